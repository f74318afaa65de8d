"""The web chat's conversations on the server: listed, reopened, saved and deleted, so that a
conversation started in one browser can be continued in another. The page stays offline-first
(its own storage is what it draws from); these routes are where it keeps a copy.

Conversations live in the response store (:mod:`chatfmt.store`, any backend of its
:class:`~chatfmt.store.Storage` protocol) and belong to the API key that saved them: one key
never lists, reads or deletes another's. The store's calls run on its own threads
(:class:`~chatfmt.store.AsyncStore`), so a slow save never holds up requests that do not use it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..server.http.bodies import json_response, read_json_body
from ..server.http.errors import ApiError
from ..server.http.openapi import error_responses, json_body, publish_models
from ..store import AsyncStore, Storage, StoreFull, owner_of
from .schemas import CONVERSATION_ID

#: The largest conversation kept (its JSON, images included).
MAX_CONVERSATION_BYTES = 8 * 1024 * 1024
_TITLE_CHARS = 80


class ConversationState(BaseModel):
    """A conversation as the page keeps it (``PUT /api/conversations/{id}``)."""

    model_config = ConfigDict(extra="ignore")

    messages: list[dict[str, Any]] = Field(max_length=4096)
    images: dict[str, Any] = Field(default_factory=dict)
    ok: dict[str, Any] = Field(default_factory=dict)
    mode: str = "chat"
    system: str = ""

    @model_validator(mode="after")
    def _valid_text(self) -> ConversationState:
        # Kept as UTF-8: a lone surrogate (from a "\udfff" escape) is no text, and would fail
        # in the store's write (a 500) rather than here (a 400 that says why).
        text = json.dumps(self.model_dump(), ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            code = ord(text[exc.start])
            raise ValueError(
                f"the conversation contains a lone surrogate (U+{code:04X}); send valid "
                "Unicode text"
            ) from None
        return self


_BLANKS = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")


def _title(state: ConversationState) -> str:
    first = next((m for m in state.messages if m.get("role") == "user"), None)
    text = first.get("content") if first else None
    # One line: runs of white space and control characters (a NUL, which PostgreSQL cannot
    # store, among them) become single spaces.
    text = _BLANKS.sub(" ", text).strip() if isinstance(text, str) else ""
    return (text[: _TITLE_CHARS - 1] + "…") if len(text) > _TITLE_CHARS else (text or "New chat")


def mount_conversations(
    app: FastAPI,
    store: Storage | None,
    *,
    check: Callable[[Request], str | None],
) -> None:
    """``GET /api/conversations``, ``GET``/``PUT``/``DELETE /api/conversations/{id}``.
    ``check`` authenticates (returning the key used) and refuses what the page may not send;
    without a store, the list says so and the rest are 404s."""

    kept_by = None if store is None else AsyncStore(store)

    publish_models(app, ConversationState)  # the schema PUT's body refers to

    def owner(request: Request) -> str:
        return owner_of(check(request))

    def kept() -> AsyncStore:
        if kept_by is None:
            raise ApiError(
                404, "this server keeps no conversations (--no-store)", type="not_found_error"
            )
        return kept_by

    def checked(cid: str) -> str:
        if not CONVERSATION_ID.fullmatch(cid):
            raise ApiError(
                400, "a conversation id is 8-64 of [A-Za-z0-9_-]", param="conversation_id"
            )
        return cid

    @app.get("/api/conversations", response_model=None, responses=error_responses(401, 403))
    async def listing(request: Request) -> Response:
        who = owner(request)
        if kept_by is None:
            return json_response({"stored": False, "conversations": []})
        rows = await kept_by.conversations(who)
        return json_response({"stored": True, "conversations": rows})

    @app.get(
        "/api/conversations/{cid}",
        response_model=None,
        responses=error_responses(400, 401, 403, 404),
    )
    async def load(request: Request, cid: str) -> Response:
        who = owner(request)
        state = await kept().load_conversation(who, checked(cid))
        if state is None:
            raise _not_found(cid)
        return json_response({"id": cid, **state})

    @app.put(
        "/api/conversations/{cid}",
        response_model=None,
        openapi_extra=json_body(ConversationState),
        responses=error_responses(400, 401, 403, 413, 415, 507),
    )
    async def save(request: Request, cid: str) -> Response:
        who = owner(request)
        checked(cid)
        size = request.headers.get("content-length", "")
        if size.isdigit() and int(size) > MAX_CONVERSATION_BYTES:
            raise ApiError(
                413, f"a conversation is kept up to {MAX_CONVERSATION_BYTES // 2**20} MB"
            )
        state = await read_json_body(request, ConversationState)
        data = state.model_dump()
        try:
            await kept().save_conversation(who, cid, _title(state), data)
        except StoreFull as exc:
            raise ApiError(507, str(exc), type="server_error", code="store_full") from None
        return json_response({"id": cid, "saved": True})

    @app.delete(
        "/api/conversations/{cid}",
        response_model=None,
        responses=error_responses(400, 401, 403, 404),
    )
    async def delete(request: Request, cid: str) -> Response:
        who = owner(request)
        gone = await kept().delete_conversation(who, checked(cid))
        if not gone:
            raise _not_found(cid)
        return json_response({"id": cid, "deleted": True})


def _not_found(cid: str) -> ApiError:
    return ApiError(404, f"conversation {cid!r} not found", type="not_found_error")
