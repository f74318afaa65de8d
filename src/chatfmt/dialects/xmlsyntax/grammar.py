"""The call grammar of an :class:`~.spec.XMLSyntax`: the declared tools' calls, in its layout.

The literals are the syntax's own layouts with the tool's name and each key written in, so
the grammar asks for exactly the text the renderer writes and the parser reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import SchemaError
from ...grammar import CallRules, Grammar, ToolLike, Trigger
from ...grammar.gbnf import literal
from ...grammar.schema import SchemaConverter
from ..parsers.values import schema_types
from .spec import XMLSyntax, layouts


def call_grammar(
    syntax: XMLSyntax,
    tools: Sequence[ToolLike],
    *,
    required: bool = False,
    single: bool = False,
    lead: str = "",
) -> Grammar:
    """Calls of ``tools`` in ``syntax``: one or more blocks (or one block of one or more
    calls, :attr:`~.spec.XMLSyntax.many`), exactly one call when ``single``.

    Each declared argument comes in the schema's order, the required ones always; a string
    value is free text up to its closing tag (one of its ``enum`` when it has one); other
    values by :func:`value_rule`. A tool without declared parameters takes any arguments.
    Lazy unless ``required``: the grammar starts at the block's tag. ``lead``: text a
    required call starts with (the newline a template writes before each call)."""
    c = CallRules(tools)
    p = syntax.rule
    head, tail, name_before, name_after, call_tail, key_before, key_after, value_after = layouts(
        syntax
    )
    # A string value: any text without "</" and the closing tag's next character.
    text = c.rules.add(f"{p}-text", f'([^<] | "<" [^/] | "</" [^{syntax.value_close[2]}])*')
    forbidden = syntax.key_rule.forbidden + syntax.key.close[0]
    any_key = "[^" + "".join(dict.fromkeys(forbidden)).replace("\n", "\\n") + "]+"
    alts = []
    for tool in c.tools:
        params = tool.function.get("parameters")
        props = params.get("properties") if isinstance(params, Mapping) else None
        needed = params.get("required") if isinstance(params, Mapping) else None
        strict = tool.function.get("strict") is True
        parts = [literal(name_before + tool.name + name_after)]
        for key, schema in props.items() if isinstance(props, Mapping) else ():
            try:
                value = value_rule(c, syntax, schema, text, strict, f"{tool.name}-{key}")
            except SchemaError as exc:
                raise exc.of(f"function {tool.name!r}") from None
            one = f"{literal(key_before + key + key_after)} {value} {literal(value_after)}"
            parts.append(one if isinstance(needed, list) and key in needed else f"({one})?")
        if not isinstance(props, Mapping) or not props:
            free = f"{literal(key_before)} {any_key} {literal(key_after)} {text}"
            parts.append(f"({free} {literal(value_after)})*")
        if call_tail:
            parts.append(literal(call_tail))
        alts.append(c.rules.add(f"{p}-call-{tool.name}", " ".join(parts)))
    call = c.rules.add(f"{p}-call", " | ".join(alts))
    calls = f"{call}+" if syntax.many and not single else call
    block = c.rules.add("tagged-call", f"{literal(head)} {calls} {literal(tail)}")
    root = block if syntax.many else c.many(block, single=single)
    if required and lead:
        root = f"{literal(lead)} {root}"
    if required:
        return c.grammar(root, preserved=syntax.controls)
    trigger = Trigger("word", syntax.block_open)
    return c.grammar(root, triggers=(trigger,), preserved=syntax.controls)


def value_rule(
    c: CallRules, syntax: XMLSyntax, schema: Any, text: str, strict: bool, hint: str
) -> str:
    """The GBNF of a value the template writes as raw text: ``text`` (the string rule) for a
    string or where the schema does not say one type; one of a string ``enum``; else its
    schema's JSON, as the template writes it — where ``scalars`` is ``"python"``, a boolean
    as ``true``/``false`` in either spelling, and ``null`` as free text (``None``)."""
    enum = schema.get("enum") if isinstance(schema, Mapping) else None
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        # A string enum is written bare, as the template writes a string value.
        return c.rules.add(f"{hint}-enum", " | ".join(literal(v) for v in enum))
    if not isinstance(schema, Mapping) or "allOf" in schema or "$ref" in schema:
        # Combined or referenced schemas are left to the parser's typing: the converter
        # here sees only this property, not the tool's definitions its parts may name.
        return text
    types = schema_types(schema)
    if types is None or "string" in types or len(types) != 1:
        return text
    kind = types[0]
    if syntax.scalars == "python":
        if kind == "boolean":
            return c.rules.add("xml-boolean", '"true" | "false" | "True" | "False"')
        if kind not in ("integer", "number", "object", "array"):
            return text
    return SchemaConverter(c.rules, schema, strict=strict).value(schema, hint)


__all__ = ["call_grammar", "value_rule"]
