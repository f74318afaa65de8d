"""ChatML (``<|im_start|>role\\n…<|im_end|>``) and its Qwen2.5 preset.

Tool calls follow the Hermes / Qwen2.5 convention: ``<tool_call>\\n{"name": …, "arguments": …}
\\n</tool_call>`` after the assistant's text. :class:`Qwen25` reproduces the official Qwen2.5 chat
template byte for byte (default system prompt, ``# Tools`` section, tool results merged into one
``user`` turn of ``<tool_response>`` blocks).

The stream parser accepts the three shapes small Qwen models actually write: tagged calls, a bare
``{"name": …, "arguments": …}`` object, and the same object in a ```` ```json ```` fence.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence

from ..grammar import CallRules, Grammar, ToolLike, Trigger
from ..grammar.gbnf import WS_PATTERN, literal
from ..markup import TOOL_CALL as TOOL_CALL
from ..markup import TOOL_CALL_END as TOOL_CALL_END
from ..markup import TOOL_RESPONSE, TOOL_RESPONSE_END, escape_lone_surrogates
from ..messages import Conversation, Message, Tool
from ..segments import Block, BlockBuilder, Control, Segment, Text
from ..validation import JSON_CALL_NAMES, MessageRule, NeedsContent, NoMetadata
from .base import RESULT_ROLES, Dialect, StreamParser
from .fingerprint import CHATML_MARKUP, HERMES_MARKUP, Fingerprint
from .parsers.hermes import HermesParser

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"

QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
#: The tool section of Qwen's templates (Qwen2.5, QwQ, Qwen3), before the tool list.
QWEN_TOOLS_HEAD = "# Tools\n\nYou may call one or more functions to assist with the user query."
_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
#: The end of the Hermes tools section, with its call example (shared by the Qwen templates).
HERMES_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
_START = Control(IM_START)
_END = Control(IM_END)
_NEWLINE = Text("\n")


def arguments_json(arguments: str) -> str:
    """The template's ``tool_call.arguments | tojson`` for arguments given as an object."""
    text = json.dumps(json.loads(arguments), ensure_ascii=False)
    # A lone surrogate (from a "\ud800" escape) is not text a tokenizer can take: keep it escaped.
    return escape_lone_surrogates(text)


def render_hermes_call(b: BlockBuilder, name: str, arguments: str, raw: str | None) -> None:
    """One call as Hermes-style templates write it: ``<tool_call>`` (a control token where the
    vocabulary has it), the JSON object on a line of its own, ``</tool_call>``; a call with
    ``raw`` text re-renders to the tokens the model produced."""
    if raw is not None:
        b.tagged(raw)
        return
    b.control(TOOL_CALL, required=False)
    b.text(f'\n{{"name": "{name}", "arguments": {arguments_json(arguments)}}}\n')
    b.control(TOOL_CALL_END, required=False)


def hermes_call_prefix(name: str | None) -> tuple[Segment, ...]:
    """The opening of a Hermes-style call, up to its arguments when the tool is named: what
    forces a call after the generation prompt."""
    if name is None:
        return (Control(TOOL_CALL, False), Text("\n"))
    opening = '\n{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '
    return (Control(TOOL_CALL, False), Text(opening))


def render_tool_responses(
    b: BlockBuilder, texts: Iterable[str], *, trailing_newline: bool = False
) -> None:
    """Tool results as Hermes-style templates write them in one turn: each on lines of its
    own in ``<tool_response>`` tags (control tokens where the vocabulary has them), separated
    by a newline; ``trailing_newline``: the newline after each block instead of before it."""
    for text in texts:
        if not trailing_newline:
            b.text("\n")
        b.control(TOOL_RESPONSE, required=False)
        b.text("\n" + text + "\n")
        b.control(TOOL_RESPONSE_END, required=False)
        if trailing_newline:
            b.text("\n")


