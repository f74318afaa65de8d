"""Qwen3 and QwQ: ChatML with ``<think>`` reasoning and Hermes ``<tool_call>`` JSON calls.

:class:`Qwen3` reproduces the published Qwen3 chat template byte for byte, and its ids with the
Qwen3 vocabulary (Qwen2.5's plus ``<tool_response>``, ``</tool_response>``, ``<think>`` and
``</think>`` as added tokens). Its history rule: an assistant turn keeps its reasoning only after
the last real user query (a tool loop still in progress); earlier turns drop it. Thinking is
switched per request (``enable_thinking``): off, the generation prompt closes an empty thought.

:class:`QwQ` follows QwQ-32B's template: earlier turns drop their reasoning whatever follows, and
the generation prompt opens the thought, closing it at once unless thinking is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..grammar import WORDS, Grammar, ToolLike, thought_first
from ..markup import THINK, THINK_END, TOOL_RESPONSE, TOOL_RESPONSE_END
from ..messages import Conversation, Message
from ..segments import BlockBuilder, Control, Segment, Text
from ..validation import JSON_CALL_NAMES, MessageRule, NeedsContent, NoMetadata
from .base import ReasoningMode, StreamParser
from .chatml import (
    HERMES_TOOLS_TAIL,
    IM_END,
    IM_START,
    QWEN_TOOLS_HEAD,
    TOOL_CALL,
    TOOL_CALL_END,
    ChatML,
    render_hermes_call,
    render_tool_responses,
)
from .fingerprint import CHATML_MARKUP, HERMES_MARKUP, THINK_MARKUP, Fingerprint
from .parsers.hermes import HermesParser
from .parsers.think import ThinkParser

#: Qwen3's history rule: reasoning is kept only after the last real user query.
_HISTORY_RULE = ("last_query_index", "multi_step_tool")
_INLINE = (TOOL_CALL, TOOL_CALL_END, THINK, THINK_END, TOOL_RESPONSE, TOOL_RESPONSE_END)


def split_thought(message: Message) -> tuple[str, str]:
    """An assistant message's ``(reasoning, content)`` as the Qwen templates read them: its
    ``reasoning`` if set, else a ``<think>`` … ``</think>`` block written into its content."""
    content = message.content or ""
    if message.reasoning is not None:
        return message.reasoning, content
    if THINK_END not in content:
        return "", content
    head, _, _ = content.partition(THINK_END)
    reasoning = head.rstrip("\n").split(THINK)[-1].lstrip("\n")
    return reasoning, content.split(THINK_END)[-1].lstrip("\n")


def last_query(messages: Sequence[Message]) -> int:
    """The index of the last user message that is a real query (not tool results a client
    wrote into a user turn); ``len - 1`` when there is none, as the template computes it."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user":
            text = m.text
            if not (text.startswith(TOOL_RESPONSE) and text.endswith(TOOL_RESPONSE_END)):
                return i
    return len(messages) - 1


