"""DeepSeek V3.2 and V4: DSML calls, the tools in the system prompt (on :mod:`.deepseek`'s
shared half: tokens, validation, the thinking switch and the reasoning wrapper)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ValidationError
from ..grammar import Grammar, ToolLike
from ..markup import THINK, THINK_END
from ..messages import Conversation, Message, Tool, ToolCall
from ..segments import BlockBuilder
from ..validation import MessageRule
from .base import RESULT_ROLES, StreamParser, is_result, last_of
from .deepseek import (
    ASSISTANT,
    DEEPSEEK_TURNS,
    USER,
    DeepSeekBase,
    system_prompt_of,
)
from .fingerprint import Fingerprint
from .parsers.deepseek import BOS, DSML, EOS
from .parsers.dsml import DSMLCallsParser, dsml_call_grammar

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


def _argument_names(dialect: str, messages: Sequence[Message]) -> None:
    """A DSML call writes each argument name in a ``parameter name="…"`` attribute."""
    for index, message in enumerate(messages):
        for call in message.tool_calls or ():
            for key in call.arguments_dict():
                if '"' in key or "<" in key:
                    raise ValidationError(
                        f"argument name {key!r} holds a quote or '<', which break the call's "
                        "parameter tag",
                        index=index,
                        rule="tool-call-arguments",
                    )


class DeepSeekV32(DeepSeekBase):
    """DeepSeek V3.2: text-exact with its published chat template.

    Tools are listed in the system prompt; calls are a ``<｜DSML｜function_calls>`` block after
    the content. History keeps reasoning only in thinking mode and only for the replies after
    the last user message (a tool loop in progress); others render an empty thought
    (``</think>``). Results follow the calls in one ``<function_results>`` block, and the reply
    after them continues the turn after a blank line.
    """

    name = "deepseek-v3.2"
    fingerprint = Fingerprint(
        "DeepSeek V3.2 (DSML function calls, <function_results>)",
        requires=(*DEEPSEEK_TURNS, "｜DSML｜", "<function_results>"),
        precedence=200,
    )
    rules: tuple[MessageRule, ...] = (*DeepSeekBase.rules, _argument_names)
    controls = (*DeepSeekBase.controls, DSML)
    block_name = "function_calls"
    _tools_head = _V32_TOOLS
    _tools_end = _V32_TOOLS_END

    def _inline(self) -> tuple[str, ...]:
        return (DSML, THINK, THINK_END)

    def _builder(self) -> BlockBuilder:
        return BlockBuilder(inline_controls=self._inline())

    def _open(self, b: BlockBuilder, conversation: Conversation) -> None:
        """The first block: ``<｜begin▁of▁sentence｜>`` and the system prompt, tools included."""
        b.control(BOS)
        self._system(b, conversation)
        b.block([i for i, m in enumerate(conversation.messages) if m.role == "system"])

    def _system(self, b: BlockBuilder, conversation: Conversation) -> None:
        system = system_prompt_of(conversation.messages)
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

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs = conversation.messages
        self._open(b, conversation)
        last_user = last_of(msgs, "user")
        pending = ""  # what the next reply opens with: "user" (a new turn), "results", ""
        for i, j in self._turns(msgs):
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
            elif is_result(m):
                b.text("\n\n<function_results>")
                for r in msgs[i:j]:
                    b.text(f"\n<result>{r.text}</result>")
                b.text("\n</function_results>")
                # The blank line that opens the next reply, in this text run as the template's
                # string has it (a separate run would tokenize differently).
                if (j < len(msgs) and msgs[j].role == "assistant") or (
                    j == len(msgs) and add_generation_prompt
                ):
                    b.text("\n\n")
                pending = "results"
            else:
                continue
            b.block(range(i, j))
        if add_generation_prompt and pending:
            if pending == "user":
                b.control(ASSISTANT)
            self._think(b)
            if not self.thinking:
                self._think_end(b)
            b.block()

    def _answer_parser(self, id_factory: Callable[[], str] | None) -> StreamParser:
        return DSMLCallsParser(
            id_factory=id_factory, stop_controls=self.stop_controls, block=self.block_name
        )

    def _calls_grammar(self, tools: Sequence[ToolLike], *, required: bool, single: bool) -> Grammar:
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
    fingerprint = Fingerprint(
        "DeepSeek V4 (DSML tool calls, <tool_result> results)",
        requires=(*DEEPSEEK_TURNS, "｜DSML｜", "<tool_result>"),
        precedence=210,
    )
    block_name = "tool_calls"
    _tools_head = _V4_TOOLS
    _tools_end = _V4_TOOLS_END

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs = conversation.messages
        self._open(b, conversation)
        last_input = last_of(msgs, "user", *RESULT_ROLES)
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
                b.block((i,))
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
                    b.text(f"<tool_result>{r.text}</tool_result>" if is_result(r) else r.text)
                j += 1
            b.block(range(i, j))
            i = j
        if add_generation_prompt:
            b.control(ASSISTANT)
            if self.thinking:
                self._think(b)
            else:
                self._think_end(b)
            b.block()


__all__ = ["DeepSeekV4", "DeepSeekV32"]
