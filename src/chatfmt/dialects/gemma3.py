"""Gemma 3: ``<bos>``, then ``<start_of_turn>{role}\\n{content}<end_of_turn>\\n`` per message.

The assistant's role is ``model``; a leading system message is not a turn of its own but is
put before the first user message's content, followed by a blank line. Contents are trimmed
of surrounding whitespace, and user and model turns must alternate. This reproduces Gemma 3's
published chat template and llama.cpp's built-in ``gemma`` template; the format has no tool
turns, so tools and tool results are refused with an error that says so.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ValidationError
from ..messages import Conversation
from ..segments import Block, BlockBuilder, Control, Text
from ..validation import check_not_empty
from .base import Dialect
from .fingerprint import Fingerprint
from .parsers.plain import PlainParser

BOS, START, END, EOS = "<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>"
_NEWLINE = Text("\n")


_MARKUP = frozenset(
    {"<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<bos>", "<eos>"}
)


class Gemma3(Dialect):
    """The Gemma 3 instruction-tuned chat format (``gemma-3-*-it``)."""

    name = "gemma3"
    fingerprint = Fingerprint(
        "Gemma turns (<start_of_turn>role … <end_of_turn>, the reply as model); Gemma 2 and 3 "
        "write the same turns (Gemma 2 refuses a system message, which gemma3 puts before the "
        "first user message)",
        requires=("<start_of_turn>", "<end_of_turn>"),
        tokens=_MARKUP,
        architectures=("gemma", "gemma2", "gemma3"),
        precedence=70,
    )
    controls = (BOS, START, END, EOS)
    stop_controls = (END, EOS)

    def __init__(self, *, id_factory: Callable[[], str] | None = None) -> None:
        self._id_factory = id_factory

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        """No tools; after an optional leading system message, user and assistant alternate
        starting with the user (strict)."""
        if conversation.tools:
            raise ValidationError(
                "Gemma 3's chat format has no tool definitions or tool turns; send the request "
                "without tools, or serve a model whose format has tools",
                rule="tools",
            )
        msgs = conversation.messages
        for i, m in enumerate(msgs):
            if m.role in ("tool", "observation") or m.tool_calls:
                raise ValidationError(
                    "Gemma 3's chat format has no tool calls or tool results; put the result "
                    "in a user message instead",
                    index=i,
                    rule="tools",
                )
            if m.role == "system" and i > 0:
                raise ValidationError(
                    "only a first system message is supported (it is put before the first user "
                    "message); merge later instructions into a user message",
                    index=i,
                    rule="system-first",
                )
        if not strict:
            return
        check_not_empty(conversation)
        turns = msgs[1:] if msgs and msgs[0].role == "system" else msgs
        for k, m in enumerate(turns):
            want = "user" if k % 2 == 0 else "assistant"
            if m.role != want:
                raise ValidationError(
                    f"Gemma 3 needs user and assistant turns to alternate, starting with the "
                    f"user; this {m.role} message comes where a {want} message must be",
                    index=msgs.index(m),
                    rule="alternation",
                )

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        """``<bos>``, one block per turn (the system text in the first), the model prompt."""
        msgs = conversation.messages
        prefix = ""
        start = 0
        if msgs and msgs[0].role == "system":
            prefix = msgs[0].text + "\n\n"
            start = 1
        b.add(Block((Control(BOS),)))
        for i in range(start, len(msgs)):
            m = msgs[i]
            role = "model" if m.role == "assistant" else m.role
            head = f"{role}\n{prefix if i == start else ''}"
            text = Text(head + m.text.strip())
            covered = tuple(range(start, i + 1)) if i == start else (i,)
            b.add(Block((Control(START), text, Control(END), _NEWLINE), covered))
        if add_generation_prompt:
            b.add(Block((Control(START), Text("model\n"))))

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> PlainParser:
        return PlainParser(
            id_factory=id_factory or self._id_factory, stop_controls=self.stop_controls
        )
