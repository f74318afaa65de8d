"""DeepSeek R1, V3.1, V3.2 and V4: ``<｜User｜>`` / ``<｜Assistant｜>`` turns, ``<think>``
reasoning, and two call syntaxes.

- :class:`DeepSeekR1` and :class:`DeepSeekV31` write calls between special tokens
  (``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>…<｜tool▁sep｜>…<｜tool▁call▁end｜>…``); R1 fences
  the arguments in a JSON code block after a ``function`` type, V3.1 writes the bare object.
- :class:`DeepSeekV32` and :class:`DeepSeekV4` write DSML blocks (``<｜DSML｜invoke name="…">``
  with one ``<｜DSML｜parameter>`` per argument) and describe the tools in the system prompt.

Every role and call token is a :class:`~chatfmt.segments.Control` written by the renderer; text
in messages is only ever text. ``docs/formats/deepseek.md`` names each family's reference
template and where chatfmt differs from it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ValidationError
from ..grammar import Grammar, ToolLike, thought_first
from ..messages import Conversation, Message, Tool, ToolCall
from ..segments import Block, BlockBuilder, Control, Segment, Text
from ..validation import check_common
from .base import Dialect, ReasoningMode, StreamParser
from .chatml import BAD_CALL_NAME, arguments_json
from .parsers.deepseek import (
    BOS,
    CALL_BEGIN,
    CALL_END,
    CALLS_BEGIN,
    CALLS_END,
    DSML,
    EOS,
    SEP,
    DSMLCallsParser,
    SpecialCallsParser,
    dsml_call_grammar,
    special_call_grammar,
)
from .parsers.think import ThinkParser

USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
OUTPUTS_BEGIN = "<｜tool▁outputs▁begin｜>"
OUTPUTS_END = "<｜tool▁outputs▁end｜>"
OUTPUT_BEGIN = "<｜tool▁output▁begin｜>"
OUTPUT_END = "<｜tool▁output▁end｜>"
THINK = "<think>"
THINK_END = "</think>"
_CALL_TOKENS = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
_OUTPUT_TOKENS = (OUTPUTS_BEGIN, OUTPUTS_END, OUTPUT_BEGIN, OUTPUT_END)


def _system_prompt(messages: Sequence[Message]) -> str:
    """Every system message's text, in order, joined by a blank line (V3.1 and later)."""
    return "\n\n".join(m.text for m in messages if m.role == "system")


def _answer(content: str, *, split_once: bool) -> str:
    """What the templates keep of an answer's content in history: the text after a
    ``</think>`` written into it (the first one for V3.1, the last one for R1)."""
    if THINK_END not in content:
        return content
    return content.split(THINK_END, 1)[1] if split_once else content.split(THINK_END)[-1]


def _is_result(m: Message) -> bool:
    return m.role in ("tool", "observation")


class _DeepSeek(Dialect):
    """What the four families share: tokens, validation, the reasoning wrapper."""

    controls: tuple[str, ...] = (
        BOS, EOS, USER, ASSISTANT, THINK, THINK_END, *_CALL_TOKENS, *_OUTPUT_TOKENS,
    )  # fmt: skip
    stop_controls = (EOS,)
    reasoning: ReasoningMode = "switch"
    thinking = False  # the templates' default: thinking is asked for per request

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        check_common(conversation, strict=strict)
        if not strict:
            return
        for i, m in enumerate(conversation.messages):
            if m.metadata:
                raise ValidationError(
                    f"the {self.name} format has no header metadata and would drop it; remove "
                    "'metadata'",
                    index=i,
                    rule="metadata",
                )
            for call in m.tool_calls or ():
                if not call.name or BAD_CALL_NAME.search(call.name) or "<" in call.name:
                    raise ValidationError(
                        f"tool call name {call.name!r} is empty or holds quotes, '<', "
                        "backslashes or control characters, which break the call's syntax; use "
                        "a plain identifier such as 'get_weather'",
                        index=i,
                        rule="tool-call-name",
                    )
                self._check_call(i, call)

    def _check_call(self, index: int, call: ToolCall) -> None:
        """Family rules for one call (strict mode)."""

    def _builder(self) -> BlockBuilder:
        return BlockBuilder()

    def _think(self, b: BlockBuilder) -> None:
        b.control(THINK, required=False)

    def _think_end(self, b: BlockBuilder) -> None:
        b.control(THINK_END, required=False)

    # ==== Grammars ====

    def _calls_grammar(
        self, tools: Sequence[ToolLike], *, required: bool, single: bool
    ) -> Grammar:
        """The family's call syntax (see the subclasses)."""
        raise NotImplementedError

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """The family's calls; a required one may follow the thought when thinking is on
        (the prompt opened it: the reply closes it first)."""
        return self.after_thought(self._calls_grammar(tools, required=required, single=single))

    def after_thought(self, grammar: Grammar) -> Grammar:
        if not self.thinking:
            return grammar
        return thought_first(grammar, THINK, THINK_END, opened=self.prompt_opens_thought)

    # ==== Parsing ====

    #: Whether the generation prompt opens the thought when thinking is on.
    prompt_opens_thought = True

    def _answer_parser(self, id_factory: Callable[[], str] | None) -> StreamParser:
        raise NotImplementedError

    def for_reply_to(self, conversation: Conversation) -> _DeepSeek:
        """After tool results R1 and V3.1 write no generation prompt, so no thought is open:
        the reply to such a conversation is parsed from its start, not inside a thought."""
        if not (self.thinking and self.prompt_opens_thought):
            return self
        self.validate(conversation)
        blocks = self.render_blocks(conversation)
        if blocks and blocks[-1].text.rstrip("\n").endswith(THINK):
            return self
        configured = copy.copy(self)
        configured.prompt_opens_thought = False
        return configured

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """Reasoning in ``<think>`` (the reply starts inside it when the prompt opened it),
        then text and calls in the family's syntax."""
        return ThinkParser(
            self._answer_parser(id_factory),
            id_factory=id_factory,
            stop_controls=self.stop_controls,
            open_tag=THINK,
            close_tag=THINK_END,
            started=self.thinking and self.prompt_opens_thought,
        )


