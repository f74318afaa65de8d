"""Continuing a stored conversation on the exact ids the engine saw and produced.

A stored response keeps the ids of its exchange (:class:`~.store.ExactIds`). When a request
continues it, the prompt chatfmt renders for the request is checked against what was stored,
and where the exact ids say the same thing they are sent in place of the rendered
conversation up to the stored reply: the model sees its own tokenization and call syntax, and
the engine's prompt cache matches the whole earlier exchange.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...dialects.base import Dialect
from ...errors import ChatFmtError
from ...messages import Conversation
from ...segments import BlockEncoder
from ...store import view_of
from ...tokenizers.base import Tokenizer


@dataclass(frozen=True, slots=True)
class Continuation:
    """A stored conversation's exact ids, to send instead of re-rendering what they hold.

    ``ids`` are the exchange so far as the engine saw and produced it, the last reply without
    its stop token; ``view`` the digest of that last prompt as chatfmt renders it (see
    :class:`~.store.ExactIds`); ``before_reply``: how many of the request's messages come
    before that reply (the reply is the next one).
    """

    ids: Sequence[int]
    view: str
    before_reply: int
    #: How many of the last ``ids`` are the reply (a forced call's opening included).
    reply: int


class Splicer:
    """Splices continuations into the prompts of one dialect and tokenizer."""

    def __init__(self, dialect: Dialect, tokenizer: Tokenizer, stop_ids: frozenset[int]) -> None:
        self.dialect = dialect
        self.tokenizer = tokenizer
        self.stop_ids = stop_ids
        self.control_ids = frozenset(tokenizer.controls.values())

    def splice(
        self,
        conv: Conversation,
        ids: list[int],
        continuation: Continuation,
        encoder: BlockEncoder,
    ) -> list[int] | None:
        """``ids`` (the rendered prompt) with the stored exchange's exact ids in place of the
        messages up to its reply, or ``None`` when they cannot stand in.

        They can when this request renders the messages before the reply exactly as the stored
        prompt was rendered (same view: same system text, tools, messages), the reply and what
        follows it extend that render (the format renders turns independently), and the
        reply's render ends at a stop token within or right after it (``<|im_end|>``,
        ``<|eot_id|>``, ChatGLM3's next role token): the exact ids then replace everything up
        to that token, which the engine never cached, having stopped at it.
        """
        n = continuation.before_reply
        messages = conv.messages
        if not 0 < n < len(messages) or not self.dialect.renders_turns_independently(conv):
            return None
        try:
            before = Conversation(messages=messages[:n], tools=conv.tools)
            view = self.dialect.render(before, self.tokenizer, encoder=encoder).ids
            with_reply = Conversation(messages=messages[: n + 1], tools=conv.tools)
            replied = self.dialect.render(
                with_reply, self.tokenizer, encoder=encoder, add_generation_prompt=False
            ).ids
        except (ChatFmtError, ValueError):
            return None
        start, end = len(view), len(replied)
        if view_of(view) != continuation.view or ids[:end] != replied or replied[:start] != view:
            return None
        stops = self.stop_ids
        k = next((k for k in range(start, min(end + 1, len(ids))) if ids[k] in stops), None)
        if k is None:
            return None
        # A control token the model wrote where the format has none (an <|im_start|> amid
        # text, a stray </tool_call>, which the parser read as text) must not become
        # structure in later prompts: the exact reply's controls must be those of the
        # rendered reply, in order, with some left out (a bare-JSON call has no tags).
        controls = self.control_ids
        exact = continuation.ids[len(continuation.ids) - continuation.reply :]
        rendered = iter([i for i in ids[start:k] if i in controls])
        if not all(i in rendered for i in exact if i in controls):
            return None
        return [*continuation.ids, *ids[k:]]
