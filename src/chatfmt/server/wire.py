"""Parser events and decoded turns → OpenAI wire models (see :mod:`.schemas`)."""

from __future__ import annotations

from ..events import Event, Finish, ParseResult, TextDelta, ToolCallDelta, ToolCallStart
from .policy import CallPolicy
from .schemas import (
    AssistantMessage,
    ChunkChoice,
    Delta,
    FunctionCall,
    FunctionCallDelta,
    ToolCallOut,
)
from .schemas import ToolCallDelta as WireToolCallDelta

#: The first chunk of every stream.
ROLE_CHOICE = ChunkChoice(delta=Delta(role="assistant", content=""))


def chunk_choices(events: list[Event]) -> list[ChunkChoice]:
    """One streamed choice per event that changes the reply; adjacent text is merged."""
    out: list[ChunkChoice] = []
    text: list[str] = []

    def flush_text() -> None:
        if text:
            joined = "".join(text)
            text.clear()
            if joined:
                out.append(ChunkChoice(delta=Delta(content=joined)))

    for ev in events:
        if isinstance(ev, TextDelta):
            text.append(ev.text)
            continue
        flush_text()
        if isinstance(ev, ToolCallStart):
            call = WireToolCallDelta(
                index=ev.index,
                id=ev.id,
                type="function",
                function=FunctionCallDelta(name=ev.name, arguments=""),
            )
            out.append(ChunkChoice(delta=Delta(tool_calls=[call])))
        elif isinstance(ev, ToolCallDelta):
            if ev.arguments:
                part = WireToolCallDelta(
                    index=ev.index, function=FunctionCallDelta(arguments=ev.arguments)
                )
                out.append(ChunkChoice(delta=Delta(tool_calls=[part])))
        elif isinstance(ev, Finish):
            out.append(ChunkChoice(delta=Delta(), finish_reason=ev.reason))
    flush_text()
    return out


def assistant_message(result: ParseResult, policy: CallPolicy) -> AssistantMessage:
    """The reply of a decoded turn, with only the calls ``policy`` kept.

    ``content`` is ``null`` when the reply only calls tools, and ``""`` when it is empty.
    """
    content = "".join([result.content or "", *policy.demoted_text]) or None
    calls = [
        ToolCallOut(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
        for c in result.tool_calls
        if c.id in policy.kept_ids
    ]
    if not calls:
        return AssistantMessage(content=content or "")
    return AssistantMessage(content=content, tool_calls=calls)
