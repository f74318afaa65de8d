"""Errors in OpenAI's shape, ``{"error": {message, type, param, code}}``: the API and the web chat.

Route and service code raises :class:`ApiError`; :func:`.bodies.install_error_handler` answers
it on an app. An API whose errors have another shape (the Messages API) registers an
:data:`ErrorWriter` for its path prefix (:func:`.bodies.add_error_shape`), and
:func:`error_body` writes each error in the shape of the path it was answered on. (No
web-framework types here: the service raises these too.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from ...errors import EngineError, EngineUnavailableError


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """Every error, in OpenAI's shape (also sent in-band when a started stream fails)."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorBody


def first_problem(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """``(location, message)`` of the first pydantic error, as a request error names it."""
    first = errors[0] if errors else {}
    loc = ".".join(str(p) for p in first.get("loc", ()))
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return loc, msg


class ApiError(Exception):
    """An error answered in OpenAI's shape; ``headers`` go with the response (``Allow``)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> ErrorResponse:
        return ErrorResponse(
            error=ErrorBody(message=self.message, type=self.type, param=self.param, code=self.code)
        )


#: Writes an :class:`ApiError` as the JSON body of an API whose errors have another shape
#: than OpenAI's (see :func:`.bodies.add_error_shape`).
ErrorWriter = Callable[[ApiError], bytes]


#: The attribute of an app's ``state`` that maps path prefixes to their :data:`ErrorWriter`.
SHAPES_STATE = "error_shapes"


def error_body(scope: Mapping[str, Any] | None, error: ApiError) -> bytes:
    """``error``'s JSON body in the shape of the API that the request's path belongs to
    (:func:`.bodies.add_error_shape`; OpenAI's by default, and without a request)."""
    writer = _writer_for(scope) if scope is not None else None
    if writer is not None:
        return writer(error)
    return error.body().model_dump_json().encode()


def _writer_for(scope: Mapping[str, Any]) -> ErrorWriter | None:
    # Starlette puts the app in the scope before its middleware runs.
    shapes = getattr(getattr(scope.get("app"), "state", None), SHAPES_STATE, None)
    if not shapes:
        return None
    path = str(scope.get("path", ""))
    for prefix, writer in shapes.items():
        if path == prefix or path.startswith(prefix + "/"):
            return writer  # type: ignore[no-any-return]
    return None


class ClientGone(Exception):
    """The client disconnected before the answer was ready (answered 499, for the logs)."""


def validation_error(errors: Sequence[Mapping[str, Any]]) -> ApiError:
    """A 400 naming the first problem pydantic found (its field is the ``param``)."""
    loc, msg = first_problem(errors)
    return ApiError(400, f"{loc}: {msg}" if loc else msg, param=loc or None)


def engine_api_error(exc: EngineError) -> ApiError:
    """503 when the engine cannot be reached (retry later), 502 when it failed."""
    if isinstance(exc, EngineUnavailableError):
        return ApiError(503, str(exc), type="engine_unavailable", code="engine_unavailable")
    return ApiError(502, str(exc), type="engine_error", code="engine_error")
