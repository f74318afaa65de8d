"""Kimi K2's calls: a section of special-token calls whose head is the call's id.

::

    text<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

(one line in the output). The structure is DeepSeek V3.1's, with Kimi's tokens, so the parser
is :class:`~.deepseek.SpecialCallsParser` with those tokens and one difference: a call's head
is its id, ``functions.NAME:INDEX``, which names the tool. The id is kept as the call's id, so
a call parsed from the model's output renders back to the id the model wrote (the index counts
the conversation's calls, as the Kimi templates number them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ...grammar import CallRules, Grammar, ToolLike, Trigger
from ...grammar.gbnf import literal
from ...messages import Tool
from .deepseek import SpecialCallsParser, valid_name

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
CALL_TOKENS = (SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGUMENT_BEGIN, CALL_END)

_CALL_ID = re.compile(r"functions\.(.+):([0-9]+)")


def call_id(name: str, index: int) -> str:
    """The id Kimi's templates give the ``index``-th call of a conversation (from 0)."""
    return f"functions.{name}:{index}"


def call_index(call_id: str, name: str) -> int | None:
    """The index a call id of Kimi's form (``functions.NAME:INDEX``) carries for tool ``name``;
    ``None`` for any other id."""
    m = _CALL_ID.fullmatch(call_id)
    return int(m.group(2)) if m is not None and m.group(1) == name else None


class KimiCallsParser(SpecialCallsParser):
    """One Kimi K2 answer: text, then a section of calls; each call's id is the head the
    model wrote (``functions.get_weather:0``), its tool the name inside it."""

    calls_begin = SECTION_BEGIN
    calls_end = SECTION_END
    call_begin = CALL_BEGIN
    call_end = CALL_END
    sep = ARGUMENT_BEGIN

    def __init__(
        self, *, id_factory: Callable[[], str] | None = None, stop_controls: Sequence[str] = ()
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._seen: set[str] = set()  # the ids of this turn's calls so far

    def _call_head(self, head: str) -> tuple[str, str | None] | None:
        """``functions.NAME:INDEX`` (the id, kept) or a bare ``NAME`` (a fresh id); a head
        that repeats an id of this turn gets a fresh one, so the turn's ids stay distinct."""
        m = _CALL_ID.fullmatch(head)
        name = m.group(1) if m is not None else head
        if not valid_name(name):
            return None
        if m is None:
            return name, None
        if head in self._seen:
            self._warnings.append(f"tool call id {head!r} repeats in this turn; given a fresh id")
            return name, None
        self._seen.add(head)
        return name, head


def kimi_call_grammar(
    tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
) -> Grammar:
    """A section of calls of ``tools``, each ``functions.NAME:INDEX`` and its arguments as
    JSON of the tool's schema; lazy from ``<|tool_calls_section_begin|>`` unless
    ``required``."""
    c = CallRules(tools)

    def one(t: Tool) -> str:
        head = f"{literal(CALL_BEGIN)} {literal(call_id(t.name, 0)[:-1])} [0-9]+"
        return f"{head} {literal(ARGUMENT_BEGIN)} {c.arguments(t)} {literal(CALL_END)}"

    call = c.any_call(one)
    many = call if single else f"{call}+"
    root = f"{literal(SECTION_BEGIN)} {many} {literal(SECTION_END)}"
    triggers = () if required else (Trigger("word", SECTION_BEGIN),)
    return c.grammar(root, triggers=triggers, preserved=CALL_TOKENS)


__all__ = [
    "ARGUMENT_BEGIN",
    "CALL_BEGIN",
    "CALL_END",
    "CALL_TOKENS",
    "SECTION_BEGIN",
    "SECTION_END",
    "KimiCallsParser",
    "call_id",
    "call_index",
    "kimi_call_grammar",
]
