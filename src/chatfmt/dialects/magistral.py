"""Magistral and Ministral 3 reasoning (``magistral``): Mistral's instruct v13 layout with the
thought between ``[THINK]`` and ``[/THINK]``.

As ``mistral-common``'s ``InstructTokenizerV13`` encodes a conversation: system prompts in place
in ``[SYSTEM_PROMPT]`` tags, the tools in ``[AVAILABLE_TOOLS]`` before the *first* user turn,
each call ``[TOOL_CALLS]name[ARGS]{arguments}`` (no call id: v13 dropped it), each result
``[TOOL_RESULTS]result[/TOOL_RESULTS]`` (no id either), an assistant turn's thought as
``[THINK]…[/THINK]`` before its text, every turn ending ``</s>``. There is no generation prompt:
the model answers after ``[/INST]`` or ``[/TOOL_RESULTS]``.

Where the published template and the encoder differ, chatfmt follows the encoder (the model
was trained on its ids) except for the default system prompt, which only the template writes
and without which the model does not think: a conversation with no system message gets it.
``docs/formats/mistral.md`` lists every difference.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ..errors import ValidationError
from ..grammar import WORDS, Grammar, ToolLike, thought_first
from ..messages import Conversation, Message
from ..segments import Block, BlockBuilder, Control, Segment
from .base import ReasoningMode, StreamParser
from .fingerprint import Fingerprint
from .mistral import (
    BOS,
    CALLS,
    EOS,
    INST,
    INST_END,
    RESULTS,
    RESULTS_END,
    SYSTEM,
    SYSTEM_END,
    TOOLS,
    TOOLS_END,
    dumps,
)
from .mistral_v11 import ARGS, MistralV11
from .parsers.think import ThinkParser

THINK, THINK_END = "[THINK]", "[/THINK]"
# Which role may follow which: the encoder's order, with one assistant message per reply (two
# in a row would merge into one text and lose a thought).
_NEXT = {
    "system": {"user", "assistant", "system"},
    "user": {"user", "assistant", "system"},
    "assistant": {"user", "tool"},
    "tool": {"assistant", "tool", "user"},
}
#: The system prompt Ministral 3 Reasoning's template writes when a conversation has none, as
#: (text, thought, text): its middle part is an example thought between the think controls.
DEFAULT_SYSTEM = (
    "# HOW YOU SHOULD THINK AND ANSWER\n\nFirst draft your thinking process (inner monologue) "
    "until you arrive at a response. Format your response using Markdown, and use LaTeX for any "
    "mathematical equations. Write both your thoughts and the response in the same language as "
    "the input.\n\nYour thinking process must follow the template below:",
    "Your thoughts or/and draft, like working through an exercise on scratch paper. Be as "
    "casual and as long as you want until you are confident to generate the response to the "
    "user.",
    "Here, provide a self-contained response.",
)


class Magistral(MistralV11):
    """Instruct v13 with reasoning: id-exact with ``mistral-common``'s ``InstructTokenizerV13``
    (given the same system prompt), text-exact with Ministral 3 Reasoning's template on the
    conversations it accepts (assistant text without trailing spaces, which the encoder
    strips and the template keeps)."""

    name = "magistral"
    fingerprint = Fingerprint(
        "Magistral / Ministral 3 reasoning ([SYSTEM_PROMPT], [INST], [THINK]…[/THINK] thoughts, "
        "[TOOL_CALLS]name[ARGS]… calls)",
        requires=("[INST]", "[SYSTEM_PROMPT]", "[THINK]"),
        precedence=230,
    )
    controls = (*MistralV11.controls, THINK, THINK_END)
    reasoning: ReasoningMode = "always"
    thinking = True
    #: Whether a conversation without a system message gets :data:`DEFAULT_SYSTEM` (the
    #: template's behaviour, which turns the model's thinking on).
    default_system = True

    # ==== Validation ====

    def _check_message(self, i: int, m: Message, prev: Message | None) -> None:
        role = "tool" if m.role == "observation" else m.role
        if prev is not None:
            before = "tool" if prev.role == "observation" else prev.role
            if role not in _NEXT[before]:
                raise ValidationError(
                    f"{m.role!r} cannot follow {prev.role!r}; after it may come "
                    f"{' or '.join(sorted(_NEXT[before]))} messages"
                    + (" (merge the two into one)" if role == before == "assistant" else ""),
                    index=i,
                    rule="order",
                )
        if m.role == "assistant":
            self._check_reply(i, m)
        elif role == "tool" and m.tool_call_id is None:
            raise ValidationError(
                "a tool result needs the tool_call_id of the call it answers (v13 does not "
                "render it, but results are matched to calls by it)",
                index=i,
                rule="tool-pairing",
            )

    def _check_whole(self, msgs: Sequence[Message]) -> None:
        if msgs and not any(m.role == "user" for m in msgs):
            raise ValidationError(
                "the conversation has no user message to answer; add one", rule="first-message"
            )

    def _check_reply(self, i: int, m: Message) -> None:
        # v13 renders no call id, so any id will do (v11's are 9 letters or digits); a
        # thought alone is a reply.
        calls = m.tool_calls or ()
        if not m.content and not calls and m.reasoning is None:
            raise ValidationError(
                "an assistant message needs content, reasoning or tool calls",
                index=i,
                rule="content",
            )
        for call in calls:
            self._check_name(call.name, i)
            if call.id == "null":
                raise ValidationError(
                    "a tool call needs an id (results are matched to calls by it)",
                    index=i,
                    rule="tool-call-id",
                )

    # ==== Rendering ====

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        # No generation prompt: the reply follows [/INST] or [/TOOL_RESULTS] as it is.
        msgs = conversation.messages
        b.add(Block((Control(BOS),)))
        if self.default_system and not any(m.role == "system" for m in msgs):
            intro, thought, outro = DEFAULT_SYSTEM
            b.control(SYSTEM)
            b.text(intro)
            b.control(THINK)
            b.text(thought)
            b.control(THINK_END)
            b.text(outro)
            b.control(SYSTEM_END)
            b.block(())
        tools_due = bool(conversation.tools)
        i = 0
        while i < len(msgs):
            m = msgs[i]
            if m.role == "user":
                # The encoder joins a run of user messages into one turn.
                j = i
                while j + 1 < len(msgs) and msgs[j + 1].role == "user":
                    j += 1
                if tools_due:
                    tools_due = False
                    b.control(TOOLS)
                    b.text(dumps([self._tool(t) for t in conversation.tools]))
                    b.control(TOOLS_END)
                b.control(INST)
                b.text("\n\n".join(x.content for x in msgs[i : j + 1] if x.content))
                b.control(INST_END)
                b.block(range(i, j + 1))
                i = j + 1
                continue
            if m.role == "system":
                b.control(SYSTEM)
                b.text(m.text)
                b.control(SYSTEM_END)
            elif m.role == "assistant":
                self._render_assistant(b, m)
            else:
                b.control(RESULTS)
                b.text(m.text)
                b.control(RESULTS_END)
            b.block((i,))
            i += 1

    def _render_assistant(self, b: BlockBuilder, m: Message) -> None:
        if m.reasoning is not None:
            # Thought and text are chunks to the encoder, which strips neither.
            b.control(THINK)
            b.text(m.reasoning)
            b.control(THINK_END)
            b.text(m.content or "")
        else:
            b.text((m.content or "").rstrip(" "))  # the encoder strips a plain text's spaces
        for call in m.tool_calls or ():
            b.control(CALLS)
            b.text(call.name)
            b.control(ARGS)
            b.text(dumps(json.loads(call.arguments or "{}")))
        b.control(EOS)

    # ==== Parsing ====

    def close_thought(self) -> tuple[Segment, ...] | None:
        """``[/THINK]`` right after the reasoning, as the history writes it."""
        return (Control(THINK_END),)

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """An optional ``[THINK]`` … ``[/THINK]`` thought, then v11's text and calls (the
        model writes no call ids; each call gets a fresh one)."""
        return ThinkParser(
            super().stream_parser(id_factory=id_factory),
            id_factory=id_factory,
            stop_controls=self.stop_controls,
            open_tag=THINK,
            close_tag=THINK_END,
        )

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """v11's calls (``[TOOL_CALLS]`` name ``[ARGS]`` arguments); a required call may
        follow a thought."""
        return self.after_thought(super().call_grammar(tools, required=required, single=single))

    def answer_grammar(self) -> Grammar:
        return self.after_thought(WORDS)

    def after_thought(self, grammar: Grammar) -> Grammar:
        return thought_first(grammar, THINK, THINK_END)


__all__ = ["DEFAULT_SYSTEM", "THINK", "THINK_END", "Magistral"]
