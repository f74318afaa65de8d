"""GBNF, the grammar language of llama.cpp: a grammar with its triggers, and a rule set to
build one with.

A :class:`Grammar` is what an engine needs to constrain sampling: the GBNF text and, for a
*lazy* grammar, the triggers that switch it on. Until a trigger matches, the model writes
freely; from the trigger on (the matched text included) every token must fit the grammar.
That is how a reply may be plain prose or a tool call, and a call is always well formed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..errors import SchemaError

#: ``WS_RULE`` as a regular expression, for triggers: the text a trigger matches is fed to
#: the grammar, so a trigger must never match more whitespace than the grammar allows.
WS_PATTERN = r"(?: |\n[ \t]{0,20})?"
#: Whitespace between JSON tokens. Bounded: an unbounded run lets a small model emit
#: newlines until max_tokens (a known failure of ``[ \t\n]*`` grammars). Written as an
#: optional group, not with an empty alternative (``| " " | ...``): llama.cpp reads both, but
#: xgrammar (vLLM's default grammar backend) refuses an empty alternative.
WS_RULE = '(" " | "\\n" [ \\t]{0,20})?'

_LITERAL_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NAME_CHARS = re.compile(r"[^a-zA-Z0-9]+")
#: Rules with fixed names, shared by every schema of a grammar.
SHARED_NAMES = frozenset(
    ["root", "ws", "integer", "number", "date-string", "time-string", "date-time-string"]
    + ["uuid-string"]
    + [
        f"{syntax}-{kind}"
        for syntax in ("json", "python")
        for kind in ("char", "string", "value", "object", "array", "boolean", "null")
    ]
)


@dataclass(frozen=True)
class Trigger:
    """What switches a lazy grammar on.

    ``word``: the text appears anywhere in the output (the grammar starts at it).
    ``pattern``: a regular expression matches somewhere; the grammar starts at its first
    group (or at the match). ``pattern_full``: the expression matches all the output so far.
    """

    kind: Literal["word", "pattern", "pattern_full"]
    value: str


@dataclass(frozen=True)
class Grammar:
    """A GBNF grammar (root rule ``root``), and how it is switched on.

    ``lazy=False``: the whole reply must match. ``lazy=True``: only from a trigger on.
    ``preserved`` names control tokens the grammar spells as text (``<tool_call>``): an
    engine must let the model sample them and match them by their text.
    """

    gbnf: str
    lazy: bool = False
    triggers: tuple[Trigger, ...] = ()
    preserved: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.lazy and not self.triggers:
            raise ValueError("a lazy grammar needs at least one trigger")


def literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    out = []
    for ch in text:
        if ch in _LITERAL_ESCAPES:
            out.append(_LITERAL_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def rule_name(hint: str) -> str:
    """A rule name from any text (GBNF names are ``[a-zA-Z0-9-]+``)."""
    return _NAME_CHARS.sub("-", hint).strip("-").lower() or "r"


def repeat(item: str, low: int, high: int | None, *, sep: str = "") -> str:
    """``item`` ``low`` to ``high`` times (``None``: no upper bound), ``sep`` between."""
    if high is not None and high < low:
        raise SchemaError(f"no value has between {low} and {high} items or characters")
    if not sep:
        if high is None:
            return f"({item}){{{low},}}" if low else f"({item})*"
        return f"({item}){{{low},{high}}}" if low != high else f"({item}){{{low}}}"
    if high == 0:
        return '""'
    rest_high = None if high is None else high - 1
    rest = repeat(f"{sep} {item}", max(low - 1, 0), rest_high)
    once = f"{item} {rest}"
    return once if low else f"({once})?"


class Rules:
    """A set of named rules; names are made unique as rules are added. Names given to
    :meth:`shared` rules (and ``root``) are never handed out by :meth:`reserve`, whatever a
    schema calls its definitions."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}
        self._kept = set(SHARED_NAMES)

    def __contains__(self, name: str) -> bool:
        return name in self._rules

    def reserve(self, hint: str) -> str:
        """A fresh name, held for a rule defined later (recursive schemas refer to it)."""
        base = rule_name(hint)
        name, n = base, 1
        while name in self._rules or name in self._kept:
            n += 1
            name = f"{base}-{n}"
        self._rules[name] = ""
        return name

    def define(self, name: str, body: str) -> str:
        self._rules[name] = body
        return name

    def add(self, hint: str, body: str) -> str:
        """Add a rule; an existing rule with the same body is reused instead."""
        base = rule_name(hint)
        for existing, existing_body in self._rules.items():
            if existing_body == body and (existing == base or existing.startswith(base + "-")):
                return existing
        return self.define(self.reserve(hint), body)

    def shared(self, name: str, body: str) -> str:
        """A rule of fixed name and body (``ws``, ``json-string``…), defined once."""
        assert name in self._kept, f"{name!r} is not a shared rule name"
        if name not in self._rules:
            self._rules[name] = body
        return name

    def gbnf(self, root: str) -> str:
        """The grammar text, ``root ::= <root>`` first, without rules it never reaches."""
        reached: list[str] = []
        todo = _references(root)
        while todo:
            name = todo.pop()
            if name in reached or name not in self._rules:
                continue
            reached.append(name)
            todo += _references(self._rules[name])
        lines = [f"root ::= {root}"]
        lines += [f"{n} ::= {b}" for n, b in self._rules.items() if n in reached and n != "root"]
        return "\n".join(lines) + "\n"


def _references(body: str) -> list[str]:
    """The rule names a rule body refers to (outside literals, classes and counts)."""
    names, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch in '"[{':
            close = {'"': '"', "[": "]", "{": "}"}[ch]
            i += 1
            while i < len(body) and body[i] != close:
                i += 2 if body[i] == "\\" else 1
            i += 1
        elif ch.isalnum() or ch == "-":
            j = i
            while j < len(body) and (body[j].isalnum() or body[j] == "-"):
                j += 1
            names.append(body[i:j])
            i = j
        else:
            i += 1
    return names
