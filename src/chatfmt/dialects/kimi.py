"""Kimi K2 and K2-Thinking: ``<|im_role|>label<|im_middle|>…<|im_end|>`` turns and calls in a
section of special tokens whose ids are ``functions.NAME:INDEX``.

Each message is its role token (``<|im_system|>``, ``<|im_user|>``, ``<|im_assistant|>``; a tool
result is a system-role turn), a label (the message's ``name``, else its role), ``<|im_middle|>``,
its text and ``<|im_end|>``. Tools are declared as one JSON list in a ``tool_declare`` turn; a
conversation that does not open with a system message gets Kimi's default one. A call is
``<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{…}<|tool_call_end|>``
inside ``<|tool_calls_section_begin|>`` … ``<|tool_calls_section_end|>``, INDEX counting the
conversation's calls from 0; a result is ``## Return of ID`` and its text, the IDs given to the
results in the order of the calls.

A call keeps the id the model wrote (:class:`ToolCall.id <chatfmt.ToolCall>`), so history
renders it back as written; a call with an id of another form (an OpenAI client's ``call_…``)
gets the template's, from the counter. Text-exact with the published templates
(``docs/formats/kimi.md``); the Kimi vocabulary is not available offline, so ids are not
checked.
"""

from __future__ import annotations

import copy
import json
from collections import deque
from collections.abc import Callable, Sequence

from ..grammar import WORDS, Grammar, ToolLike, thought_first
from ..messages import Conversation, Message, ToolCall
from ..segments import BlockBuilder, Control, Segment, Text
from ..validation import CallNames, MessageRule, NoMetadata
from .base import Dialect, ReasoningMode, StreamParser
from .fingerprint import Fingerprint
from .parsers.deepseek import valid_name
from .parsers.kimi import (
    ARGUMENT_BEGIN,
    CALL_BEGIN,
    CALL_END,
    CALL_TOKENS,
    SECTION_BEGIN,
    SECTION_END,
    KimiCallsParser,
    call_id,
    call_index,
    kimi_call_grammar,
)
from .parsers.think import ThinkParser

IM_SYSTEM = "<|im_system|>"
IM_USER = "<|im_user|>"
IM_ASSISTANT = "<|im_assistant|>"
IM_MIDDLE = "<|im_middle|>"
IM_END = "<|im_end|>"
THINK = "<think>"
THINK_END = "</think>"
#: The system prompt the templates write when a conversation does not open with one.
DEFAULT_SYSTEM = "You are Kimi, an AI assistant created by Moonshot AI."
_ROLE_TOKEN = {"user": IM_USER, "assistant": IM_ASSISTANT}


def _is_result(m: Message) -> bool:
    return m.role in ("tool", "observation")


def _label(m: Message) -> str:
    """The turn's label: the message's ``name``, else its role (a result's is ``tool``)."""
    return m.name or ("tool" if _is_result(m) else m.role)


_MARKUP = frozenset(
    {"<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"}
    | {f"<|tool_call{s}|>" for s in ("s_section_begin", "s_section_end", "_begin", "_end")}
    | {"<|tool_call_argument_begin|>", "<think>", "</think>"}
    | {f"<|media_{s}|>" for s in ("start", "content", "pad", "end")}
)
_MARKERS = ("<|im_user|>", "<|im_middle|>", "<|tool_calls_section_begin|>")


