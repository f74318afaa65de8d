"""Grammars for whole JSON replies and for tool calls of declared tools.

The dialects assemble their call syntax (tags, markers, metadata lines) around the pieces
built here: a call object naming one of the declared tools with arguments that follow that
tool's ``parameters`` schema, or the arguments alone (as JSON or as Python keyword
arguments). A tool whose definition says ``"strict": true`` gets an error for any schema
keyword the grammar cannot enforce; other tools get those keywords ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import SchemaError
from ..messages import Tool
from .gbnf import Grammar, Rules, Trigger, literal
from .schema import SchemaConverter, Syntax

#: ECMAScript's syntax characters: escaped in patterns, nothing else (std::regex, which
#: llama.cpp uses, need not accept Python's other escapes).
_REGEX_SPECIAL = re.compile(r"[\^$\\.*+?()[\]{}|/]")
#: A tool as :class:`~chatfmt.messages.Tool` or as an OpenAI tool dict.
ToolLike = Tool | Mapping[str, Any]
#: ``response_format: {"type": "json_object"}``: any JSON object.
ANY_OBJECT: Mapping[str, Any] = {"type": "object"}


def json_grammar(
    schema: Mapping[str, Any] | bool, *, strict: bool = False, name: str = ""
) -> Grammar:
    """A grammar for a whole reply that is one JSON value of ``schema`` (what
    ``response_format`` asks for). :class:`SchemaError` when ``strict`` and the schema has
    a keyword the grammar cannot enforce."""
    rules = Rules()
    try:
        root = SchemaConverter(rules, schema, strict=strict).value(schema, "value")
    except SchemaError as exc:
        raise exc.of(f"response_format {name!r}" if name else "response_format") from None
    return Grammar(rules.gbnf(root))


#: A reply in words: it cannot open with a call, JSON, code or a tag, and holds no control
#: token (their text starts with ``<``). For a turn that must answer instead of calling.
WORDS = Grammar("root ::= [^{}<\\[\\]`('\" \\t\\n] [^<]*\n")


class CallRules:
    """Rules for calls of ``tools`` in one :class:`~chatfmt.grammar.gbnf.Rules` set."""

    def __init__(self, tools: Sequence[ToolLike]) -> None:
        if not tools:
            raise ValueError("a call grammar needs at least one tool")
        self.tools = [Tool.of(t) for t in tools]
        self.rules = Rules()
        #: For the shared rules (whitespace, strings, any object) outside any tool's schema.
        self._plain = SchemaConverter(self.rules)
        self.ws = self._plain.ws

    def _converter(self, tool: Tool, syntax: Syntax = "json") -> tuple[SchemaConverter, Any]:
        params = tool.function.get("parameters")
        schema = params if params is not None else {"type": "object", "properties": {}}
        strict = tool.function.get("strict") is True
        return SchemaConverter(self.rules, schema, syntax=syntax, strict=strict), schema

    def arguments(self, tool: Tool) -> str:
        """The tool's arguments as a JSON (or Python) object."""
        conv, schema = self._converter(tool)
        try:
            return conv.value(schema, f"{tool.name}-args")
        except SchemaError as exc:
            raise exc.of(f"function {tool.name!r}") from None

    def keyword_arguments(self, tool: Tool) -> str:
        """The tool's arguments as Python keyword arguments ``k=v, …`` with literal values
        (may be empty)."""
        conv, schema = self._converter(tool, "python")
        try:
            return conv.members(schema, f"{tool.name}-kwargs", kwargs=True) or '""'
        except SchemaError as exc:
            raise exc.of(f"function {tool.name!r}") from None

    def call_object(
        self,
        *,
        args_key: str = "arguments",
        type_function: bool = False,
        trailing: str = "",
        undeclared: bool = False,
    ) -> str:
        """``{"name": <a declared tool>, "<args_key>": <its arguments>}``; with
        ``type_function`` an optional leading ``"type": "function"`` (Llama 3's form);
        ``trailing``: an optional last member (GBNF, its comma included).

        ``undeclared``: also any *other* name with any object as arguments. A lazy grammar
        uses it so that a model starting a call the user did not ask for (a joke written as
        ``{"name": "tell_joke"}``) is not pushed into calling a declared tool instead: the
        server returns such a call as text, as without a grammar (measured: forcing declared
        names turned 9 of 30 plain questions into calls)."""
        ws = self.ws
        head = f'"{{" {ws}'
        if type_function:
            head += f' ("\\"type\\"" {ws} ":" {ws} "\\"function\\"" {ws} "," {ws})?'
        key = literal(json.dumps(args_key))

        def obj(name: str, args: str) -> str:
            pair = f'{key} {ws} ":" {ws} {args}' + (f" ({trailing})?" if trailing else "")
            return f'{head} "\\"name\\"" {ws} ":" {ws} {name} {ws} "," {ws} {pair} {ws} "}}"'

        alts = [
            self.rules.add(
                f"call-{t.name}",
                obj(literal(json.dumps(t.name, ensure_ascii=False)), self.arguments(t)),
            )
            for t in self.tools
        ]
        if undeclared:
            any_object = self._plain.value(ANY_OBJECT, "args")
            alts.append(self.rules.add("call-other", obj(self._other_name(), any_object)))
        return self.rules.add("call", " | ".join(alts))

    def _other_name(self) -> str:
        """A JSON string that is none of the declared tool names and does not begin with one
        (a trie of the names). A name that begins with a declared one is taken to be that
        tool: small models write ``add_args`` or ``get_weather_info`` for ``add`` and
        ``get_weather``; an unrelated name (``tell_joke``) stays free."""
        names = {t.name for t in self.tools}
        anything = self.rules.add("other-rest", f'{self._plain.char_rule()}* "\\""')

        def node(prefix: str) -> str | None:
            nexts = sorted({n[len(prefix)] for n in names if n.startswith(prefix) and n != prefix})
            alts = [f"{literal(c)} {rule}" for c in nexts if (rule := node(prefix + c)) is not None]
            if prefix not in names:
                # Any other character (or an escape) leaves every name behind, or it ends here.
                other = "".join(_class_char(c) for c in nexts)
                alts.append(f'[^"\\\\\\x00-\\x1F{other}] {anything}')
                alts.append(f'"\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{{4}}) {anything}')
                alts.append('"\\""')
            if not alts:
                return None
            return self.rules.add(f"other-{prefix or 'name'}", " | ".join(alts))

        root = node("")
        assert root is not None  # the empty prefix is never a tool name
        return f'"\\"" {root}'

    def any_call(self, body: Callable[[Tool], str]) -> str:
        """The rule ``call``: a call of any declared tool, each tool's written as ``body(tool)``
        (in a rule ``call-NAME`` of its own)."""
        alts = [self.rules.add(f"call-{t.name}", body(t)) for t in self.tools]
        return self.rules.add("call", " | ".join(alts))

    def many(self, item: str, *, single: bool, sep: str = "") -> str:
        """``item`` once (``single``) or one or more times, ``sep`` (and whitespace) between."""
        if single:
            return item
        between = f"{self.ws} {sep} {self.ws}" if sep else self.ws
        return f"{item} ({between} {item})*"

    def names_pattern(self) -> str:
        """A regular expression (ECMAScript) matching any declared tool name."""
        return "(?:" + "|".join(_REGEX_SPECIAL.sub(r"\\\g<0>", t.name) for t in self.tools) + ")"

    def grammar(
        self, root: str, *, triggers: Sequence[Trigger] = (), preserved: Sequence[str] = ()
    ) -> Grammar:
        """The grammar of ``root``: lazy when ``triggers`` are given."""
        return Grammar(
            self.rules.gbnf(root),
            lazy=bool(triggers),
            triggers=tuple(triggers),
            preserved=tuple(preserved),
        )


