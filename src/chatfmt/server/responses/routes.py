"""The Responses API's routes: ``POST /v1/responses`` (whole or streamed, every event with
its ``sequence_number``), ``GET`` / ``DELETE /v1/responses/{id}`` and
``GET /v1/responses/{id}/input_items``, over :class:`.service.ResponsesService`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request, Response

from ...driver import TurnDriver
from ...store import owner_of
from ..http.bodies import ApiKeys, json_response, read_json_body, require_bearer
from ..http.errors import ApiError
from ..http.openapi import error_responses, json_body
from ..http.sse import (
    pings_until_started,
    sse_response,
    start_stream,
    stop_started,
    stream_errors,
    until_disconnect,
)
from .frames import coalesce
from .frames import frame as frame_event
from .input import ResponsesRequest
from .output import BuiltEvent, LogprobOutputBuilder, OutputBuilder, PartDelta
from .service import Exchange, Generated, ResponsesService
from .wire import ErrorEvent, ResponseError, ResponseEvent, StreamEvent


def _builder(svc: ResponsesService, ex: Exchange) -> OutputBuilder:
    encrypted = "reasoning.encrypted_content" in (ex.req.include or ())
    names = ex.tools.namespaced
    if ex.prep.params.logprobs is not None:
        return LogprobOutputBuilder(
            svc.chat.logprobs, encrypted_reasoning=encrypted, namespaced=names
        )
    return OutputBuilder(encrypted_reasoning=encrypted, namespaced=names)


async def _output(
    driver: TurnDriver, builder: OutputBuilder
) -> AsyncGenerator[list[BuiltEvent], None]:
    """The generation's stream events, a step at a time, as ``builder`` collects the output.

    Pulled by the consumer: while a client is still taking earlier events, the engine's
    tokens wait in its socket and come as one chunk, so one step, at the next pull."""
    async with aclosing(driver.steps()) as steps:
        if isinstance(builder, LogprobOutputBuilder):
            async for events in steps:
                yield builder.feed(events, driver.take_logprobs())
        else:
            async for events in steps:
                yield builder.feed(events)
    yield builder.finish(cut=driver.cut)


async def _generate(svc: ResponsesService, ex: Exchange, driver: TurnDriver) -> Generated:
    """The whole generation (no stream)."""
    builder = _builder(svc, ex)
    async with aclosing(_output(driver, builder)) as output:
        async for _events in output:
            pass
    return Generated(driver, builder)


def build_responses_router(svc: ResponsesService, *, api_key: ApiKeys) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/v1/responses",
        response_model=None,
        openapi_extra=json_body(ResponsesRequest),
        responses=error_responses(400, 401, 404, 415, 502, 503),
    )
    async def create(request: Request) -> Response:
        owner = owner_of(require_bearer(request, api_key))
        req = await read_json_body(request, ResponsesRequest, svc.chat.limits)
        ex = await svc.prepare(req, owner)
        driver, _policy = svc.chat.driver(ex.prep)
        if req.stream:
            # An engine that is down within FIRST_TOKEN_WAIT is a 502/503 here, before the
            # stream's 200; past it the stream starts and pings while the prompt is read.
            opening = await start_stream(request, driver.open())
            return sse_response(_stream(svc, ex, driver, opening))

        done = await until_disconnect(request, _generate(svc, ex, driver))
        response = svc.finished(ex, done)
        await svc.keep(ex, response, done)
        return Response(response.body(), media_type="application/json")

    async def stored(request: Request, rid: str) -> Any:
        owner = owner_of(require_bearer(request, api_key))
        if svc.store is None:
            raise ApiError(
                404, "this server keeps no responses (--no-store)", type="not_found_error"
            )
        found = await svc.store.get(owner, rid)
        if found is None:
            raise ApiError(
                404, f"response {rid!r} not found", type="not_found_error", param="response_id"
            )
        return found

    @router.get("/v1/responses/{rid}", response_model=None, responses=error_responses(401, 404))
    async def get(request: Request, rid: str) -> Response:
        found = await stored(request, rid)
        return Response(
            json.dumps(found.response, ensure_ascii=False), media_type="application/json"
        )

    @router.delete("/v1/responses/{rid}", response_model=None, responses=error_responses(401, 404))
    async def delete(request: Request, rid: str) -> Response:
        owner = owner_of(require_bearer(request, api_key))
        if svc.store is None or not await svc.store.delete(owner, rid):
            await stored(request, rid)  # answers the 404 that says why
        return json_response({"id": rid, "object": "response.deleted", "deleted": True})

    @router.get(
        "/v1/responses/{rid}/input_items", response_model=None, responses=error_responses(401, 404)
    )
    async def input_items_of(request: Request, rid: str) -> Response:
        found = await stored(request, rid)
        order = request.query_params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise ApiError(400, 'order must be "asc" or "desc"', param="order")
        try:
            limit = int(request.query_params.get("limit", "20"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            raise ApiError(400, "limit must be an integer from 1 to 100", param="limit")
        data = found.input_items if order == "asc" else list(reversed(found.input_items))
        after = request.query_params.get("after")
        if after is not None:
            ids = [i["id"] for i in data]
            if after not in ids:
                raise ApiError(400, f"no input item {after!r} in this response", param="after")
            data = data[ids.index(after) + 1 :]
        shown = data[:limit]
        page = {
            "object": "list",
            "data": shown,
            "first_id": shown[0]["id"] if shown else None,
            "last_id": shown[-1]["id"] if shown else None,
            "has_more": len(data) > limit,
        }
        return Response(json.dumps(page, ensure_ascii=False), media_type="application/json")

    return router


async def _stream(
    svc: ResponsesService, ex: Exchange, driver: TurnDriver, opening: asyncio.Task[None]
) -> AsyncIterator[bytes]:
    """The typed event stream, every event with its ``sequence_number``: ``response.created``
    and ``response.in_progress`` at once, then a ``: ping`` comment (no event, no sequence
    number) every ``PING_SECONDS`` until the engine's first token, then the output's events."""
    sequence = 0

    def frame(event: StreamEvent | PartDelta) -> bytes:
        nonlocal sequence
        sequence += 1
        return frame_event(event, sequence - 1)

    rid, created, req = ex.rid, ex.created, ex.req
    started = svc.response(rid, created, req, "in_progress", [], None, left_out=ex.tools.left_out)
    yield frame(ResponseEvent(type="response.created", response=started))
    yield frame(ResponseEvent(type="response.in_progress", response=started))
    builder = _builder(svc, ex)

    async def body() -> AsyncIterator[bytes]:
        async for ping in pings_until_started(opening):
            yield ping
        async with aclosing(_output(driver, builder)) as output:
            async for events in output:
                if events:  # one write a step, its deltas merged
                    yield b"".join([frame(event) for event in coalesce(events)])
        done = Generated(driver, builder)
        final = svc.finished(ex, done)
        await svc.keep(ex, final, done)
        if final.status == "incomplete":
            yield frame(ResponseEvent(type="response.incomplete", response=final))
        else:
            yield frame(ResponseEvent(type="response.completed", response=final))

    def failed(error: ApiError) -> list[bytes]:
        response = svc.response(
            rid,
            created,
            req,
            "failed",
            [],
            None,
            error=ResponseError(code="server_error", message=error.message),
        )
        return [
            frame(ErrorEvent(code=error.code or "server_error", message=error.message)),
            frame(ResponseEvent(type="response.failed", response=response)),
        ]

    async def stop() -> None:
        await stop_started(opening, driver.aclose)

    async for data in stream_errors(body(), "response", on_error=failed, close=stop):
        yield data
