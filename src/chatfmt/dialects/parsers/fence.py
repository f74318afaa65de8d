"""A fenced Python block as a run request: the code-interpreter convention of models whose
format has no interpreter role.

ChatGLM3 asks for a run by writing a code block in an ``interpreter`` segment; most models, small
ones especially, write a Markdown block instead of escaping their code into a JSON call
(measured with the default model: multi-line code in a JSON string arrives as its first line).
In interpreter mode the agent wraps the dialect's parser in :class:`FencedRuns`:

- text streams as it does without the wrapper until a line opens a Python fence
  (```` ```python ````, ```` ```py ````); from there the block is an ``interpreter`` call:
  announced, its ``{"code": …}`` arguments streamed as the model writes the code, ended when a
  line closes the fence;
- the closing fence ends the turn (:attr:`~chatfmt.dialects.base.StreamParser.turn_over`), as a
  call's stop token would: the decoder stops there, the code runs, its output is the observation;
- a block the output ends inside (cut by the token limit, or the model stopped without closing
  it) is an incomplete call, never run (see ``calls.py``);
- everything else (reasoning, the dialect's own calls) passes through unchanged.

The wrapper reads only the inner parser's visible text, so a fence inside reasoning or inside
a call's arguments is not a run, and streamed and whole output give the same turn.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from ...events import (
    Event,
    Finish,
    ParseResult,
    TextDelta,
    ToolCallStart,
)
from ...messages import INTERPRETER, Message
from ...segments import Control
from ..base import StreamParser, finish_reason_for
from .calls import CallStream, cut_problem

_FENCE = "```"
#: A line that opens a Python block (CommonMark allows up to 3 spaces of indentation; models
#: write none, and an indented block is usually an example inside a list: not a run).
_OPENING = re.compile(r"```[ \t]*(?:python3?|py|ipython)[ \t]*", re.IGNORECASE)
#: What a line that opens a block with some info string can look like before its end.
_MAYBE_OPENING = re.compile(r"```[ \t]*[A-Za-z0-9_+.-]*[ \t]*")
_CODE_PREFIX = '{"code": "'
_CODE_SUFFIX = '"}'


def _escaped(code: str) -> str:
    """``code`` as the inside of a JSON string: per character, so chunks escape alike."""
    return json.dumps(code, ensure_ascii=False)[1:-1]


class FencedRuns(StreamParser):
    """Wraps a dialect's parser: a fenced Python block in the reply is an interpreter call."""

    def __init__(self, inner: StreamParser, *, name: str = INTERPRETER) -> None:
        super().__init__(id_factory=inner._new_id)
        self.inner = inner
        self._name = name
        self._out: list[Event] = []
        self._calls = CallStream(self._new_id, self._out.append, self._warnings)
        self._state: Literal["text", "code", "closed"] = "text"
        self._line_start = True
        self._held = ""  # text state: a line that may open a block; code: "\n" + a maybe-close
        self._text: list[str] = []  # the visible text, what the message's content becomes
        self._opening = ""  # the opening line, for the raw text of an incomplete call
        self._code: list[str] = []
        self._inner_calls = 0  # calls the inner parser announced (the next index is after them)
        self._finish: Literal["stop", "length"] | None = None

    # ==== StreamParser ====

    def on_text(self, text: str) -> list[Event]:
        return self._wrap(self.inner.feed(text))

    def on_control(self, token: str) -> list[Event]:
        return self._wrap(self.inner.feed(Control(token)))

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        closed = self._state == "closed"
        # After the closing fence the turn ended where the model meant it to.
        out = self._wrap(self.inner.finish("stop" if closed else reason))
        self._finish = "stop" if closed else reason
        if self._state == "text" and self._held:
            out += self._emit_text(self._held)
            self._held = ""
        elif self._state == "code":
            out += self._end_of_output_in_code(reason)
        result = self.result()
        out.append(Finish(result.finish_reason))
        return out

    def result(self) -> ParseResult:
        inner = self.inner.result()
        merged = inner.message
        calls = [*inner.tool_calls, *self._calls.complete]
        text = "".join(self._text)
        message = Message(
            role="assistant",
            content=text or None,
            reasoning=merged.reasoning,
            tool_calls=tuple(calls) or None,
        )
        finish = self._finish or "stop"
        return ParseResult(
            messages=[message],
            finish_reason=finish_reason_for(bool(calls), finish),
            warnings=[*inner.warnings, *self._warnings],
            incomplete_calls=[*inner.incomplete_calls, *self._calls.incomplete],
        )

    # ==== Internals ====

    def _wrap(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            if self._state == "closed":
                break
            if isinstance(ev, TextDelta):
                out += self._scan(ev.text)
            elif isinstance(ev, Finish):
                continue  # the wrapper's own Finish ends the turn
            else:
                if self._state == "code":  # the dialect's own call opened inside the block
                    out += self._cut_block("is unterminated")
                elif self._held:
                    out += self._emit_text(self._held)
                    self._held = ""
                if isinstance(ev, ToolCallStart):
                    self._inner_calls = max(self._inner_calls, ev.index + 1)
                    self._calls.count = self._inner_calls
                out.append(ev)
        return out

    def _emit_text(self, text: str) -> list[Event]:
        self._text.append(text)
        return [TextDelta(text)]

    def _scan(self, text: str) -> list[Event]:
        if self._state == "code":
            return self._scan_code(text)
        buf, self._held = self._held + text, ""
        out: list[Event] = []
        i, n = 0, len(buf)
        while i < n:
            end = buf.find("\n", i)
            if self._line_start:
                line = buf[i:] if end < 0 else buf[i:end]
                if end < 0 and _maybe_opening(line):
                    self._held = line  # the rest of the line decides
                    break
                if end >= 0 and _OPENING.fullmatch(line):
                    if i:
                        out += self._emit_text(buf[:i])
                    self._open(line)
                    return out + self._collect() + self._scan_code(buf[end + 1 :])
            stop = n if end < 0 else end + 1
            self._line_start = end >= 0
            i = stop
        kept = buf[: n - len(self._held)] if self._held else buf
        if kept:
            out += self._emit_text(kept)
        return out

    def _open(self, line: str) -> None:
        self._state = "code"
        self._opening = line + "\n"
        self._calls.start(self._name)
        self._calls.stream(_CODE_PREFIX)
        # The code's first line starts a line: an empty block closes at once.
        self._held = "\n"

    def _scan_code(self, text: str) -> list[Event]:
        # ``_held`` is the newline before a line that may be the closing fence (the code does
        # not include it), then that line so far. The first line of the block is preceded by a
        # virtual newline, dropped if the line is code.
        buf, self._held = self._held + text, ""
        first = not self._code
        start = 0
        while True:
            nl = buf.find("\n", start)
            if nl < 0:
                break
            rest = buf[nl + 1 :]
            line_end = rest.find("\n")
            line = rest if line_end < 0 else rest[:line_end]
            if line_end >= 0 and _closes(line):
                self._add_code(buf[:nl], first)
                return self._collect() + self._close()
            if line_end < 0 and (_FENCE.startswith(line) or _closes(line)):
                # "", "`", "``" may grow into the closing fence; "```" is one unless more
                # than spaces follow on its line.
                self._add_code(buf[:nl], first)
                self._held = buf[nl:]
                return self._collect()
            start = nl + 1
        self._add_code(buf, first)
        return self._collect()

    def _add_code(self, code: str, first: bool) -> None:
        if first and code.startswith("\n"):
            code = code[1:]  # the virtual newline before the first line
        if code:
            self._code.append(code)
            self._calls.stream(_escaped(code))

    def _close(self) -> list[Event]:
        code = "".join(self._code)
        if not code.strip():
            return self._cut_block("is empty") + self._finish_closed()
        self._calls.stream(_CODE_SUFFIX)
        self._calls.end()
        self._calls.record(self._raw() + "\n" + _FENCE)
        return self._collect() + self._finish_closed()

    def _finish_closed(self) -> list[Event]:
        self._state = "closed"
        self._held = ""
        self.turn_over = True
        return []

    def _cut_block(self, problem: str) -> list[Event]:
        self._calls.cut(f"(a fenced code block) {problem}")
        self._calls.record(self._raw())
        self._state = "text"
        self._held = ""
        self._line_start = False
        return self._collect()

    def _end_of_output_in_code(self, reason: Literal["stop", "length"]) -> list[Event]:
        held = self._held
        if reason == "stop" and held.startswith("\n") and _closes(held[1:]):
            return self._close()  # the block closed at the very end of the output
        if held.strip("\n"):
            self._add_code(held, not self._code)
        self._held = ""
        return self._cut_block(cut_problem(reason))

    def _raw(self) -> str:
        return self._opening + "".join(self._code)

    def _collect(self) -> list[Event]:
        # In place: the call stream holds this list's append.
        out = self._out[:]
        self._out.clear()
        return out


def _closes(line: str) -> bool:
    """Whether ``line`` (without its newline) closes a block: the fence and spaces only."""
    return line.startswith(_FENCE) and not line[3:].strip(" \t")


def _maybe_opening(line: str) -> bool:
    """Whether ``line`` (no newline yet) may still become a fence's opening line."""
    if len(line) < 3:
        return _FENCE.startswith(line)
    return len(line) <= 40 and _MAYBE_OPENING.fullmatch(line) is not None


__all__ = ["FencedRuns"]
