"""Request and response plumbing shared by the API (``server/``) and the web chat (``web/``):
the API-key check, JSON bodies in (``application/json`` only, finite numbers only, within
the :class:`~chatfmt.server.http.limits.ServerLimits` counts) and out, and errors answered in
OpenAI's shape, or in the shape of the API that a path prefix belongs to
(:func:`add_error_shape`).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import pydantic
from fastapi import FastAPI, Request, Response
from starlette.requests import ClientDisconnect

from ...errors import ChatFmtError
from .errors import SHAPES_STATE, ApiError, ClientGone, ErrorWriter, error_body, validation_error
from .limits import DEFAULT_LIMITS, ServerLimits, count_problem

M = TypeVar("M", bound=pydantic.BaseModel)

JSON_MEDIA_TYPE = "application/json"

#: Bodies up to this size are parsed on the event loop: a thread hop costs more than parsing.
#: Larger ones (up to ``max_body_bytes``, 8 MiB by default: 0.1 s of parsing) go to a thread.
INLINE_PARSE_BYTES = 64 * 1024


def json_bytes(
    body: pydantic.BaseModel | Mapping[str, Any], *, exclude: set[str] | None = None
) -> bytes:
    """Compact UTF-8 JSON; models keep their own rules for which ``None`` fields to write
    (``exclude`` leaves fields of a model out)."""
    if isinstance(body, pydantic.BaseModel):
        return body.__pydantic_serializer__.to_json(body, exclude=exclude)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def json_response(
    body: pydantic.BaseModel | Mapping[str, Any],
    status: int = 200,
    *,
    headers: Mapping[str, str] | None = None,
) -> Response:
    return Response(
        content=json_bytes(body), status_code=status, media_type=JSON_MEDIA_TYPE, headers=headers
    )


def add_error_shape(app: FastAPI, prefix: str, writer: ErrorWriter) -> None:
    """Answer errors of requests to ``prefix`` (the path itself and everything under it) in the
    shape ``writer`` writes, rather than OpenAI's: the errors of routes, of the framework (404,
    405) and of the app's middleware (413) alike."""
    shapes = dict(getattr(app.state, SHAPES_STATE, None) or {})
    shapes[prefix.rstrip("/")] = writer
    setattr(app.state, SHAPES_STATE, shapes)


def error_response(error: ApiError, request: Request | None = None) -> Response:
    """``error`` answered, in the shape of the API ``request`` went to (see
    :func:`error_body`)."""
    body = error_body(request.scope if request is not None else None, error)
    return Response(
        content=body, status_code=error.status, media_type=JSON_MEDIA_TYPE, headers=error.headers
    )


async def _answer_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc, request)


def install_error_handler(app: FastAPI) -> None:
    """Answer :class:`ApiError` raised by ``app``'s routes (idempotent)."""
    app.add_exception_handler(ApiError, _answer_api_error)
    app.add_exception_handler(ClientGone, _client_gone)
    # A client that goes away while sending its body: the same as any other disconnect.
    app.add_exception_handler(ClientDisconnect, _client_gone)


async def _client_gone(_request: Request, _exc: Exception) -> Response:
    # Nobody reads this answer; 499 (nginx's "client closed request") counts it in /metrics.
    return Response(status_code=499)


#: One API key, several (each its own tenant of stored data), or none.
ApiKeys = str | Sequence[str] | None


def _keys(api_key: ApiKeys) -> tuple[str, ...]:
    if api_key is None:
        return ()
    return (api_key,) if isinstance(api_key, str) else tuple(api_key)


def check_api_key(api_key: ApiKeys) -> None:
    """Refuse a key no client could send: HTTP headers carry printable ASCII, and clients trim
    the spaces around a token."""
    for key in _keys(api_key):
        if not key or any(not "!" <= c <= "~" for c in key):
            raise ChatFmtError(
                "the API key must be printable ASCII without spaces (a client could not send it "
                "in an Authorization header); choose another key"
            )


def require_bearer(
    request: Request, api_key: ApiKeys, *, key_header: str | None = None
) -> str | None:
    """401 unless the request carries ``Authorization: Bearer <key>`` with one of the keys (if
    any is set); returns the key it carried (``None`` when the server has none).

    ``key_header`` names a header that may carry the key instead (the Anthropic API's
    ``x-api-key``); when a request sends it, it is the one checked."""
    keys = _keys(api_key)
    if not keys:
        return None
    own = request.headers.get(key_header) if key_header is not None else None
    if own is not None:
        scheme, token = "bearer", own
    else:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
    sent = token.strip().encode()
    # Every key is compared (in constant time each), so timing tells nothing about which.
    matches = [k for k in keys if secrets.compare_digest(sent, k.encode())]
    if scheme.lower() != "bearer" or not matches:
        how = "'Authorization: Bearer <key>'"
        if key_header is not None:
            how = f"'{key_header}: <key>' or {how}"
        raise ApiError(
            401, f"invalid or missing API key; send the header {how}", code="invalid_api_key"
        )
    return matches[0]


