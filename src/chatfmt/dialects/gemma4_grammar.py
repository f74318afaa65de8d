"""The grammar of Gemma 4's calls: ``<|tool_call>call:NAME{…}<tool_call|>`` over declared tools.

Arguments follow each tool's schema in the call notation (:mod:`.parsers.gemma4`): declared
parameters in the template's order (sorted without case), the required ones always, each
after a comma but the first; strings between ``<|"|>`` tokens, integers and numbers as JSON
writes them (their ranges kept), booleans ``true``/``false``, a null ``None``, arrays and
objects nested by their ``items`` and ``properties``; what a schema leaves open is any value
of the notation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import SchemaError
from ..grammar import CallRules, Grammar, ToolLike, Trigger, thought_first
from ..grammar.gbnf import literal
from ..grammar.schema import SchemaConverter
from .parsers.gemma4 import CALL, CALL_END, CALL_HEAD, QUOTE, sorted_items
from .parsers.values import schema_types

_Q = literal(QUOTE)
# A string's text: anything without "<|" (so it cannot run past its closing quote token).
_STRING = f'{_Q} ( [^<] | "<" [^|] )* {_Q}'
_NUMBER = '"-"? [0-9]+ ("." [0-9]+)? ([eE] [-+]? [0-9]+)?'
_KEY = "[^:,{}\\x5B\\x5D<>\\n]+"


class _Values:
    """Rules for values of the notation, by schema."""

    def __init__(self, c: CallRules) -> None:
        self.c = c
        self.strict = False  # the tool at hand's
        rules = c.rules
        self.string = rules.add("gemma4-string", _STRING)
        number = rules.add("gemma4-number", _NUMBER)
        value = rules.reserve("gemma4-value")  # any value: recursive
        member = rules.add("gemma4-member", f"{_KEY} {literal(':')} {value}")
        self.members = f"({member} ({literal(',')} {member})*)?"
        rules.define(
            value,
            f'{self.string} | {number} | "true" | "false" | "None" '
            f'| "{{" {self.members} "}}" | "[" ({value} ("," {value})*)? "]"',
        )
        self.any = value

    def value(self, schema: Any, hint: str) -> str:
        rules = self.c.rules
        enum = schema.get("enum") if isinstance(schema, Mapping) else None
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            return rules.add(f"{hint}-enum", f"{_Q} ({' | '.join(map(literal, enum))}) {_Q}")
        types = schema_types(schema)
        if types is None:
            return self.any
        alts = [self._of(kind, schema, hint) for kind in dict.fromkeys(types)]
        return alts[0] if len(alts) == 1 else rules.add(f"{hint}-types", " | ".join(alts))

    def _of(self, kind: str, schema: Mapping[str, Any], hint: str) -> str:
        if kind == "string":
            return self.string
        if kind in ("integer", "number"):
            # Python prints an integer or a float as JSON does (1e+20 included).
            only = {k: v for k, v in schema.items() if k not in ("type", "anyOf", "oneOf")}
            sub = {**only, "type": kind}
            return SchemaConverter(self.c.rules, sub, strict=self.strict).value(sub, hint)
        if kind == "boolean":
            return '("true" | "false")'
        if kind == "null":
            return '"None"'
        if kind == "array":
            item = self.value(schema.get("items"), f"{hint}-item")
            return self.c.rules.add(f"{hint}-array", f'"[" ({item} ("," {item})*)? "]"')
        if kind == "object":
            props = schema.get("properties")
            if not isinstance(props, Mapping) or not props:
                return self.c.rules.add(f"{hint}-object", f'"{{" {self.members} "}}"')
            body = self.object_members(schema, hint)
            return self.c.rules.add(f"{hint}-object", f'"{{" {body} "}}"')
        return self.any

    def object_members(self, schema: Mapping[str, Any], hint: str) -> str:
        """The declared members of an object schema in the template's order, commas between,
        the required ones always (any members when it declares none)."""
        props = schema.get("properties")
        if not isinstance(props, Mapping) or not props:
            return self.members
        needed = schema.get("required")
        needed = needed if isinstance(needed, list) else []
        items = [
            (
                self.c.rules.add(
                    f"{hint}-{key}", f"{literal(key + ':')} {self.value(sub, f'{hint}-{key}')}"
                ),
                key in needed,
            )
            for key, sub in sorted_items(props)
        ]
        # tails[i]: the members from i on, each after a comma.
        tail = '""'
        tails = [tail]
        for rule, required in reversed(items):
            piece = f'"," {rule} {tail}' if required else f'("," {rule})? {tail}'
            tail = self.c.rules.add(f"{hint}-rest", piece)
            tails.append(tail)
        tails.reverse()
        alts = []
        for i, (rule, required) in enumerate(items):
            alts.append(f"{rule} {tails[i + 1]}")
            if required:
                break  # a required member comes first when none is written before it
        else:
            alts.append('""')
        return self.c.rules.add(f"{hint}-members", " | ".join(alts))


def gemma4_call_grammar(
    tools: Sequence[ToolLike], *, required: bool = False, single: bool = False, thought: bool
) -> Grammar:
    """One or more calls (exactly one when ``single``) of ``tools``. Lazy unless ``required``:
    the grammar starts at ``<|tool_call>``. A required call may follow a thought
    (``<|channel>thought`` … ``<channel|>``) when ``thought`` (thinking on)."""
    c = CallRules(tools)
    values = _Values(c)
    alts = []
    for tool in c.tools:
        values.strict = tool.function.get("strict") is True
        params = tool.function.get("parameters")
        schema = params if isinstance(params, Mapping) else {}
        try:
            members = values.object_members(schema, f"{tool.name}-args")
        except SchemaError as exc:
            raise exc.of(f"function {tool.name!r}") from None
        head = literal(f"{CALL_HEAD}{tool.name}{{")
        body = f"{literal(CALL)} {head} {members} {literal('}')} {literal(CALL_END)}"
        alts.append(c.rules.add(f"call-{tool.name}", body))
    call = c.rules.add("call", " | ".join(alts))
    root = c.many(call, single=single)
    preserved = (CALL, CALL_END, QUOTE)
    if not required:
        return c.grammar(root, triggers=(Trigger("word", CALL),), preserved=preserved)
    grammar = c.grammar(root, preserved=preserved)
    if not thought:
        return grammar  # the prompt closed an empty thought
    wrapped = thought_first(grammar, "<|channel>thought", "<channel|>")
    # The channel's opening is a token and a word: the token is what an engine preserves.
    kept = (*(p for p in wrapped.preserved if p != "<|channel>thought"), "<|channel>")
    return dataclasses.replace(wrapped, preserved=kept)


__all__ = ["gemma4_call_grammar"]