class ChatML(Dialect):
    """Plain ChatML: ``<|im_start|>{role}[ {metadata}]\\n{content}<|im_end|>\\n`` per message.

    Tool results (``tool`` or ``observation``) render as ``tool`` turns; tools, when given, are
    described in the system turn in the Hermes format and calls are written in ``<tool_call>``
    tags (plain text on vocabularies without that token). A message's ``name`` is not rendered;
    put ``name=...`` in ``metadata`` for the original ChatML header.
    """

    name = "chatml"
    fingerprint = Fingerprint(
        "plain ChatML turns (<|im_start|>role … <|im_end|>), with no default system prompt "
        "and, if any, Qwen's Hermes-style tool section",
        requires=("<|im_start|>", "<|im_end|>"),
        tokens=CHATML_MARKUP | HERMES_MARKUP,
        excludes=("<think>", "</think>", "enable_thinking", "reasoning_content", "bos_token"),
        with_tools=(QWEN_TOOLS_HEAD,),
        fixed_system=(QWEN25_DEFAULT_SYSTEM,),
        precedence=120,
    )
    rules: tuple[MessageRule, ...] = (JSON_CALL_NAMES,)
    controls: tuple[str, ...] = (IM_START, IM_END, ENDOFTEXT, TOOL_CALL, TOOL_CALL_END)
    stop_controls = (IM_END, ENDOFTEXT)
    inline_controls: tuple[str, ...] = (TOOL_CALL, TOOL_CALL_END)
    reply_in_words = True
    turns_render_independently = True
    results_together = False  # plain ChatML: each result is a tool turn of its own
    #: System prompt used when the conversation has none (``None``: no system turn then, unless
    #: tools must be described).
    default_system: str | None = None

    # ==== Rendering ====

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs = conversation.messages
        turn = self._turn_writer(msgs)
        for i, j in self._turns(msgs, self._render_system(b, conversation)):
            if msgs[i].role in RESULT_ROLES:
                self._render_results(b, msgs[i:j])
                b.block(range(i, j))
            else:
                turn(b, i)
        if add_generation_prompt:
            b.control(IM_START)
            b.text("assistant\n")
            self._generation_prompt(b)
            b.block()

    def _turn_writer(self, msgs: Sequence[Message]) -> Callable[[BlockBuilder, int], None]:
        """What writes the turn of message ``i`` (tool results aside) for this conversation:
        a family's layout keeps what it needs of the whole conversation (where the history
        rule cuts reasoning) in it."""

        def turn(b: BlockBuilder, i: int) -> None:
            m = msgs[i]
            if m.role == "assistant" and m.tool_calls:
                self._render_calls(b, m)
                b.block((i,))
            else:
                # The common turn, built directly: this is the hot path of a long chat.
                head = f"{m.role} {m.metadata}\n" if m.metadata else m.role + "\n"
                b.blocks.append(Block((_START, Text(head + m.text), _END, _NEWLINE), (i,)))

        return turn

    def _generation_prompt(self, b: BlockBuilder) -> None:
        """What follows ``<|im_start|>assistant\n`` in the generation prompt (nothing here;
        a reasoning family's empty thought)."""

    def _render_system(self, b: BlockBuilder, conversation: Conversation) -> int:
        """The system turn (with the tools, when there are any); returns the index of the first
        message left to render."""
        msgs = conversation.messages
        first_system = bool(msgs) and msgs[0].role == "system"
        if not (first_system or conversation.tools or self.default_system is not None):
            return 0
        system = msgs[0].text if first_system else self.default_system
        b.control(IM_START)
        meta = msgs[0].metadata if first_system else None
        b.text(self._header("system", meta) + "\n")
        if conversation.tools:
            b.text(system + "\n\n" if system is not None else "")
            # Tool definitions are caller text: only the template's own tags are controls.
            b.text(self._tools_section(conversation.tools))
            b.tagged(HERMES_TOOLS_TAIL)
        else:
            b.text(system or "")
        b.control(IM_END)
        b.text("\n")
        b.block((0,) if first_system else ())
        return 1 if first_system else 0

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """The opening of a tagged call, up to the arguments when the tool is named."""
        return hermes_call_prefix(name)

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """Tagged calls; when lazy, also the bare and fenced JSON forms small Qwen models
        write (switched on by ``<tool_call>``, a reply starting ``{"name":``, or a
        ```` ```json ```` fence holding one)."""
        return hermes_call_grammar(
            tools, TOOL_CALL, TOOL_CALL_END, required=required, single=single
        )

    def _header(self, role: str, metadata: str | None) -> str:
        return f"{role} {metadata}" if metadata else role

    def _tools_section(self, tools: Sequence[Tool]) -> str:
        """The ``# Tools`` head and one JSON line per tool (the tail with its tags is apart)."""
        return _TOOLS_HEAD + "".join("\n" + t.json_text for t in tools)

    def _render_calls(self, b: BlockBuilder, m: Message) -> None:
        b.control(IM_START)
        b.text(self._header("assistant", m.metadata))
        if m.content:
            b.text("\n" + m.content)
        for call in m.tool_calls or ():
            b.text("\n")
            render_hermes_call(b, call.name, call.arguments, call.raw)
        b.control(IM_END)
        b.text("\n")

    def _render_results(self, b: BlockBuilder, results: Sequence[Message]) -> None:
        (m,) = results  # a turn each (results_together is off)
        b.control(IM_START)
        b.text(self._header("tool", m.metadata) + "\n" + m.text)
        b.control(IM_END)
        b.text("\n")

    # ==== Parsing ====

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """A fresh parser; ``id_factory`` makes tool call ids (deterministic ones in tests)."""
        return HermesParser(id_factory=id_factory, stop_controls=self.stop_controls)


