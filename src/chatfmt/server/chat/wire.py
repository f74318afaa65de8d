"""Parser events and decoded turns → OpenAI wire models (see :mod:`.schemas`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from ...events import (
    Event,
    Finish,
    IncompleteCall,
    ParseResult,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    merge_deltas,
)
from ...messages import ToolCall
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

if TYPE_CHECKING:
    from ...engines.base import TokenLogprob
    from .logprobs import LogprobWriter

#: The first chunk of every stream.
ROLE_CHOICE = ChunkChoice(delta=Delta(role="assistant", content=""))


def chunk_choices(events: list[Event]) -> list[ChunkChoice]:
    """One streamed choice per event that changes the reply; adjacent text (and adjacent
    reasoning) is merged."""
    out: list[ChunkChoice] = []
    merged = merge_deltas(events)
    for ev in merged:
        if isinstance(ev, TextDelta):
            if ev.text:
                out.append(ChunkChoice(delta=Delta(content=ev.text)))
        elif isinstance(ev, ReasoningDelta):
            if ev.text:
                out.append(ChunkChoice(delta=Delta(reasoning_content=ev.text)))
        elif isinstance(ev, ToolCallStart):
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
    return out


#: A text or reasoning delta's choice, serialized as pydantic would, around its JSON string.
_TEXT_HEAD = b'{"index":0,"delta":{"content":'
_REASONING_HEAD = b'{"index":0,"delta":{"reasoning_content":'
_DELTA_TAIL = b'},"finish_reason":null,"logprobs":null}'
_to_json = ChunkChoice.__pydantic_serializer__.to_json

#: The first chunk's choice, serialized once.
ROLE_FRAME = _to_json(ROLE_CHOICE)


def choice_frames(events: list[Event]) -> list[bytes]:
    """:func:`chunk_choices` serialized: the same bytes, built directly for text and
    reasoning deltas (nearly every streamed token), without a model per token."""
    out: list[bytes] = []
    for ev in merge_deltas(events):
        if isinstance(ev, TextDelta | ReasoningDelta):
            if not ev.text:
                continue
            # (No lone surrogate that orjson would refuse: TurnDecoder replaced them, and
            # pydantic cannot write one either.)
            head = _TEXT_HEAD if isinstance(ev, TextDelta) else _REASONING_HEAD
            out.append(head + orjson.dumps(ev.text) + _DELTA_TAIL)
            continue
        out.extend(_to_json(c) for c in chunk_choices([ev]))
    return out


def logprob_frames(
    events: list[Event], pending: list[TokenLogprob], writer: LogprobWriter
) -> list[bytes]:
    """:func:`chunk_choices` serialized, the first carrying the log-probabilities of
    ``pending`` (emptied): those of the tokens that made its step, and of earlier steps that
    changed nothing visible (text held back as the possible start of a marker)."""
    choices = chunk_choices(events)
    if choices and pending:
        choices[0].logprobs = writer.chat(pending)
        pending.clear()
    return [_to_json(c) for c in choices]


def calls_in_order(result: ParseResult) -> list[ToolCall | IncompleteCall]:
    """The turn's calls in the order the model wrote them, complete and incomplete."""
    pending = sorted(result.incomplete_calls, key=lambda c: c.index)
    out: list[ToolCall | IncompleteCall] = []
    for call in result.tool_calls:
        while pending and pending[0].index <= len(out):
            out.append(pending.pop(0))
        out.append(call)
    return out + pending


def assistant_message(result: ParseResult, policy: CallPolicy) -> AssistantMessage:
    """The reply of a decoded turn, with only the calls ``policy`` kept.

    ``content`` is ``null`` when the reply only calls tools, and ``""`` when it is empty. A
    call that did not close is returned as OpenAI returns one cut by ``length``: in
    ``tool_calls`` with exactly the partial arguments the model wrote (never completed), the
    finish reason saying it is not runnable (``length``, or ``stop``).
    """
    content = "".join([result.content or "", *policy.demoted_text]) or None
    calls = [
        ToolCallOut(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
        for c in calls_in_order(result)
        if c.id in policy.kept_ids
    ]
    reasoning = result.reasoning or None  # left out of the JSON while None
    if not calls:
        # Only reasoning (a reply cut off while thinking): content null, so that the message
        # sent back renders as reasoning, not as an empty answer.
        empty = None if reasoning else ""
        return AssistantMessage(content=content or empty, reasoning_content=reasoning)
    return AssistantMessage(content=content, reasoning_content=reasoning, tool_calls=calls)
