"""The harmony (gpt-oss) reply parser: messages with channel headers, calls by recipient.

A reply, after the generation prompt ``<|start|>assistant``, is one or more messages:
``{header}<|message|>{body}`` ended by ``<|end|>`` (then ``<|start|>`` and the next header) or
by a stop, ``<|return|>`` after the answer or ``<|call|>`` after a call. The header holds
``<|channel|>{channel}`` and, for a call, ``to={recipient}`` (before or after the channel) and
``<|constrain|>json``. The ``final`` channel is content, and so is a ``commentary`` message
without a recipient (a *preamble*: text for the user before calls, as the renderer writes an
assistant message's content beside its calls). A message to ``functions.NAME`` is a call: once
its body starts as a JSON object the call is announced and its arguments stream as
:class:`~chatfmt.jsonscan.CallScanner` checks them; a call whose JSON does not close is
incomplete (:mod:`.calls`). The ``analysis`` channel is the reasoning, streamed as
:class:`~chatfmt.events.ReasoningDelta` (several analysis messages joined by a blank line);
every other channel is kept in :attr:`HarmonyParser.channels`, never in the content.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Literal

from ...events import Event, Finish, ParseResult, ReasoningDelta, TextDelta
from ...jsonscan import WS, CallScanner
from ...messages import Message
from ..base import StreamParser, finish_reason_for
from .calls import CallStream, cut_problem

START = "<|start|>"
END = "<|end|>"
MESSAGE = "<|message|>"
CHANNEL = "<|channel|>"
CONSTRAIN = "<|constrain|>"
RETURN = "<|return|>"
CALL = "<|call|>"
_CHANNEL_NAME = re.compile(r"[^\s<]*")
_HEADER, _BODY, _BETWEEN = range(3)
#: Joins the text of several analysis messages into one reasoning.
_REASONING_SEP = "\n\n"
#: Channels whose messages without a recipient are content: the answer, and preambles.
_VISIBLE = (None, "final", "commentary")


def _closed(scan: CallScanner) -> bool:
    """Whether the arguments object is complete."""
    return scan.args_state == "done"


class HarmonyParser(StreamParser):
    """One assistant turn of harmony messages; never raises on model output."""

    def __init__(
        self, *, id_factory: Callable[[], str] | None = None, stop_controls: Iterable[str] = ()
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._state = _HEADER
        self._header: list[str] = []
        self._header_controls = False
        self._opened = False  # a message header was complete
        self._channel: str | None = None
        self._recipient: str | None = None
        self._body: list[str] = []
        self._scan: CallScanner | None = None
        self._first = ""  # the first non-whitespace character of a call's body
        self._tail = False  # non-whitespace after a call's JSON
        self._content: list[str] = []
        self._reasoning: list[str] | None = None  # None: no analysis message yet
        self._events: list[Event] = []
        self._calls = CallStream(
            self._new_id, self._events.append, self._warnings, raw_in_calls=False
        )
        self._noted_stray = False
        #: ``(channel, text)`` of each message that is neither content nor a call: the chain
        #: of thought (``analysis``) and any other channel.
        self.channels: list[tuple[str, str]] = []

    @property
    def reasoning(self) -> str | None:
        """The ``analysis`` messages' text (never part of the content)."""
        return None if self._reasoning is None else "".join(self._reasoning)

    @property
    def in_thought(self) -> bool | None:
        """Inside an ``analysis`` message's body; undecided between messages and in a header."""
        if self._state != _BODY:
            return None
        return self._recipient is None and self._channel == "analysis"

    def _take(self) -> list[Event]:
        out = self._events[:]
        self._events.clear()  # (the call stream appends to this very list)
        return out

    # ==== Input ====

    def on_text(self, text: str) -> list[Event]:
        if self._state == _HEADER:
            self._header.append(text)
        elif self._state == _BODY:
            if self._recipient is None and self._channel in _VISIBLE:
                self._content.append(text)
                return [TextDelta(text)]
            self._body.append(text)
            if self._recipient is None and self._channel == "analysis" and text:
                assert self._reasoning is not None
                self._reasoning.append(text)
                return [ReasoningDelta(text)]
            self._scan_call(text)
            return self._take()
        elif text.strip(WS) and not self._noted_stray:
            self._noted_stray = True
            self._warnings.append("text between harmony messages was ignored")
        return []

    def on_control(self, token: str) -> list[Event]:
        state = self._state
        if state == _BODY:
            if token not in (END, START):
                return self.on_text(token)
            events = self._close_message("stop")
            self._state = _BETWEEN
        else:
            events = []
        if token == START:
            self._state = _HEADER
            self._header, self._header_controls = [], False
        elif state != _HEADER:
            pass
        elif token == MESSAGE:
            events += self._open_message()
        elif token == END:
            self._warnings.append(f"a message header ended without {MESSAGE}; dropped")
            self._state = _BETWEEN
        else:
            self._header.append(token)
            self._header_controls = True
        return events

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        events: list[Event] = []
        if self._state == _BODY:
            events = self._close_message(reason)
        elif self._state == _HEADER and self._header:
            text = "".join(self._header)
            if not self._opened and not self._header_controls:
                self._warnings.append("the reply has no harmony message header; kept as text")
                self._content.append(text)
                events.append(TextDelta(text))
            else:
                self._warnings.append("the reply ended inside a message header; dropped")
        events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        return events

    def result(self) -> ParseResult:
        content = "".join(self._content) or None
        calls = tuple(self._calls.complete) or None
        message = Message(
            role="assistant", content=content, reasoning=self.reasoning, tool_calls=calls
        )
        reason = finish_reason_for(bool(calls), self._finish or "stop")
        return ParseResult([message], reason, list(self._warnings), list(self._calls.incomplete))

    # ==== Messages ====

    def _open_message(self) -> list[Event]:
        """Read the header (as the reference reads it: the channel wherever it is, then
        whitespace-separated parts, ``to=`` marking the recipient)."""
        header = "".join(self._header)
        channel = None
        at = header.find(CHANNEL)
        if at >= 0:
            rest = header[at + len(CHANNEL) :]
            name = _CHANNEL_NAME.match(rest)
            assert name is not None
            channel = name.group() or None
            header = header[:at] + " " + rest[name.end() :]
        parts = header.replace(CONSTRAIN, " " + CONSTRAIN).split()
        recipient = next((p[3:] for p in reversed(parts) if p.startswith("to=")), None)
        self._channel, self._recipient = channel, recipient
        self._body, self._first, self._tail = [], "", False
        self._scan = None
        if recipient is not None:
            self._scan = CallScanner()
            self._scan.feed('{"arguments": ')
        self._state = _BODY
        self._opened = True
        if recipient is not None or channel != "analysis":
            return []
        if self._reasoning is None:
            self._reasoning = []
            return []
        self._reasoning.append(_REASONING_SEP)
        return [ReasoningDelta(_REASONING_SEP)]

    def _scan_call(self, text: str) -> None:
        scan = self._scan
        if scan is None:
            return
        if not self._first:
            stripped = text.lstrip(WS)
            self._first = stripped[:1]
            name = (self._recipient or "").removeprefix("functions.")
            if self._first == "{" and name:
                self._calls.start(name)  # a call to a function, its arguments an object
        if self._calls.open is None:
            return
        if _closed(scan) or scan.error is not None:
            self._tail = self._tail or bool(text.strip(WS))
            return
        scan.feed(text)
        self._calls.flush(scan)
        if _closed(scan):
            call = self._calls.open
            self._calls.end()
            # After the arguments, only whitespace: what the body holds past them, however
            # the output was chunked (the scanner may read on past the object).
            body = "".join(self._body)
            args = "".join(call.arguments) if call is not None else ""
            self._tail = bool(body[body.find("{") + len(args) :].strip(WS))
        elif scan.error is not None:
            self._calls.cut(f"has malformed JSON ({scan.error})")

    def _close_message(self, reason: Literal["stop", "length"]) -> list[Event]:
        body = "".join(self._body)
        self._state = _BETWEEN
        if self._recipient is None:
            if self._channel not in _VISIBLE:
                self.channels.append((self._channel or "", body))
            return []
        name = self._recipient.removeprefix("functions.")
        calls = self._calls
        if calls.open is None:  # never announced: what the model wrote is text
            problem = "names no function" if not name else "is not a JSON object"
            self._warnings.append(f"the call to {self._recipient} {problem}; kept as text")
            self._content.append(body)
            return [TextDelta(body)] if body else []
        if not calls.open.ended:
            calls.cut(cut_problem(reason))
        elif self._tail and calls.open.complete:
            self._warnings.append(f"text after the JSON of the call to {name} was ignored")
        calls.record(body)
        return self._take()
