"""MiniMax-M2: interleaved thinking kept in history, calls as ``<invoke>`` XML in a block.

:class:`MiniMaxM2` reproduces the published MiniMax-M2 chat template byte for byte (no MiniMax
vocabulary is available offline, so text only). Each turn is ``]~b]{role}\\n{content}[e~[\\n``
after ``]~!b[``; the system turn always comes first (a default text when the conversation has
none) and describes the tools as one ``<tool>`` JSON object each. The model always thinks: the
generation prompt opens ``<think>``. Its history rule keeps the thought of every assistant turn
after the last user message (the tool loop in progress: interleaved thinking), and drops it
from earlier turns.

Calls are written as the template writes them (``MINIMAX_XML`` below: strings as
they are, other values as JSON) and read back typed by the tools' schemas: :meth:`with_tools`
gives a dialect whose parser knows a request's tools.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence

from ..grammar import Grammar, ToolLike, thought_first
from ..markup import THINK, THINK_END
from ..messages import Conversation, Message
from ..segments import BlockBuilder, Control, Segment, Text
from ..validation import CallNames, MessageRule, NoMetadata, SystemOnlyFirst
from .base import RESULT_ROLES, Dialect, StreamParser, last_of
from .fingerprint import Fingerprint
from .parsers.think import ThinkParser
from .parsers.values import Schemas, tool_schemas
from .xmlsyntax import XMLSyntax, XMLSyntaxParser, call_grammar

#: The calls, after the reply's text, in one block::
#:
#:     <minimax:tool_call>
#:     <invoke name="get_weather">
#:     <parameter name="city">Paris</parameter>
#:     </invoke>
#:     </minimax:tool_call>
#:
#: A value is raw text (a string as it is, any other value as JSON), typed by the tool's schema
#: when read back. A call is complete at ``</invoke>``; a block holds several calls, so a call
#: keeps no raw text of its own.
MINIMAX_XML = XMLSyntax(
    block="<minimax:tool_call>\n{calls}</minimax:tool_call>",
    call='<invoke name="{name}">\n{arguments}</invoke>\n',
    argument='<parameter name="{key}">{value}</parameter>\n',
    controls=("<minimax:tool_call>", "</minimax:tool_call>"),
    scalars="json",
    rule="minimax",
)

BEGIN = "]~!b["
ROLE = "]~b]"
END = "[e~["
BLOCK, BLOCK_END = MINIMAX_XML.controls
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
    inline_controls: tuple[str, ...] = _TAGS
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

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs = conversation.messages
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
        b.block((0,) if first_system else ())
        last_user = last_of(msgs, "user")
        for i, j in self._turns(msgs, 1 if first_system else 0):
            m = msgs[i]
            if m.role in RESULT_ROLES:
                self._render_results(b, msgs[i:j])
            elif m.role == "assistant":
                self._render_assistant(b, m, keep=i > last_user)
            elif m.role == "user":
                b.control(ROLE)
                b.text("user\n" + m.text)
                self._end(b)
            # A later system message: the template drops it (refused when strict).
            b.block(range(i, j))
        if add_generation_prompt:
            b.control(ROLE)
            b.text("ai\n")
            b.control(THINK, required=False)
            b.text("\n")
            b.block()

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
            MINIMAX_XML.write(b, [(c.name, c.arguments_dict()) for c in m.tool_calls])
        self._end(b)

    def _render_results(self, b: BlockBuilder, results: Sequence[Message]) -> None:
        # Consecutive results share one tool turn, one <response> each.
        b.control(ROLE)
        b.text("tool")
        for m in results:
            b.text("\n<response>" + m.text + "</response>")
        self._end(b)

    # ==== Parsing and grammars ====

    def close_thought(self) -> tuple[Segment, ...] | None:
        """``\\n</think>\\n\\n``, as the history writes a kept thought's end."""
        return (Text("\n"), Control(THINK_END, required=False), Text("\n\n"))

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """The thought the prompt opened, then text and ``<invoke>`` calls typed by
        :attr:`tool_schemas`."""
        answer = XMLSyntaxParser(
            MINIMAX_XML,
            id_factory=id_factory,
            stop_controls=self.stop_controls,
            schemas=self.tool_schemas,
        )
        return ThinkParser.after_prompt_of(self, answer, id_factory, started=True)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """Nothing: the prompt opened a thought, and the call comes after it (the grammar
        says so)."""
        return ()

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """A block of calls of ``tools`` (lazy: from ``<minimax:tool_call>`` on); a required
        one comes after the thought the prompt opened."""
        grammar = call_grammar(MINIMAX_XML, tools, required=required, single=single)
        return self.after_thought(grammar)

    def after_thought(self, grammar: Grammar) -> Grammar:
        return thought_first(grammar, THINK, THINK_END, opened=True)


__all__ = ["MINIMAX_DEFAULT_SYSTEM", "MiniMaxM2"]
