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
- everything else (reasoning, the dialect's own calls, renumbered after the runs) passes
  through unchanged; a block of another language (or none) is text, and so is a ``python``
  fence inside it, as CommonMark reads it.

The wrapper reads only the inner parser's visible text, so a fence inside reasoning or inside
a call's arguments is not a run, and streamed and whole output give the same turn. A parser
may hold back whitespace (the end of a call's closing tag may follow): a closing fence line is
also closed by whatever comes next, the inner parser's next call or the end of the output.
Fence lines are short by rule (at most 8 spaces around the info string, 16 after a closing
fence): what a fence line may still become is held, never more than a few characters, so the
scan is linear in the output. The newline before an opening fence belongs to neither the text
nor the code: re-rendered from its raw text, the call reads as the model wrote it.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Literal

from ...events import (
    Event,
    Finish,
    ParseResult,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ...messages import INTERPRETER, Message, ToolCall
from ...segments import Control
from ..base import StreamParser, finish_reason_for
from .calls import CallStream, cut_problem

_FENCE = "```"
#: A line that opens a Python block (models write no indentation; an indented block is usually
#: an example inside a list, not a run).
_OPENING = re.compile(r"```[ \t]{0,8}(?:python3?|py|ipython)[ \t\r]{0,8}", re.IGNORECASE)
#: What a fence line (opening, of any language, or closing) can look like before its newline.
_MAYBE_FENCE = re.compile(r"```[ \t]{0,8}[A-Za-z0-9_+.-]{0,16}[ \t\r]{0,8}")
_LONGEST_CLOSE = 3 + 16
_CODE_PREFIX = '{"code": "'
_CODE_SUFFIX = '"}'


def _escaped(code: str) -> str:
    """``code`` as the inside of a JSON string: per character, so chunks escape alike."""
    return json.dumps(code, ensure_ascii=False)[1:-1]


def _closes(line: str) -> bool:
    """Whether ``line`` (without its newline) closes a block: the fence and spaces only."""
    return len(line) <= _LONGEST_CLOSE and line.startswith(_FENCE) and not line[3:].strip(" \t\r")


def _maybe_fence(line: str) -> bool:
    """Whether ``line`` (no newline yet) may still become a fence line."""
    if len(line) < 3:
        return _FENCE.startswith(line)
    return _MAYBE_FENCE.fullmatch(line) is not None


class FencedRuns(StreamParser):
    """Wraps a dialect's parser: a fenced Python block in the reply is an interpreter call."""

    def __init__(self, inner: StreamParser, *, name: str = INTERPRETER) -> None:
        super().__init__(id_factory=inner._new_id)
        self.inner = inner
        self._name = name
        self._out: list[Event] = []
        self._calls = CallStream(self._new_id, self._out.append, self._warnings)
        self._state: Literal["text", "code", "closed"] = "text"
        # Text: whether the next character starts a line, the line so far while it may be a
        # fence line, a newline not yet shown (it may precede an opening fence), and whether
        # a block of another language is open.
        self._line_start = True
        self._held = ""
        self._newline = False
        self._foreign = False
        self._text: list[str] = []  # the visible text, what the message's content becomes
        # Code: ``_held`` is the newline before a line that may close the block, then that line
        # so far; the block's first line has a virtual newline before it (``_virtual``).
        self._virtual = False
        self._opening = ""
        self._code: list[str] = []
        # Calls of the turn, the inner parser's renumbered around the runs: the next index,
        # each inner index's number, the call ids passed on (in order of their numbers).
        self._next = 0
        self._renumbered: dict[int, int] = {}
        self._passed: dict[str, int] = {}
        # The inner parser's warnings before the piece being read, and before the close: what
        # it says of the text after the closing fence is not of this turn.
        self._mark = 0
        self._inner_warnings: int | None = None
        self._finish: Literal["stop", "length"] | None = None

    # ==== StreamParser ====

    def on_text(self, text: str) -> list[Event]:
        self._mark = len(self.inner._warnings)
        return self._wrap(self.inner.feed(text))

    def on_control(self, token: str) -> list[Event]:
        self._mark = len(self.inner._warnings)
        return self._wrap(self.inner.feed(Control(token)))

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        # What the inner parser held (whitespace after a closing fence) may close the block.
        self._mark = len(self.inner._warnings)
        out = self._wrap(self.inner.finish(reason))
        if self._state == "text":
            out += self._show(self._held, final=True)
            self._held = ""
        elif self._state == "code":
            if reason == "stop" and self._held_closes():
                out += self._close()  # the block closed at the very end of the output
            else:
                out += self._end_in_code(reason)
        self._finish = "stop" if self._state == "closed" else reason
        out.append(Finish(self.result().finish_reason))
        return out

    def result(self) -> ParseResult:
        inner = self.inner.result()
        passed = self._passed
        numbered = [(passed[c.id], c) for c in inner.tool_calls if c.id in passed]
        numbered += [(passed[c.id], c) for c in self._calls.complete]
        calls: list[ToolCall] = [c for _, c in sorted(numbered, key=lambda p: p[0])]
        incomplete = [
            replace(c, index=passed[c.id]) for c in inner.incomplete_calls if c.id in passed
        ]
        incomplete = sorted([*incomplete, *self._calls.incomplete], key=lambda c: c.index)
        warnings = inner.warnings
        if self._inner_warnings is not None:
            warnings = warnings[: self._inner_warnings]
        message = Message(
            role="assistant",
            content="".join(self._text) or None,
            reasoning=inner.message.reasoning,
            tool_calls=tuple(calls) or None,
        )
        return ParseResult(
            messages=[message],
            finish_reason=finish_reason_for(bool(calls), self._finish or "stop"),
            warnings=[*warnings, *self._warnings],
            incomplete_calls=incomplete,
        )

    # ==== The inner parser's events ====

    def _wrap(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            if self._state == "closed":
                break
            if isinstance(ev, TextDelta):
                out += self._scan(ev.text)
            elif isinstance(ev, ToolCallStart | ToolCallDelta | ToolCallEnd):
                if self._state == "code":
                    if self._held_closes():  # the closing fence, then the dialect's call
                        out += self._close()
                        break
                    out += self._cut_block("is unterminated")
                elif self._held or self._newline:
                    out += self._show(self._held, final=True)
                    self._held = ""
                out.append(self._renumber(ev))
            elif not isinstance(ev, Finish):  # the wrapper's own Finish ends the turn
                out.append(ev)
        return out

    def _renumber(self, ev: ToolCallStart | ToolCallDelta | ToolCallEnd) -> Event:
        if isinstance(ev, ToolCallStart):
            index = self._renumbered[ev.index] = self._next
            self._next += 1
            self._passed[ev.id] = index
            return ToolCallStart(index, ev.id, ev.name)
        index = self._renumbered.get(ev.index, ev.index)
        if isinstance(ev, ToolCallDelta):
            return ToolCallDelta(index, ev.arguments)
        return ToolCallEnd(index, ev.complete)

    # ==== Text ====

    def _show(self, text: str, *, final: bool = False) -> list[Event]:
        """``text`` is visible; a newline at its end waits (it may precede an opening fence)
        unless ``final``."""
        if self._newline:
            text = "\n" + text
        self._newline = not final and text.endswith("\n")
        if self._newline:
            text = text[:-1]
        if not text:
            return []
        self._text.append(text)
        return [TextDelta(text)]

    def _scan(self, text: str) -> list[Event]:
        if self._state == "code":
            return self._scan_code(text)
        buf, self._held = self._held + text, ""
        i, n = 0, len(buf)
        while i < n:
            end = buf.find("\n", i)
            if self._line_start:
                stop = n if end < 0 else end
                if end < 0:
                    if _maybe_fence(buf[i : i + _LONGEST_CLOSE + 8]) and n - i <= 40:
                        self._held = buf[i:]  # the rest of the line decides
                        break
                elif stop - i <= 40 and buf.startswith(_FENCE, i):
                    line = buf[i:stop]
                    if self._foreign:
                        self._foreign = not _closes(line)
                    elif _OPENING.fullmatch(line):
                        out = self._show(buf[:i])
                        self._open(line)
                        return out + self._collect() + self._scan_code(buf[end + 1 :])
                    elif _MAYBE_FENCE.fullmatch(line):
                        self._foreign = True  # a block of another language, or of none
            self._line_start = end >= 0
            i = n if end < 0 else end + 1
        return self._show(buf[: n - len(self._held)])

    # ==== Code ====

    def _open(self, line: str) -> None:
        self._state = "code"
        self._newline = False  # the separator before the call: neither text nor code
        self._opening = line + "\n"
        self._calls.count = self._next
        call = self._calls.start(self._name)
        self._passed[call.id] = call.index
        self._next += 1
        self._calls.stream(_CODE_PREFIX)
        self._held = "\n"
        self._virtual = True

    def _scan_code(self, text: str) -> list[Event]:
        buf, self._held = self._held + text, ""
        pos, n = 0, len(buf)
        while True:
            nl = buf.find("\n", pos)
            if nl < 0:
                break
            j = nl + 1
            line_end = buf.find("\n", j)
            end = n if line_end < 0 else line_end
            if end - j <= _LONGEST_CLOSE and (j == n or buf[j] == "`"):
                line = buf[j:end]
                if line_end >= 0 and _closes(line):
                    self._add_code(buf[:nl])
                    return self._collect() + self._close()
                if line_end < 0 and (_FENCE.startswith(line) or _closes(line)):
                    # "", "`", "``" may grow into the closing fence; "```" and spaces are one
                    # unless more follows on the line.
                    self._add_code(buf[:nl])
                    self._held = buf[nl:]
                    return self._collect()
            pos = j
        self._add_code(buf)
        return self._collect()

    def _add_code(self, code: str) -> None:
        if self._virtual and code:
            code = code[1:]  # the virtual newline before the block's first line
            self._virtual = False
        if code:
            self._code.append(code)
            self._calls.stream(_escaped(code))

    def _held_closes(self) -> bool:
        return self._held.startswith("\n") and _closes(self._held[1:])

    def _close(self) -> list[Event]:
        if not "".join(self._code).strip():
            self._cut_block("is empty")
        else:
            self._calls.stream(_CODE_SUFFIX)
            self._calls.end()
            self._calls.record(self._opening + "".join(self._code) + "\n" + _FENCE)
        self._state = "closed"
        self._held = ""
        self._inner_warnings = self._mark
        self.turn_over = True
        return self._collect()

    def _cut_block(self, problem: str) -> list[Event]:
        self._calls.cut(f"(a fenced code block) {problem}")
        self._calls.record(self._opening + "".join(self._code))
        self._state = "text"
        self._held = ""
        self._line_start = False
        return self._collect()

    def _end_in_code(self, reason: Literal["stop", "length"]) -> list[Event]:
        if self._held.strip("\n"):
            self._add_code(self._held)
        self._held = ""
        return self._cut_block(cut_problem(reason))

    def _collect(self) -> list[Event]:
        # In place: the call stream holds this list's append.
        out = self._out[:]
        self._out.clear()
        return out


__all__ = ["FencedRuns"]
