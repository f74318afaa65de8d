"""The harmony (gpt-oss) reply parser: messages with channel headers, calls by recipient.

A reply, after the generation prompt ``<|start|>assistant``, is one or more messages:
``{header}<|message|>{body}`` ended by ``<|end|>`` (then ``<|start|>`` and the next header) or
by a stop, ``<|return|>`` after the answer or ``<|call|>`` after a call. The header holds
``<|channel|>{channel}`` and, for a call, ``to={recipient}`` (before or after the channel) and
``<|constrain|>json``. Only the ``final`` channel is content; a message to ``functions.NAME``
is a call whose body, a JSON object, is checked by :class:`~chatfmt.jsonscan.CallScanner` as
it streams; the ``analysis`` channel is the reasoning, streamed as
:class:`~chatfmt.events.ReasoningDelta` (several analysis messages joined by a blank line);
every channel other than ``final`` (``analysis``, preambles on ``commentary``) is also kept in
:attr:`HarmonyParser.channels`, never in the content.

Also here: :func:`tools_section`, the developer message's tool listing, with each tool's JSON
schema written as the TypeScript-like type the reference writes (:func:`typescript`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Literal

from ..events import (
    Event,
    Finish,
    ParseResult,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ..jsonscan import WS, CallScanner
from ..messages import Message, ToolCall
from .base import StreamParser, finish_reason_for

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
        self._calls: list[ToolCall] = []
        self._noted_stray = False
        #: ``(channel, text)`` of each message that is neither the answer nor a call: the
        #: chain of thought (``analysis``) and preambles (``commentary``).
        self.channels: list[tuple[str, str]] = []

    @property
    def reasoning(self) -> str | None:
        """The ``analysis`` messages' text (never part of the content)."""
        return None if self._reasoning is None else "".join(self._reasoning)

    # ==== Input ====

    def on_text(self, text: str) -> list[Event]:
        if self._state == _HEADER:
            self._header.append(text)
        elif self._state == _BODY:
            if self._recipient is None and self._channel in (None, "final"):
                self._content.append(text)
                return [TextDelta(text)]
            self._body.append(text)
            if self._recipient is None and self._channel == "analysis" and text:
                assert self._reasoning is not None
                self._reasoning.append(text)
                return [ReasoningDelta(text)]
            self._scan_call(text)
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
        events.append(Finish(finish_reason_for(bool(self._calls), reason)))
        return events

    def result(self) -> ParseResult:
        content = "".join(self._content) or None
        calls = tuple(self._calls) or None
        message = Message(
            role="assistant", content=content, reasoning=self.reasoning, tool_calls=calls
        )
        reason = finish_reason_for(bool(self._calls), self._finish or "stop")
        return ParseResult([message], reason, list(self._warnings))

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
        if self._first != "{":
            return
        if _closed(scan) or scan.error is not None:
            self._tail = self._tail or bool(text.strip(WS))
            return
        scan.feed(text)
        # After the arguments, only whitespace: anything else stops the scanner.
        self._tail = _closed(scan) and (scan.error is not None or scan.done)

    def _close_message(self, reason: Literal["stop", "length"]) -> list[Event]:
        body = "".join(self._body)
        self._state = _BETWEEN
        if self._recipient is None:
            if self._channel not in (None, "final"):
                self.channels.append((self._channel or "", body))
            return []
        scan = self._scan
        assert scan is not None
        name = self._recipient.removeprefix("functions.")
        problem = None
        if not name:
            problem = "names no function"
        elif self._first != "{":
            problem = "is not a JSON object"
        elif not _closed(scan):
            cut = "was cut off" if reason == "length" else "is unterminated"
            problem = f"has malformed JSON ({scan.error})" if scan.error else cut
        if problem is not None:
            self._warnings.append(f"the call to {self._recipient} {problem}; kept as text")
            self._content.append(body)
            return [TextDelta(body)] if body else []
        if self._tail:
            self._warnings.append(f"text after the JSON of the call to {name} was ignored")
        index = len(self._calls)
        arguments = scan.take_safe()
        try:
            call = ToolCall(id=self._new_id(), name=name, arguments=arguments)
        except (ValueError, RecursionError):  # unreachable: the scanner checked the JSON
            call = ToolCall(id=self._new_id(), name=name, arguments=(arguments := "{}"))
            self._warnings.append(f"the arguments of the call to {name} were invalid")
        self._calls.append(call)
        return [
            ToolCallStart(index, call.id, name),
            ToolCallDelta(index, arguments),
            ToolCallEnd(index),
        ]
