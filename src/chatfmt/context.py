"""Exact token counts and fitting a conversation into a context window.

Counts are what :meth:`Dialect.render` produces, tools and generation prompt included, so a
count is never an estimate. Fitting keeps the leading system message(s) and the tools, keeps
the newest turns, and drops whole turns from the oldest: a turn is a user message with every
assistant message and tool result that follows it, so a tool call is never separated from its
result and no message is cut in half. :func:`truncate_tool_results` cuts long tool results to
a token budget instead, with a visible marker (:mod:`chatfmt.truncation`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .dialects.base import ConversationLike, Dialect, ToolsLike
from .errors import ContextOverflowError
from .messages import Conversation, Message, as_conversation, conversation_of
from .segments import Block, BlockEncoder, RenderedPrompt
from .tokenizers.base import Tokenizer
from .truncation import truncate


@dataclass(frozen=True)
class FitResult:
    """A conversation that fits, its exact prompt size and what was dropped."""

    conversation: Conversation
    prompt_tokens: int
    dropped: tuple[int, ...]
    """Indices (in the input conversation) of the messages that were dropped."""


class Budget:
    """Renders, counts and fits conversations for one dialect and tokenizer, incrementally.

    It remembers the last conversation it rendered. When the next one extends it (the same
    message objects, more appended, as in a chat), only the last turn of the old one and the
    new messages are rendered and tokenized again: appending costs O(new tokens). Otherwise it
    falls back to a full render, still reusing the ids of blocks it has encoded before.
    """

    def __init__(
        self, dialect: Dialect, tokenizer: Tokenizer, *, encoder: BlockEncoder | None = None
    ) -> None:
        self.dialect = dialect
        self.tokenizer = tokenizer
        self.encoder = encoder or BlockEncoder(tokenizer)
        self._last: tuple[Conversation, bool, RenderedPrompt] | None = None

    def render(
        self,
        conversation: ConversationLike,
        *,
        tools: ToolsLike = None,
        add_generation_prompt: bool = True,
        strict: bool = True,
    ) -> RenderedPrompt:
        """The exact prompt, as :meth:`Dialect.render` gives it."""
        conv = as_conversation(conversation, tools)
        prompt = self._render_incremental(conv, add_generation_prompt, strict)
        if prompt is None:
            self.dialect.validate(conv, strict=strict)
            blocks = self.dialect.render_blocks(conv, add_generation_prompt=add_generation_prompt)
            prompt = self.encoder.encode(blocks)
        self._last = (conv, strict, prompt)
        return prompt

    def count(
        self,
        conversation: ConversationLike,
        *,
        tools: ToolsLike = None,
        add_generation_prompt: bool = True,
        strict: bool = True,
    ) -> int:
        """The exact number of prompt tokens."""
        prompt = self.render(
            conversation, tools=tools, add_generation_prompt=add_generation_prompt, strict=strict
        )
        return len(prompt.ids)

    def _render_incremental(
        self, conv: Conversation, add_generation_prompt: bool, strict: bool
    ) -> RenderedPrompt | None:
        """Render ``conv`` by re-rendering only the last turn of the previous conversation and
        what was appended; ``None`` when ``conv`` does not extend it."""
        if self._last is None:
            return None
        old, old_strict, old_prompt = self._last
        if old_strict != strict:
            return None
        return render_extension(
            self.dialect,
            self.encoder,
            old,
            old_prompt,
            conv,
            add_generation_prompt=add_generation_prompt,
            strict=strict,
        )

    def fit(
        self,
        conversation: ConversationLike,
        *,
        context: int,
        reserve: int = 0,
        tools: ToolsLike = None,
        strict: bool = True,
    ) -> FitResult:
        """Drop the oldest whole turns until prompt + ``reserve`` fits in ``context`` tokens.

        Raises :class:`ContextOverflowError` with the numbers when even the system message,
        the tools and the newest turn do not fit.
        """
        if context <= 0 or reserve < 0:
            raise ContextOverflowError(
                f"context must be positive and reserve not negative (got {context}, {reserve})",
                prompt_tokens=0,
                context=context,
                reserve=reserve,
            )
        conv = as_conversation(conversation, tools)
        self.dialect.validate(conv, strict=strict)
        budget = context - reserve
        if budget <= 0:
            raise ContextOverflowError(
                f"reserve ({reserve}) leaves no room in a context of {context} tokens; "
                "lower the reserve (max_tokens) or use a larger context",
                prompt_tokens=0,
                context=context,
                reserve=reserve,
            )
        head, turns = _split_turns(conv.messages)
        # Per-turn counts from one render: blocks are attributed to the turn of their first
        # message. Blocks without messages (prefix, default system, generation prompt) and the
        # head are fixed costs.
        blocks = self.dialect.render_blocks(conv)
        turn_of = {i: t for t, (start, end) in enumerate(turns) for i in range(start, end)}
        fixed = 0
        per_turn = [0] * len(turns)
        for block in blocks:
            n = len(self.encoder.encode_block(block))
            t = _turn_of_block(block, turn_of)
            if t is None:
                fixed += n
            else:
                per_turn[t] += n
        total = fixed + sum(per_turn)
        first = 0
        while total > budget and first < len(turns) - 1:
            total -= per_turn[first]
            first += 1
        # Re-render what is kept and count exactly: layouts that merge messages (Qwen2.5 tool
        # results) or depend on the first message make the sum above an approximation.
        while True:
            kept = conv.messages[:head] + _flatten(conv.messages, turns[first:])
            candidate = Conversation(messages=kept, tools=conv.tools)
            exact = self.encoder.count(self.dialect.render_blocks(candidate))
            if exact <= budget:
                dropped = tuple(i for start, end in turns[:first] for i in range(start, end))
                return FitResult(candidate, exact, dropped)
            if first >= len(turns) - 1:
                raise ContextOverflowError(
                    f"the prompt needs {exact} tokens even with only the system message, the "
                    f"tools and the newest turn; with {reserve} reserved for the reply that "
                    f"exceeds the context of {context} tokens. Shorten the newest message or "
                    "the tools, lower the reserve (max_tokens), or use a larger context",
                    prompt_tokens=exact,
                    context=context,
                    reserve=reserve,
                )
            first += 1


def render_extension(
    dialect: Dialect,
    encoder: BlockEncoder,
    old: Conversation,
    old_prompt: RenderedPrompt,
    conv: Conversation,
    *,
    add_generation_prompt: bool = True,
    strict: bool = True,
) -> RenderedPrompt | None:
    """The render of ``conv``, which extends ``old`` (the same message objects, more
    appended; the same tools), from ``old_prompt``: only the last turn of ``old`` and what was
    appended are rendered and encoded again. ``None`` when ``conv`` does not extend ``old`` or
    ``dialect`` does not render its turns independently; then render in full.

    Only the re-rendered part is validated (with the leading system messages): a caller that
    needs the whole conversation's errors validates it first."""
    if not dialect.renders_turns_independently(conv):
        return None
    msgs, old_msgs = conv.messages, old.messages
    if (
        conv.tools != old.tools
        or len(msgs) < len(old_msgs)
        or any(a is not b for a, b in zip(msgs, old_msgs, strict=False))
    ):
        return None
    head, turns = _split_turns(old_msgs)
    if len(turns) < 2:
        return None  # nothing worth keeping
    restart = turns[-1][0]
    # Blocks of the old prompt that render only messages before the restart point (and the
    # message-less prefix before them) are unchanged by anything appended later.
    keep = 0
    for block in old_prompt.blocks:
        if (block.messages and max(block.messages) >= restart) or (
            not block.messages and keep and old_prompt.blocks[keep - 1].messages
        ):
            break
        keep += 1
    if keep == 0:
        return None
    # The rest is rendered as the head followed by the messages from the restart point (the
    # dialect renders a turn the same way whatever turns came before it).
    short = conversation_of(msgs[:head] + msgs[restart:], conv.tools)
    dialect.validate(short, strict=strict)
    rendered = dialect.render_blocks(short, add_generation_prompt=add_generation_prompt)
    offset = restart - head
    tail: list[Block] = []
    for block in rendered:
        if not tail and not any(i >= head for i in block.messages):
            continue  # the prefix and the head: already in the kept blocks
        tail.append(
            block._replace(messages=tuple(i + offset if i >= head else i for i in block.messages))
        )
    kept_end = old_prompt.spans[keep - 1].end
    new = encoder.encode(tail)
    ids = old_prompt.ids[:kept_end] + new.ids
    spans = old_prompt.spans[:keep] + tuple(
        s._replace(start=s.start + kept_end, end=s.end + kept_end) for s in new.spans
    )
    return RenderedPrompt(ids=ids, blocks=old_prompt.blocks[:keep] + new.blocks, spans=spans)


