"""What ``/openapi.json`` says about routes that read their JSON body by hand.

The POST routes parse their body themselves (to answer 415 and OpenAI-shaped 400s that name the
field), so FastAPI cannot see the body model: :func:`json_body` declares it on the route and
:func:`publish_models` puts the models into the document's components.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic
from fastapi import FastAPI

from .errors import ErrorResponse

REF = "#/components/schemas/{model}"

_ERRORS: dict[int, str] = {
    400: "A malformed request, or one the model's format or context cannot take",
    401: "A missing or wrong API key",
    403: "A request from another web site",
    404: "No such model, route or file",
    409: "A file that cannot be written where it is asked for",
    413: "A body over the size limit",
    415: "A body of the wrong content type (application/json; files: application/octet-stream)",
    502: "The engine failed",
    503: "The engine cannot be reached",
    507: "The store is at its size limit, and this key stores the most",
}


def ref(model: type[pydantic.BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def json_body(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` of a route whose JSON request body is a ``model``."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref(model)}},
        }
    }


def error_responses(
    *statuses: int, model: type[pydantic.BaseModel] = ErrorResponse
) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for the errors a route answers, in OpenAI's error shape (or
    ``model``'s, for an API with errors of its own shape)."""
    return {s: {"model": model, "description": _ERRORS[s]} for s in statuses}


def event_stream_ok(
    description: str, json_model: type[pydantic.BaseModel] | None = None
) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry of a route whose 200 answer is a ``text/event-stream`` (or,
    with ``json_model``, that JSON body when the request does not ask for a stream)."""
    ok: dict[str, Any] = {
        "description": description,
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
    if json_model is not None:
        ok["model"] = json_model
    return {200: ok}


def publish_models(
    app: FastAPI, *models: type[pydantic.BaseModel], drop_validation_errors: bool = False
) -> None:
    """Add ``models`` (and the models they use) to ``app``'s OpenAPI components.

    ``drop_validation_errors`` removes FastAPI's 422 answers from the document, for an app that
    answers request validation errors with 400 instead.
    """
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        document = build()
        if fresh:
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                schema = model.model_json_schema(ref_template=REF)
                for name, definition in schema.pop("$defs", {}).items():
                    schemas.setdefault(name, definition)
                schemas.setdefault(model.__name__, schema)
            if drop_validation_errors:
                _drop_422(document)
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _drop_422(document: dict[str, Any]) -> None:
    for path in document.get("paths", {}).values():
        for operation in path.values():
            operation.get("responses", {}).pop("422", None)
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)


#: Answered by the app's BodyLimitMiddleware (chatfmt.server.http.limits) before a route runs.
TOO_LARGE: dict[int | str, dict[str, object]] = {
    413: {"model": ErrorResponse, "description": "A body over the server's size limit"}
}