class KimiK2(Dialect):
    """Kimi K2 Instruct: text-exact with its published chat template (``Kimi-K2-Instruct``);
    it does not reason."""

    name = "kimi-k2"
    fingerprint = Fingerprint(
        "Kimi K2 Instruct (<|im_user|>…<|im_middle|> turns, functions.NAME:INDEX calls in a "
        "tool-calls section, no reasoning)",
        requires=_MARKERS,
        tokens=_MARKUP,
        excludes=("<think>",),
        precedence=30,
    )
    rules: tuple[MessageRule, ...] = (
        NoMetadata(hint=" (a turn's label is the message's 'name')"),
        CallNames(
            lambda name: not valid_name(name),
            "whitespace, quotes, '<', '>' or backslashes",
            "the call's id (functions.NAME:INDEX)",
        ),
    )
    controls: tuple[str, ...] = (IM_SYSTEM, IM_USER, IM_ASSISTANT, IM_MIDDLE, IM_END, *CALL_TOKENS)
    stop_controls = (IM_END,)
    reply_in_words = True
    turns_render_independently = False  # call ids count the calls of every turn before
    reasoning: ReasoningMode = "never"
    #: What follows the default system prompt (the K2 Instruct template writes a newline).
    _after_default_system = "\n"
    #: The index the next call's id carries: the calls of the conversation replied to
    #: (:meth:`for_reply_to`).
    next_call_index = 0

    # ==== Rendering ====

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs = conversation.messages
        if conversation.tools:
            definitions = [t.definition for t in conversation.tools]
            self._turn(b, IM_SYSTEM, "tool_declare", json.dumps(definitions, ensure_ascii=False))
        if self._needs_default_system(msgs):
            self._turn(b, IM_SYSTEM, "system", DEFAULT_SYSTEM)
            b.text(self._after_default_system)
        b.block()
        first_answer = next(
            (i for i, m in enumerate(msgs) if m.role == "assistant" and not m.tool_calls), -1
        )
        counter = 0
        pending: deque[str] = deque()  # the ids of calls whose results are still to come
        for i, m in enumerate(msgs):
            b.control(_ROLE_TOKEN.get(m.role, IM_SYSTEM))
            b.text(_label(m))
            b.control(IM_MIDDLE)
            if m.role == "assistant":
                self._thought(b, m, keep=i > first_answer)
                b.text(m.text)
                if m.tool_calls:
                    b.control(SECTION_BEGIN)
                    for call in m.tool_calls:
                        written = _written_id(call, counter)
                        counter += 1
                        pending.append(written)
                        self._render_call(b, written, call)
                    b.control(SECTION_END)
            elif _is_result(m):
                answered = pending.popleft() if pending else call_id(m.name or "unknown", counter)
                b.text(f"## Return of {answered}\n{m.text}")
            else:
                b.text(m.text)
            b.control(IM_END)
            b.block((i,))
        if add_generation_prompt:
            self._turn(b, IM_ASSISTANT, "assistant", None)
            b.block()

    def _needs_default_system(self, msgs: Sequence[Message]) -> bool:
        return bool(msgs) and msgs[0].role != "system"

    def _turn(self, b: BlockBuilder, role: str, label: str, text: str | None) -> None:
        """A turn the template writes itself; ``None``: opened only (the generation prompt)."""
        b.control(role)
        b.text(label)
        b.control(IM_MIDDLE)
        if text is not None:
            b.text(text)
            b.control(IM_END)

    def _thought(self, b: BlockBuilder, m: Message, *, keep: bool) -> None:
        """The thought a reply shows in history (K2-Thinking); K2 Instruct writes none."""

    def _render_call(self, b: BlockBuilder, written: str, call: ToolCall) -> None:
        b.control(CALL_BEGIN)
        b.text(written)
        b.control(ARGUMENT_BEGIN)
        b.text(call.arguments)  # the template writes string arguments as they are
        b.control(CALL_END)

    def for_reply_to(self, conversation: Conversation) -> KimiK2:
        """This dialect for the reply to ``conversation``: its next call's id carries the
        index after the conversation's calls (a forced call is written with it)."""
        calls = sum(len(m.tool_calls or ()) for m in conversation.messages)
        if calls == self.next_call_index:
            return self
        configured = copy.copy(self)
        configured.next_call_index = calls
        return configured

    # ==== Parsing and grammars ====

    def _answer_parser(self, id_factory: Callable[[], str] | None) -> StreamParser:
        return KimiCallsParser(id_factory=id_factory, stop_controls=self.stop_controls)

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """Text, then a section of calls whose ids are the ones the model wrote."""
        return self._answer_parser(id_factory)

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """A section of calls of declared tools (lazy: from its opening token)."""
        return kimi_call_grammar(tools, required=required, single=single)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """The section's and the call's opening tokens, and the call's id (with
        :attr:`next_call_index`) when the tool is named."""
        head: tuple[Segment, ...] = (Control(SECTION_BEGIN), Control(CALL_BEGIN))
        if name is None:
            return head
        return (*head, Text(call_id(name, self.next_call_index)), Control(ARGUMENT_BEGIN))


def _written_id(call: ToolCall, counter: int) -> str:
    """The id a call is written with: its own when the model wrote it (Kimi's form, naming
    the same tool), else the template's for the ``counter``-th call."""
    return call.id if call_index(call.id, call.name) is not None else call_id(call.name, counter)


class KimiK2Thinking(KimiK2):
    """Kimi K2-Thinking: text-exact with its published chat template; it always thinks.

    The generation prompt opens no thought: the model writes ``<think>`` … ``</think>`` first.
    History shows an empty thought (``<think></think>``) for every reply up to and including
    the conversation's first answer without calls, and each later reply's reasoning (the
    template looks for the last such answer, but its loop keeps the first one it meets from
    the end, i.e. the first: chatfmt does what the template does). No newline follows the
    default system prompt.
    """

    name = "kimi-k2-thinking"
    fingerprint = Fingerprint(
        "Kimi K2-Thinking (<|im_user|>…<|im_middle|> turns, functions.NAME:INDEX calls in a "
        "tool-calls section, <think> reasoning)",
        requires=(*_MARKERS, "<think>"),
        tokens=_MARKUP,
        precedence=40,
    )
    controls = (*KimiK2.controls, THINK, THINK_END)
    reasoning: ReasoningMode = "always"
    thinking = True
    _after_default_system = ""

    def _needs_default_system(self, msgs: Sequence[Message]) -> bool:
        return not msgs or msgs[0].role != "system"

    def _thought(self, b: BlockBuilder, m: Message, *, keep: bool) -> None:
        b.control(THINK, required=False)
        b.text((m.reasoning or "") if keep else "")
        b.control(THINK_END, required=False)

    def close_thought(self) -> tuple[Segment, ...] | None:
        """``</think>`` right after the reasoning, as the history writes it."""
        return (Control(THINK_END, required=False),)

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """Reasoning in ``<think>`` (the reply opens it), then text and calls."""
        return ThinkParser.after_prompt_of(self, self._answer_parser(id_factory), id_factory)

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """As K2's, after the thought when the whole reply must be calls."""
        grammar = super().call_grammar(tools, required=required, single=single)
        return thought_first(grammar, THINK, THINK_END)

    def answer_grammar(self) -> Grammar:
        return thought_first(WORDS, THINK, THINK_END)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """An empty thought (as history shows a reply without reasoning), then K2's."""
        thought = (Control(THINK, False), Control(THINK_END, False))
        return thought + super().forced_call_prefix(name)


__all__ = ["DEFAULT_SYSTEM", "KimiK2", "KimiK2Thinking"]
