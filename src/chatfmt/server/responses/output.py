"""Parser events → the Responses API's output items and its typed stream events.

One builder serves both the whole response and the stream, so they cannot disagree: text opens
a ``message`` item (``output_text`` part), each call a ``function_call`` item, reasoning (gpt-oss)
a ``reasoning`` item; the events are those OpenAI documents, in its order
(``output_item.added`` → ``content_part.added`` → ``output_text.delta``… → ``output_text.done``
→ ``content_part.done`` → ``output_item.done``; for calls ``output_item.added`` →
``function_call_arguments.delta``… → ``.done`` → ``output_item.done``).
"""

from __future__ import annotations

import base64
import binascii
import secrets
from typing import Any

from ...events import Event, ReasoningDelta, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart


def item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


#: What chatfmt's ``encrypted_content`` starts with. It is not encrypted: the reasoning is in
#: the item's ``content`` already. It is the item's reasoning in one opaque string, as clients
#: that keep no state (``store: false``) send it back to continue a tool loop.
_REASONING_PREFIX = "chatfmt-reasoning-v1:"


def reasoning_blob(text: str) -> str:
    """A reasoning item's ``encrypted_content`` (asked for with ``include``)."""
    return _REASONING_PREFIX + base64.urlsafe_b64encode(text.encode()).decode()


def reasoning_of_blob(blob: str) -> str | None:
    """The reasoning text of :func:`reasoning_blob`'s string (``None``: not one of ours)."""
    if not blob.startswith(_REASONING_PREFIX):
        return None
    try:
        return base64.urlsafe_b64decode(blob[len(_REASONING_PREFIX) :]).decode()
    except (binascii.Error, ValueError):
        return None


class OutputBuilder:
    """Feed parser events; read :attr:`items` (the response's ``output``) at the end. Each
    call returns the stream events it caused (without ``sequence_number``).
    ``encrypted_reasoning`` adds ``encrypted_content`` to reasoning items once complete."""

    def __init__(self, *, encrypted_reasoning: bool = False) -> None:
        self.encrypted_reasoning = encrypted_reasoning
        self.items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the item receiving deltas
        self._calls: dict[int, dict[str, Any]] = {}  # open calls by parser index

    @property
    def _index(self) -> int:
        return len(self.items) - 1

    def feed(self, events: list[Event]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for ev in events:
            if isinstance(ev, TextDelta):
                if ev.text:
                    out += self._text(ev.text)
            elif isinstance(ev, ReasoningDelta):
                if ev.text:
                    out += self._reasoning(ev.text)
            elif isinstance(ev, ToolCallStart):
                out += self._close()
                call: dict[str, Any] = {
                    "id": item_id("fc"),
                    "type": "function_call",
                    "status": "in_progress",
                    "call_id": ev.id,
                    "name": ev.name,
                    "arguments": "",
                }
                self.items.append(call)
                self._calls[ev.index] = call
                out.append(self._added(call))
            elif isinstance(ev, ToolCallDelta):
                open_call = self._calls.get(ev.index)
                if open_call is not None and ev.arguments:
                    call = open_call
                    call["arguments"] += ev.arguments
                    out.append(
                        {
                            "type": "response.function_call_arguments.delta",
                            "item_id": call["id"],
                            "output_index": self.items.index(call),
                            "delta": ev.arguments,
                        }
                    )
            elif isinstance(ev, ToolCallEnd):
                ended = self._calls.pop(ev.index, None)
                if ended is not None:
                    if not ev.complete:  # it did not close: its arguments are partial
                        ended["status"] = "incomplete"
                    out += self._end_call(ended)
        return out

    def finish(self, *, cut: bool = False) -> list[dict[str, Any]]:
        """Close what is open; a reply with no output at all is one empty message. ``cut``:
        the reply was cut off (``max_output_tokens``) while its last item was being written,
        so that item is marked ``incomplete``. A call that did not close is ``incomplete``
        whatever ended it (its ``ToolCallEnd`` says so), with exactly its partial arguments."""
        if cut and self.items:
            self.items[-1]["status"] = "incomplete"
        out = self._close()
        for call in list(self._calls.values()):
            out += self._end_call(call)
        self._calls.clear()
        if not self.items:
            out += self._text("")
            out += self._close()
        return out

    # ==== Items ====

    def _added(self, item: dict[str, Any]) -> dict[str, Any]:
        # A copy as the item is now (its text grows later, before this event is written).
        shown = {**item, "content": []} if "content" in item else dict(item)
        return {"type": "response.output_item.added", "output_index": self._index, "item": shown}

    def _text(self, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != "message":
            out += self._close()
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            message: dict[str, Any] = {
                "id": item_id("msg"),
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [part],
            }
            self.items.append(message)
            self._open = message
            out.append(self._added(message))
            out.append(
                {
                    "type": "response.content_part.added",
                    "item_id": message["id"],
                    "output_index": self._index,
                    "content_index": 0,
                    "part": {**part},
                }
            )
        message = self._open
        assert message is not None
        message["content"][0]["text"] += text
        if text:
            out.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": message["id"],
                    "output_index": self.items.index(message),
                    "content_index": 0,
                    "delta": text,
                    "logprobs": [],
                }
            )
        return out

    def _reasoning(self, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != "reasoning":
            out += self._close()
            item: dict[str, Any] = {
                "id": item_id("rs"),
                "type": "reasoning",
                "status": "in_progress",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": ""}],
            }
            self.items.append(item)
            self._open = item
            out.append(self._added(item))
        item = self._open
        assert item is not None
        item["content"][0]["text"] += text
        out.append(
            {
                "type": "response.reasoning_text.delta",
                "item_id": item["id"],
                "output_index": self.items.index(item),
                "content_index": 0,
                "delta": text,
            }
        )
        return out

    def _close(self) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = self.items.index(item)
        if item["status"] != "incomplete":
            item["status"] = "completed"
        out: list[dict[str, Any]] = []
        if item["type"] == "message":
            part = item["content"][0]
            base = {"item_id": item["id"], "output_index": index, "content_index": 0}
            out.append(
                {"type": "response.output_text.done", **base, "text": part["text"], "logprobs": []}
            )
            out.append({"type": "response.content_part.done", **base, "part": dict(part)})
        else:
            text = item["content"][0]["text"]
            if self.encrypted_reasoning:
                item["encrypted_content"] = reasoning_blob(text)
            out.append(
                {
                    "type": "response.reasoning_text.done",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "text": text,
                }
            )
        out.append({"type": "response.output_item.done", "output_index": index, "item": item})
        return out

    def _end_call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        index = self.items.index(call)
        if call["status"] != "incomplete":
            call["status"] = "completed"
        return [
            {
                "type": "response.function_call_arguments.done",
                "item_id": call["id"],
                "output_index": index,
                "name": call["name"],
                "arguments": call["arguments"],
            },
            {"type": "response.output_item.done", "output_index": index, "item": dict(call)},
        ]
