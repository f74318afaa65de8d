"""The web chat's file routes: upload into, list, and download from a conversation's code
interpreter working directory (the checks on paths are :mod:`.files`'s)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from ..interpreter.sessions import InterpreterSessions
from ..server.errors import ApiError
from ..server.http import json_response
from ..server.openapi import error_responses
from .files import FileError, check_name, list_files, open_download, save_upload
from .schemas import CONVERSATION_ID, FileEntry, FileList, UploadResponse

_UPLOAD_TYPE = "application/octet-stream"


def _conversation_id(cid: str) -> str:
    if not CONVERSATION_ID.fullmatch(cid):
        raise ApiError(400, "a conversation id is 8-64 of [A-Za-z0-9_-]", param="conversation_id")
    return cid


def mount_files(
    app: FastAPI,
    sessions: InterpreterSessions,
    *,
    check: Callable[[Request], Any],
    max_upload_bytes: int,
) -> None:
    """``POST /api/files/{id}/{name}`` (the raw file, ``application/octet-stream``: a type
    another site cannot send without a preflight), ``GET /api/files/{id}``, and
    ``GET /api/files/{id}/{path}``. ``check`` raises for requests the page may not make."""

    @app.post(
        "/api/files/{cid}/{name}",
        response_model=None,
        responses={200: {"model": UploadResponse}, **error_responses(400, 401, 403, 409, 413, 415)},
    )
    async def upload(request: Request, cid: str, name: str) -> Response:
        check(request)
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
        root = await sessions.directory(cid, create=True)
        if root is None:
            raise ApiError(400, "this interpreter keeps no files")
        try:
            path = await asyncio.to_thread(save_upload, root, name, data)
        except FileError as exc:
            raise ApiError(exc.status, str(exc), param="name") from None
        return json_response(UploadResponse(name=name, path=str(path), size=len(data)))

    @app.get(
        "/api/files/{cid}",
        response_model=None,
        responses={200: {"model": FileList}, **error_responses(400, 401, 403)},
    )
    async def listing(request: Request, cid: str) -> Response:
        check(request)
        root = await sessions.directory(_conversation_id(cid), create=False)
        files = await asyncio.to_thread(list_files, root) if root is not None else []
        entries = [FileEntry(**f) for f in files]
        return json_response(FileList(directory=str(root) if root else None, files=entries))

    @app.get(
        "/api/files/{cid}/{path:path}",
        response_model=None,
        responses=error_responses(400, 401, 403, 404),
    )
    async def download(request: Request, cid: str, path: str) -> Response:
        check(request)
        root = await sessions.directory(_conversation_id(cid), create=False)
        if root is None:
            raise ApiError(404, "this conversation has no files", type="not_found_error")
        try:
            chunks, size, headers = await asyncio.to_thread(open_download, root, path)
        except FileError as exc:
            raise ApiError(exc.status, str(exc), type="not_found_error") from None
        headers["Content-Length"] = str(size)
        return StreamingResponse(chunks, headers=headers, media_type=headers["Content-Type"])