def require_json(request: Request) -> None:
    """415 unless the body is declared ``application/json`` (UTF-8, the only JSON charset).

    Besides saying what the body is, this keeps web pages of other sites out: a cross-site
    page can only send a JSON content type after a CORS preflight, which this server refuses.
    """
    declared = request.headers.get("content-type")
    media, _, params = (declared or "").partition(";")
    charset = ""
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
    if media.strip().lower() == JSON_MEDIA_TYPE and charset in ("", "utf-8", "utf8"):
        return
    got = f"got {declared!r}" if declared is not None else "no Content-Type was sent"
    raise ApiError(
        415,
        f"send the request body as JSON with the header 'Content-Type: {JSON_MEDIA_TYPE}' "
        f"(optionally '; charset=utf-8'); {got}",
        code="unsupported_media_type",
    )


class _NonFinite(ValueError):
    """A number JSON cannot carry: ``NaN``/``Infinity`` (Python's JSON extension) or one that
    overflows a double (``1e999``)."""


def _reject_constant(name: str) -> Any:
    raise _NonFinite(f"{name}, which is not a JSON number (JSON numbers are finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"{text}, which is too large for a number (at most about 1.8e308)")
    return value


def _same(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def parse_json_body(body: bytes, model: type[M], limits: ServerLimits = DEFAULT_LIMITS) -> M:
    """``body`` as a ``model``, or a 400 naming the problem (too many ``messages`` or
    ``tools`` for ``limits`` among them, found before the model validates each one)."""
    try:
        # RecursionError: JSON nested deeper than the parser goes is bad input, not a crash.
        text = body.decode("utf-8-sig")  # JSON on the web is UTF-8 (json.loads would guess)
        # object_hook: the C parser holds the GIL for all of a big body (0.1 s for 8 MiB of
        # small messages) unless it calls back into Python, where other threads get their turn.
        data = json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float, object_hook=_same
        )
    except _NonFinite as exc:
        raise ApiError(
            400,
            f"the request body contains {exc}; send a finite number, or leave the field out "
            "to use its default",
            code="invalid_json",
        ) from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ApiError(
            400, f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(data).__name__}")
    problem = count_problem(data, limits)
    if problem is not None:
        # Free the parse here, in this thread: raised with it alive, the exception would carry
        # it to the event loop, and freeing a quarter-million messages takes tens of ms.
        del data
        raise problem
    # Only a "\\ud800"-"\\udfff" escape can bring a lone surrogate in (raw UTF-8 cannot encode
    # one): bodies without such an escape skip the walk.
    if _SURROGATE_ESCAPE.search(text):
        where = lone_surrogate_at(data)
        if where is not None:
            del data
            raise ApiError(
                400,
                f"{where} contains a lone surrogate (a \\ud800-\\udfff escape that is not half "
                "of a pair), which is not Unicode text; send valid text",
                param=where if where != "the body" else None,
            )
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc.errors()) from None


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def lone_surrogate_at(value: Any) -> str | None:
    """Where in parsed JSON ``value`` a string (or key) holds a lone surrogate (``"the body"``
    for the top level), or ``None``. Iterative: the body may nest deeply."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if not _encodes(node):
                return path or "the body"
        elif isinstance(node, dict):
            for k, v in node.items():
                if not _encodes(k):
                    return path or "the body"
                stack.append((v, f"{path}.{k}" if path else k))
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node))
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def request_limits(request: Request) -> ServerLimits:
    """The limits of the app serving ``request`` (set by ``create_app``), else the defaults."""
    limits = getattr(request.app.state, "limits", None)
    return limits if isinstance(limits, ServerLimits) else DEFAULT_LIMITS


async def read_json_body(request: Request, model: type[M], limits: ServerLimits | None = None) -> M:
    """The checked JSON body of a POST: 415 if it is not declared JSON, 400 if it is bad.

    ``limits`` (by default the app's, :func:`request_limits`) bound the counts of
    ``messages`` and ``tools``; the body size is bounded while it is read, by the app's
    :class:`~chatfmt.server.http.limits.BodyLimitMiddleware`. A large body is parsed in a worker
    thread, so that other requests go on meanwhile.
    """
    require_json(request)
    chosen = limits or request_limits(request)
    body = await request.body()
    if len(body) <= INLINE_PARSE_BYTES:
        return parse_json_body(body, model, chosen)
    return await asyncio.to_thread(parse_json_body, body, model, chosen)