class Qwen25(ChatML):
    """The Qwen2.5 preset: byte-exact with the official Qwen2.5 chat template."""

    name = "qwen2.5"
    fingerprint = Fingerprint(
        "the Qwen2.5 instruct template (ChatML, Hermes <tool_call> calls, Qwen's default "
        "system prompt); preferred to chatml, which renders the same turns without that "
        "default system prompt",
        requires=("<|im_start|>", QWEN25_DEFAULT_SYSTEM),
        tokens=CHATML_MARKUP | HERMES_MARKUP,
        excludes=("<think>", "</think>", "enable_thinking", "reasoning_content", "bos_token"),
        with_tools=(QWEN_TOOLS_HEAD,),
        fixed_system=(QWEN25_DEFAULT_SYSTEM,),
        architectures=("qwen2",),
        precedence=130,
    )
    rules: tuple[MessageRule, ...] = (
        JSON_CALL_NAMES,
        NeedsContent(calls_only=True),
        NoMetadata(hint=" (or render with dialect 'chatml')"),
    )
    default_system = QWEN25_DEFAULT_SYSTEM

    def _header(self, role: str, metadata: str | None) -> str:
        return role  # the template writes no metadata

    results_together = True

    def _render_results(self, b: BlockBuilder, results: Sequence[Message]) -> None:
        # Consecutive results share one user turn, one <tool_response> block each.
        b.control(IM_START)
        b.text("user")
        for m in results:
            b.text("\n<tool_response>\n" + m.text + "\n</tool_response>")
        b.control(IM_END)
        b.text("\n")


# A reply that starts as a JSON call object, or a fenced one anywhere in it.
_BARE_CALL = rf'\s*(\{{{WS_PATTERN}"name"{WS_PATTERN}:)[\s\S]*'
_FENCED_CALL = rf'(```(?:json)?{WS_PATTERN}\{{{WS_PATTERN}"name"{WS_PATTERN}:)'


def hermes_call_grammar(
    tools: Sequence[ToolLike], open_tag: str, close_tag: str, *, required: bool, single: bool
) -> Grammar:
    """Calls in ``open_tag`` … ``close_tag``; when lazy, also bare and fenced JSON calls."""
    c = CallRules(tools)
    call, ws = c.call_object(undeclared=not required), c.ws
    tagged = c.rules.add(
        "tagged-call", f"{literal(open_tag)} {ws} {call} {ws} {literal(close_tag)}"
    )
    calls = c.many(tagged, single=single)
    if required:
        return c.grammar(calls, preserved=(open_tag, close_tag))
    fenced = c.rules.add("fenced-call", f'"```" "json"? {ws} {call} {ws} "```"')
    triggers = (
        Trigger("word", open_tag),
        Trigger("pattern_full", _BARE_CALL),
        Trigger("pattern", _FENCED_CALL),
    )
    return c.grammar(
        f"{calls} | {call} | {fenced}", triggers=triggers, preserved=(open_tag, close_tag)
    )
