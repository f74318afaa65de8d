"""Server-sent events and client disconnects, shared by the API and the web chat.

A client that goes away cancels its work: :func:`until_disconnect` for a plain request,
:func:`event_stream` for a stream whose producer may stay silent for a long time (a slow
first token, a long interpreter cell).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import anyio
from fastapi import Request
from fastapi.responses import StreamingResponse

T = TypeVar("T")

logger = logging.getLogger("chatfmt.server")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


def sse_event(data: bytes | str) -> bytes:
    """One ``data:`` event carrying ``data`` (JSON, which has no raw newlines)."""
    if isinstance(data, str):
        data = data.encode()
    return b"data: " + data + b"\n\n"


def sse_response(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


async def wait_disconnect(request: Request) -> None:
    """Return once the client has disconnected (reads, and so consumes, the request body)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``, cancelling it (and raising :class:`ClientGone`) if the client leaves."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass  # the client is gone; nobody hears about this request's outcome
    raise ClientGone


async def event_stream(
    request: Request,
    events: AsyncIterator[T],
    *,
    encode: Callable[[T], bytes],
    on_error: Callable[[Exception], T],
) -> AsyncIterator[bytes]:
    """Run ``events`` in a task and stream them encoded; a client disconnect cancels the task.

    An exception of ``events`` becomes its last event, ``on_error(exc)``. The task and a
    disconnect watcher make cancellation prompt even while nothing is being sent.
    """
    queue: asyncio.Queue[tuple[T] | None] = asyncio.Queue()

    async def produce() -> None:
        try:
            async for event in events:
                await queue.put((event,))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await queue.put((on_error(exc),))
        finally:
            with contextlib.suppress(AttributeError):
                await events.aclose()  # type: ignore[attr-defined]
            queue.put_nowait(None)

    stopping = False

    def stop() -> None:
        # Cancel once: a second cancel would break into the producer's own clean-up (such as
        # interrupting a running cell and waiting for it), which must run to its end.
        nonlocal stopping
        if not stopping:
            stopping = True
            producer.cancel()

    async def watch() -> None:
        await wait_disconnect(request)
        logger.info("client disconnected; stopping its stream")
        stop()

    producer = asyncio.create_task(produce())
    watcher = asyncio.create_task(watch())
    try:
        while True:
            item = await queue.get()
            if item is None:
                break
            yield encode(item[0])
    finally:
        watcher.cancel()
        if not producer.done():
            stop()
        # This generator may itself be cancelled (the response's scope): shield the wait so
        # the request ends only once the producer has cleaned up.
        with anyio.CancelScope(shield=True):
            for task in (producer, watcher):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