def _split_turns(messages: tuple[Message, ...]) -> tuple[int, list[tuple[int, int]]]:
    """Leading system messages, then turns as ``(start, end)`` index ranges."""
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    turns: list[tuple[int, int]] = []
    start = head
    for i in range(head + 1, len(messages)):
        if messages[i].role in ("user", "system"):
            turns.append((start, i))
            start = i
    if start < len(messages):
        turns.append((start, len(messages)))
    return head, turns


def _flatten(messages: tuple[Message, ...], turns: list[tuple[int, int]]) -> tuple[Message, ...]:
    return tuple(m for start, end in turns for m in messages[start:end])


def _turn_of_block(block: Block, turn_of: dict[int, int]) -> int | None:
    for i in block.messages:
        if i in turn_of:
            return turn_of[i]
    return None


def truncate_text(text: str, tokenizer: Tokenizer, max_tokens: int) -> str:
    """``text`` cut to at most ``max_tokens`` tokens, marker included.

    The ChatGLM3 demos cut long tool results the same way (``truncate_length``); the marker tells
    the model the result is incomplete.
    """
    return truncate(text, max_tokens=max_tokens, count_tokens=tokenizer.count_text)


def truncate_tool_results(
    conversation: ConversationLike, tokenizer: Tokenizer, max_tokens: int
) -> Conversation:
    """A copy whose tool results (``tool`` / ``observation``) are at most ``max_tokens`` each."""
    conv = as_conversation(conversation)
    messages = tuple(
        m.model_copy(update={"content": truncate_text(m.content, tokenizer, max_tokens)})
        if m.role in ("tool", "observation") and m.content
        else m
        for m in conv.messages
    )
    return Conversation(messages=messages, tools=conv.tools)
