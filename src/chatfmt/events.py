"""Events a stream parser emits, and the result of parsing one assistant turn.

Deltas are append-only: the concatenation of every :class:`TextDelta` is the final text, of
every :class:`ReasoningDelta` the final reasoning, and of every :class:`ToolCallDelta` of one
call its final ``arguments`` JSON, or, for a call that ends with ``ToolCallEnd(complete=False)``,
the partial arguments the model wrote before it was cut off (chatfmt never completes them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .messages import Message, ToolCall

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True, slots=True)
class TextDelta:
    """More visible assistant text."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """More of the model's reasoning (gpt-oss's ``analysis`` channel): never part of the
    visible text; OpenAI-compatible servers send it as ``reasoning_content``."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call begins; its name is complete. ``index`` counts calls in this turn from 0."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of the JSON arguments of call ``index``."""

    index: int
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """Call ``index`` ended. ``complete`` is False for a call that did not close (cut by
    ``length``, the turn ended inside it, or its JSON broke): its arguments are the partial text
    the model wrote, it is never runnable and it is reported in
    :attr:`ParseResult.incomplete_calls`, not among the message's calls."""

    index: int
    complete: bool = True


@dataclass(frozen=True, slots=True)
class SegmentEnd:
    """A segment of the turn ended (ChatGLM3: one ``<|assistant|>`` part)."""

    metadata: str


@dataclass(frozen=True, slots=True)
class Finish:
    """The turn ended. ``reason`` is ``tool_calls`` when the turn ends in calls."""

    reason: FinishReason


Event = (
    TextDelta | ReasoningDelta | ToolCallStart | ToolCallDelta | ToolCallEnd | SegmentEnd | Finish
)


def merge_deltas(events: list[Event]) -> list[Event]:
    """Events with adjacent text deltas, and adjacent argument deltas of one call, merged.

    Two chunkings of the same output give the same merged events (what the stream-equals-whole
    property compares), and a UI can coalesce a burst of deltas into one update.
    """
    out: list[Event] = []
    for e in events:
        last = out[-1] if out else None
        if isinstance(e, TextDelta) and isinstance(last, TextDelta):
            out[-1] = TextDelta(last.text + e.text)
        elif isinstance(e, ReasoningDelta) and isinstance(last, ReasoningDelta):
            out[-1] = ReasoningDelta(last.text + e.text)
        elif (
            isinstance(e, ToolCallDelta)
            and isinstance(last, ToolCallDelta)
            and last.index == e.index
        ):
            out[-1] = ToolCallDelta(e.index, last.arguments + e.arguments)
        else:
            out.append(e)
    return out


_EVENT_TYPES = {
    TextDelta: "text",
    ReasoningDelta: "reasoning",
    ToolCallStart: "tool_call_start",
    ToolCallDelta: "tool_call_delta",
    ToolCallEnd: "tool_call_end",
    SegmentEnd: "segment_end",
    Finish: "finish",
}


def event_json(event: Event) -> dict[str, Any]:
    """The event as a JSON object: ``{"type": "text", "text": ...}`` and so on (what
    ``chatfmt parse --stream`` prints). A :class:`ToolCallEnd` carries ``"complete": false``
    only for a call that did not close; absent, it is true."""
    out = {"type": _EVENT_TYPES[type(event)], **asdict(event)}
    if isinstance(event, ToolCallEnd) and event.complete:
        del out["complete"]
    return out


@dataclass(frozen=True, slots=True)
class IncompleteCall:
    """A call the model announced but did not close (see :class:`ToolCallEnd`): never run.

    ``arguments`` is the partial arguments text exactly as it was streamed (not valid JSON in
    general), ``raw`` the exact text the model wrote for the call."""

    index: int
    id: str
    name: str
    arguments: str
    raw: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ParseResult:
    """One parsed assistant turn.

    ``messages`` are the turn's parts in the dialect's own history shape (ChatGLM3 writes a
    text part and each tool call as separate ``<|assistant|>`` segments); :attr:`message` merges
    them into one OpenAI-shaped assistant message. ``warnings`` says why output that looked like
    a tool call was kept as text, or was cut off. ``incomplete_calls`` are the calls that were
    announced but did not close: they are in no message (nothing that runs calls from a parsed
    message can run one), and a turn that has them never finishes with ``tool_calls`` because
    of them.
    """

    messages: list[Message]
    finish_reason: FinishReason = "stop"
    warnings: list[str] = field(default_factory=list)
    incomplete_calls: list[IncompleteCall] = field(default_factory=list)

    @property
    def content(self) -> str | None:
        texts = [m.content for m in self.messages if m.content]
        return "".join(texts) if texts else None

    @property
    def reasoning(self) -> str | None:
        texts = [m.reasoning for m in self.messages if m.reasoning is not None]
        return "".join(texts) if texts else None

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [c for m in self.messages for c in (m.tool_calls or ())]

    @property
    def message(self) -> Message:
        """The whole turn as one assistant message (content, reasoning and tool calls)."""
        calls = self.tool_calls
        return Message(
            role="assistant",
            content=self.content,
            reasoning=self.reasoning,
            tool_calls=tuple(calls) or None,
        )

    def to_openai(self) -> dict[str, Any]:
        """The turn in OpenAI's assistant-message shape (plus ``finish_reason``, and
        ``incomplete_calls`` and ``warnings`` when there are any)."""
        out = self.message.to_openai()
        out["finish_reason"] = self.finish_reason
        if self.incomplete_calls:
            out["incomplete_calls"] = [c.to_json() for c in self.incomplete_calls]
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out
