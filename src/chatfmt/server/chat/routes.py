"""HTTP routes: ``/v1/chat/completions``, ``/v1/models``, ``/tokenize``, ``/health``."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request, Response

from ..http.bodies import ApiKeys, json_response, read_json_body, require_bearer
from ..http.errors import ApiError
from ..http.openapi import TOO_LARGE, error_responses, event_stream_ok, json_body
from ..http.sse import sse_response, start_stream, until_disconnect
from .schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    ChatFormat,
    HealthResponse,
    ModelCard,
    ModelList,
    TokenizeResponse,
)
from .service import ChatService

_CHAT_OK = event_stream_ok(
    "A chat.completion; with stream: true, server-sent events instead: one "
    "'data: <chat.completion.chunk>' per delta (ChatCompletionChunk), then 'data: [DONE]'",
    ChatCompletion,
)



def build_router(service: ChatService, *, api_key: ApiKeys) -> APIRouter:
    """The routes of one served model."""
    router = APIRouter()
    created = int(time.time())

    @router.post(
        "/v1/chat/completions",
        response_model=None,
        openapi_extra=json_body(ChatCompletionRequest),
        responses={**_CHAT_OK, **error_responses(400, 401, 415, 502, 503), **TOO_LARGE},
    )
    async def chat_completions(request: Request) -> Response:
        require_bearer(request, api_key)
        req = await read_json_body(request, ChatCompletionRequest, service.limits)
        prep = await service.prepare_async(req)
        if prep.stream:
            driver, _policy = service.driver(prep)
            # Headers within FIRST_TOKEN_WAIT, pings while the engine reads a long prompt.
            opening = await start_stream(request, driver.open())
            return sse_response(service.sse(prep, driver, opening))
        return json_response(await until_disconnect(request, service.complete(prep)))

    @router.post(
        "/tokenize",
        response_model=None,
        openapi_extra=json_body(ChatCompletionRequest),
        responses={
            200: {"model": TokenizeResponse},
            **error_responses(400, 401, 415),
            **TOO_LARGE,
        },
    )
    async def tokenize(request: Request) -> Response:
        """The exact prompt ids a chat request renders to (vLLM-style ``/tokenize``)."""
        require_bearer(request, api_key)
        req = await read_json_body(request, ChatCompletionRequest, service.limits)
        return json_response(await asyncio.to_thread(service.render_info, req))

    chat_format = ChatFormat(
        dialect=service.dialect.name,
        description=service.format_description,
        chat_only=service.chat_only,
    )
    card = ModelCard(id=service.model_name, created=created, chat_format=chat_format)

    @router.get(
        "/v1/models",
        response_model=None,
        responses={200: {"model": ModelList}, **error_responses(401)},
    )
    async def models(request: Request) -> Response:
        require_bearer(request, api_key)
        return json_response(ModelList(data=[card]))

    @router.get(
        "/v1/models/{model_id:path}",
        response_model=None,
        responses={200: {"model": ModelCard}, **error_responses(401, 404)},
    )
    async def model(request: Request, model_id: str) -> Response:
        require_bearer(request, api_key)
        if model_id != service.model_name:
            raise ApiError(
                404,
                f"model {model_id!r} is not served here; this server serves {service.model_name!r}",
                type="not_found_error",
                param="model",
                code="model_not_found",
            )
        return json_response(card)

    @router.get(
        "/health",
        response_model=None,
        responses={200: {"model": HealthResponse}, 503: {"model": HealthResponse}},
    )
    async def health() -> Response:
        ok = await service.engine.health()
        body = HealthResponse(
            status="ok" if ok else "unavailable",
            model=service.model_name,
            engine=service.engine.name,
            dialect=service.dialect.name,
            context_length=service.engine.context_length,
        )
        return json_response(body, 200 if ok else 503)

    @router.get(
        "/metrics",
        response_model=None,
        responses={200: {"content": {"text/plain": {}}}, **error_responses(401)},
    )
    async def metrics(request: Request) -> Response:
        """Prometheus text format: requests, tokens, latencies, engine slots and restarts."""
        require_bearer(request, api_key)  # usage figures are the key holder's business
        page = service.metrics
        if page is None:
            raise ApiError(404, "metrics are off for this app", type="not_found_error")
        return Response(await page.page(), media_type=page.content_type)

    return router
