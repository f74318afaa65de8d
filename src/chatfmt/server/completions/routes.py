"""HTTP routes: ``/v1/completions``, ``/detokenize``, ``/v1/chat/render``.

``/v1/chat/render`` is the render half of ``/v1/chat/completions``: the same body, the same
preparation, the prompt shown instead of generated. It is named after the route it mirrors
(beside it under ``/v1/chat``), rather than after a tokenizer operation: what it answers is
the whole request's render (tools, forced call, reasoning controls, the stops generation would
use), which ``/tokenize`` answers only in part.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response

from ..chat.schemas import ChatCompletionRequest
from ..http.bodies import ApiKeys, json_response, read_json_body, require_bearer
from ..http.openapi import TOO_LARGE, error_responses, event_stream_ok, json_body
from ..http.sse import sse_response, start_stream, until_disconnect
from .schemas import (
    Completion,
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResponse,
    RenderResponse,
)
from .service import CompletionsService

_COMPLETION_OK = event_stream_ok(
    "A text_completion; with stream: true, server-sent events instead: one "
    "'data: <text_completion>' per piece of text, then 'data: [DONE]'",
    Completion,
)


def build_completions_router(service: CompletionsService, *, api_key: ApiKeys) -> APIRouter:
    """The routes of one served model."""
    router = APIRouter()
    limits = service.chat.limits

    @router.post(
        "/v1/completions",
        response_model=None,
        openapi_extra=json_body(CompletionRequest),
        responses={**_COMPLETION_OK, **error_responses(400, 401, 415, 502, 503), **TOO_LARGE},
    )
    async def completions(request: Request) -> Response:
        """A text or token-id prompt continued as given (no chat template)."""
        require_bearer(request, api_key)
        req = await read_json_body(request, CompletionRequest, limits)
        prep = service.prepare(req)
        if prep.stream:
            driver = service.driver(prep)
            # Headers within FIRST_TOKEN_WAIT, pings while the engine reads a long prompt.
            opening = await start_stream(request, driver.open())
            return sse_response(service.sse(prep, driver, opening))
        return json_response(await until_disconnect(request, service.complete(prep)))

    @router.post(
        "/detokenize",
        response_model=None,
        openapi_extra=json_body(DetokenizeRequest),
        responses={200: {"model": DetokenizeResponse}, **error_responses(400, 401, 415)},
    )
    async def detokenize(request: Request) -> Response:
        """The text of token ids (vLLM-style ``/detokenize``; the inverse of ``/tokenize``)."""
        require_bearer(request, api_key)
        req = await read_json_body(request, DetokenizeRequest, limits)
        return json_response(service.detokenize(req))

    @router.post(
        "/v1/chat/render",
        response_model=None,
        openapi_extra=json_body(ChatCompletionRequest),
        responses={200: {"model": RenderResponse}, **error_responses(400, 401, 415), **TOO_LARGE},
    )
    async def render(request: Request) -> Response:
        """The exact prompt (text and ids) ``/v1/chat/completions`` would send for this body."""
        require_bearer(request, api_key)
        req = await read_json_body(request, ChatCompletionRequest, limits)
        return json_response(await asyncio.to_thread(service.render, req))

    return router


__all__ = ["build_completions_router"]
