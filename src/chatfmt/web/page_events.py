"""The agent loop as the page's JSON events (the table in ``docs/web.md``)."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from typing import Any

from ..agent import (
    Agent,
    AgentResult,
    ModelEvent,
    ToolFinished,
    ToolStarted,
    TurnFinished,
)
from ..errors import ChatFmtError
from ..events import ReasoningDelta, TextDelta, ToolCallDelta, ToolCallStart
from ..messages import INTERPRETER, Conversation, Message
from .code_deltas import CodeDeltas

logger = logging.getLogger("chatfmt.web")


def _png_base64(image: Any) -> str | None:
    if isinstance(image, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(image)).decode("ascii")
    if isinstance(image, str):
        return image.split(",", 1)[1] if image.startswith("data:") else image
    data = getattr(image, "data", None)  # an image object carrying its bytes
    return _png_base64(data) if data is not None else None


def _openai(message: Message) -> dict[str, Any]:
    out = message.to_openai()
    if message.metadata is not None:  # ChatGLM3 history needs it back verbatim
        out["metadata"] = message.metadata
    return out


async def agent_events(agent: Agent, conversation: Conversation) -> AsyncIterator[dict[str, Any]]:
    """The agent loop as the page's JSON events (see ``docs/web.md``)."""
    codes: dict[int, CodeDeltas] = {}
    started: list[str] = []  # ids of the calls announced in this turn, by index
    ran = 0  # calls of this turn already run: the n-th ToolStarted is the n-th start
    stream = agent.stream(conversation)
    try:
        async for item in stream:
            if isinstance(item, ModelEvent):
                ev = item.event
                if isinstance(ev, TextDelta):
                    if ev.text:
                        yield {"type": "text", "text": ev.text}
                elif isinstance(ev, ReasoningDelta):
                    # Streamed apart from the text, so the page can show it as thinking; the
                    # turn's messages carry it too (reasoning_content), so it stays in history.
                    if ev.text:
                        yield {"type": "reasoning", "text": ev.text}
                elif isinstance(ev, ToolCallStart):
                    started.append(ev.id)
                    if ev.name == INTERPRETER:
                        codes[ev.index] = CodeDeltas()
                    yield {
                        "type": "tool_call_start",
                        "index": ev.index,
                        "id": ev.id,
                        "name": ev.name,
                    }
                elif isinstance(ev, ToolCallDelta) and ev.index in codes:
                    text = codes[ev.index].feed(ev.arguments)
                    if text and ev.index < len(started):
                        yield {"type": "code_delta", "id": started[ev.index], "text": text}
            elif isinstance(item, TurnFinished):
                result = item.result
                yield {
                    "type": "turn",
                    "finish_reason": result.finish_reason,
                    "messages": [_openai(m) for m in result.messages],
                    "warnings": list(result.warnings),
                }
                codes.clear()
                started = []
                ran = 0
            elif isinstance(item, ToolStarted):
                call = item.call
                event: dict[str, Any] = {
                    "type": "tool_call",
                    "id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                }
                # The parser's streamed id and the final call's id should agree; if a dialect
                # renames calls, tell the page which streamed element this is.
                if ran < len(started) and started[ran] != call.id:
                    event["stream_id"] = started[ran]
                ran += 1
                yield event
            elif isinstance(item, ToolFinished):
                images = [b for b in (_png_base64(i) for i in item.images) if b]
                msg = Message(
                    role="tool",
                    content=item.observation,
                    tool_call_id=item.call.id,
                    name=item.call.name,
                )
                yield {
                    "type": "tool_result",
                    "id": item.call.id,
                    "name": item.call.name,
                    "content": item.observation,
                    "ok": item.ok,
                    "images": images,
                    "message": _openai(msg),
                }
            elif isinstance(item, AgentResult):
                yield {
                    "type": "done",
                    "stopped": item.stopped,
                    "steps": item.steps,
                    "messages": [_openai(m) for m in item.new_messages],
                }
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def error_event(exc: Exception) -> dict[str, Any]:
    """The page's ``error`` event for a loop that failed: chatfmt's errors say what went wrong,
    anything else is logged and reported by its type only."""
    if isinstance(exc, ChatFmtError):
        return {"type": "error", "message": str(exc)}
    logger.error("the web agent loop failed", exc_info=exc)
    return {"type": "error", "message": f"internal error: {type(exc).__name__}"}
