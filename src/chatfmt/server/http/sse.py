"""Server-sent events and client disconnects, shared by the API and the web chat.

A client that goes away cancels its work: :func:`until_disconnect` for a plain request,
:func:`event_stream` for a stream whose producer may stay silent for a long time (a slow
first token, a long interpreter cell).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeVar

import anyio
from fastapi import Request
from fastapi.responses import StreamingResponse

from ...errors import EngineError
from .errors import ApiError, ClientGone, engine_api_error

T = TypeVar("T")

logger = logging.getLogger("chatfmt.server")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"
#: An SSE comment: every client's event parser skips it, and it keeps the connection busy.
PING = b": ping\n\n"

#: How long a stream waits for the engine's first token before it answers anyway. Within it,
#: an engine that is down is a 503 with its error; past it, the stream's headers and first
#: events go out, then a ping every :data:`PING_SECONDS` while the engine reads the prompt:
#: agents send prompts of 10,000 to 20,000 tokens, which a small machine reads for minutes,
#: and a client that gets no headers times out and sends the request again (Claude Code:
#: every 5 minutes, measured). Read when a stream starts (tests shorten them).
FIRST_TOKEN_WAIT = 2.0
PING_SECONDS = 10.0


def sse_event(data: bytes | str, *, event: str | None = None) -> bytes:
    """One event carrying ``data`` (JSON, which has no raw newlines), named ``event`` when
    given (the Responses API names each event by its type)."""
    if isinstance(data, str):
        data = data.encode()
    head = b"data: " if event is None else b"event: " + event.encode() + b"\ndata: "
    return head + data + b"\n\n"


def sse_response(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


def error_frame(error: ApiError) -> list[bytes]:
    """A chat-completions stream's in-band error: OpenAI's error body as one event."""
    body = error.body()
    return [sse_event(body.__pydantic_serializer__.to_json(body))]


async def stream_errors(
    body: AsyncIterator[bytes],
    what: str,
    *,
    on_error: Callable[[ApiError], Iterable[bytes]] = error_frame,
    close: Callable[[], Awaitable[None]] | None = None,
) -> AsyncGenerator[bytes, None]:
    """``body``, with a failure after the headers went out reported in the stream.

    The headers are sent, so an error can no longer be a status code: an engine failure
    becomes its 502/503 error, anything else (a bug of ours, not the client's) is logged and
    becomes a 500 error, each framed by ``on_error``; the stream then ends without its normal
    close (no ``[DONE]``), as OpenAI's do. ``close`` runs at the end whatever happens
    (shielded: a client that went away cancels this generator, and the close must still run).
    """
    try:
        async for data in body:
            yield data
    except EngineError as exc:
        for frame in on_error(engine_api_error(exc)):
            yield frame
    except Exception:
        logger.exception("%s stream failed", what)
        error = ApiError(500, f"internal error while streaming the {what}", type="server_error")
        for frame in on_error(error):
            yield frame
    finally:
        if close is not None:
            with anyio.CancelScope(shield=True):
                await close()


async def wait_disconnect(request: Request) -> None:
    """Return once the client has disconnected (reads, and so consumes, the request body)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``, cancelling it (and raising :class:`ClientGone`, answered 499) if the
    client leaves; an engine failure is raised as its 502/503 :class:`ApiError`."""
    try:
        return await _until_disconnect(request, work)
    except EngineError as exc:
        raise engine_api_error(exc) from None


async def _until_disconnect(request: Request, work: Awaitable[T]) -> T:
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


async def start_stream(request: Request, start: Awaitable[None]) -> asyncio.Task[None]:
    """Start a stream's generation (``start``: the driver's ``open()``, which returns at the
    engine's first chunk) and wait for it :data:`FIRST_TOKEN_WAIT` at most: an engine that
    fails within it is answered with its 502/503 here, before the stream's 200. The task is
    handed to :func:`pings_until_started` and :func:`stop_started`; a client that leaves
    while this waits cancels it (:class:`ClientGone`)."""
    opening = asyncio.ensure_future(start)
    try:
        await until_disconnect(request, asyncio.wait({opening}, timeout=FIRST_TOKEN_WAIT))
    except BaseException:
        opening.cancel()  # the client left: the task closes the engine's stream as it ends
        raise
    if opening.done() and not opening.cancelled():
        exc = opening.exception()
        if isinstance(exc, EngineError):
            raise engine_api_error(exc) from None
        if exc is not None:
            raise exc
    return opening


async def pings_until_started(
    opening: asyncio.Task[None], ping: Callable[[], bytes] = lambda: PING
) -> AsyncIterator[bytes]:
    """``ping()`` every :data:`PING_SECONDS` until the generation has started; then its
    failure, if it failed (raised, for :func:`stream_errors` to frame)."""
    every = PING_SECONDS
    while not opening.done():
        done, _ = await asyncio.wait({opening}, timeout=every)
        if not done:
            yield ping()
    opening.result()


async def stop_started(opening: asyncio.Task[None], close: Callable[[], Awaitable[None]]) -> None:
    """End a stream's generation: a start still under way (the client left while the engine
    read the prompt) is cancelled and waited for first, since the engine's stream cannot be
    closed while it is read from; then ``close`` (the driver's ``aclose``)."""
    if not opening.done():
        opening.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await opening  # (its failure, if any, was reported in the stream)
    await close()
