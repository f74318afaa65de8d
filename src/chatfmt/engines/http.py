"""HTTP to an engine server: JSON requests, and streamed completions read a batch at a time.

A relay in front of a GPU engine pays for every token it passes on, and on a small machine
that cost competes with the engine for the same cores. The stream is read with aiohttp (its
HTTP parser and chunked decoding are compiled, where a pure-Python client parses each chunk
through several layers of state machines, cancel scopes and decoders), its events are parsed
with orjson, and everything that arrived in one read is handed over at once: when the relay
or its client falls behind the engine, the events that piled up in the socket become one
batch, so the work per token falls as the load rises (the coalescing vLLM's stream interval
does, without holding back a token that the client is ready for).

A session (connection pool) belongs to one event loop; :class:`EngineHTTP` keeps one per
loop, and marks one whose loop has ended closed when a new loop asks (``asyncio.run`` per
call); its sockets go with the garbage collector.

A connection that breaks after the engine sent its last events may lose those (aiohttp
raises the error before handing over what it had buffered): the stream then fails as broken
instead of ending, and nothing that was handed on is taken back.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncGenerator
from typing import Any

from .._imports import require
from ..errors import EngineError, EngineUnavailableError, RemoteHTTPError

#: Answers that mean "not now" (a router without a ready backend, a model still loading).
RETRY_STATUS = frozenset({502, 503, 504})


class EngineHTTP:
    """Requests to the server at ``base_url``.

    ``timeout`` bounds the wait for each read of a stream (and for a whole JSON answer);
    ``connect_timeout`` the connection; ``retries`` extra attempts, with exponential
    ``backoff``, while the server cannot be reached or answers 502/503/504.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.25,
    ) -> None:
        self._aiohttp = require("aiohttp", extra="server")
        self._orjson = require("orjson", extra="server")
        self.base_url = base_url
        # ``connect`` would also bound the wait for a free connection of the pool; only the
        # socket's connection gets ``connect_timeout``, and streams wait for their turn.
        self._timeout = self._aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=connect_timeout, sock_read=timeout
        )
        self._retries = max(0, retries)
        self._backoff = backoff
        self._headers = {"Accept": "text/event-stream", "Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._sessions: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}
        # Sessions left open by a caller that never called aclose(), each asyncio.run() its own
        # loop: closed when this object goes, or at exit, instead of each complaining then.
        weakref.finalize(self, _close_orphans, self._sessions)
        # Failures before any byte of an answer: the request can be sent again safely.
        aiohttp = self._aiohttp
        self._unreached = (
            aiohttp.ClientOSError,  # connection refused (ClientConnectorError) among them
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientConnectionResetError,
            aiohttp.ConnectionTimeoutError,
        )

    # ==== Sessions ====

    async def _session(self) -> Any:
        loop = asyncio.get_running_loop()
        held = self._sessions.get(id(loop))
        if held is not None and held[0] is loop and not held[1].closed:
            return held[1]
        for key, (old_loop, old) in list(self._sessions.items()):
            if old_loop.is_closed():  # its asyncio.run ended: nothing of it is usable
                del self._sessions[key]
                await old.close()
        session = self._aiohttp.ClientSession(
            # No cap on connections: each stream holds one, and the server bounds its streams.
            connector=self._aiohttp.TCPConnector(limit=0),
            timeout=self._timeout,
            headers=self._headers,
            # Ask for the body as it is: a proxy that compresses would otherwise send gzip.
            skip_auto_headers=("Accept-Encoding",),
            auto_decompress=False,
        )
        self._sessions[id(loop)] = (loop, session)
        return session

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        for key, (old_loop, session) in list(self._sessions.items()):
            if old_loop is loop or old_loop.is_closed():
                del self._sessions[key]
                await session.close()

    # ==== Requests ====

    async def get_json(self, path: str, *, retry: bool) -> Any:
        """``GET path``'s JSON answer, retrying while unreachable when ``retry``."""
        aiohttp = self._aiohttp
        url = self.base_url + path
        last: BaseException | None = None
        for attempt in range(self._retries + 1 if retry else 1):
            if attempt:
                await asyncio.sleep(self._backoff * 2 ** (attempt - 1))
            try:
                session = await self._session()
                async with session.get(url) as resp:
                    body = await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                last = exc
                continue
            if status >= 400:
                text = body.decode("utf-8", "replace")[:200]
                raise EngineError(f"GET {url} answered {status}: {text}")
            try:
                return self._orjson.loads(body)
            except ValueError:
                raise EngineError(f"GET {url} did not answer JSON") from None
        raise EngineUnavailableError(
            f"cannot reach the engine at {self.base_url} ({describe(last)}); "
            "is the server running and the URL right?"
        )

    async def open(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` and return the streaming response, retrying while unreachable.

        An error status is raised as :class:`RemoteHTTPError` (after retries for 502/503/504).
        """
        aiohttp = self._aiohttp
        url = self.base_url + path
        try:
            data = self._orjson.dumps(body)
        except TypeError:  # an integer past 64 bits (a seed): the engine answers it
            data = json.dumps(body).encode()
        last: BaseException | None = None
        for attempt in range(self._retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff * 2 ** (attempt - 1))
            session = await self._session()
            try:
                resp = await session.post(url, data=data)
            except self._unreached as exc:
                last = exc  # nothing was generated yet: safe to retry
                continue
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                raise EngineError(f"request to {url} failed: {describe(exc)}") from None
            if resp.status < 400:
                return resp
            try:
                detail = (await resp.read()).decode("utf-8", "replace")[:500]
            except (aiohttp.ClientError, asyncio.TimeoutError):
                detail = ""
            finally:
                resp.release()
            if resp.status in RETRY_STATUS:
                last = EngineError(f"HTTP {resp.status}: {detail}")
                continue
            raise RemoteHTTPError(
                f"the engine at {url} answered {resp.status}: {detail}", status_code=resp.status
            )
        raise EngineUnavailableError(
            f"cannot reach the engine at {self.base_url} after {self._retries + 1} attempts "
            f"({describe(last)}); is the server running and the URL right?"
        )

    async def events(self, resp: Any) -> AsyncGenerator[list[Any], None]:
        """The JSON of each ``data:`` event of ``resp``, a list per read (everything that had
        arrived), until ``[DONE]`` or the end of the stream; the response is then released.

        A malformed event raises :class:`EngineError` once the events read before it are
        handed over (they are the engine's output too); a broken connection raises it as well.
        """
        aiohttp = self._aiohttp
        pending = b""
        try:
            async for data in resp.content.iter_any():
                lines = (pending + data).split(b"\n")
                pending = lines.pop()  # an incomplete last line waits for the next read
                batch, done = self._parse(lines)
                if batch:
                    yield batch
                if done:
                    return
            batch, _ = self._parse([pending])  # a last event without its newline
            if batch:
                yield batch
        except _Malformed as bad:
            if bad.batch:  # the events before it in the same read are the engine's output
                yield bad.batch
            raise EngineError(f"the engine sent a malformed event: {bad.text}") from None
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise EngineError(
                f"the connection to the engine at {self.base_url} broke mid-stream "
                f"({describe(exc)})"
            ) from None
        finally:
            resp.release()

    def _parse(self, lines: list[bytes]) -> tuple[list[Any], bool]:
        """The events of complete ``lines``, and whether ``[DONE]`` was among them."""
        batch: list[Any] = []
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # blank separators, ": ping" comments, event names
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return batch, True
            try:
                batch.append(self._orjson.loads(payload))
            except ValueError:
                try:  # what orjson refuses and JSON allows: a lone surrogate escape, NaN
                    batch.append(json.loads(payload))
                except ValueError:
                    raise _Malformed(batch, payload[:200].decode("utf-8", "replace")) from None
        return batch, False


class _Malformed(Exception):
    """An event that is not JSON, with the events parsed before it in the same read."""

    def __init__(self, batch: list[Any], text: str) -> None:
        super().__init__(text)
        self.batch = batch
        self.text = text


def _close_orphans(sessions: dict[int, tuple[asyncio.AbstractEventLoop, Any]]) -> None:
    """Close the sessions whose event loop has ended (a fresh loop runs each close)."""
    orphans = [s for loop, s in sessions.values() if loop.is_closed() and not s.closed]
    sessions.clear()
    try:
        asyncio.get_running_loop()
        return  # inside a running loop: a nested one cannot run; leave them to the GC
    except RuntimeError:
        pass
    if orphans:
        loop = asyncio.new_event_loop()
        try:
            for session in orphans:
                loop.run_until_complete(session.close())
        finally:
            loop.close()


def describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no attempt was made"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["RETRY_STATUS", "EngineHTTP", "describe"]
