"""NVIDIA Nemotron: Nemotron 3 Nano (ChatML, XML calls) and Nemotron Nano v2 (``<SPECIAL_1x>``
role tokens, ``<TOOLCALL>`` JSON lists).

:class:`Nemotron3` reproduces the published Nemotron 3 Nano chat template byte for byte (no
Nemotron vocabulary is available offline: text only). It is ChatML with Qwen3-Coder's XML calls
(``<tool_call>\\n<function=…>``, values typed back by schema through :meth:`with_tools`), tools
described as XML in the system turn (the schema keys it does not name written as elements of
their own), and ``<think>`` reasoning switched per request (``enable_thinking``). Its history
rule (the template's ``truncate_history_thinking``, on by default): an assistant turn before the
last user message shows an empty thought ``<think></think>`` instead of its own; later turns keep
theirs. The system turn is always written, empty when there is no system prompt or tools.

:class:`NemotronNano2` is the earlier format (see its docstring).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Sequence

from ..errors import ValidationError
from ..grammar import CallRules, Grammar, ToolLike, Trigger, thought_first
from ..grammar.gbnf import literal
from ..markup import THINK, THINK_END, TOOL_RESPONSE, TOOL_RESPONSE_END
from ..messages import Conversation, Message
from ..segments import BlockBuilder, Control, Segment, Text
from ..validation import JSON_CALL_NAMES, MessageRule, SystemOnlyFirst
from .base import Dialect, ReasoningMode, StreamParser, last_of
from .chatml import (
    ENDOFTEXT,
    IM_END,
    IM_START,
    TOOL_CALL,
    TOOL_CALL_END,
    arguments_json,
)
from .fingerprint import Fingerprint
from .parsers.mistral import ToolCallsParser
from .parsers.think import ThinkParser
from .parsers.values import json_text
from .qwen3_coder import XMLCallsMixin, coder_tool, render_result_lines, xml_call_grammar

_INLINE = (TOOL_CALL, TOOL_CALL_END, THINK, THINK_END, TOOL_RESPONSE, TOOL_RESPONSE_END)
_TOOLS_HEAD = "# Tools\n\nYou have access to the following functions:\n\n<tools>"
_TOOLS_TAIL = (
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>"
    "\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is "
    "no function call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n</IMPORTANT>"
)
_EMPTY_THOUGHT = THINK + THINK_END


class Nemotron3(XMLCallsMixin):
    """Nemotron 3 Nano: byte-exact with its published chat template; thinking on unless turned
    off; earlier turns' thoughts emptied (:attr:`truncate_history_thinking`)."""

    name = "nemotron3"
    fingerprint = Fingerprint(
        "Nemotron 3 Nano (ChatML, <function=…> calls, XML tool descriptions with extra schema "
        "keys, truncate_history_thinking)",
        requires=("<|im_start|>", "<function=", "truncate_history_thinking", "render_extra_keys"),
        precedence=260,
    )
    controls = (IM_START, IM_END, ENDOFTEXT, *_INLINE)
    inline_controls: tuple[str, ...] = _INLINE
    prompt_opens_thought = True
    #: The template's ``truncate_history_thinking``: turns before the last user message show
    #: ``<think></think>`` in place of their thought. Off, every turn keeps its own.
    truncate_history_thinking = True

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        super().validate(conversation, strict=strict)
        msgs = conversation.messages
        k = 1 if msgs and msgs[0].role == "system" else 0
        if len(msgs) > k and msgs[k].role in ("tool", "observation"):
            # The template opens a results turn only after another turn of the loop.
            raise ValidationError(
                f"the {self.name} template writes no turn header for tool results that come "
                "first; start with a user message",
                index=k,
                rule="results-first",
            )

    def _last_query(self, msgs: Sequence[Message]) -> int:
        # The last user message of any kind; with none, every turn keeps its thought.
        if not self.truncate_history_thinking:
            return -1
        return last_of(msgs, "user")

    def _render_system(self, b: BlockBuilder, conversation: Conversation) -> int:
        msgs = conversation.messages
        first_system = bool(msgs) and msgs[0].role == "system"
        system = msgs[0].text if first_system else ""
        b.control(IM_START)
        b.text("system\n" + system)
        if conversation.tools:
            b.text(("\n\n" if system else "") + _TOOLS_HEAD)
            b.text("".join(coder_tool(t.definition, listed=True) for t in conversation.tools))
            b.tagged(_TOOLS_TAIL)
        b.control(IM_END)
        b.text("\n")
        b.block((0,) if first_system else ())
        return 1 if first_system else 0

    def _render_assistant(self, b: BlockBuilder, m: Message, *, keep: bool, last: bool) -> None:
        # The template's own string operations, on the same text, so the result is exact; then
        # the thought tags it wrote itself become tokens, and tags in caller text stay text.
        content, reasoning = m.content or "", m.reasoning or ""
        if reasoning.strip():
            text = f"{THINK}\n{reasoning}\n{THINK_END}\n{content}"
            close: int | None = len(THINK) + 1 + len(reasoning) + 1
        elif THINK in content or THINK_END in content:
            text, close = content, None  # a thought the caller wrote: left to the cuts below
        else:
            text, close = _EMPTY_THOUGHT + content, len(THINK)
        if keep:
            text = text.strip()
        elif m.tool_calls:
            if THINK_END in text:
                text = text.split(THINK_END)[-1]
            elif THINK in text:
                text = text.split(THINK)[0]
            text, close = _EMPTY_THOUGHT + text.strip(), len(THINK)
        else:
            if THINK in text and THINK_END in text:
                text, close = _EMPTY_THOUGHT + text.split(THINK_END)[-1], len(THINK)
            text = text.strip()
        b.text("assistant\n")
        if close is None:
            b.text(text)
        else:
            b.tagged(THINK)
            b.text(text[len(THINK) : close])
            b.tagged(THINK_END)
            b.text(text[close + len(THINK_END) :])
        if m.tool_calls:
            b.text("\n")
        for call in m.tool_calls or ():
            self._render_call(b, call.name, call.arguments, call.raw)
            b.text("\n")

    def _render_results(self, b: BlockBuilder, results: Sequence[Message]) -> None:
        render_result_lines(b, results)

    def _generation_prompt(self, b: BlockBuilder) -> None:
        b.tagged(THINK + "\n" if self.thinking else _EMPTY_THOUGHT)

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """Qwen3-Coder's XML calls (lazy: from ``<tool_call>`` on), then the newline the
        template writes after a call (so the model writes it too); after the thought when the
        model thinks first."""
        grammar = xml_call_grammar(tools, required=required, single=single)
        head, _, rules = grammar.gbnf.partition("\n")
        root = f'root ::= ( {head.removeprefix("root ::= ")} ) "\\n"?'
        return self._after_thought(dataclasses.replace(grammar, gbnf=f"{root}\n{rules}"))

    def close_thought(self) -> tuple[Segment, ...] | None:
        """``\\n</think>\\n``: the history writes one newline before the answer."""
        return (Text("\n"), Control(THINK_END, required=False), Text("\n"))

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """Reasoning in ``<think>`` (the prompt opened it when thinking is on), then text and
        XML calls typed by the request's tools."""
        return ThinkParser.after_prompt_of(
            self, self._answer_parser(id_factory), id_factory, started=self.thinking
        )