def _class_char(c: str) -> str:
    """``c`` inside a GBNF character class (llama.cpp reads ``\\]``, ``\\\\``, ``\\x..``)."""
    return f"\\x{ord(c):02X}" if c in "]\\^-[" or ord(c) < 0x20 else c


def thought_first(
    grammar: Grammar, open_tag: str, close_tag: str, *, opened: bool = False
) -> Grammar:
    """``grammar`` (a whole-reply one: a required call, an answer in words) with an optional
    thought before it, for a model that thinks first: ``open_tag`` … ``close_tag`` and the
    blank lines after it. ``opened``: the prompt already opened the thought, so the reply
    starts inside it and must close it. A lazy grammar is returned as it is: it only starts
    at its trigger, whatever came before.

    The thought may hold any text except the close tag's first three characters (``</t``,
    ``[/T``: the grammar cannot say "anything but the close tag" in one rule); the close
    tag matches by text, so it is ``preserved`` for engines that see it as one token.
    """
    if grammar.lazy:
        return grammar
    lines = grammar.gbnf.splitlines()
    if not lines or not lines[0].startswith("root ::= "):
        raise ValueError("thought_first needs a grammar whose first rule is root")
    if len(close_tag) < 3 or len(set(close_tag[:3])) < 3:
        # A repeated character among the three would make the exclusion below unsound.
        raise ValueError(f"thought_first needs a close tag like '</think>', got {close_tag!r}")
    c0, c1, c2 = (_class_char(c) for c in close_tag[:3])
    first, second = literal(close_tag[0]), literal(close_tag[1])
    # A run of the first character is taken whole ("<<" then "/" is still a close tag's
    # start), so the thought can never hold the close tag.
    body = f"( [^{c0}] | {first}+ [^{c0}{c1}] | {first}+ {second} [^{c2}] )*"
    thought = f"{body} {literal(close_tag)} [\\n]*"
    head = thought if opened else f"( {literal(open_tag)} {thought} )?"
    rules = [
        f"root ::= {head} answer-after-thought",
        "answer-after-thought ::= " + lines[0][len("root ::= ") :],
        *lines[1:],
    ]
    return Grammar(
        "\n".join(rules) + "\n",
        lazy=False,
        triggers=grammar.triggers,
        preserved=(*grammar.preserved, open_tag, close_tag),
    )
