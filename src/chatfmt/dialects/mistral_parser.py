"""The parser of a control token followed by a JSON list of calls (Mistral's ``[TOOL_CALLS]``).

``text [TOOL_CALLS] [{"name": …, "arguments": {…}}, …]``: text streams as it comes; after the
control, each object is checked as it streams by :class:`~chatfmt.jsonscan.CallScanner`, starts
a call as soon as its name is known and streams its arguments. A single object without the list
brackets is accepted too. Text after the list is content again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from ..events import (
    Event,
    Finish,
    ParseResult,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ..jsonscan import WS, CallScanner, empty_arguments
from ..messages import ToolCall
from .base import StreamParser, finish_reason_for, single_message_result

# Modes: text; after the control; before an element; in an object; after an object; after the
# list (whitespace dropped); after a broken call (ignored).
_TEXT, _OPEN, _ELEM, _JSON, _SEP, _AFTER, _SKIP = range(7)


class ToolCallsParser(StreamParser):
    """One assistant turn: text, then ``calls_control`` and a JSON array of call objects.

    Output that does not parse degrades to text with a warning; a call already started when its
    JSON breaks is closed with valid arguments, and what follows it is ignored. Every decision
    depends only on the characters seen, so any chunking gives the same events and result.
    """

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (),
        calls_control: str = "[TOOL_CALLS]",
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._control = calls_control
        self._mode = _TEXT
        self._single = False  # a bare object after the control, not a list
        self._raw: list[str] = []  # text since the control or the last call, kept for degrading
        self._in_list = 0  # calls of the current list
        self._scan: CallScanner | None = None
        self._call: tuple[int, str, str] | None = None  # index, id, name of the open call
        self._args: list[str] = []
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls: list[ToolCall] = []

    # ==== Input ====

    def on_control(self, token: str) -> list[Event]:
        if token == self._control and self._mode in (_TEXT, _AFTER, _SKIP):
            self._mode, self._raw, self._in_list, self._single = _OPEN, [token], 0, False
            return []
        return self.on_text(token)

    def on_text(self, text: str) -> list[Event]:
        while text:
            mode = self._mode
            if mode == _TEXT:
                self._out(text)
                break
            if mode == _SKIP:
                break
            if mode == _JSON:
                text = self._on_json(text)
                continue
            j = len(text) - len(text.lstrip(WS))
            if mode != _AFTER:
                self._raw.append(text[:j])
            text = text[j:]
            if not text:
                break
            c = text[0]
            if mode == _AFTER:
                self._mode = _TEXT
            elif (mode == _OPEN and c == "[") or (mode == _SEP and c == ","):
                self._raw.append(c)
                self._mode, text = _ELEM, text[1:]
            elif c == "{" and mode in (_OPEN, _ELEM):
                self._single = mode == _OPEN
                self._scan, self._mode = CallScanner(), _JSON
            elif c == "]" and (mode == _SEP or (mode == _ELEM and not self._in_list)):
                self._mode, self._raw, text = _AFTER, [], text[1:]
            else:
                self._degrade(f"expected a tool call object, got {c!r}")
        out, self._events = self._events, []
        return out

    def _on_json(self, text: str) -> str:
        scan = self._scan
        assert scan is not None
        n = scan.feed(text)
        self._raw.append(text[:n])
        if self._call is None and scan.name is not None:
            self._call = (len(self._calls), self._new_id(), scan.name)
            self._events.append(ToolCallStart(*self._call[:2], scan.name))
        if scan.error is not None:
            if self._call is None:
                self._degrade(f"malformed tool call JSON ({scan.error})")
                return text[n:]
            self._break(f"tool call {self._call[0]} has malformed JSON ({scan.error})")
            self._warnings.append("the output after it was ignored")
            self._mode = _SKIP
            return ""
        self._flush_args()
        if scan.done:
            if self._call is None:
                self._degrade("a tool call object has no string 'name'")
                return text[n:]
            self._end_call()
            self._mode = _AFTER if self._single else _SEP
        return text[n:]

    # ==== Output ====

    def _out(self, text: str) -> None:
        if text:
            self._content.append(text)
            self._events.append(TextDelta(text))

    def _flush_args(self) -> None:
        if self._call is not None and self._scan is not None:
            text = self._scan.take_safe()
            if text:
                self._args.append(text)
                self._events.append(ToolCallDelta(self._call[0], text))

    def _end_call(self) -> None:
        call, scan = self._call, self._scan
        assert call is not None and scan is not None
        self._flush_args()
        if not self._args:
            self._args.append(empty_arguments(scan, call[0], self._warnings))
            self._events.append(ToolCallDelta(call[0], self._args[0]))
        self._events.append(ToolCallEnd(call[0]))
        self._calls.append(ToolCall(id=call[1], name=call[2], arguments="".join(self._args)))
        self._call, self._scan, self._args, self._raw = None, None, [], []
        self._in_list += 1

    def _break(self, reason: str) -> None:
        """The open call cannot be completed: close its arguments validly and say so."""
        scan = self._scan
        assert scan is not None
        self._flush_args()
        if scan.args_state == "object":
            fix = scan.completion()
            self._args.append(fix)
            assert self._call is not None
            self._events.append(ToolCallDelta(self._call[0], fix))
            reason += f"; its arguments were closed with {fix if len(fix) <= 16 else fix[:16]!r}"
            scan.args_state = "done"
        self._warnings.append(reason)
        self._end_call()

    def _degrade(self, reason: str) -> None:
        """What followed the control (or the last call) is not a call: it is text."""
        self._warnings.append(f"{reason}; kept as text")
        text = "".join(self._raw)
        self._raw, self._scan, self._mode = [], None, _TEXT
        self._out(text)

    # ==== End ====

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        mode = self._mode
        cut = "was cut off" if reason == "length" else "is unterminated"
        if mode == _JSON and self._call is not None:
            self._break(f"tool call {self._call[0]} {cut}")
        elif mode == _JSON or (mode in (_OPEN, _ELEM) and not self._in_list):
            self._degrade(f"the tool call list {cut}")
        elif mode in (_ELEM, _SEP):
            self._warnings.append(f"the tool call list {cut}")
        self._events.append(Finish(finish_reason_for(bool(self._calls), reason)))
        out, self._events = self._events, []
        return out

    def result(self) -> ParseResult:
        return single_message_result(self._content, self._calls, self._finish, self._warnings)