# ==== Tool descriptions ====


# ==== Nemotron Nano v2 ====

SYSTEM = "<SPECIAL_10>"
TURN = "<SPECIAL_11>"
TURN_END = "<SPECIAL_12>"
TOOLCALL = "<TOOLCALL>"
TOOLCALL_END = "</TOOLCALL>"
TOOL_RESULTS = "<TOOL_RESPONSE>"
TOOL_RESULTS_END = "</TOOL_RESPONSE>"
AVAILABLE_TOOLS = "<AVAILABLE_TOOLS>"
AVAILABLE_TOOLS_END = "</AVAILABLE_TOOLS>"
_NANO2_INLINE = (
    THINK, THINK_END, TOOLCALL, TOOLCALL_END, TOOL_RESULTS, TOOL_RESULTS_END, AVAILABLE_TOOLS,
    AVAILABLE_TOOLS_END,
)  # fmt: skip
_THINK_FLAG, _NO_THINK_FLAG = "/think", "/no_think"
_NANO2_TOOLS_TAIL = (
    "\n\nIf you decide to call any tool(s), use the following format:\n"
    '<TOOLCALL>[{{"name": "tool_name1", "arguments": "tool_args1"}}, '
    '{{"name": "tool_name2", "arguments": "tool_args2"}}]</TOOLCALL>\n\n'
    "The user will execute tool-calls and return responses from tool(s) in this format:\n"
    '<TOOL_RESPONSE>[{{"tool_response1"}}, {{"tool_response2"}}]</TOOL_RESPONSE>\n\n'
    "Based on the tool responses, you can call additional tools if needed, correct tool calls "
    "if any errors are found, or just respond to the user."
)


