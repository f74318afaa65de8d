"""The parser of replies that are Python lists of calls: ``[f(a=1, b="x"), g()]`` (Llama 4).

A reply that opens (after whitespace) with ``[`` and a name followed by ``(`` is a list of
calls; each call is announced when its ``name(`` is read, and its arguments (Python literals,
read with :func:`chatfmt.pycall.parse_tool_call`, never evaluated) stream as JSON once its
``)`` closes. The calls of a list are complete only when ``]`` closes the list: a list that is
cut off or breaks leaves every call of it incomplete (:mod:`.calls`), and what follows a break
is ignored. Lists may follow one another (``[f()][g()]``, as Meta's encoder writes several
calls); text after a list is content. A reply that does not open with a call list is text, as
is a list whose first element is not a call (``[1, 2]``, a Markdown link).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Literal

from ...errors import PyCallError
from ...events import Event, Finish
from ...jsonscan import WS
from ...pycall import parse_tool_call
from ..base import StreamParser, finish_reason_for
from .calls import CallStream, OpenCall, cut_problem
from .turn import TurnOutput

# Modes: the reply's start (whitespace held); text; in a list; after a list (whitespace held);
# after a broken list (ignored).
_START, _TEXT, _LIST, _AFTER, _SKIP = range(5)
# Where a list is: before an element; in its name; in its arguments; after a call.
_ELEM, _NAME, _ARGS, _SEP = range(10, 14)
_OPENERS = {"(": ")", "[": "]", "{": "}"}


class PythonicCallsParser(TurnOutput, StreamParser):
    """One assistant turn: text, or lists of Python calls with literal keyword arguments.

    Every decision depends only on the characters seen (a string's opening quote waits for
    the two characters that tell a triple quote), so any chunking gives the same events.
    """

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (),
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._mode = _START
        self._held: list[str] = []  # whitespace before a list, or the list's text so far
        self._pending = ""  # characters not yet scanned (a quote that may open a triple one)
        self._where = _ELEM
        self._name: list[str] = []
        self._args: list[str] = []
        self._depth = 0  # brackets open inside the call's parentheses
        self._quote = ""  # the open string's quote ("", ', ", ''' or """)
        self._escape = False
        self._open: list[tuple[OpenCall, str]] = []  # this list's calls and their raw text
        self._lists = 0  # lists closed so far
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls = CallStream(self._new_id, self._emit, self._warnings)

    # ==== Input ====

    def on_text(self, text: str) -> list[Event]:
        self._feed(text)
        out, self._events = self._events, []  # inline: once per chunk
        return out

    def _feed(self, text: str) -> None:
        while text:
            i = 0
            while i < len(text) and self._mode in (_START, _AFTER):
                c = text[i]
                i += 1
                if c in WS:
                    self._held.append(c)
                elif c == "[":
                    self._mode, self._where = _LIST, _ELEM
                    self._held.append(c)
                else:
                    self._mode = _TEXT
                    self._out("".join(self._held))
                    self._held = []
                    i -= 1
            text = text[i:]
            if not text or self._mode == _SKIP:
                return
            if self._mode == _TEXT:
                self._out(text)
                return
            self._pending += text
            text = self._scan()

    def _scan(self) -> str:
        """Read the list as far as its characters decide; what follows the list."""
        text, i = self._pending, 0
        while i < len(text) and self._mode == _LIST:
            c = text[i]
            where = self._where
            if where == _ARGS:
                used = self._arg_char(text, i)
                if used == 0:
                    break  # a quote waits for what follows it
                i += used
                continue
            self._held.append(c)
            i += 1
            if where == _ELEM:
                if c in WS:
                    continue
                if c == "]" and self._open:  # a trailing comma, as Python allows
                    self._close_list()
                elif c.isidentifier():
                    self._where, self._name = _NAME, [c]
                else:
                    self._not_a_call(f"a list element starts with {c!r}")
            elif where == _NAME:
                if ("a" + c).isidentifier():
                    self._name.append(c)
                elif c == "(":
                    call = self._calls.start("".join(self._name))
                    self._open.append((call, ""))
                    self._where, self._args, self._depth = _ARGS, [], 0
                else:
                    self._not_a_call(f"a list element is not a call (at {c!r})")
            elif c in WS:
                continue
            elif c == ",":
                self._where = _ELEM
            elif c == "]":
                self._close_list()
            else:
                self._break(f"expected ',' or ']' after a call, got {c!r}")
        if self._mode == _LIST:
            self._pending = text[i:]
            return ""
        self._pending = ""
        return text[i:]

    def _arg_char(self, text: str, i: int) -> int:
        """Consume the arguments' character(s) at ``i``; 0 when the next ones are needed."""
        c = text[i]
        if self._quote:
            if self._escape:
                self._escape = False
            elif c == "\\":
                self._escape = True
            elif c == "\n" and len(self._quote) == 1:
                self._take(c)
                self._break("has a line break inside a one-line string")
                return 1
            elif text.startswith(self._quote, i):
                n = len(self._quote)
                self._take(text[i : i + n])
                self._quote = ""
                return n
            elif c == self._quote[0] and len(text) - i < len(self._quote):
                return 0  # perhaps the closing triple quote
            self._take(c)
            return 1
        if c in "'\"":
            if len(text) - i < 3:
                return 0
            self._quote = c * 3 if text.startswith(c * 3, i) else c
            self._take(self._quote)
            return len(self._quote)
        if c in _OPENERS:
            self._depth += 1
        elif c in ")]}" and self._depth:
            self._depth -= 1
        elif c == ")":
            self._held.append(c)
            self._end_arguments()
            return 1
        self._take(c)
        return 1

    def _take(self, text: str) -> None:
        self._args.append(text)
        self._held.append(text)

    def _end_arguments(self) -> None:
        """The call's ``)`` closed: read its arguments and stream them as JSON."""
        name, source = "".join(self._name), "".join(self._args)
        raw = f"{name}({source})"
        try:
            args = parse_tool_call(raw, function=name)
            arguments = json.dumps(args, ensure_ascii=False, allow_nan=False)
        except (PyCallError, ValueError, RecursionError) as exc:
            self._break(f"has arguments that are not Python literals ({exc})")
            return
        call, _ = self._open[-1]
        self._open[-1] = (call, raw)
        self._calls.open = call
        self._calls.stream(arguments)
        self._where = _SEP

    # ==== Decisions ====

    def _close_list(self) -> None:
        """``]``: every call of the list is complete (its arguments are checked once more)."""
        for call, raw in self._open:
            self._calls.open = call
            if not call.arguments:
                self._calls.stream("{}")
            self._calls.end()
            self._calls.record(raw)
        self._open, self._held, self._lists = [], [], self._lists + 1
        self._mode = _AFTER

    def _not_a_call(self, reason: str) -> None:
        """The list is not a call list: before any call of it, it is text."""
        if self._open:
            self._break(f"{reason}")
            return
        # Brackets in prose or a Markdown link: ordinary text, no warning.
        self._mode = _TEXT
        self._out("".join(self._held))
        self._held = []

    def _break(self, problem: str) -> None:
        """The list broke after calls were announced: each ends incomplete; the rest of the
        output is ignored."""
        self._cut_all(problem)
        self._warnings.append("the output after it was ignored")
        self._mode = _SKIP

    def _cut_all(self, problem: str) -> None:
        raw = "".join(self._held)
        for call, _ in self._open:
            self._calls.open = call
            self._calls.cut(problem)
            self._calls.record(raw)
        self._open, self._held = [], []

    # ==== End ====

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        if self._mode == _LIST:
            self._held.append(self._pending)
            self._pending = ""
            cut = cut_problem(reason)
            if self._open:
                self._cut_all(cut)
            else:
                if not self._lists:
                    self._warnings.append(f"the tool call list {cut}; kept as text")
                self._out("".join(self._held))
        elif self._mode == _START:
            self._out("".join(self._held))
        self._held = []
        self._events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        out, self._events = self._events, []  # inline: once per chunk
        return out
