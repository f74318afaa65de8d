"""The FastAPI application factory."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..dialects.base import Dialect
from ..engines.base import Engine
from .routes import build_router, json_response
from .service import ApiError, ChatService

log = logging.getLogger("chatfmt.server")


def create_app(
    engine: Engine, dialect: Dialect, *, model_name: str, api_key: str | None = None
) -> FastAPI:
    """An OpenAI-compatible app serving ``engine`` through ``dialect``.

    Everything the app needs lives on it (``app.state.service``); there are no module
    globals, so several apps can run in one process. ``api_key`` makes every ``/v1`` route
    and ``/tokenize`` require ``Authorization: Bearer <api_key>``.
    """
    service = ChatService(engine, dialect, model_name=model_name)
    app = FastAPI(title="chatfmt", summary=f"{model_name} served with the {dialect.name} format")
    app.state.service = service

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> Response:
        return json_response(exc.body(), exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> Response:
        # FastAPI answers 422; OpenAI clients expect 400 for a malformed request.
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        msg = str(first.get("msg", "invalid request"))
        return json_response(
            ApiError(400, f"{loc}: {msg}" if loc else msg, param=loc or None).body(), 400
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return json_response(
            ApiError(exc.status_code, str(exc.detail), type=kind).body(), exc.status_code
        )

    @app.exception_handler(Exception)
    async def _internal_error(_request: Request, exc: Exception) -> Response:
        log.exception("unhandled error while serving a request")
        body = ApiError(
            500, f"internal server error: {type(exc).__name__}", type="server_error"
        ).body()
        return json_response(body, 500)

    app.include_router(build_router(service, api_key=api_key))
    return app
