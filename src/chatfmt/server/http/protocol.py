"""uvicorn's HTTP protocol with the connection-level limits of :class:`ServerLimits`.

uvicorn times out idle keep-alive connections, but not a connection that is still sending its
request headers: a client that opens connections and sends a byte now and then (slowloris)
holds them for ever. Nor does it count connections per client. :func:`guarded_protocol` makes
a subclass of its protocol that does both; pass it as ``uvicorn.Config(http=...)``, or use
:func:`chatfmt.server.http.limits.uvicorn_options`.

The protocol is uvicorn's httptools one where ``httptools`` is installed (the server extra
installs it): it frames each streamed chunk in a few byte operations, where the pure-Python
h11 one validates and frames every chunk through its state machine, a cost paid per token
by a relay in front of an engine. Without ``httptools``, it is the h11 one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar, cast

from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from .errors import ApiError
from .limits import DEFAULT_LIMITS, ServerLimits, send_error, setting

log = logging.getLogger("chatfmt.server")


class ClientConnections:
    """Open connections per client address, for one server (its event loop's thread only)."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def add(self, host: str) -> int:
        """Count one more connection from ``host``; returns how many it now has."""
        n = self._open.get(host, 0) + 1
        self._open[host] = n
        return n

    def remove(self, host: str) -> None:
        n = self._open.get(host, 0) - 1
        if n > 0:
            self._open[host] = n
        else:
            self._open.pop(host, None)

    def count(self, host: str) -> int:
        return self._open.get(host, 0)


def _refusal(host: str, cap: int) -> Any:
    """An ASGI app answering 429 (and closing) for a connection over the per-client cap."""
    error = ApiError(
        429,
        f"too many connections from {host}: this server serves at most {cap} at once per "
        f"client address ({setting('max_connections_per_client')}); close idle connections "
        "or retry later",
        type="rate_limit_error",
        code="too_many_connections",
        headers={"Connection": "close", "Retry-After": "1"},
    )

    async def refuse(_scope: Scope, _receive: Receive, send: Send) -> None:
        await send_error(send, error)

    return refuse


class ConnectionGuard:
    """A deadline for request headers and a per-client cap, mixed into a uvicorn protocol.

    The header deadline starts when the connection opens and, on a kept-alive connection,
    when the first byte of the next request arrives (an idle kept-alive connection is left to
    uvicorn's own ``timeout_keep_alive``); it ends when the headers are complete. A connection
    still without complete headers at the deadline is closed.

    Once the headers are complete, the body must arrive within ``body_timeout`` (a client
    that declares a large body and trickles it would hold its socket and task for ever).

    A connection beyond ``max_connections_per_client`` from one address is answered 429 as
    soon as its request headers arrive, and closed; one beyond twice the cap is closed at
    once, since a client that keeps opening connections past their refusals is not waiting
    for answers, and each open socket costs a file descriptor.
    """

    limits: ClassVar[ServerLimits] = DEFAULT_LIMITS
    clients: ClassVar[ClientConnections] = ClientConnections()
    # What the guard reads of the uvicorn protocol it is mixed into (both have them).
    app: Any
    client: tuple[str, int] | None
    cycle: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)  # type: ignore[call-arg]
        self._counted_host: str | None = None
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None

    # ==== Connection events ====

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        cap = self.limits.max_connections_per_client
        host = self.client[0] if self.client else None  # None: a Unix socket
        if cap is not None and host is not None:
            self._counted_host = host
            n = self.clients.add(host)
            if n > 2 * cap:
                log.info("closing a connection from %s: %d open, over twice the cap", host, n)
                transport.close()
                return
            if n > cap:
                self.app = _refusal(host, cap)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self._between_requests():
            self._arm_header_timer()  # the first bytes of the next request on this connection
        super().data_received(data)  # type: ignore[misc]
        if not self._between_requests():
            self._disarm_header_timer()
            self._watch_body()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        # A pipelined request already buffered may have started here, headers complete.
        self._disarm_body_timer()
        if not self._between_requests():
            self._disarm_header_timer()
            self._watch_body()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        self._disarm_body_timer()
        if self._counted_host is not None:
            self.clients.remove(self._counted_host)
            self._counted_host = None
        super().connection_lost(exc)  # type: ignore[misc]

    # ==== Header deadline ====

    def _between_requests(self) -> bool:
        """No request is in progress: the next one's headers are still to come."""
        return self.cycle is None or self.cycle.response_complete

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(
            self.limits.header_timeout, self._headers_too_slow
        )

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._between_requests() and not self.transport.is_closing():
            log.info(
                "closing a connection from %s: no complete request headers within %g s",
                self.client[0] if self.client else "a client",
                self.limits.header_timeout,
            )
            # connection_lost tells h11, as uvicorn's own keep-alive timeout does.
            self.transport.close()

    # ==== Body deadline ====

    def _watch_body(self) -> None:
        """Headers are complete: the body must follow within ``body_timeout``."""
        if self.cycle is not None and self.cycle.more_body:
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(
                    self.limits.body_timeout, self._body_too_slow
                )
        else:
            self._disarm_body_timer()

    def _disarm_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_too_slow(self) -> None:
        self._body_timer = None
        if self.cycle is not None and self.cycle.more_body and not self.transport.is_closing():
            log.info(
                "closing a connection from %s: request body not complete within %g s",
                self.client[0] if self.client else "a client",
                self.limits.body_timeout,
            )
            self.transport.close()  # the app's receive() then reports a disconnect


