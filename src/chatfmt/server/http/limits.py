"""Limits that keep one client from stalling or exhausting the server for the others.

:class:`ServerLimits` holds every setting. The app enforces the request-level ones
(:func:`chatfmt.server.create_app` takes ``limits=``): the body size while the body is read
(:class:`BodyLimitMiddleware`), the number of messages and tools before a request is
validated (:func:`count_problem`). The connection-level ones, the time to send request headers
and the connections per client address, live in uvicorn's HTTP protocol:
``uvicorn.Config(app, **uvicorn_options(limits))``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError, error_body

MIB = 1024 * 1024

#: The ``chatfmt serve`` flag of each setting, for error messages that say what to change.
SETTING_FLAGS: Mapping[str, str] = {
    "max_body_bytes": "--max-body-mb",
    "max_messages": "--max-messages",
    "max_tools": "--max-tools",
    "header_timeout": "--header-timeout",
    "body_timeout": "--body-timeout",
    "max_connections_per_client": "--max-connections-per-client",
}


def setting(name: str) -> str:
    """How an error message names a setting: the field and its ``chatfmt serve`` flag."""
    return f"the server setting {name} ({SETTING_FLAGS[name]})"


@dataclass(frozen=True)
class ServerLimits:
    """What one request or one client may take of the server.

    The defaults are far above what real clients send and low enough that a hostile request
    costs the server little:

    * ``max_body_bytes`` (8 MiB): a full 128K-token context is about 0.5 MB of text, JSON
      escaping at most doubles it, and tool schemas add kilobytes; a parsed body takes about
      ten times its size in memory, so a handful of bodies at the limit stay under a gigabyte.
    * ``max_messages`` (4096): an agent filling a 128K-token context with 30-token steps.
    * ``max_tools`` (512): four times OpenAI's own limit of 128 tools.
    * ``header_timeout`` (20 s): request headers are one small write; only a client that
      holds connections open on purpose (slowloris) needs more.
    * ``body_timeout`` (60 s): from complete headers to the end of the body; a full 8 MiB
      body at 1 Mbit/s takes about as long, and chat bodies are far smaller.
    * ``max_connections_per_client`` (64): ten times a browser's pool, enough for an agent's
      parallel calls; ``None`` turns it off (behind a reverse proxy every client has its
      address).
    """

    max_body_bytes: int = 8 * MIB
    max_messages: int = 4096
    max_tools: int = 512
    header_timeout: float = 20.0
    max_connections_per_client: int | None = 64
    body_timeout: float = 60.0

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_messages", "max_tools", "max_connections_per_client"):
            value = getattr(self, name)
            if value is None and name == "max_connections_per_client":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ServerLimits.{name} must be a positive integer, got {value!r}")
        for name in ("header_timeout", "body_timeout"):
            timeout = getattr(self, name)
            if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
                raise ValueError(
                    f"ServerLimits.{name} must be a positive number of seconds, got {timeout!r}"
                )


DEFAULT_LIMITS = ServerLimits()


def _size(n: int) -> str:
    for unit, name in ((MIB, "MiB"), (1024, "KiB")):
        if n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} bytes"


class BodyTooLarge(ApiError):
    """413: the body is over ``max_body_bytes``. The connection is closed after the answer:
    the rest of the body is never read."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            f"the request body is larger than {_size(limit)}, the most this server accepts "
            f"({setting('max_body_bytes')}); send a shorter conversation, or raise the limit",
            param=None,
            code="request_too_large",
            headers={"Connection": "close"},
        )


def count_problem(data: Mapping[str, Any], limits: ServerLimits) -> ApiError | None:
    """A 400 when a parsed body has more ``messages`` or ``tools`` than the limits allow.

    For the parsed JSON, before the request model validates every item: a count over the
    limit costs nothing more than the parse. (Returned, not raised, so that the caller can free
    the parse before raising it.)
    """
    for field, limit, name in (
        ("messages", limits.max_messages, "max_messages"),
        ("tools", limits.max_tools, "max_tools"),
    ):
        items = data.get(field)
        if isinstance(items, list) and len(items) > limit:
            return ApiError(
                400,
                f"'{field}' has {len(items)} items, more than the {limit} this server accepts "
                f"({setting(name)}); send fewer",
                param=field,
                code=f"too_many_{field}",
            )
    for field in _SCHEMA_FIELDS:
        value = data.get(field)
        if isinstance(value, dict | list) and _deeper_than(value, MAX_SCHEMA_NESTING):
            return ApiError(
                400,
                f"'{field}' nests JSON objects and arrays more than {MAX_SCHEMA_NESTING} levels "
                "deep; flatten its schemas (no real tool or output schema needs that many)",
                param=field,
                code="too_deeply_nested",
            )
    return None


#: Fields holding JSON schemas (tool parameters, ``response_format``, the Responses API's
#: ``text.format``), which grammar converters and tool renderers walk recursively.
_SCHEMA_FIELDS = ("tools", "response_format", "text")

#: The deepest nesting of objects and arrays accepted in those fields: room for schemas of
#: 64 levels (each a schema and its ``properties``), far from Python's recursion limit.
MAX_SCHEMA_NESTING = 160


def _deeper_than(value: dict[str, Any] | list[Any], limit: int) -> bool:
    """Whether ``value`` nests objects and arrays more than ``limit`` levels (iterative: a
    hostile body must not exhaust the recursion this check is there to protect)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


class BodyLimitMiddleware:
    """Refuses bodies over ``max_body_bytes`` while they are read (ASGI middleware).

    A declared ``Content-Length`` over the limit is answered at once, before the app runs or a
    byte of the body is read. A chunked body is counted as the app reads it, and the read that
    crosses the limit raises :class:`BodyTooLarge`: nothing ever holds more than the limit plus
    one read (uvicorn reads at most 64 KiB ahead). The answer closes the connection.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit
        for name, value in scope["headers"]:
            # A malformed Content-Length never gets here: the HTTP parser answers 400 itself.
            if name == b"content-length" and value.strip().isdigit() and int(value) > limit:
                await send_error(send, BodyTooLarge(limit), scope)
                return
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge as exc:
            # The app's handlers answer ApiError; this is for a reader outside them.
            if started:
                raise
            await send_error(send, exc, scope)


async def send_error(send: Send, error: ApiError, scope: Scope | None = None) -> None:
    """Answer ``error`` through a bare ASGI ``send`` (outside the app's handlers), in the
    shape of the API ``scope``'s path belongs to (OpenAI's without a scope)."""
    body = error_body(scope, error)
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()]
    headers += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def uvicorn_options(limits: ServerLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config`` that enforce the connection-level limits
    (``header_timeout``, ``max_connections_per_client``); each call makes a protocol class with
    its own count of connections, so give each server its own call.

    ``ws="none"``: the API serves no WebSockets, and an upgraded connection would leave the
    protocol that counts and times it.
    """
    from .protocol import guarded_protocol

    return {"http": guarded_protocol(limits), "ws": "none"}


__all__ = [
    "DEFAULT_LIMITS",
    "BodyLimitMiddleware",
    "BodyTooLarge",
    "ServerLimits",
    "count_problem",
    "uvicorn_options",
]
