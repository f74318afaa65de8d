"""Bodies of the web chat's ``/api`` routes (the page's events are in :mod:`.page_events`)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..server.chat.schemas import ToolList
from .modes import Mode

#: A browser conversation's id, as the page makes it (``store.js``).
CONVERSATION_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CountRequest(_Strict):
    """Body of ``POST /api/count``: what to count (``tools`` or a ``mode`` that implies them)."""

    messages: list[dict[str, Any]]
    tools: ToolList = None
    mode: Mode | None = None
    system: str | None = None


class AgentRequest(_Strict):
    """Body of ``POST /api/agent``: the whole conversation; the reply streams as events."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    mode: Mode = "chat"
    system: str | None = None
    #: The browser conversation's id, 8-64 of ``[A-Za-z0-9_-]`` (interpreter mode needs one).
    conversation_id: str | None = None


class CountResponse(_Strict):
    """The exact prompt size of a conversation, and the model's context length."""

    tokens: int
    context: int


class InfoResponse(_Strict):
    """What the page needs to know about the server (``GET /api/info``)."""

    model: str
    dialect: str
    context: int
    max_tokens: int
    tools: list[dict[str, Any]]
    interpreter: bool
    interpreter_tool: dict[str, Any]
    modes: list[Mode]
    #: What protection the interpreter's code runs under, in one line (``None``: no interpreter).
    sandbox: str | None = None
    #: The largest file the interpreter accepts as an upload, in bytes.
    max_upload_bytes: int = 0
    #: Each mode's default system prompt (``None``: the mode has none), which the page shows
    #: in its system prompt field and sends unless the reader changes it.
    system_prompts: dict[Mode, str | None] = Field(default_factory=dict)


#: The longest text ``POST /api/markdown`` renders, in characters (a few seconds of work at
#: worst; a longer message stays plain text on the page).
MAX_MARKDOWN_CHARS = 100_000


class MarkdownRequest(_Strict):
    """Body of ``POST /api/markdown``: Markdown text (model output: untrusted) to render."""

    text: str


class MarkdownResponse(_Strict):
    """``text`` as sanitized HTML: only the tags and attributes Markdown produces."""

    html: str


class UploadResponse(_Strict):
    """A file saved into the conversation's working directory (``POST /api/files/...``)."""

    name: str
    path: str
    size: int
    #: The line the page puts before the user's next message to tell the model of the file.
    note: str


class FileEntry(_Strict):
    name: str
    size: int


class FileList(_Strict):
    """The files in the conversation's working directory (``GET /api/files/{id}``)."""

    directory: str | None
    files: list[FileEntry]
