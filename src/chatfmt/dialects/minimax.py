"""MiniMax-M2: interleaved thinking kept in history, calls as ``<invoke>`` XML in a block.

:class:`MiniMaxM2` reproduces the published MiniMax-M2 chat template byte for byte (no MiniMax
vocabulary is available offline, so text only). Each turn is ``]~b]{role}\\n{content}[e~[\\n``
after ``]~!b[``; the system turn always comes first (a default text when the conversation has
none) and describes the tools as one ``<tool>`` JSON object each. The model always thinks: the
generation prompt opens ``<think>``. Its history rule keeps the thought of every assistant turn
after the last user message (the tool loop in progress: interleaved thinking), and drops it
from earlier turns.

Calls are written as the template writes them (``parsers/minimax.render_invoke``: strings as
they are, other values as JSON) and read back typed by the tools' schemas: :meth:`with_tools`
gives a dialect whose parser knows a request's tools.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import SchemaError
from ..grammar import CallRules, Grammar, ToolLike, Trigger, thought_first
from ..grammar.gbnf import literal
from ..grammar.schema import SchemaConverter
from ..markup import THINK, THINK_END
from ..messages import Conversation, Message
from ..segments import Block, BlockBuilder, Segment
from ..validation import CallNames, MessageRule, NoMetadata, SystemOnlyFirst
from .base import Dialect, StreamParser
from .fingerprint import Fingerprint
from .parsers.minimax import (
    BLOCK,
    BLOCK_END,
    INVOKE,
    INVOKE_END,
    NAME_END,
    PARAMETER,
    PARAMETER_END,
    MiniMaxCallParser,
    render_invoke,
)
from .parsers.think import ThinkParser
from .parsers.values import Schemas, schema_types, tool_schemas

BEGIN = "]~!b["
ROLE = "]~b]"
END = "[e~["
_TAGS = (THINK, THINK_END, BLOCK, BLOCK_END)

MINIMAX_DEFAULT_SYSTEM = "You are a helpful assistant."
_TOOLS_HEAD = (
    "\n\n# Tools\nYou may call one or more tools to assist with the user query.\nHere are the "
    "tools available in JSONSchema format:\n\n<tools>\n"
)
_TOOLS_TAIL = (
    "</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass parameters:\n"
    '\n<minimax:tool_call>\n<invoke name="tool-name-1">\n<parameter name="param-key-1">'
    'param-value-1</parameter>\n<parameter name="param-key-2">param-value-2</parameter>\n'
    "...\n</invoke>\n</minimax:tool_call>"
)


def _bad_name(name: str) -> bool:
    """Whether a tool or parameter name would break its ``name="…"`` attribute."""
    return not name or any(c in name for c in '"<>\n')


class MiniMaxM2(Dialect):
    """MiniMax-M2: byte-exact with its published chat template (text); always thinks."""

    name = "minimax-m2"
    fingerprint = Fingerprint(
        "MiniMax-M2 (]~!b[ … ]~b] turns, <minimax:tool_call> XML calls, interleaved <think>)",
        requires=("]~!b[", "]~b]", "<minimax:tool_call>"),
        precedence=290,
    )
    rules: tuple[MessageRule, ...] = (
        SystemOnlyFirst(),
        NoMetadata(),
        CallNames(_bad_name, "'\"', '<', '>' or a newline", "the call's XML", bad_key=_bad_name),
    )
    controls = (BEGIN, ROLE, END, *_TAGS)
    stop_controls = (END,)
    reasoning = "always"
    thinking = True
    #: The request's tools (name → parameters' ``properties``), set by :meth:`with_tools`.
    tool_schemas: Schemas | None = None

    def with_tools(self, tools: Sequence[ToolLike]) -> MiniMaxM2:
        """This dialect with a request's ``tools``: its parser types each call's values by the
        tool's schema (a string stays a string; other values are read as JSON of their type
        when they parse, as a string when not)."""
        configured = copy.copy(self)
        # The same reading as Qwen3-Coder's (``$ref`` into ``$defs`` resolved).
        configured.tool_schemas = tool_schemas(tools)
        return configured

    # ==== Rendering ====

    def render_blocks(
        self, conversation: Conversation, *, add_generation_prompt: bool = True
    ) -> list[Block]:
        msgs = conversation.messages
        b = BlockBuilder(inline_controls=_TAGS)
        blocks: list[Block] = []
        first_system = bool(msgs) and msgs[0].role == "system"
        b.control(BEGIN)
        b.control(ROLE)
        b.text("system\n" + (msgs[0].text if first_system and msgs[0].text else ""))
        if not (first_system and msgs[0].text):
            b.text(MINIMAX_DEFAULT_SYSTEM)
        if conversation.tools:
            tools = "".join(
                f"<tool>{json.dumps(t.function, ensure_ascii=False)}</tool>\n"
                for t in conversation.tools
            )
            # Tool definitions are caller text: only the template's own tags become controls.
            b.text(_TOOLS_HEAD + tools)
            b.tagged(_TOOLS_TAIL)
        self._end(b)
        blocks.append(b.block((0,) if first_system else ()))
        start = 1 if first_system else 0
        last_user = max((i for i in range(start, len(msgs)) if msgs[i].role == "user"), default=-1)
        i = start
        while i < len(msgs):
            m = msgs[i]
            if m.role in ("tool", "observation"):
                i = self._render_results(b, msgs, i, blocks)
                continue
            if m.role == "assistant":
                self._render_assistant(b, m, keep=i > last_user)
            elif m.role == "user":
                b.control(ROLE)
                b.text("user\n" + m.text)
                self._end(b)
            # A later system message: the template drops it (refused when strict).
            blocks.append(b.block((i,)))
            i += 1
        if add_generation_prompt:
            b.control(ROLE)
            b.text("ai\n")
            b.control(THINK, required=False)
            b.text("\n")
            blocks.append(b.block())
        return blocks

    def _end(self, b: BlockBuilder) -> None:
        b.control(END)
        b.text("\n")

    def _render_assistant(self, b: BlockBuilder, m: Message, *, keep: bool) -> None:
        content, reasoning = m.text, m.reasoning
        if reasoning is None and THINK_END in content:
            # The template reads a thought written into the content, as it would print it.
            reasoning = content.split(THINK_END)[0].strip("\n").split(THINK)[-1].strip("\n")
            content = content.split(THINK_END)[-1].strip("\n")
        b.control(ROLE)
        b.text("ai\n")
        if reasoning and keep:  # interleaved thinking: the loop in progress keeps its thoughts
            b.control(THINK, required=False)
            b.text("\n" + reasoning + "\n")
            b.control(THINK_END, required=False)
            b.text("\n\n")
        b.text(content)
        if m.tool_calls:
            b.text("\n")
            b.control(BLOCK, required=False)
            b.text("\n" + "".join(render_invoke(c.name, c.arguments_dict()) for c in m.tool_calls))
            b.control(BLOCK_END, required=False)
        self._end(b)

    def _render_results(
        self, b: BlockBuilder, msgs: Sequence[Message], i: int, blocks: list[Block]
    ) -> int:
        # Consecutive results share one tool turn, one <response> each.
        j = i
        b.control(ROLE)
        b.text("tool")
        while j < len(msgs) and msgs[j].role in ("tool", "observation"):
            b.text("\n<response>" + msgs[j].text + "</response>")
            j += 1
        self._end(b)
        blocks.append(b.block(range(i, j)))
        return j

    # ==== Parsing and grammars ====

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """The thought the prompt opened, then text and ``<invoke>`` calls typed by
        :attr:`tool_schemas`."""
        answer = MiniMaxCallParser(
            id_factory=id_factory, stop_controls=self.stop_controls, schemas=self.tool_schemas
        )
        return ThinkParser(
            answer,
            id_factory=id_factory,
            stop_controls=self.stop_controls,
            open_tag=THINK,
            close_tag=THINK_END,
            started=True,
        )

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """Nothing: the prompt opened a thought, and the call comes after it (the grammar
        says so)."""
        return ()

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """A block of calls of ``tools`` (lazy: from ``<minimax:tool_call>`` on); a required
        one comes after the thought the prompt opened."""
        return self.after_thought(minimax_call_grammar(tools, required=required, single=single))

    def after_thought(self, grammar: Grammar) -> Grammar:
        return thought_first(grammar, THINK, THINK_END, opened=True)


# ==== The call grammar ====

# A string value: any text without "</p" (so it cannot run past its closing tag).
_TEXT_VALUE = '([^<] | "<" [^/] | "</" [^p])*'
_NAME_CHARS = '[^"<>\\n]+'


def minimax_call_grammar(
    tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
) -> Grammar:
    """``<minimax:tool_call>\\n`` then one ``<invoke name="NAME">\\n`` … ``</invoke>\\n`` per
    call (exactly one when ``single``), then ``</minimax:tool_call>``.

    Each declared parameter comes in the schema's order, the required ones always; a string
    value is free text (one of its ``enum`` when it has one); any other single type follows
    its schema as JSON, as the template writes it. A tool without declared parameters takes
    any. Lazy unless ``required``: the grammar starts at ``<minimax:tool_call>``."""
    c = CallRules(tools)
    text = c.rules.add("minimax-text", _TEXT_VALUE)
    param_end = literal(PARAMETER_END + "\n")
    alts = []
    for tool in c.tools:
        params = tool.function.get("parameters")
        props = params.get("properties") if isinstance(params, Mapping) else None
        needed = params.get("required") if isinstance(params, Mapping) else None
        strict = tool.function.get("strict") is True
        parts = []
        for key, schema in props.items() if isinstance(props, Mapping) else ():
            try:
                value = _value_rule(c, schema, text, strict, f"{tool.name}-{key}")
            except SchemaError as exc:
                raise exc.of(f"function {tool.name!r}") from None
            one = f"{literal(PARAMETER + key + NAME_END)} {value} {param_end}"
            parts.append(one if isinstance(needed, list) and key in needed else f"({one})?")
        if not isinstance(props, Mapping) or not props:
            free = f"{literal(PARAMETER)} {_NAME_CHARS} {literal(NAME_END)} {text} {param_end}"
            parts.append(f"({free})*")
        head = literal(f"{INVOKE}{tool.name}{NAME_END}\n")
        body = " ".join([head, *parts, literal(INVOKE_END + "\n")])
        alts.append(c.rules.add(f"invoke-{tool.name}", body))
    invoke = c.rules.add("invoke", " | ".join(alts))
    invokes = invoke if single else f"{invoke}+"
    block = f"{literal(BLOCK)} {literal(chr(10))} {invokes} {literal(BLOCK_END)}"
    preserved = (BLOCK, BLOCK_END)
    if required:
        return c.grammar(block, preserved=preserved)
    return c.grammar(block, triggers=(Trigger("word", BLOCK),), preserved=preserved)


def _value_rule(c: CallRules, schema: Any, text: str, strict: bool, hint: str) -> str:
    enum = schema.get("enum") if isinstance(schema, Mapping) else None
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        # A string enum is written bare, as the template writes a string value.
        return c.rules.add(f"{hint}-enum", " | ".join(literal(v) for v in enum))
    types = schema_types(schema)
    if types is None or "string" in types or len(types) != 1:
        return text
    # Any other value is written as JSON (the template's tojson): its schema's JSON.
    return SchemaConverter(c.rules, schema, strict=strict).value(schema, hint)


__all__ = ["MINIMAX_DEFAULT_SYSTEM", "MiniMaxM2", "minimax_call_grammar"]
