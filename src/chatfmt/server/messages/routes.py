"""The Messages API's routes: ``POST /v1/messages`` (whole or streamed as Anthropic's named
events) and ``POST /v1/messages/count_tokens``, over :class:`.service.MessagesService`. Their
errors are Anthropic's shape (:func:`.wire.error_json`, registered for the path prefix by the
app); the key may come as ``x-api-key`` or ``Authorization: Bearer``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing

import orjson
from fastapi import APIRouter, Request, Response

from ...driver import TurnDriver
from ..http.bodies import ApiKeys, json_response, read_json_body, require_bearer
from ..http.errors import ApiError
from ..http.openapi import error_responses, event_stream_ok, json_body
from ..http.sse import (
    pings_until_started,
    sse_event,
    sse_response,
    start_stream,
    stop_started,
    stream_errors,
    until_disconnect,
)
from .output import BuiltEvent, PartDelta
from .request import CountTokensRequest, MessagesRequest
from .service import Exchange, MessagesService, stop_of, usage_of
from .wire import (
    Message,
    MessageDelta,
    MessagesError,
    MessageStart,
    MessageStop,
    MessageUsage,
    Ping,
    StopDelta,
    StreamEvent,
    TokenCount,
)

#: The header Anthropic's clients send their key in (``Authorization: Bearer`` works too).
KEY_HEADER = "x-api-key"

_CREATE_OK = event_stream_ok(
    "A message; with stream: true, server-sent events instead, each named by its type: "
    "message_start, ping, per content block content_block_start, content_block_delta…, "
    "content_block_stop, then message_delta and message_stop (error if it fails after it began)",
    Message,
)

#: A text or thinking delta's event, serialized as pydantic would, around its JSON string.
_DELTA_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_TEXT_MID = b',"delta":{"type":"text_delta","text":'
_THINKING_MID = b',"delta":{"type":"thinking_delta","thinking":'
_DELTA_TAIL = b"}}\n\n"


def frame(event: StreamEvent | BuiltEvent | MessagesError) -> bytes:
    """One named SSE event. A per-token delta is written directly (the same bytes as its
    model's), as the chat stream writes its text deltas."""
    if isinstance(event, PartDelta):
        mid = _THINKING_MID if event.thinking else _TEXT_MID
        return b"".join(
            (_DELTA_HEAD, str(event.block).encode(), mid, orjson.dumps(event.text), _DELTA_TAIL)
        )
    return sse_event(event.__pydantic_serializer__.to_json(event), event=event.type)


def build_messages_router(svc: MessagesService, *, api_key: ApiKeys) -> APIRouter:
    router = APIRouter()
    errors = error_responses(400, 401, 404, 413, 415, 502, 503, model=MessagesError)

    @router.post(
        "/v1/messages",
        response_model=None,
        openapi_extra=json_body(MessagesRequest),
        responses={**_CREATE_OK, **errors},
    )
    async def create(request: Request) -> Response:
        require_bearer(request, api_key, key_header=KEY_HEADER)
        req = await read_json_body(request, MessagesRequest, svc.chat.limits)
        ex = await svc.prepare(req)
        driver, _policy = svc.chat.driver(ex.prep)
        if req.stream:
            opening = await start_stream(request, driver.open())
            return sse_response(_stream(svc, ex, driver, opening))
        return json_response(await until_disconnect(request, svc.generate(ex, driver)))

    @router.post(
        "/v1/messages/count_tokens",
        response_model=None,
        openapi_extra=json_body(CountTokensRequest),
        responses={
            200: {"model": TokenCount},
            **error_responses(400, 401, 413, 415, model=MessagesError),
        },
    )
    async def count_tokens(request: Request) -> Response:
        require_bearer(request, api_key, key_header=KEY_HEADER)
        req = await read_json_body(request, CountTokensRequest, svc.chat.limits)
        return json_response(await svc.count(req))

    return router


async def _stream(
    svc: MessagesService, ex: Exchange, driver: TurnDriver, opening: asyncio.Task[None]
) -> AsyncIterator[bytes]:
    """Anthropic's event stream: ``message_start`` (its usage the prompt so far: what the
    engine took from its cache is known at the end), ``ping`` (and one every
    :data:`~chatfmt.server.http.sse.PING_SECONDS` until the first token: Anthropic's named
    ping event, as its API sends it), the blocks' events, ``message_delta`` (the stop reason
    and the final usage), ``message_stop``."""
    builder = ex.builder()
    start = Message(
        id=ex.id,
        content=[],
        model=ex.req.model,
        stop_reason=None,
        usage=MessageUsage(input_tokens=driver.prompt_tokens, output_tokens=0),
    )
    yield frame(MessageStart(message=start)) + frame(Ping())

    async def body() -> AsyncIterator[bytes]:
        # (An engine that failed to start: raised here, the error event below.)
        async for ping in pings_until_started(opening, lambda: frame(Ping())):
            yield ping
        async with aclosing(driver.steps()) as steps:
            async for events in steps:
                built = builder.feed(events)
                if built:  # one write a step
                    yield b"".join([frame(e) for e in built])
        tail = [frame(e) for e in builder.finish()]
        reason, sequence = stop_of(ex, driver)
        end = MessageDelta(
            delta=StopDelta(stop_reason=reason, stop_sequence=sequence), usage=usage_of(driver)
        )
        yield b"".join([*tail, frame(end), frame(MessageStop())])

    def failed(error: ApiError) -> list[bytes]:
        # After the headers: Anthropic's error event, and the stream ends without its stop.
        return [frame(MessagesError.of(error))]

    async def stop() -> None:
        await stop_started(opening, driver.aclose)

    # Closed with this generator (a client that left), so that the engine stops at once.
    async with aclosing(stream_errors(body(), "message", on_error=failed, close=stop)) as out:
        async for data in out:
            yield data
