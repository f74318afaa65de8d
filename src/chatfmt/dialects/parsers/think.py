"""Reasoning in ``<think>`` … ``</think>`` before the answer: one wrapper for every family.

Qwen3, QwQ, DeepSeek R1 and V3.1+, GLM-4.5+, MiniMax and others write their chain of thought
between two tags, then the answer in their own syntax. :class:`ThinkParser` splits the thought
off as :class:`~chatfmt.events.ReasoningDelta` events and hands the answer to the family's own
parser, so no call parser needs to know about reasoning.

Where the template's generation prompt already opened the block (``<think>\\n``, as QwQ,
Qwen3.5 and DeepSeek R1 do), the parser starts inside it (``started=True``); otherwise a reply
may open one itself, after optional blank lines. The newlines the templates put around the
thought (``<think>\\n…\\n</think>\\n\\n``) are layout, not reasoning: they are dropped, which is
what each template strips again when it renders the turn back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

from ...events import Event, ParseResult, ReasoningDelta
from ...markup import held_suffix
from ...messages import Message
from ...segments import Control
from ..base import StreamParser

if TYPE_CHECKING:
    from ..base import Dialect

# Where the parser is: before anything (a thought may open), inside the thought, after it.
_LEAD, _THINK, _ANSWER = range(3)


class ThinkParser(StreamParser):
    """An optional ``open_tag`` … ``close_tag`` thought, then ``answer`` (the family's parser).

    ``started``: the prompt already opened the thought, so the reply begins inside it; with no
    ``close_tag`` at all the whole reply is reasoning (a reply cut off while thinking). The tags
    parse the same whether they arrive as control tokens or as text; a tag split across chunks
    is held back until it is decided, so any chunking gives the same events.
    """

    def __init__(
        self,
        answer: StreamParser,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Iterable[str] = (),
        open_tag: str = "<think>",
        close_tag: str = "</think>",
        started: bool = False,
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._answer = answer
        self._open_tag = open_tag
        self._close_tag = close_tag
        self._mode = _THINK if started else _LEAD
        # Undecided text, never longer than a tag: the start of a tag split across chunks.
        self._hold = ""
        # Blank lines before the reply's first text, counted (not held as text, which would
        # make a model stuck on newlines cost quadratic time): layout if a thought opens.
        self._lead = 0
        self._started_text = False  # the thought has had a character that is not a newline
        self._reasoning: list[str] = []
        self._thought = started  # whether the reply has a thought at all
        self._newlines = 0  # trailing newlines of the thought so far, held back
        self._skip_newlines = False  # right after the thought: the layout before the answer

    # ==== Public interface ====

    @classmethod
    def after_prompt_of(
        cls,
        dialect: Dialect,
        answer: StreamParser,
        id_factory: Callable[[], str] | None,
        *,
        started: bool = False,
    ) -> ThinkParser:
        """A ``<think>`` thought, then ``answer``: the parser of a reasoning family's reply to
        ``dialect``'s generation prompt (``started``: the prompt opened the thought)."""
        return cls(
            answer, id_factory=id_factory, stop_controls=dialect.stop_controls, started=started
        )

    @property
    def in_thought(self) -> bool | None:
        return None if self._mode == _LEAD else self._mode == _THINK

    def on_text(self, text: str) -> list[Event]:
        if self._mode == _ANSWER and not self._skip_newlines:
            return self._answer.feed(text)
        return self._scan(text)

    def on_control(self, token: str) -> list[Event]:
        if self._mode == _ANSWER:
            self._skip_newlines = False
            return self._answer.feed(Control(token))
        if self._mode == _LEAD and token == self._open_tag and not self._hold:
            self._enter_thought()
            return []
        if self._mode == _THINK and token == self._close_tag:
            out = self._think_text(self._hold, final=True)
            self._hold = ""
            self._mode = _ANSWER
            self._skip_newlines = True
            return out
        if self._mode == _LEAD and self._open_tag.startswith(token):
            # A token that begins a longer open tag (Gemma 4's "<|channel>" of
            # "<|channel>thought"): read as its text, which the tag is matched on.
            return self._scan(token)
        if self._mode == _LEAD:
            # Another control token first (a call's tag): no thought; the answer has begun.
            out = self._leave_lead("")
            return out + self._answer.feed(Control(token))
        # Inside the thought, any other control token is reasoning text, as written.
        return self._scan(token)

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        out: list[Event] = []
        if self._mode == _THINK:
            # Cut off (or stopped) while thinking: what was written is reasoning; trailing
            # newlines are the layout that would have come before the closing tag.
            out += self._think_text(self._hold, final=True)
            self._hold = ""
        elif self._mode == _LEAD:
            out += self._leave_lead("")
        return out + self._answer.finish(reason)

    def result(self) -> ParseResult:
        result = self._answer.result()
        if not self._thought:
            return result
        reasoning = "".join(self._reasoning)
        messages = list(result.messages)
        first = messages[0] if messages else Message(role="assistant", content=None)
        merged = Message(
            role=first.role,
            content=first.content,
            tool_calls=first.tool_calls,
            metadata=first.metadata,
            reasoning=reasoning,
        )
        messages[0:1] = [merged]
        return ParseResult(
            messages=messages,
            finish_reason=result.finish_reason,
            warnings=self._warnings + result.warnings,
            incomplete_calls=result.incomplete_calls,
        )

    # ==== Scanning ====

    def _enter_thought(self) -> None:
        self._mode = _THINK
        self._thought = True
        self._lead = 0  # the blank lines before the tag were layout

    def _leave_lead(self, text: str) -> list[Event]:
        """No thought opens: the blank lines and held text so far, then ``text``, are the
        answer's."""
        self._mode = _ANSWER
        held = "\n" * self._lead + self._hold + text
        self._lead, self._hold = 0, ""
        return self._answer.feed(held) if held else []

    def _scan(self, text: str) -> list[Event]:
        out: list[Event] = []
        while text:
            if self._mode == _LEAD:
                if not self._hold:
                    body = text.lstrip("\n")
                    self._lead += len(text) - len(body)
                    text = body
                    if not text:
                        return out
                candidate = self._hold + text  # the hold is shorter than the tag
                self._hold = ""
                if candidate.startswith(self._open_tag):
                    text = candidate[len(self._open_tag) :]
                    self._enter_thought()
                    continue
                if self._open_tag.startswith(candidate):
                    self._hold = candidate  # a tag split across chunks
                    return out
                return out + self._leave_lead(candidate)
            if self._mode == _THINK:
                text = self._hold + text  # the hold is shorter than the close tag
                self._hold = ""
                at = text.find(self._close_tag)
                if at < 0:
                    keep = held_suffix(text, (self._close_tag,))
                    body, self._hold = text[: len(text) - keep], text[len(text) - keep :]
                    return out + self._think_text(body, final=False)
                out += self._think_text(text[:at], final=True)
                text = text[at + len(self._close_tag) :]
                self._mode = _ANSWER
                self._skip_newlines = True
                continue
            # _ANSWER, right after the thought: the newlines before the answer are layout.
            if self._skip_newlines:
                text = text.lstrip("\n")
                if not text:
                    return out
                self._skip_newlines = False
            return out + self._answer.feed(text)
        return out

    def _think_text(self, text: str, *, final: bool) -> list[Event]:
        """Reasoning text, without the newlines that open and close the block: leading ones
        are dropped, trailing ones counted until more reasoning follows (``final``: none
        will)."""
        if not self._started_text:
            text = text.lstrip("\n")
            if not text:
                return []
            self._started_text = True
        body = text.rstrip("\n")
        if not body:
            # Only newlines: layout if the block closes next, reasoning if more follows.
            self._newlines = 0 if final else self._newlines + len(text)
            return []
        piece = "\n" * self._newlines + body
        self._newlines = 0 if final else len(text) - len(body)
        self._reasoning.append(piece)
        return [ReasoningDelta(piece)]