def _unflagged(text: str) -> str:
    """A user or system text as the template writes it: the thinking flags deleted, trimmed."""
    return text.replace(_THINK_FLAG, "").replace(_NO_THINK_FLAG, "").strip()


def thinking_flag(conversation: Conversation) -> bool | None:
    """The thinking switch the conversation's own text sets, as the template reads it: the last
    system or user message holding ``/think`` (on) or ``/no_think`` (off); ``None`` for none."""
    flag = None
    for m in conversation.messages:
        if m.role in ("user", "system"):
            if _THINK_FLAG in m.text:
                flag = True
            elif _NO_THINK_FLAG in m.text:
                flag = False
    return flag


class NemotronNano2(Dialect):
    """Nemotron Nano v2 (9B, 12B): byte-exact with its published chat template.

    Thinking is switched by ``/think`` or ``/no_think`` in a system or user message (the last
    one wins, and the template deletes the flags from the text); with neither, by the request
    (:meth:`with_reasoning`, on by default). :meth:`for_reply_to` gives the dialect configured
    for the conversation's own switch, for parsing its reply. The template never writes a
    turn's reasoning, and cuts a thought left in an earlier turn's content."""

    name = "nemotron-nano2"
    fingerprint = Fingerprint(
        "Nemotron Nano v2 (<SPECIAL_10>System, <SPECIAL_11>User/Assistant turns, "
        "<TOOLCALL>[…] calls, /think and /no_think switches)",
        requires=("<SPECIAL_10>", "<SPECIAL_11>", "<TOOLCALL>"),
        precedence=270,
    )
    rules: tuple[MessageRule, ...] = (SystemOnlyFirst(), JSON_CALL_NAMES)
    controls = (SYSTEM, TURN, TURN_END, *_NANO2_INLINE)
    stop_controls = (TURN_END,)
    inline_controls: tuple[str, ...] = _NANO2_INLINE
    reasoning: ReasoningMode = "switch"
    thinking = True
    turns_render_independently = False  # a later flag changes the generation prompt

    def for_reply_to(self, conversation: Conversation) -> NemotronNano2:
        flag = thinking_flag(conversation)
        if flag is None or flag == self.thinking:
            return self
        configured = copy.copy(self)
        configured.thinking = flag
        return configured

    # ==== Validation ====

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        super().validate(conversation, strict=strict)
        msgs = conversation.messages
        for i, m in enumerate(msgs):
            if m.role != "assistant" and m.content is None:
                raise ValidationError(
                    f"a {m.role} message needs content for the {self.name} template; set "
                    'content to a string (it may be "")',
                    index=i,
                    rule="content",
                )
        if not msgs or all(m.role == "system" for m in msgs):
            raise ValidationError(
                f"the {self.name} template needs a message after the system prompt; add one",
                rule="no-turns",
            )

    # ==== Rendering ====

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        thinking = self.for_reply_to(conversation).thinking
        msgs = conversation.messages
        first_system = msgs[0].role == "system"
        system = _unflagged(msgs[0].text) if first_system else ""
        b.control(SYSTEM)
        b.text("System\n" + system)
        if conversation.tools:
            b.text(
                ("\n\n" if system else "") + "You can use the following tools to assist the "
                "user if required:\n"
            )
            b.control(AVAILABLE_TOOLS, required=False)
            defs = (t.definition.get("function", t.definition) for t in conversation.tools)
            b.text("[" + ", ".join(json_text(d) for d in defs) + "]")
            b.control(AVAILABLE_TOOLS_END, required=False)
            b.tagged(_NANO2_TOOLS_TAIL)
        b.text("\n\n")
        b.block((0,) if first_system else ())
        start = 1 if first_system else 0
        n = len(msgs)
        last = msgs[-1] if n > start and msgs[-1].role == "assistant" else None
        end = n - 1 if last is not None else n
        i = start
        while i < end:
            m = msgs[i]
            if m.role in ("tool", "observation"):
                j = i
                b.control(TURN)
                b.text("User\n")
                b.control(TOOL_RESULTS, required=False)
                b.text("[")
                while j < end and msgs[j].role in ("tool", "observation"):
                    b.text((", " if j > i else "") + msgs[j].text)
                    j += 1
                b.text("]")
                b.control(TOOL_RESULTS_END, required=False)
                b.block(range(i, j))
                i = j
                continue
            b.control(TURN)
            if m.role == "assistant":
                self._render_assistant(b, m)
            else:
                b.text("User\n" + _unflagged(m.text) + "\n")
            b.block((i,))
            i += 1
        if last is not None:
            self._render_last(b, last, thinking, add_generation_prompt)
            b.block((n - 1,))
        elif add_generation_prompt:
            b.control(TURN)
            b.text("Assistant\n")
            b.tagged(THINK + "\n" if thinking else _EMPTY_THOUGHT)
            b.block()

    def _render_assistant(self, b: BlockBuilder, m: Message) -> None:
        content = m.content or ""
        if THINK_END in content:
            content = content.split(THINK_END)[1]  # the template keeps the second piece only
        content = content.strip()
        b.text("Assistant\n" + content)
        if m.tool_calls:
            b.text("\n" if content else "")
            self._render_calls(b, m)
        b.text("\n")
        b.control(TURN_END)
        b.text("\n")

    def _render_calls(self, b: BlockBuilder, m: Message) -> None:
        b.control(TOOLCALL, required=False)
        objects = [
            c.raw if c.raw is not None
            else f'{{"name": "{c.name}", "arguments": {arguments_json(c.arguments)}}}'
            for c in m.tool_calls or ()
        ]  # fmt: skip
        b.text("[" + ", ".join(objects) + "]")
        b.control(TOOLCALL_END, required=False)

    def _render_last(
        self, b: BlockBuilder, m: Message, thinking: bool, add_generation_prompt: bool
    ) -> None:
        """A final assistant message, as the template writes it: continued after the
        generation prompt, or (without one) its text as a thinking turn, then its calls as a
        turn of their own."""
        content = (m.content or "").strip()
        if add_generation_prompt and m.tool_calls:
            raise ValidationError(
                f"the {self.name} template drops the calls of a final assistant message that "
                "the generation prompt continues; render it without the generation prompt, or "
                "add the tool results",
                rule="final-calls",
            )
        if add_generation_prompt or content:
            b.control(TURN)
            b.text("Assistant\n")
            b.tagged(THINK + "\n" if thinking else _EMPTY_THOUGHT)
            b.text(content)
            if not add_generation_prompt:
                b.text("\n")
                b.control(TURN_END)
                b.text("\n")
        if m.tool_calls:
            b.control(TURN)
            b.text("Assistant\n")
            self._render_calls(b, m)
            b.control(TURN_END)
            b.text("\n\n")

    # ==== Parsing and grammars ====

    def close_thought(self) -> tuple[Segment, ...] | None:
        """``\\n</think>\\n\\n``: the history keeps no thought to copy; the generation
        prompt opens it with a newline (``<think>\\n``), and the template strips the answer
        of the newlines that follow the tag."""
        return (Text("\n"), Control(THINK_END, required=False), Text("\n\n"))

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """Reasoning in ``<think>`` (the prompt opened it when thinking is on), then text and a
        ``<TOOLCALL>`` JSON list of calls."""
        calls = ToolCallsParser(
            id_factory=id_factory,
            stop_controls=self.stop_controls,
            calls_control=TOOLCALL,
            close_control=TOOLCALL_END,
        )
        return ThinkParser.after_prompt_of(self, calls, id_factory, started=self.thinking)

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """``<TOOLCALL>[{"name": …, "arguments": {…}}, …]</TOOLCALL>`` (lazy: from
        ``<TOOLCALL>`` on); after the thought when the model thinks first."""
        c = CallRules(tools)
        ws = c.ws
        calls = c.many(c.call_object(undeclared=not required), single=single, sep='","')
        body = f'{literal(TOOLCALL)} {ws} "[" {ws} {calls} {ws} "]" {ws} {literal(TOOLCALL_END)}'
        triggers = () if required else (Trigger("word", TOOLCALL),)
        grammar = c.grammar(body, triggers=triggers, preserved=(TOOLCALL, TOOLCALL_END))
        if not self.thinking:
            return grammar
        return thought_first(grammar, THINK, THINK_END, opened=True)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """``<TOOLCALL>[`` and the call's opening up to its arguments when it is named; nothing
        when the prompt opened a thought (the call comes after it, which the grammar says)."""
        if self.thinking:
            return ()
        head = "[" if name is None else '[{"name": ' + json.dumps(name) + ', "arguments": '
        return (Control(TOOLCALL, False), Text(head))


__all__ = ["Nemotron3", "NemotronNano2", "thinking_flag"]
