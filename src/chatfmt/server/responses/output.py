"""Parser events → the Responses API's output items and its typed stream events (the models
of :mod:`.wire`).

One builder serves both the whole response and the stream, so they cannot disagree: text opens
a ``message`` item (``output_text`` part), each call a ``function_call`` item, reasoning (gpt-oss)
a ``reasoning`` item (``reasoning_text`` part); the events are those OpenAI documents, in its
order (``output_item.added`` → ``content_part.added`` → ``output_text.delta``… (or
``reasoning_text.delta``…) → ``output_text.done`` (``reasoning_text.done``) →
``content_part.done`` → ``output_item.done``; for calls ``output_item.added`` →
``function_call_arguments.delta``… → ``.done`` → ``output_item.done``).

With log-probabilities asked for, :class:`LogprobOutputBuilder` gives each text delta the
tokens it came from (its ``logprobs``), and each ``output_text`` part all of its message's.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ...engines.base import TokenLogprob
from ...events import Event, ReasoningDelta, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from ..chat.logprobs import Entry, LogprobWriter
from .wire import (
    ContentPartAdded,
    ContentPartDone,
    DeltaLogprob,
    DeltaTopLogprob,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    FunctionCallItem,
    Logprob,
    MessageItem,
    OutputEvent,
    OutputItem,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    OutputTextDone,
    OutputTextPart,
    ReasoningItem,
    ReasoningTextDelta,
    ReasoningTextDone,
    ReasoningTextPart,
    TopLogprob,
)


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


class PartDelta(NamedTuple):
    """Text (``reasoning``: reasoning text) added to the open item's part: the stream event
    made per token, so a plain tuple rather than a pydantic model (``model_construct`` was a
    quarter of the stream's own Python time per token). :func:`.frames.frame` writes its
    bytes; :meth:`event` is the wire model it stands for. ``logprobs``: those of the tokens
    the text came from, when asked for (a reasoning delta has none)."""

    reasoning: bool
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: tuple[DeltaLogprob, ...] = ()

    def event(self) -> OutputTextDelta | ReasoningTextDelta:
        if self.reasoning:
            return ReasoningTextDelta(
                item_id=self.item_id,
                output_index=self.output_index,
                content_index=self.content_index,
                delta=self.delta,
            )
        return OutputTextDelta(
            item_id=self.item_id,
            output_index=self.output_index,
            content_index=self.content_index,
            delta=self.delta,
            logprobs=self.logprobs,
        )


#: What the builder returns: the wire's events, and per-token deltas as :class:`PartDelta`.
BuiltEvent = OutputEvent | PartDelta


@dataclass(slots=True)
class _OpenCall:
    """A call whose arguments are still streaming: its item, its place in the output, and
    its arguments so far."""

    item: FunctionCallItem
    index: int
    pieces: list[str] = field(default_factory=list)


class OutputBuilder:
    """Feed parser events; read :attr:`items` (the response's ``output``) once :meth:`finish`
    returned. Each call returns the stream events it caused (``sequence_number`` is set when
    the stream writes them). ``encrypted_reasoning`` adds ``encrypted_content`` to reasoning
    items once complete.

    An event shows its item as it was when the event happened (a copy), since the stream
    writes it later, while the item goes on changing here. The text of the open item and the
    arguments of open calls are kept as pieces and joined when they close: a string grown by
    every token would be copied whole for every token. Events other than the per-token
    deltas are built with validation: ``model_construct`` would skip it, but is pure Python
    and measured slower.
    """

    def __init__(
        self,
        *,
        encrypted_reasoning: bool = False,
        namespaced: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        self.encrypted_reasoning = encrypted_reasoning
        #: Flat names of namespaced functions → their namespace and own name (.tools).
        self.namespaced = namespaced or {}
        self.items: list[OutputItem] = []
        self._open: MessageItem | ReasoningItem | None = None  # the item receiving deltas
        self._pieces: list[str] = []  # its text so far
        self._calls: dict[int, _OpenCall] = {}  # open calls by parser index
        #: The open message's log-probabilities so far (only LogprobOutputBuilder adds any).
        self._logprobs: list[Entry] = []

    def feed(self, events: list[Event]) -> list[BuiltEvent]:
        out: list[BuiltEvent] = []
        for ev in events:
            if isinstance(ev, TextDelta):
                if ev.text:
                    self._text(ev.text, out)
            elif isinstance(ev, ReasoningDelta):
                if ev.text:
                    self._reasoning(ev.text, out)
            elif isinstance(ev, ToolCallStart):
                self._close(out)
                space, name = self.namespaced.get(ev.name, (None, ev.name))
                call = FunctionCallItem(
                    id=item_id("fc"),
                    status="in_progress",
                    call_id=ev.id,
                    name=name,
                    arguments="",
                    namespace=space,
                )
                self._calls[ev.index] = _OpenCall(call, len(self.items))
                self.items.append(call)
                out.append(
                    OutputItemAdded(output_index=len(self.items) - 1, item=call.model_copy())
                )
            elif isinstance(ev, ToolCallDelta):
                open_call = self._calls.get(ev.index)
                if open_call is not None and ev.arguments:
                    open_call.pieces.append(ev.arguments)
                    out.append(
                        FunctionCallArgumentsDelta(
                            item_id=open_call.item.id,
                            output_index=open_call.index,
                            delta=ev.arguments,
                        )
                    )
            elif isinstance(ev, ToolCallEnd):
                ended = self._calls.pop(ev.index, None)
                if ended is not None:
                    if not ev.complete:  # it did not close: its arguments are partial
                        ended.item.status = "incomplete"
                    self._end_call(ended, out)
        return out

    def finish(self, *, cut: bool = False) -> list[BuiltEvent]:
        """Close what is open; a reply with no output at all is one empty message. ``cut``:
        the reply was cut off (``max_output_tokens``) while its last item was being written,
        so that item is marked ``incomplete``. A call that did not close is ``incomplete``
        whatever ended it (its ``ToolCallEnd`` says so), with exactly its partial arguments."""
        out: list[BuiltEvent] = []
        if cut and self.items:
            last = self.items[-1]
            # Only an item still being written was cut: a call whose JSON closed is whole
            # even when the cut came right after it.
            if last is self._open or any(c.item is last for c in self._calls.values()):
                last.status = "incomplete"
        self._close(out)
        for call in self._calls.values():
            self._end_call(call, out)
        self._calls.clear()
        if not self.items:
            self._start_message(out)
            self._close(out)
        return out

    # ==== Items ====
    # The open item is always the last one: a call closes it before it is added.

    def _start(self, item: MessageItem | ReasoningItem, out: list[BuiltEvent]) -> None:
        """Open ``item``, a message or reasoning holding one empty part: it is shown added
        without content, then its part added (a copy: the item's own part is filled in when
        it closes)."""
        self._close(out)
        self.items.append(item)
        self._open = item
        index = len(self.items) - 1
        shown = item.model_copy(update={"content": []})
        out.append(OutputItemAdded(output_index=index, item=shown))
        part = item.content[0].model_copy()
        out.append(
            ContentPartAdded(item_id=item.id, output_index=index, content_index=0, part=part)
        )

    def _start_message(self, out: list[BuiltEvent]) -> MessageItem:
        message = MessageItem(
            id=item_id("msg"), status="in_progress", content=[OutputTextPart(text="")]
        )
        self._start(message, out)
        return message

    def _text(self, text: str, out: list[BuiltEvent]) -> None:
        message = self._open
        if not isinstance(message, MessageItem):
            message = self._start_message(out)
        self._pieces.append(text)
        out.append(PartDelta(False, message.id, len(self.items) - 1, 0, text))

    def _reasoning(self, text: str, out: list[BuiltEvent]) -> None:
        item = self._open
        if not isinstance(item, ReasoningItem):
            item = ReasoningItem(
                id=item_id("rs"), status="in_progress", content=[ReasoningTextPart(text="")]
            )
            self._start(item, out)
        self._pieces.append(text)
        out.append(PartDelta(True, item.id, len(self.items) - 1, 0, text))

    def _close(self, out: list[BuiltEvent]) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        index = len(self.items) - 1
        text = "".join(self._pieces)
        self._pieces = []
        if item.status != "incomplete":
            item.status = "completed"
        part = item.content[0]
        part.text = text
        if isinstance(item, MessageItem):
            done: tuple[DeltaLogprob, ...] = ()
            if self._logprobs:
                assert isinstance(part, OutputTextPart)
                part.logprobs = tuple(part_logprob(e) for e in self._logprobs)
                done = tuple(delta_logprob(e) for e in self._logprobs)
                self._logprobs = []
            out.append(
                OutputTextDone(
                    item_id=item.id, output_index=index, content_index=0, text=text, logprobs=done
                )
            )
        else:
            if self.encrypted_reasoning:
                item.encrypted_content = reasoning_blob(text)
            out.append(
                ReasoningTextDone(item_id=item.id, output_index=index, content_index=0, text=text)
            )
        out.append(ContentPartDone(item_id=item.id, output_index=index, content_index=0, part=part))
        out.append(OutputItemDone(output_index=index, item=item.model_copy()))

    def _end_call(self, call: _OpenCall, out: list[BuiltEvent]) -> None:
        item = call.item
        item.arguments = "".join(call.pieces)
        if item.status != "incomplete":
            item.status = "completed"
        out.append(
            FunctionCallArgumentsDone(
                item_id=item.id, output_index=call.index, name=item.name, arguments=item.arguments
            )
        )
        out.append(OutputItemDone(output_index=call.index, item=item.model_copy()))


#: Events of a step whose tokens are not the message's text.
_NOT_TEXT = (ReasoningDelta, ToolCallStart, ToolCallDelta)


class LogprobOutputBuilder(OutputBuilder):
    """An :class:`OutputBuilder` for a request that asked for log-probabilities: feed each
    step's entries with its events.

    A step's tokens go with its first text delta; those of a step that showed nothing (text
    held back as the possible start of a marker) wait for the next one; those of a step that
    wrote only reasoning or calls are theirs, and the Responses API gives those none.
    """

    def __init__(
        self,
        writer: LogprobWriter,
        *,
        encrypted_reasoning: bool = False,
        namespaced: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(encrypted_reasoning=encrypted_reasoning, namespaced=namespaced)
        self._writer = writer
        self._pending: list[TokenLogprob] = []  # not yet given to a text delta
        self._attach: list[Entry] = []  # for this step's first text delta

    def feed(self, events: list[Event], entries: Sequence[TokenLogprob] = ()) -> list[BuiltEvent]:
        self._pending.extend(entries)
        if self._pending:
            if any(isinstance(ev, TextDelta) and ev.text for ev in events):
                self._attach, self._pending = self._writer.entries(self._pending), []
            elif any(isinstance(ev, _NOT_TEXT) for ev in events):
                self._pending = []
        return super().feed(events)

    def _text(self, text: str, out: list[BuiltEvent]) -> None:
        super()._text(text, out)
        if self._attach:
            entries, self._attach = self._attach, []
            self._logprobs.extend(entries)
            delta = out[-1]
            assert isinstance(delta, PartDelta)
            out[-1] = delta._replace(logprobs=tuple(delta_logprob(e) for e in entries))


def part_logprob(entry: Entry) -> Logprob:
    """An entry as an ``output_text`` part lists it (with bytes)."""
    token, top = entry
    alternatives = [TopLogprob(token=t.token, bytes=t.bytes or [], logprob=t.logprob) for t in top]
    return Logprob(
        token=token.token, bytes=token.bytes or [], logprob=token.logprob, top_logprobs=alternatives
    )


def delta_logprob(entry: Entry) -> DeltaLogprob:
    """An entry as a text event lists it (without bytes)."""
    token, top = entry
    return DeltaLogprob(
        token=token.token,
        logprob=token.logprob,
        top_logprobs=[DeltaTopLogprob(token=t.token, logprob=t.logprob) for t in top],
    )
