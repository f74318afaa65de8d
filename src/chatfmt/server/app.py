"""The FastAPI application factory."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from ..dialects.base import Dialect
from ..engines.base import Engine
from ..errors import StoreError
from ..store import AsyncStore, Storage
from .chat.routes import build_router
from .chat.schemas import ChatCompletionChunk, ChatCompletionRequest
from .chat.service import ChatService
from .completions.routes import build_completions_router
from .completions.schemas import CompletionRequest, DetokenizeRequest
from .completions.service import CompletionsService
from .http.bodies import (
    ApiKeys,
    add_error_shape,
    check_api_key,
    error_response,
    install_error_handler,
)
from .http.errors import ApiError, validation_error
from .http.limits import DEFAULT_LIMITS, BodyLimitMiddleware, ServerLimits
from .http.openapi import publish_models
from .messages.request import CountTokensRequest, MessagesRequest
from .messages.routes import build_messages_router
from .messages.service import MessagesService
from .messages.wire import error_json
from .metrics import CountRequests, MeteredEngine, ServerMetrics
from .responses.input import ResponsesRequest
from .responses.routes import build_responses_router
from .responses.service import ResponsesService

log = logging.getLogger("chatfmt.server")


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app serves at the request's path (each route asked
    whether it would take the request with that method: routers may nest)."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes
        )
    ]


def create_app(
    engine: Engine,
    dialect: Dialect,
    *,
    model_name: str,
    api_key: ApiKeys = None,
    limits: ServerLimits = DEFAULT_LIMITS,
    call_grammar: bool = True,
    store: Storage | None = None,
    chat_only: bool = False,
    format_description: str | None = None,
) -> FastAPI:
    """An OpenAI-compatible app serving ``engine`` through ``dialect`` (and Anthropic's
    Messages API, on the same pipeline).

    Everything the app needs lives on it (``app.state.service``, ``app.state.limits``,
    ``app.state.service.metrics`` behind ``GET /metrics``); there
    are no module globals, so several apps can run in one process. ``api_key`` (one key or
    several) makes every ``/v1`` route and ``/tokenize`` require ``Authorization: Bearer
    <key>``; stored responses belong to the key that made them. ``store`` keeps responses for
    ``previous_response_id`` and ``GET /v1/responses/{id}`` (``None``: none are kept).

    ``limits`` bound what one request may send (body size, messages, tools), for routes added
    to the app later too (the web chat); the connection-level ones need the server's help:
    ``uvicorn.Config(app, **uvicorn_options(limits))``.

    Tool calls are constrained to the dialect's call grammar where the engine can (see
    :func:`~chatfmt.server.chat.constraints.constraint`); ``call_grammar=False`` leaves the
    calls a model may choose to make free (forced calls, strict tools and ``response_format``
    still are not).
    ``chat_only``: requests with tools are refused (the model's template writes none).
    ``format_description``: how the model is served, in words, for ``/v1/models`` (by default
    the dialect's own description, or its name).
    """
    metrics = ServerMetrics(engine)
    # Generations are counted at the engine, so routes added later (the web chat, which
    # takes the engine from app.state.service) are counted too.
    metered = MeteredEngine(engine, metrics)
    service = ChatService(
        metered,
        dialect,
        model_name=model_name,
        limits=limits,
        metrics=metrics,
        call_grammar=call_grammar,
        chat_only=chat_only,
    )
    if format_description is not None:
        service.format_description = format_description
    check_api_key(api_key)
    # No /docs or /redoc: FastAPI's pages load scripts from CDNs, on the origin of the API and
    # the code interpreter. The schema itself stays at /openapi.json.
    app = FastAPI(
        title="chatfmt",
        summary=f"{model_name} served with the {dialect.name} format",
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    app.state.limits = limits
    install_error_handler(app)
    app.add_middleware(BodyLimitMiddleware, limit=limits.max_body_bytes)
    # Outermost, so that answers from the middleware above (413) are counted too.
    app.add_middleware(CountRequests, metrics=metrics, routes=app.router)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI answers 422; OpenAI clients expect 400 for a malformed request.
        errors = [{**e, "loc": tuple(e.get("loc", ()))[1:]} for e in exc.errors()]  # no "body"
        return error_response(validation_error(errors), request)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names the methods of the first route with this path only; a path
            # served by several routes (GET and DELETE of one response) allows them all.
            headers["Allow"] = ", ".join(allowed_methods(request))
        error = ApiError(exc.status_code, str(exc.detail), type=kind, headers=headers)
        return error_response(error, request)

    @app.exception_handler(StoreError)
    async def _store_error(request: Request, exc: StoreError) -> Response:
        # The database is down or refused (the routes handle a full store and a broken chain
        # themselves): a 503 that says so, not an internal error of chatfmt's.
        log.warning("the response store failed: %s", exc)
        return error_response(
            ApiError(503, f"{exc}; retry later", type="server_error", code="store_unavailable"),
            request,
        )

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error while serving a request")
        error = ApiError(
            500,
            f"internal server error: {type(exc).__name__}",
            type="server_error",
            # The server drops the connection after an unhandled error: say so, so that a
            # client does not send its next request on it.
            headers={"Connection": "close"},
        )
        return error_response(error, request)

    app.include_router(build_router(service, api_key=api_key))
    # The legacy completions, /detokenize and /v1/chat/render, on the same chat service.
    app.include_router(build_completions_router(CompletionsService(service), api_key=api_key))
    app.state.store = store
    # The store's calls run on its own threads (AsyncStore), never in the pool rendering uses.
    kept = None if store is None else AsyncStore(store)
    app.include_router(build_responses_router(ResponsesService(service, kept), api_key=api_key))
    # Anthropic's Messages API, on the same chat service; everything under its path answers
    # errors in its shape (a 404 of a path below it and a 413 of the middleware included).
    app.include_router(build_messages_router(MessagesService(service), api_key=api_key))
    add_error_shape(app, "/v1/messages", error_json)

    @app.head("/", include_in_schema=False)
    async def _probe() -> Response:
        # Claude Code checks that its base URL answers before it sends anything.
        return Response(status_code=200)

    publish_models(
        app,
        ChatCompletionRequest,
        ChatCompletionChunk,
        ResponsesRequest,
        MessagesRequest,
        CountTokensRequest,
        CompletionRequest,
        DetokenizeRequest,
        drop_validation_errors=True,
    )
    return app