# ==== R1 and V3.1: calls between special tokens ====


class DeepSeekV31(_DeepSeek):
    """DeepSeek V3.1 (hybrid thinking): text-exact with its published chat template.

    History drops every earlier turn's reasoning (``<think></think>``); a reply that follows
    tool results continues the turn without a new ``<｜Assistant｜>``. Thinking is off unless a
    request turns it on (the template's default); on, the generation prompt opens the thought.
    """

    name = "deepseek-v3.1"
    #: R1 writes ``function<｜tool▁sep｜>name`` and fences the arguments; V3.1 does neither.
    fenced = False

    def render_blocks(
        self, conversation: Conversation, *, add_generation_prompt: bool = True
    ) -> list[Block]:
        msgs = conversation.messages
        b = self._builder()
        blocks: list[Block] = []
        b.control(BOS)
        b.text(self._system(conversation))
        blocks.append(b.block([i for i, m in enumerate(msgs) if m.role == "system"]))
        last_user = False  # the template's ns.is_last_user: a user spoke since the last reply
        after_results = False
        n = len(msgs)
        i = 0
        while i < n:
            m = msgs[i]
            if m.role == "user":
                b.control(USER)
                b.text(m.text)
                last_user, after_results = True, False
            elif m.role == "assistant":
                self._render_assistant(b, m, opens=last_user, after_results=after_results)
                last_user = after_results = False
            elif _is_result(m):
                j = i
                while j < n and _is_result(msgs[j]):
                    j += 1
                self._render_results(b, msgs[i:j])
                blocks.append(b.block(range(i, j)))
                last_user, after_results = False, True
                i = j
                continue
            else:  # system: already rendered at the top
                i += 1
                continue
            blocks.append(b.block((i,)))
            i += 1
        if add_generation_prompt and self._prompts_after(msgs, last_user, after_results):
            b.control(ASSISTANT)
            self._generation_prompt(b)
            blocks.append(b.block())
        return blocks

    def _system(self, conversation: Conversation) -> str:
        return _system_prompt(conversation.messages)

    def _prompts_after(self, msgs: Sequence[Message], last_user: bool, results: bool) -> bool:
        """Whether the template writes a generation prompt here (V3.1: only after a user; after
        results the reply continues the turn)."""
        return last_user

    def _generation_prompt(self, b: BlockBuilder) -> None:
        self._think(b)
        if not self.thinking:
            self._think_end(b)

    def _render_assistant(
        self, b: BlockBuilder, m: Message, *, opens: bool, after_results: bool
    ) -> None:
        if opens:
            b.control(ASSISTANT)
            self._think(b)
            self._think_end(b)
        content = m.text
        if not m.tool_calls:
            b.text(content if after_results else _answer(content, split_once=True))
        else:
            b.text(content)
            self._render_calls(b, m.tool_calls)
        b.control(EOS)

    def _render_calls(self, b: BlockBuilder, calls: Sequence[ToolCall]) -> None:
        b.control(CALLS_BEGIN)
        for k, call in enumerate(calls):
            if k and self.fenced:
                b.text("\n")
            b.control(CALL_BEGIN)
            if self.fenced:
                b.text("function")
                b.control(SEP)
                b.text(f"{call.name}\n```json\n{arguments_json(call.arguments)}\n```")
            else:
                b.text(call.name)
                b.control(SEP)
                b.text(arguments_json(call.arguments))
            b.control(CALL_END)
        b.control(CALLS_END)

    def _render_results(self, b: BlockBuilder, results: Sequence[Message]) -> None:
        for m in results:
            b.control(OUTPUT_BEGIN)
            b.text(m.text)
            b.control(OUTPUT_END)

    def _answer_parser(self, id_factory: Callable[[], str] | None) -> StreamParser:
        return SpecialCallsParser(
            id_factory=id_factory, stop_controls=self.stop_controls, fenced=self.fenced
        )

    def _calls_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """``<｜tool▁calls▁begin｜>``, one call or more of a declared tool,
        ``<｜tool▁calls▁end｜>``; when lazy, switched on by ``<｜tool▁calls▁begin｜>``."""
        return special_call_grammar(tools, fenced=self.fenced, required=required, single=single)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>``, and the name and ``<｜tool▁sep｜>`` when
        the call is named (R1: its ``function`` type first, the fence after)."""
        head: tuple[Segment, ...] = (Control(CALLS_BEGIN), Control(CALL_BEGIN))
        if self.thinking and self.prompt_opens_thought:
            # The prompt opened a thought: close it, or the call would be read as reasoning.
            head = (Control(THINK_END, required=False), *head)
        if name is None:
            return head
        if self.fenced:
            return (*head, Text("function"), Control(SEP), Text(f"{name}\n```json\n"))
        return (*head, Text(name), Control(SEP))


class DeepSeekR1(DeepSeekV31):
    """DeepSeek R1: always thinks; the generation prompt opens the thought (``<think>\\n``).

    Text-exact with the chat template R1's distilled models ship (R1's own layout), within
    that template's well-formed domain (see the format page). History keeps no reasoning: an
    answer keeps what follows the last ``</think>`` of its content. Tool results are wrapped in
    ``<｜tool▁outputs▁begin｜>`` … ``<｜tool▁outputs▁end｜>``, and the reply after them continues
    the turn without a new ``<｜Assistant｜>``.
    """

    name = "deepseek-r1"
    fenced = True
    reasoning = "always"
    thinking = True

    def _system(self, conversation: Conversation) -> str:
        return _system_prompt(conversation.messages)

    def _prompts_after(self, msgs: Sequence[Message], last_user: bool, results: bool) -> bool:
        return not results  # the results close with <｜tool▁outputs▁end｜>; the reply follows

    def _generation_prompt(self, b: BlockBuilder) -> None:
        self._think(b)
        b.text("\n")

    def _render_assistant(
        self, b: BlockBuilder, m: Message, *, opens: bool, after_results: bool
    ) -> None:
        if not after_results:
            b.control(ASSISTANT)
        content = m.text
        if m.tool_calls:
            b.text(content)
            self._render_calls(b, m.tool_calls)
        else:
            b.text(_answer(content, split_once=False))
        b.control(EOS)

    def _render_results(self, b: BlockBuilder, results: Sequence[Message]) -> None:
        b.control(OUTPUTS_BEGIN)
        for k, m in enumerate(results):
            if k:
                b.text("\n")
            b.control(OUTPUT_BEGIN)
            b.text(m.text)
            b.control(OUTPUT_END)
        b.control(OUTPUTS_END)


# ==== V3.2 and V4: DSML calls, tools in the system prompt ====

_V32_TOOLS = (
    "## Tools\n\nYou have access to a set of tools you can use to answer the user's question.\n"
    'You can invoke functions by writing a "<{d}function_calls>" block like the following as '
    "part of your reply to the user:\n<{d}function_calls>\n<{d}invoke "
    'name="$FUNCTION_NAME">\n<{d}parameter name="$PARAMETER_NAME" string="true|false">'
    "$PARAMETER_VALUE</{d}parameter>\n...\n</{d}invoke>\n<{d}invoke "
    'name="$FUNCTION_NAME2">\n...\n</{d}invoke>\n</{d}function_calls>\n\nString and scalar '
    "parameters should be specified as is without any escaping or quotes, while lists and "
    'objects should use JSON format. The "string" attribute should be set to "true" for '
    'string type parameters and "false" for other types (numbers, booleans, arrays, objects).'
    "\n\nIf the thinking_mode is enabled, then after function results you should strongly "
    "consider outputting a thinking block. Here is an example:\n\n<{d}function_calls>\n...\n"
    "</{d}function_calls>\n\n<function_results>\n...\n</function_results>\n\n{t}...thinking "
    "about results{te}\n\nHere are the functions available in JSONSchema format:\n<functions>\n"
)
_V32_TOOLS_END = "</functions>\n"
_V4_TOOLS = (
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
    'invoke tools by writing a "<{d}tool_calls>" block like the following:\n\n<{d}tool_calls>'
    '\n<{d}invoke name="$TOOL_NAME">\n<{d}parameter name="$PARAMETER_NAME" '
    'string="true|false">$PARAMETER_VALUE</{d}parameter>\n...\n</{d}invoke>\n<{d}invoke '
    'name="$TOOL_NAME2">\n...\n</{d}invoke>\n</{d}tool_calls>\n\nString parameters should be '
    'specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, '
    'objects), pass the value in JSON format and set `string="false"`.\n\nIf thinking_mode is '
    "enabled (triggered by {t}), you MUST output your complete reasoning inside {t}...{te} "
    "BEFORE any tool calls or final response.\n\nOtherwise, output directly after {te} with "
    "tool calls or final response.\n\n### Available Tool Schemas\n\n"
)
_V4_TOOLS_END = (
    "\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n"
)


def _function(tool: Tool) -> dict[str, Any] | None:
    """The function a tool declares (the template lists ``type: function`` tools only)."""
    d = tool.definition
    if d.get("type") == "function" and isinstance(d.get("function"), dict):
        fn: dict[str, Any] = d["function"]
        return fn
    return d if "type" not in d and "name" in d else None


class DeepSeekV32(_DeepSeek):
    """DeepSeek V3.2: text-exact with its published chat template.

    Tools are listed in the system prompt; calls are a ``<｜DSML｜function_calls>`` block after
    the content. History keeps reasoning only in thinking mode and only for the replies after
    the last user message (a tool loop in progress); others render an empty thought
    (``</think>``). Results follow the calls in one ``<function_results>`` block, and the reply
    after them continues the turn after a blank line.
    """

    name = "deepseek-v3.2"
    controls = (*_DeepSeek.controls, DSML)
    block_name = "function_calls"
    _tools_head = _V32_TOOLS
    _tools_end = _V32_TOOLS_END

    def _check_call(self, index: int, call: ToolCall) -> None:
        for key in call.arguments_dict():
            if '"' in key or "<" in key:
                raise ValidationError(
                    f"argument name {key!r} holds a quote or '<', which break the call's "
                    "parameter tag",
                    index=index,
                    rule="tool-call-arguments",
                )

    def _inline(self) -> tuple[str, ...]:
        return (DSML, THINK, THINK_END)

    def _builder(self) -> BlockBuilder:
        return BlockBuilder(inline_controls=self._inline())

    def _system(self, b: BlockBuilder, conversation: Conversation) -> None:
        system = _system_prompt(conversation.messages)
        b.text(system)
        functions = [fn for t in conversation.tools if (fn := _function(t)) is not None]
        if not conversation.tools:
            return
        if system:
            b.text("\n\n")
        b.tagged(self._tools_head.format(d=DSML, t=THINK, te=THINK_END))
        b.text("".join(json.dumps(fn, ensure_ascii=False) + "\n" for fn in functions))
        b.tagged(self._tools_end.format(d=DSML, t=THINK, te=THINK_END))

    def _thought(self, b: BlockBuilder, m: Message, keep: bool) -> None:
        """The thought before a reply: its reasoning in thinking mode after the last query,
        else an empty one (``</think>`` alone)."""
        if keep and self.thinking:
            self._think(b)
            b.text(m.reasoning or "")
        self._think_end(b)

    def _render_calls(self, b: BlockBuilder, calls: Sequence[ToolCall]) -> None:
        b.text("\n\n<")
        b.control(DSML, required=False)
        b.text(f"{self.block_name}>\n")
        for call in calls:
            b.text("<")
            b.control(DSML, required=False)
            b.text(f'invoke name="{call.name}">\n')
            for key, value in call.arguments_dict().items():
                string = isinstance(value, str)
                b.text("<")
                b.control(DSML, required=False)
                b.text(f'parameter name="{key}" string="{"true" if string else "false"}">')
                b.text(value if string else json.dumps(value, ensure_ascii=False))
                b.text("</")
                b.control(DSML, required=False)
                b.text("parameter>\n")
            b.text("</")
            b.control(DSML, required=False)
            b.text("invoke>\n")
        b.text("</")
        b.control(DSML, required=False)
        b.text(f"{self.block_name}>")

    def render_blocks(
        self, conversation: Conversation, *, add_generation_prompt: bool = True
    ) -> list[Block]:
        msgs = conversation.messages
        b = self._builder()
        blocks: list[Block] = []
        b.control(BOS)
        self._system(b, conversation)
        blocks.append(b.block([i for i, m in enumerate(msgs) if m.role == "system"]))
        last_user = max((i for i, m in enumerate(msgs) if m.role == "user"), default=-1)
        pending = ""  # what the next reply opens with: "user" (a new turn), "results", ""
        n = len(msgs)
        i = 0
        while i < n:
            m = msgs[i]
            if m.role == "user":
                b.control(USER)
                b.text(m.text)
                pending = "user"
            elif m.role == "assistant":
                if pending == "user":
                    b.control(ASSISTANT)
                if pending:
                    self._thought(b, m, keep=i > last_user)
                pending = ""
                b.text(m.text)
                if m.tool_calls:
                    self._render_calls(b, m.tool_calls)
                b.control(EOS)
            elif _is_result(m):
                j = i
                while j < n and _is_result(msgs[j]):
                    j += 1
                b.text("\n\n<function_results>")
                for r in msgs[i:j]:
                    b.text(f"\n<result>{r.text}</result>")
                b.text("\n</function_results>")
                # The blank line that opens the next reply, in this text run as the template's
                # string has it (a separate run would tokenize differently).
                if (j < n and msgs[j].role == "assistant") or (j == n and add_generation_prompt):
                    b.text("\n\n")
                blocks.append(b.block(range(i, j)))
                pending = "results"
                i = j
                continue
            else:
                i += 1
                continue
            blocks.append(b.block((i,)))
            i += 1
        if add_generation_prompt and pending:
            if pending == "user":
                b.control(ASSISTANT)
            self._think(b)
            if not self.thinking:
                self._think_end(b)
            blocks.append(b.block())
        return blocks

    def _answer_parser(self, id_factory: Callable[[], str] | None) -> StreamParser:
        return DSMLCallsParser(
            id_factory=id_factory, stop_controls=self.stop_controls, block=self.block_name
        )

    def _calls_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """A DSML block of one invoke or more of declared tools, each parameter one of the
        tool's properties with a value of its type; when lazy, switched on by the block's
        opening tag."""
        return dsml_call_grammar(tools, block=self.block_name, required=required, single=single)


class DeepSeekV4(DeepSeekV32):
    """DeepSeek V4: text-exact with its published chat template, id-exact with its vocabulary.

    Tool results are user-turn text (``<tool_result>…</tool_result>``), joined by a blank line
    with the user messages around them; every reply opens with ``<｜Assistant｜>``. History
    keeps reasoning only in thinking mode and only after the last user message or result;
    other replies render ``</think>``. Calls are a ``<｜DSML｜tool_calls>`` block.
    """

    name = "deepseek-v4"
    block_name = "tool_calls"
    _tools_head = _V4_TOOLS
    _tools_end = _V4_TOOLS_END

    def render_blocks(
        self, conversation: Conversation, *, add_generation_prompt: bool = True
    ) -> list[Block]:
        msgs = conversation.messages
        b = self._builder()
        blocks: list[Block] = []
        b.control(BOS)
        self._system(b, conversation)
        blocks.append(b.block([i for i, m in enumerate(msgs) if m.role == "system"]))
        last_input = max(
            (i for i, m in enumerate(msgs) if m.role == "user" or _is_result(m)), default=-1
        )
        n = len(msgs)
        i = 0
        while i < n:
            m = msgs[i]
            if m.role == "assistant":
                b.control(ASSISTANT)
                self._thought(b, m, keep=i > last_input)
                b.text(m.text)
                if m.tool_calls:
                    self._render_calls(b, m.tool_calls)
                b.control(EOS)
                blocks.append(b.block((i,)))
                i += 1
                continue
            if m.role == "system":
                i += 1
                continue
            # Users and results in a row are one user turn, one text run.
            j = i
            b.control(USER)
            while j < n and msgs[j].role != "assistant":
                r = msgs[j]
                if r.role != "system":
                    if j > i:
                        b.text("\n\n")
                    b.text(f"<tool_result>{r.text}</tool_result>" if _is_result(r) else r.text)
                j += 1
            blocks.append(b.block(range(i, j)))
            i = j
        if add_generation_prompt:
            b.control(ASSISTANT)
            if self.thinking:
                self._think(b)
            else:
                self._think_end(b)
            blocks.append(b.block())
        return blocks


__all__ = ["DeepSeekR1", "DeepSeekV4", "DeepSeekV31", "DeepSeekV32"]
