"""A dialect from outside chatfmt, as a separately installed package would add one: its
``chatfmt.dialects`` entry point is written by tests/dialects/test_plugins.py."""

from __future__ import annotations

from collections.abc import Callable

from chatfmt.dialects import Dialect
from chatfmt.dialects.base import EndRule
from chatfmt.dialects.fingerprint import Fingerprint
from chatfmt.dialects.parsers.plain import PlainParser
from chatfmt.messages import Conversation
from chatfmt.segments import BlockBuilder


class Tiny(Dialect):
    """``<<role>> content`` lines: no control tokens, no calls."""

    name = "tiny"
    #: What its chat template (``tiny_chat_template.jinja`` beside this file) writes.
    fingerprint = Fingerprint(
        "Tiny chat (<<role>> lines)",
        requires=("<<{{ message.role }}>> ", "<<assistant>> "),
    )
    #: Replies end with ``<|endoftext|>`` in training data (the generic rule would take the
    #: last stop token, ``<|im_end|>``).
    stop_controls = ("<|endoftext|>", "<|im_end|>")
    end_rule = EndRule(closing="<|endoftext|>")

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        return None

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        for i, m in enumerate(conversation.messages):
            b.text(f"<<{m.role}>> {m.content or ''}\n")
            b.block((i,))
        if add_generation_prompt:
            b.text("<<assistant>> ")
            b.block()

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> PlainParser:
        return PlainParser(id_factory=id_factory)


def make() -> Dialect:
    return Tiny()


def broken() -> Dialect:
    raise AssertionError("never called: the entry point fails to load")
