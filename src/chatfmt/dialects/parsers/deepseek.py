"""DeepSeek's two call syntaxes: parsers for one turn's answer, and grammars for constraint.

- Special tokens (R1, V3.1): ``text<｜tool▁calls▁begin｜>`` then calls
  ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`` and ``<｜tool▁calls▁end｜>``.
  R1 writes ``function<｜tool▁sep｜>NAME\\n```json\\n{…}\\n```<｜tool▁call▁end｜>`` with a newline
  between calls (``fenced``). The tokens arrive as control pieces (the decode pipeline splits
  them out of text), so only the name, the fence and the JSON are text.
- DSML (V3.2, V4): in :mod:`.dsml`, on :class:`.turn.TurnOutput`.

A call is announced when its name is whole and ends complete only when its arguments close (the
JSON object; the ``</｜DSML｜invoke>`` tag); one that does not is incomplete (:mod:`.calls`).
Output that does not parse degrades to text with a warning; never raises on model output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

from ...events import Event, Finish
from ...grammar import Grammar, ToolLike, Trigger
from ...grammar.calls import CallRules
from ...grammar.gbnf import literal
from ...jsonscan import WS, CallScanner
from ...messages import Tool
from ..base import StreamParser, finish_reason_for
from .calls import MAX_NAME, CallStream, cut_problem, feed_arguments
from .turn import TurnOutput

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
DSML = "｜DSML｜"
FENCE_OPEN = "```json\n"
FENCE_CLOSE = "\n```"
_NAME = re.compile(r"[^\s\"'<>\\]+\Z")


def valid_name(name: str) -> bool:
    """A tool name as these formats write it: no whitespace, quotes, angle brackets."""
    return bool(_NAME.match(name))


# ==== Special tokens (R1, V3.1) ====

# Modes: text; inside the calls block (between calls); a call's head (R1's type, then the
# name); the name; before the arguments (R1's fence); the arguments; after them, up to
# <｜tool▁call▁end｜>; after a broken call (ignored).
_TEXT, _BLOCK, _TYPE, _NAME_M, _PRE, _ARGS, _TAIL, _SKIP = range(8)


class SpecialCallsParser(TurnOutput, StreamParser):
    """One answer in R1's or V3.1's call syntax (``fenced``: R1's).

    The call tokens are class attributes and a call's head is read by :meth:`_call_head`,
    so a format with the same structure and tokens of its own (Kimi K2's
    ``<|tool_calls_section_begin|>``) subclasses this parser rather than writing another.
    """

    calls_begin = CALLS_BEGIN
    calls_end = CALLS_END
    call_begin = CALL_BEGIN
    call_end = CALL_END
    sep = SEP

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (),
        fenced: bool = False,
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._fenced = fenced
        self._mode = _TEXT
        self._raw: list[str] = []  # the block's text since its last call, kept for degrading
        self._head: list[str] = []  # the type or name being read
        self._head_len = 0  # its length: a head longer than any name is none
        self._named: tuple[str, str | None] = ("", None)  # the call's name and id, once read
        # Text before the arguments (blank space, R1's fence), taken as it comes: only a fence
        # still arriving is held, so a model stuck on spaces there costs linear time.
        self._pre: list[str] = []
        self._fence_part = ""  # the start of R1's fence line, undecided
        self._fence_seen = False
        self._scan: CallScanner | None = None
        self._fed = 0
        self._in_block = 0  # calls that ended in this block
        self._noted_tail = self._noted_skip = False
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls = CallStream(self._new_id, self._emit, self._warnings, raw_in_calls=False)

    # ==== Input ====

    def on_control(self, token: str) -> list[Event]:
        mode = self._mode
        calls_begin = self.calls_begin
        if token == calls_begin and mode in (_TEXT, _SKIP):
            self._mode, self._raw, self._in_block = _BLOCK, [token], 0
        elif token == self.call_begin and mode in (_BLOCK, _TAIL):
            self._raw.append(token)
            self._head, self._head_len = [], 0
            self._mode = _TYPE if self._fenced else _NAME_M
        elif (
            token == self.sep
            and mode in (_TYPE, _NAME_M)
            and not (self._fenced and mode == _NAME_M)
        ):
            self._raw.append(token)
            if self._fenced:
                # The type ("function") is not kept.
                self._mode, self._head, self._head_len = _NAME_M, [], 0
            else:
                self._name_done()
        elif token == self.call_end and mode == _TAIL:
            self._mode = _BLOCK
        elif token == self.calls_end and mode in (_BLOCK, _TAIL):
            if not self._in_block:
                self._degrade("the tool calls block holds no call")
            self._mode = _TEXT
        elif mode == _ARGS and self._calls.open is not None:
            # A call token inside the arguments: the model left them unfinished.
            self._break("is unterminated")
            self._mode = _SKIP if token != calls_begin else _BLOCK
            if token == calls_begin:
                self._raw, self._in_block = [token], 0
        elif mode == _SKIP:
            pass
        elif mode == _TEXT:
            self._out(token)
        else:
            self._degrade(f"unexpected {token} in a tool call")
            if mode != _TAIL:
                self._out(token)
        return self._drain()

    def on_text(self, text: str) -> list[Event]:
        mode = self._mode
        if mode == _TEXT:
            self._out(text)
        elif mode in (_BLOCK, _TAIL):
            self._between(text)
        elif mode in (_TYPE, _NAME_M):
            self._on_head(text)
        elif mode == _PRE:
            self._on_pre(text)
        elif mode == _ARGS:
            self._on_args(text)
        elif text.strip(WS) and not self._noted_skip:
            self._noted_skip = True
            self._warnings.append("the output after the malformed call was ignored")
        return self._drain()

    def _between(self, text: str) -> None:
        if self._mode == _TAIL:
            if self._fenced and not self._noted_tail and text.strip(WS).strip("`"):
                self._note_tail()
            elif not self._fenced and text.strip(WS):
                self._note_tail()
            return
        self._raw.append(text)
        if text.strip(WS):
            if self._in_block:
                self._note_tail()
            else:
                self._degrade(f"expected a tool call after {self.calls_begin}")

    def _note_tail(self) -> None:
        if not self._noted_tail:
            self._noted_tail = True
            self._warnings.append("text after a tool call's arguments was ignored")

    def _on_head(self, text: str) -> None:
        if self._mode == _NAME_M and self._fenced and "\n" in text:  # R1: ends at the newline
            at = text.index("\n")
            if not self._add_head(text[:at]):
                self._out(text[at:])  # the head is text: so is what follows it
                return
            self._raw.append("\n")
            self._name_done()
            if self._mode == _PRE:
                self._on_pre(text[at + 1 :])
            else:
                self._out(text[at + 1 :])
            return
        self._add_head(text)  # checked when whole (a partial check would depend on chunks)

    def _add_head(self, text: str) -> bool:
        """More of the head; ``False`` (and the call degraded to text) once it is longer than
        a head can be, so a name that never ends is neither held nor re-read without bound."""
        self._raw.append(text)
        self._head.append(text)
        self._head_len += len(text)
        # A head is a name, with Kimi's "functions." and ":INDEX" around it.
        if self._head_len > MAX_NAME + 32:
            self._degrade("a tool call's name is too long")
            return False
        return True

    def _call_head(self, head: str) -> tuple[str, str | None] | None:
        """A call's head (its text before the separator, stripped) as the tool's name and the
        call id the model wrote there (``None``: a fresh one); ``None`` when it is not one."""
        return (head, None) if valid_name(head) else None

    def _name_done(self) -> None:
        head = "".join(self._head).strip(WS)
        parsed = self._call_head(head)
        if parsed is not None:
            self._mode, self._scan, self._fed = _PRE, None, 0
            self._pre, self._fence_part, self._fence_seen = [], "", False
            self._named = parsed
        else:
            self._degrade(f"tool call name {head!r} is not a function name")

    def _on_pre(self, text: str) -> None:
        """Up to the arguments' ``{``: R1's fence line, blank space."""
        buf, self._fence_part = self._fence_part + text, ""
        while True:
            body = buf.lstrip(WS)
            self._pre.append(buf[: len(buf) - len(body)])
            if not body:
                return
            if self._fenced and not self._fence_seen and body.startswith("`"):
                if body.startswith(FENCE_OPEN):
                    self._pre.append(FENCE_OPEN)
                    self._fence_seen = True
                    buf = body[len(FENCE_OPEN) :]
                    continue
                if FENCE_OPEN.startswith(body):
                    self._fence_part = body  # the fence is still arriving
                    return
            break
        if body[0] != "{":
            self._degrade("a tool call's arguments are not a JSON object")
            self._out(body)  # what follows is text too
            return
        self._raw += self._pre
        self._pre = []
        self._mode = _ARGS
        self._scan = CallScanner()
        self._scan.feed('{"arguments": ')
        self._calls.start(*self._named)
        self._on_args(body)

    def _on_args(self, text: str) -> None:
        scan = self._scan
        assert scan is not None
        fed, self._fed = self._fed, self._fed + len(text)
        state, used = feed_arguments(scan, self._calls, text, fed)
        self._raw.append(text[:used])
        if state == "done":
            self._calls.end()
            self._record()
            self._in_block += 1
            self._mode = _TAIL
            self._between(text[used:])
        elif state == "error":
            self._break(f"has malformed JSON ({scan.error})")
            self._warnings.append("the output after the malformed call was ignored")
            self._mode, self._noted_skip = _SKIP, True

    # ==== Output ====

    def _record(self) -> None:
        self._calls.record("".join(self._raw))
        self._scan, self._raw = None, []

    def _break(self, problem: str) -> None:
        if self._scan is not None:
            self._calls.flush(self._scan)
        self._calls.cut(problem)
        self._record()

    def _degrade(self, reason: str) -> None:
        """What followed the calls token (or the last call) is not a call: it is text."""
        self._warnings.append(f"{reason}; kept as text")
        text = "".join(self._raw) + "".join(self._pre) + self._fence_part
        self._raw, self._mode, self._pre, self._fence_part = [], _TEXT, [], ""
        self._out(text)

    # ==== End ====

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        cut = cut_problem(reason)
        if self._mode == _ARGS and self._calls.open is not None:
            self._break(cut)
        elif self._mode in (_TYPE, _NAME_M, _PRE) or (self._mode == _BLOCK and not self._in_block):
            self._degrade(f"the tool call {cut}")
        self._events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        return self._drain()


# ==== Grammars ====


def special_call_grammar(
    tools: Sequence[ToolLike], *, fenced: bool, required: bool, single: bool
) -> Grammar:
    """R1's or V3.1's calls of ``tools``: lazy from ``<｜tool▁calls▁begin｜>`` unless
    ``required``."""
    c = CallRules(tools)

    def one(t: Tool) -> str:
        if fenced:
            head = f'{literal(CALL_BEGIN)} "function" {literal(SEP)} {literal(t.name + chr(10))}'
            body = f"{literal(FENCE_OPEN)} {c.arguments(t)} {literal(FENCE_CLOSE)}"
        else:
            head = f"{literal(CALL_BEGIN)} {literal(t.name)} {literal(SEP)}"
            body = c.arguments(t)
        return f"{head} {body} {literal(CALL_END)}"

    call = c.any_call(one)
    sep = '"\\n"' if fenced else ""
    many = call if single else f"{call} ({sep} {call})*"
    body = f"{literal(CALLS_BEGIN)} {many} {literal(CALLS_END)}"
    triggers = () if required else (Trigger("word", CALLS_BEGIN),)
    return c.grammar(
        body, triggers=triggers, preserved=(CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
    )