#: The most bytes of request headers (request line included) a connection may send.
MAX_HEADER_BYTES = 64 * 1024
_TOO_LARGE_TEXT = b"request headers over 64 KiB; send fewer or shorter headers"
_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8"
    b"\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
    % (len(_TOO_LARGE_TEXT), _TOO_LARGE_TEXT)
)


class GuardedH11Protocol(ConnectionGuard, H11Protocol):
    """uvicorn's h11 protocol with the :class:`ConnectionGuard`."""


def _fastest() -> type[ConnectionGuard]:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is not installed
        return GuardedH11Protocol

    class GuardedHttpToolsProtocol(ConnectionGuard, HttpToolsProtocol):
        """uvicorn's httptools protocol with the :class:`ConnectionGuard`, and a bound on the
        size of request headers: h11 refuses headers past 16 KiB itself, while llhttp and
        uvicorn's protocol keep whatever arrives (within the header deadline, a client could
        send hundreds of megabytes of them)."""

        _in_headers = True  # until the first request's headers are complete
        _header_bytes = 0

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self._in_headers or self.transport.is_closing():
                return
            # Counted after parsing: a read that completed the headers (and may carry the
            # body's start) does not count.
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                log.info(
                    "closing a connection from %s: request headers over %d bytes",
                    self.client[0] if self.client else "a client",
                    MAX_HEADER_BYTES,
                )
                self.transport.write(_TOO_LARGE)
                self.transport.close()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_headers = True
            self._header_bytes = 0

        def on_headers_complete(self) -> None:
            self._in_headers = False
            super().on_headers_complete()

    return GuardedHttpToolsProtocol


def guarded_protocol(
    limits: ServerLimits = DEFAULT_LIMITS, *, h11: bool = False
) -> type[ConnectionGuard]:
    """A guarded protocol class enforcing ``limits``, with its own connection count (one per
    server: a second server must not share the first one's counts): httptools' where it is
    installed, h11's where it is not or ``h11`` is true."""
    base = GuardedH11Protocol if h11 else _fastest()
    attrs = {"limits": limits, "clients": ClientConnections()}
    return cast(type[ConnectionGuard], type(base.__name__, (base,), attrs))


__all__ = [
    "MAX_HEADER_BYTES",
    "ClientConnections",
    "ConnectionGuard",
    "GuardedH11Protocol",
    "guarded_protocol",
]
