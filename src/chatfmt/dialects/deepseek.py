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
from collections.abc import Callable, Sequence

from ..grammar import Grammar, ToolLike, thought_first
from ..markup import THINK, THINK_END
from ..messages import Conversation, Message, ToolCall
from ..segments import BlockBuilder, Control, Segment, Text
from ..validation import CallNames, MessageRule, NoMetadata, json_name_is_bad
from .base import Dialect, ReasoningMode, StreamParser, is_result
from .chatml import arguments_json
from .fingerprint import Fingerprint
from .parsers.deepseek import (
    BOS,
    CALL_BEGIN,
    CALL_END,
    CALLS_BEGIN,
    CALLS_END,
    EOS,
    SEP,
    SpecialCallsParser,
    special_call_grammar,
)
from .parsers.think import ThinkParser

USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
OUTPUTS_BEGIN = "<｜tool▁outputs▁begin｜>"
OUTPUTS_END = "<｜tool▁outputs▁end｜>"
OUTPUT_BEGIN = "<｜tool▁output▁begin｜>"
OUTPUT_END = "<｜tool▁output▁end｜>"
#: The turn tokens every DeepSeek template writes.
DEEPSEEK_TURNS = (USER, ASSISTANT)
_CALL_TOKENS = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
_OUTPUT_TOKENS = (OUTPUTS_BEGIN, OUTPUTS_END, OUTPUT_BEGIN, OUTPUT_END)


def system_prompt_of(messages: Sequence[Message]) -> str:
    """Every system message's text, in order, joined by a blank line (V3.1 and later)."""
    return "\n\n".join(m.text for m in messages if m.role == "system")


def _answer(content: str, *, split_once: bool) -> str:
    """What the templates keep of an answer's content in history: the text after a
    ``</think>`` written into it (the first one for V3.1, the last one for R1)."""
    if THINK_END not in content:
        return content
    return content.split(THINK_END, 1)[1] if split_once else content.split(THINK_END)[-1]


class DeepSeekBase(Dialect):
    """What the four families share: tokens, validation, the reasoning wrapper."""

    rules: tuple[MessageRule, ...] = (
        NoMetadata(),
        CallNames(
            lambda name: json_name_is_bad(name) or "<" in name,
            "quotes, '<', backslashes or control characters",
            "the call's syntax",
        ),
    )

    controls: tuple[str, ...] = (
        BOS, EOS, USER, ASSISTANT, THINK, THINK_END, *_CALL_TOKENS, *_OUTPUT_TOKENS,
    )  # fmt: skip
    stop_controls = (EOS,)
    reasoning: ReasoningMode = "switch"
    thinking = False  # the templates' default: thinking is asked for per request

    def _think(self, b: BlockBuilder) -> None:
        b.control(THINK, required=False)

    def _think_end(self, b: BlockBuilder) -> None:
        b.control(THINK_END, required=False)

    # ==== Grammars ====

    def _calls_grammar(self, tools: Sequence[ToolLike], *, required: bool, single: bool) -> Grammar:
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

    def for_reply_to(self, conversation: Conversation) -> DeepSeekBase:
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

    def close_thought(self) -> tuple[Segment, ...] | None:
        """``</think>`` right after the reasoning, as the history writes it (R1 to V4)."""
        return (Control(THINK_END, required=False),)

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """Reasoning in ``<think>`` (the reply starts inside it when the prompt opened it),
        then text and calls in the family's syntax."""
        return ThinkParser.after_prompt_of(
            self,
            self._answer_parser(id_factory),
            id_factory,
            started=self.thinking and self.prompt_opens_thought,
        )


# ==== R1 and V3.1: calls between special tokens ====


class DeepSeekV31(DeepSeekBase):
    """DeepSeek V3.1 (hybrid thinking): text-exact with its published chat template.

    History drops every earlier turn's reasoning (``<think></think>``); a reply that follows
    tool results continues the turn without a new ``<｜Assistant｜>``. Thinking is off unless a
    request turns it on (the template's default); on, the generation prompt opens the thought.
    """

    name = "deepseek-v3.1"
    fingerprint = Fingerprint(
        "DeepSeek V3.1 (<｜tool▁calls▁begin｜> calls, one output per tool, <think></think> "
        "thinking switch)",
        requires=(*DEEPSEEK_TURNS, "<｜tool▁calls▁begin｜>", "<think></think>"),
        excludes=("<｜tool▁outputs▁begin｜>", "｜DSML｜"),
        precedence=190,
    )
    #: R1 writes ``function<｜tool▁sep｜>name`` and fences the arguments; V3.1 does neither.
    fenced = False

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs = conversation.messages
        b.control(BOS)
        b.text(self._system(conversation))
        b.block([i for i, m in enumerate(msgs) if m.role == "system"])
        last_user = False  # the template's ns.is_last_user: a user spoke since the last reply
        after_results = False
        for i, j in self._turns(msgs):
            m = msgs[i]
            if m.role == "user":
                b.control(USER)
                b.text(m.text)
                last_user, after_results = True, False
            elif m.role == "assistant":
                self._render_assistant(b, m, opens=last_user, after_results=after_results)
                last_user = after_results = False
            elif is_result(m):
                self._render_results(b, msgs[i:j])
                last_user, after_results = False, True
            else:  # system: already rendered at the top
                continue
            b.block(range(i, j))
        if add_generation_prompt and self._prompts_after(msgs, last_user, after_results):
            b.control(ASSISTANT)
            self._generation_prompt(b)
            b.block()

    def _system(self, conversation: Conversation) -> str:
        return system_prompt_of(conversation.messages)

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

    def _calls_grammar(self, tools: Sequence[ToolLike], *, required: bool, single: bool) -> Grammar:
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
    fingerprint = Fingerprint(
        "DeepSeek R1 (<｜tool▁calls▁begin｜> calls with fenced JSON, <｜tool▁outputs▁begin｜> "
        "results, the reply opened with <think>)",
        requires=(*DEEPSEEK_TURNS, "<｜tool▁calls▁begin｜>", "<｜tool▁outputs▁begin｜>", "<think>"),
        excludes=("｜DSML｜",),
        precedence=180,
    )
    fenced = True
    reasoning = "always"
    thinking = True

    def _system(self, conversation: Conversation) -> str:
        return system_prompt_of(conversation.messages)

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


__all__ = [
    "ASSISTANT",
    "THINK",
    "THINK_END",
    "USER",
    "DeepSeekBase",
    "DeepSeekR1",
    "DeepSeekV31",
    "system_prompt_of",
]
