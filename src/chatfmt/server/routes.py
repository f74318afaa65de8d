"""HTTP routes: ``/v1/chat/completions``, ``/v1/models``, ``/tokenize``, ``/health``."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import pydantic
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from ..errors import EngineError
from .schemas import ChatCompletionRequest
from .service import ApiError, ChatService, engine_api_error

T = TypeVar("T")

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


def json_response(body: Any, status: int = 200) -> Response:
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(content=data, status_code=status, media_type="application/json")


def parse_chat_request(body: bytes) -> ChatCompletionRequest:
    """The request body as a :class:`ChatCompletionRequest`, or a 400 naming the problem."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        # RecursionError: JSON nested deeper than the parser goes is bad input, not a crash.
        raise ApiError(
            400, f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(data).__name__}")
    try:
        return ChatCompletionRequest.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise ApiError(400, f"{loc}: {msg}" if loc else msg, param=loc or None) from None


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``, cancelling it if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
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


def build_router(service: ChatService, *, api_key: str | None) -> APIRouter:
    """The routes of one served model."""
    router = APIRouter()
    created = int(time.time())

    def check_auth(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(
            token.strip().encode(), api_key.encode()
        ):
            raise ApiError(
                401,
                "invalid or missing API key; send the header 'Authorization: Bearer <key>'",
                code="invalid_api_key",
            )

    @router.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> Response:
        check_auth(request)
        req = parse_chat_request(await request.body())
        prep = await service.prepare_async(req)
        try:
            if prep.stream:
                stream, first = await until_disconnect(request, service.open_stream(prep))
                return StreamingResponse(
                    service.sse(prep, stream, first),
                    media_type="text/event-stream",
                    headers=_SSE_HEADERS,
                )
            return json_response(await until_disconnect(request, service.complete(prep)))
        except EngineError as exc:
            raise engine_api_error(exc) from None
        except ClientGone:
            return Response(status_code=499)

    @router.post("/tokenize", response_model=None)
    async def tokenize(request: Request) -> Response:
        """The exact prompt ids a chat request renders to (vLLM-style ``/tokenize``)."""
        check_auth(request)
        req = parse_chat_request(await request.body())
        return json_response(await asyncio.to_thread(service.render_info, req))

    card = {"id": service.model_name, "object": "model", "created": created, "owned_by": "chatfmt"}

    @router.get("/v1/models", response_model=None)
    async def models(request: Request) -> Response:
        check_auth(request)
        return json_response({"object": "list", "data": [card]})

    @router.get("/v1/models/{model_id:path}", response_model=None)
    async def model(request: Request, model_id: str) -> Response:
        check_auth(request)
        if model_id != service.model_name:
            raise ApiError(
                404,
                f"model {model_id!r} is not served here; this server serves {service.model_name!r}",
                type="not_found_error",
                param="model",
                code="model_not_found",
            )
        return json_response(card)

    @router.get("/health", response_model=None)
    async def health() -> Response:
        ok = await service.engine.health()
        body = {
            "status": "ok" if ok else "unavailable",
            "model": service.model_name,
            "engine": service.engine.name,
            "dialect": service.dialect.name,
            "context_length": service.engine.context_length,
        }
        return json_response(body, 200 if ok else 503)

    return router