class Qwen3(ChatML):
    """Qwen3 (hybrid thinking): byte-exact with the published Qwen3 chat template."""

    name = "qwen3"
    fingerprint = Fingerprint(
        "Qwen3 (ChatML, Hermes <tool_call> calls, <think> reasoning switched by "
        "enable_thinking, kept after the last user query)",
        requires=("<|im_start|>", "<tool_call>", "<think>", "enable_thinking", QWEN_TOOLS_HEAD),
        any_of=_HISTORY_RULE,
        tokens=CHATML_MARKUP | HERMES_MARKUP | THINK_MARKUP,
        excludes=("<function=", "bos_token"),
        fixed_system=(),
        precedence=150,
    )
    rules: tuple[MessageRule, ...] = (JSON_CALL_NAMES, NeedsContent(), NoMetadata())
    controls = (*ChatML.controls, THINK, THINK_END, TOOL_RESPONSE, TOOL_RESPONSE_END)
    inline_controls: tuple[str, ...] = _INLINE
    turns_render_independently = False  # a new query drops the reasoning of the turns before
    reasoning: ReasoningMode = "switch"
    thinking = True

    def _header(self, role: str, metadata: str | None) -> str:
        return role  # the template writes no metadata

    def _turn_writer(self, msgs: Sequence[Message]) -> Callable[[BlockBuilder, int], None]:
        query = self._last_query(msgs)
        last = len(msgs) - 1

        def turn(b: BlockBuilder, i: int) -> None:
            m = msgs[i]
            b.control(IM_START)
            if m.role == "assistant":
                self._render_assistant(b, m, keep=i > query, last=i == last)
            else:
                b.text(f"{m.role}\n{self._text(m)}")
            b.control(IM_END)
            b.text("\n")
            b.block((i,))

        return turn

    def _last_query(self, msgs: Sequence[Message]) -> int:
        """Where the history rule cuts: turns after this index keep their reasoning."""
        return last_query(msgs)

    def _text(self, m: Message) -> str:
        """A user or tool message's text as the template writes it."""
        return m.text

    def _generation_prompt(self, b: BlockBuilder) -> None:
        if not self.thinking:
            b.tagged("<think>\n\n</think>\n\n")

    def _render_assistant(self, b: BlockBuilder, m: Message, *, keep: bool, last: bool) -> None:
        reasoning, content = split_thought(m)
        b.text("assistant\n")
        if keep and (last or reasoning):
            b.tagged(THINK)
            b.text("\n" + reasoning.strip("\n") + "\n")
            b.tagged(THINK_END)
            b.text("\n\n" + content.lstrip("\n"))
        else:
            b.text(content)
        for k, call in enumerate(m.tool_calls or ()):
            if k or content:
                b.text("\n")
            self._render_call(b, call.name, call.arguments, call.raw)

    def _render_call(self, b: BlockBuilder, name: str, arguments: str, raw: str | None) -> None:
        render_hermes_call(b, name, arguments, raw)

    results_together = True

    def _render_results(self, b: BlockBuilder, results: Sequence[Message]) -> None:
        # Consecutive results share one user turn, one <tool_response> block each; the tags
        # are tokens of this vocabulary, the result between them is text.
        b.control(IM_START)
        b.text("user")
        render_tool_responses(b, (self._text(m) for m in results))
        b.control(IM_END)
        b.text("\n")

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """The Hermes call opening; after a thought the prompt opened, that thought closed
        first (an empty one), or the call would be read as reasoning."""
        opening = super().forced_call_prefix(name)
        if self.thinking and self.prompt_opens_thought:
            return (Control(THINK_END, required=False), Text("\n\n"), *opening)
        return opening

    # ==== Grammars: a thinking reply opens with its thought ====

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        grammar = super().call_grammar(tools, required=required, single=single)
        return self._after_thought(grammar)

    def answer_grammar(self) -> Grammar:
        return self._after_thought(WORDS)

    def after_thought(self, grammar: Grammar) -> Grammar:
        if not self.thinking:
            return grammar
        return thought_first(grammar, THINK, THINK_END, opened=self.prompt_opens_thought)

    _after_thought = after_thought  # the name the XML-call subclasses use

    # ==== Parsing ====

    #: Whether the generation prompt itself opens the thought (the reply starts inside it).
    prompt_opens_thought = False

    def close_thought(self) -> tuple[Segment, ...] | None:
        """``\\n</think>\\n\\n``: how the history writes a kept thought's end (Qwen3, QwQ,
        Qwen3.5)."""
        return (Text("\n"), Control(THINK_END, required=False), Text("\n\n"))

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """Reasoning in ``<think>`` (when thinking is on), then the answer's text and calls."""
        return ThinkParser.after_prompt_of(
            self,
            self._answer_parser(id_factory),
            id_factory,
            started=self.thinking and self.prompt_opens_thought,
        )

    def _answer_parser(self, id_factory: Callable[[], str] | None) -> StreamParser:
        """The parser of what follows the thought: text and Hermes calls."""
        return HermesParser(id_factory=id_factory, stop_controls=self.stop_controls)


class QwQ(Qwen3):
    """QwQ-32B: byte-exact with Qwen's own chat template, whose generation prompt opens the
    thought (``<think>\n``): QwQ always thinks. llama.cpp's copy of the template adds an
    ``enable_thinking`` switch that closes the thought unless it is true; chatfmt keeps that
    switch as an option (``with_reasoning(enabled=False)``), off the vendor's default."""

    name = "qwq"
    fingerprint = Fingerprint(
        "QwQ (ChatML, Hermes <tool_call> calls, <think> reasoning dropped from every earlier turn)",
        requires=("<|im_start|>", "<tool_call>", "<think>", "</think>", QWEN_TOOLS_HEAD),
        tokens=CHATML_MARKUP | HERMES_MARKUP | THINK_MARKUP,
        excludes=(*_HISTORY_RULE, "<function=", "bos_token"),
        fixed_system=(),
        precedence=140,
    )
    thinking = True
    prompt_opens_thought = True

    def _render_system(self, b: BlockBuilder, conversation: Conversation) -> int:
        msgs = conversation.messages
        first_system = bool(msgs) and msgs[0].role == "system"
        if not conversation.tools:
            return super()._render_system(b, conversation)
        b.control(IM_START)
        b.text("system\n" + (msgs[0].text if first_system else "") + "\n\n")
        b.text(self._tools_section(conversation.tools))
        b.tagged(HERMES_TOOLS_TAIL)
        b.control(IM_END)
        b.text("\n")
        b.block((0,) if first_system else ())
        return 1 if first_system else 0

    def _render_assistant(self, b: BlockBuilder, m: Message, *, keep: bool, last: bool) -> None:
        content = m.content or ""
        if not last:
            content = content.split(THINK_END)[-1].lstrip("\n")
        b.text("assistant")
        if m.tool_calls:
            if m.content:
                b.text("\n" + content)
            for call in m.tool_calls:
                b.text("\n")
                self._render_call(b, call.name, call.arguments, call.raw)
        else:
            b.text("\n" + content)

    def _generation_prompt(self, b: BlockBuilder) -> None:
        b.tagged(THINK + "\n" if self.thinking else THINK + "\n" + THINK_END)


__all__ = ["THINK", "THINK_END", "QwQ", "Qwen3", "last_query", "split_thought"]
