"""Parser events → the Messages API's content blocks and its stream events (the models of
:mod:`.wire`).

One builder serves the whole message and the stream, so they cannot disagree. Reasoning opens
a ``thinking`` block (``thinking_delta``…, then its ``signature_delta``), text a ``text`` block
(``text_delta``…); each block is ``content_block_start`` … ``content_block_stop``, numbered
in order.

A call becomes a ``tool_use`` block only once the model has closed it: its start, its whole
input in one ``input_json_delta`` and its stop are sent together. A call cut off (by
``max_tokens``, a stop sequence, or broken JSON) is never a ``tool_use`` block, since a client
reading streamed input completes partial JSON (the ``anthropic`` SDK does) and could run what
the model never wrote; its text is given as a text block instead, as chat completions give a
call the request did not allow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import NamedTuple

from ...events import (
    Event,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    merge_deltas,
)
from . import wire
from .thinking import signature_of
from .wire import (
    BlockDelta,
    BlockStart,
    BlockStop,
    ContentBlock,
    InputJsonDelta,
    SignatureDelta,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)


class PartDelta(NamedTuple):
    """Text (``thinking``: reasoning) added to block number ``block``: the event made per
    token, a plain tuple rather than a model (see :func:`.routes.frame`)."""

    block: int
    thinking: bool
    text: str

    def event(self) -> BlockDelta:
        """The wire model this delta stands for."""
        delta: wire.ThinkingDelta | wire.TextDelta
        if self.thinking:
            delta = wire.ThinkingDelta(thinking=self.text)
        else:
            delta = wire.TextDelta(text=self.text)
        return BlockDelta(index=self.block, delta=delta)


#: What the builder returns: block events, and per-token deltas as :class:`PartDelta`.
BuiltEvent = BlockStart | BlockDelta | BlockStop | PartDelta


def tool_use_id(call_id: str) -> str:
    """A ``toolu_`` id for a parsed call's id (``call_…``: the same random part)."""
    if call_id.startswith("toolu_"):
        return call_id
    rest = call_id.removeprefix("call_")
    # Some formats' ids hold characters Anthropic's ids never do (Kimi's "functions.f:0").
    return "toolu_" + "".join(
        c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in rest
    )


def demoted_call(name: str, arguments: str) -> str:
    """A call that is not returned as one, as text (the shape chat completions give it)."""
    return f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {arguments}}}'


@dataclass(slots=True)
class _Call:
    """A call whose arguments are still streaming."""

    id: str
    name: str
    pieces: list[str] = field(default_factory=list)


class ContentBuilder:
    """Feed parser events (after the call policy); read :attr:`blocks` (the message's
    ``content``) once :meth:`finish` returned. Each call returns the stream events it caused.
    ``show_thinking`` false leaves thinking blocks' text empty (``display: "omitted"``); their
    signature carries the thought either way."""

    def __init__(self, *, show_thinking: bool = True) -> None:
        self.show_thinking = show_thinking
        self.blocks: list[ContentBlock] = []
        self._open: TextBlock | ThinkingBlock | None = None  # the block receiving deltas
        self._pieces: list[str] = []  # its text so far
        self._calls: dict[int, _Call] = {}  # open calls by parser index

    def feed(self, events: list[Event]) -> list[BuiltEvent]:
        out: list[BuiltEvent] = []
        for ev in merge_deltas(events):
            if isinstance(ev, TextDelta):
                if ev.text:
                    self._delta(ev.text, False, out)
            elif isinstance(ev, ReasoningDelta):
                if ev.text:
                    self._delta(ev.text, True, out)
            elif isinstance(ev, ToolCallStart):
                self._close(out)
                self._calls[ev.index] = _Call(ev.id, ev.name)
            elif isinstance(ev, ToolCallDelta):
                call = self._calls.get(ev.index)
                if call is not None and ev.arguments:
                    call.pieces.append(ev.arguments)
            elif isinstance(ev, ToolCallEnd):
                ended = self._calls.pop(ev.index, None)
                if ended is not None:
                    self._end_call(ended, ev.complete, out)
        return out

    def finish(self) -> list[BuiltEvent]:
        """Close what is open; a call that never ended did not close (it is text)."""
        out: list[BuiltEvent] = []
        for call in self._calls.values():
            self._end_call(call, False, out)
        self._calls.clear()
        self._close(out)
        return out

    # ==== Blocks ====
    # The open block is always the last one: a call closes it before its block is added.

    def _delta(self, text: str, thinking: bool, out: list[BuiltEvent]) -> None:
        block = self._open
        if block is None or isinstance(block, ThinkingBlock) != thinking:
            self._close(out)
            block = ThinkingBlock(thinking="", signature="") if thinking else TextBlock(text="")
            self.blocks.append(block)
            self._open = block
            out.append(BlockStart(index=len(self.blocks) - 1, content_block=block.model_copy()))
        self._pieces.append(text)
        if not thinking or self.show_thinking:
            out.append(PartDelta(len(self.blocks) - 1, thinking, text))

    def _close(self, out: list[BuiltEvent]) -> None:
        block, self._open = self._open, None
        if block is None:
            return
        index = len(self.blocks) - 1
        text = "".join(self._pieces)
        self._pieces = []
        if isinstance(block, ThinkingBlock):
            block.signature = signature_of(text)
            if self.show_thinking:
                block.thinking = text
            out.append(BlockDelta(index=index, delta=SignatureDelta(signature=block.signature)))
        else:
            block.text = text
        out.append(BlockStop(index=index))

    def _end_call(self, call: _Call, complete: bool, out: list[BuiltEvent]) -> None:
        arguments = "".join(call.pieces)
        try:
            value = json.loads(arguments) if complete else None
        except ValueError:
            value = None
        if not isinstance(value, dict):
            # Not closed (or, which the parsers never let through, not an object): its text.
            self._delta(demoted_call(call.name, arguments), False, out)
            return
        self._close(out)
        block = ToolUseBlock(id=tool_use_id(call.id), name=call.name, input=value)
        self.blocks.append(block)
        index = len(self.blocks) - 1
        out.append(BlockStart(index=index, content_block=block.model_copy(update={"input": {}})))
        out.append(BlockDelta(index=index, delta=InputJsonDelta(partial_json=arguments)))
        out.append(BlockStop(index=index))
