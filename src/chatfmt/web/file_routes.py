"""The web chat's file routes: upload into, list, and download from a conversation's code
interpreter working directory (the checks on paths are :mod:`.files`'s).

Sessions belong to the API key that made them (its owner, as the response store names it): a
key reaches only its own conversations' directories. Another key's conversation id is, to it,
a conversation without files (an empty listing, a 404 for a download), and an upload under
that id goes to a session of its own, never into the other key's directory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from ..errors import InterpreterError
from ..interpreter.sessions import InterpreterSessions, SessionsBusy
from ..prompts import upload_note
from ..server.http.bodies import json_response
from ..server.http.errors import ApiError, ErrorResponse
from ..server.http.openapi import error_responses
from ..store import owner_of
from .files import FileError, check_name, list_files, open_download, save_upload
from .schemas import CONVERSATION_ID, FileEntry, FileList, UploadResponse

_UPLOAD_TYPE = "application/octet-stream"


#: The interpreter's own error answers (the shared table describes the engine's and store's).
_SESSION_ERRORS: dict[int, str] = {
    429: "This API key's share of interpreter sessions is all in use",
    503: "Every interpreter session of the server is in use, or a kernel could not start",
    507: "The conversation's working directory is at its disk cap",
}


def session_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for routes that start interpreter sessions (with 429, 503, 507)."""
    shared = error_responses(*(s for s in statuses if s not in _SESSION_ERRORS))
    own: dict[int | str, dict[str, Any]] = {
        s: {"model": ErrorResponse, "description": _SESSION_ERRORS[s]}
        for s in statuses
        if s in _SESSION_ERRORS
    }
    return {**shared, **own}


def session_error(exc: InterpreterError) -> ApiError:
    """A session that cannot start, as an answer: 429 when the key is at its share, 503 when
    the server is full or the kernel failed to start (the message says which)."""
    status = exc.status if isinstance(exc, SessionsBusy) else 503
    code = "sessions_busy" if isinstance(exc, SessionsBusy) else "interpreter_unavailable"
    return ApiError(status, str(exc), type="server_error", code=code)


def _conversation_id(cid: str) -> str:
    if not CONVERSATION_ID.fullmatch(cid):
        raise ApiError(400, "a conversation id is 8-64 of [A-Za-z0-9_-]", param="conversation_id")
    return cid


def mount_files(
    app: FastAPI,
    sessions: InterpreterSessions,
    *,
    check: Callable[[Request], str | None],
    max_upload_bytes: int,
) -> None:
    """``POST /api/files/{id}/{name}`` (the raw file, ``application/octet-stream``: a type
    another site cannot send without a preflight), ``GET /api/files/{id}``, and
    ``GET /api/files/{id}/{path}``. ``check`` raises for requests the page may not make and
    returns the API key the request carried, whose sessions it reaches."""

    @app.post(
        "/api/files/{cid}/{name}",
        response_model=None,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {_UPLOAD_TYPE: {"schema": {"type": "string", "format": "binary"}}},
            }
        },
        responses={
            200: {"model": UploadResponse},
            **session_errors(400, 401, 403, 409, 413, 415, 429, 503, 507),
        },
    )
    async def upload(request: Request, cid: str, name: str) -> Response:
        owner = owner_of(check(request))
        _conversation_id(cid)
        try:
            check_name(name)
        except FileError as exc:
            raise ApiError(400, str(exc), param="name") from None
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != _UPLOAD_TYPE:
            raise ApiError(
                415, f"send the file's bytes as {_UPLOAD_TYPE}", type="invalid_request_error"
            )
        limit_mb = max_upload_bytes / 1024 / 1024
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_upload_bytes:
            raise ApiError(413, f"the file is larger than the upload limit of {limit_mb:g} MB")
        data = await request.body()
        if len(data) > max_upload_bytes:
            raise ApiError(413, f"the file is larger than the upload limit of {limit_mb:g} MB")
        try:
            root = await sessions.directory(cid, create=True, owner=owner)
        except InterpreterError as exc:
            raise session_error(exc) from None
        if root is None:
            raise ApiError(400, "this interpreter keeps no files")
        room = await sessions.disk_room(cid, owner)
        if room is not None and len(data) > room:
            raise ApiError(
                507,
                f"the conversation's working directory has {room / 1024 / 1024:.1f} MB left under "
                "its disk cap (--kernel-disk-mb); delete files there, or upload a smaller file",
                type="server_error",
                code="disk_limit",
            )
        try:
            path = await asyncio.to_thread(save_upload, root, name, data)
        except FileError as exc:
            raise ApiError(exc.status, str(exc), param="name") from None
        saved = UploadResponse(
            name=name, path=str(path), size=len(data), note=upload_note(str(path))
        )
        return json_response(saved)

    @app.get(
        "/api/files/{cid}",
        response_model=None,
        responses={200: {"model": FileList}, **error_responses(400, 401, 403)},
    )
    async def listing(request: Request, cid: str) -> Response:
        owner = owner_of(check(request))
        root = await sessions.directory(_conversation_id(cid), create=False, owner=owner)
        files = await asyncio.to_thread(list_files, root) if root is not None else []
        entries = [FileEntry(**f) for f in files]
        return json_response(FileList(directory=str(root) if root else None, files=entries))

    @app.get(
        "/api/files/{cid}/{path:path}",
        response_model=None,
        responses=error_responses(400, 401, 403, 404),
    )
    async def download(request: Request, cid: str, path: str) -> Response:
        owner = owner_of(check(request))
        root = await sessions.directory(_conversation_id(cid), create=False, owner=owner)
        if root is None:
            raise ApiError(404, "this conversation has no files", type="not_found_error")
        try:
            chunks, size, headers = await asyncio.to_thread(open_download, root, path)
        except FileError as exc:
            raise ApiError(exc.status, str(exc), type="not_found_error") from None
        headers["Content-Length"] = str(size)
        return StreamingResponse(chunks, headers=headers, media_type=headers["Content-Type"])
