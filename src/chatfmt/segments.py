"""A rendered prompt is a sequence of segments: control tokens and text.

Control tokens are named by their token text (``"<|im_start|>"``) and resolved to ids by the
tokenizer; text is encoded with special-token parsing off. That split is what makes a prompt
injection-proof: no text, whatever it contains, can become a control id.

Segments are grouped into :class:`Block` objects. A block is the unit of tokenization (each
:class:`Text` in it is one encoder call, exactly as the reference implementation calls its
tokenizer) and of caching, and it records which messages it renders.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .tokenizers.base import Tokenizer


# Segments and blocks are named tuples, not dataclasses: they are hashed on every cache lookup,
# and a tuple hashes in C.


class Control(NamedTuple):
    """A control token, named by its text. Only renderers and decoders create these.

    ``required=False`` marks a token the dialect uses when the vocabulary has it (Qwen2.5's
    ``<tool_call>``) and writes as plain text when it does not.
    """

    token: str
    required: bool = True


class Text(NamedTuple):
    """A run of text, encoded in one tokenizer call with special-token parsing off."""

    text: str


Segment = Control | Text


class Block(NamedTuple):
    """Segments that render ``messages`` (indices into the conversation; empty for a prefix or
    a generation prompt)."""

    segments: tuple[Segment, ...]
    messages: tuple[int, ...] = ()

    @property
    def text(self) -> str:
        """The block as text, control tokens written out."""
        return "".join(s.token if isinstance(s, Control) else s.text for s in self.segments)


#: One :class:`Control` per token and flag, shared (tuples are immutable): a render makes
#: hundreds, and a named tuple's Python-level ``__new__`` is a tenth of the renderer's time.
_control = functools.lru_cache(maxsize=1024)(Control)
_tuple_new = tuple.__new__


@functools.lru_cache(maxsize=64)
def _splitter(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    ordered = sorted(set(tokens), key=len, reverse=True)  # longest first: no token eats another
    return re.compile("(" + "|".join(map(re.escape, ordered)) + ")") if ordered else None


class BlockBuilder:
    """Collects the segments of one block at a time, and the blocks made, for renderers.

    Adjacent text is merged, so that each run between two control tokens is one :class:`Text`,
    exactly as a Hugging Face tokenizer splits a string at its added tokens.
    ``inline_controls`` are control tokens that the reference template writes *inside* its text
    (Qwen2.5's ``<tool_call>`` tags): :meth:`tagged` turns them into optional controls.
    """

    __slots__ = ("_segments", "_split", "_text", "blocks")

    def __init__(self, inline_controls: Iterable[str] = ()) -> None:
        #: The blocks made so far, in order: what a layout's render returns.
        self.blocks: list[Block] = []
        self._segments: list[Segment] = []
        self._text: list[str] = []
        self._split = _splitter(tuple(inline_controls)) if inline_controls else None

    def text(self, text: str) -> None:
        """Append text (encoded with special-token parsing off)."""
        if text:
            self._text.append(text)

    def control(self, token: str, *, required: bool = True) -> None:
        """Append a control token."""
        self._flush()
        self._segments.append(_control(token, required))

    def tagged(self, text: str) -> None:
        """Append template text (or a call's raw model text) in which the inline controls are
        control tokens, because the reference tokenizer turns those strings into their ids.
        Only for text the dialect itself writes or the model produced, never for user text."""
        if self._split is None:
            self.text(text)
            return
        for k, part in enumerate(self._split.split(text)):
            if k % 2:
                self.control(part, required=False)
            else:
                self.text(part)

    def block(self, messages: Iterable[int] = ()) -> None:
        """End a block: the segments collected so far, rendering ``messages``, go to
        :attr:`blocks`; the next block starts empty."""
        self._flush()
        self.blocks.append(Block(tuple(self._segments), tuple(messages)))
        self._segments = []

    def add(self, block: Block) -> None:
        """Append a block made elsewhere (a constant prefix) after the blocks made so far."""
        if self._segments or self._text:  # a layout's bug: the order would be lost
            raise ValueError("end the block being written (block()) before adding another")
        self.blocks.append(block)

    def _flush(self) -> None:
        if self._text:
            self._segments.append(_tuple_new(Text, ("".join(self._text),)))
            self._text = []


class Span(NamedTuple):
    """Token positions ``[start, end)`` of one block and the messages it renders."""

    start: int
    end: int
    messages: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """The output of rendering: token ids, the blocks they came from, and their spans."""

    ids: list[int]
    blocks: tuple[Block, ...]
    spans: tuple[Span, ...] = field(default=())

    @property
    def text(self) -> str:
        """The prompt as text with control tokens written out (for display and diffing)."""
        return "".join(b.text for b in self.blocks)

    def __len__(self) -> int:
        return len(self.ids)


class BlockEncoder:
    """Encodes blocks to ids with a per-block cache.

    Blocks are immutable and hashable, so a conversation that grows by one turn re-encodes only
    its new blocks. The cache is bounded by ``max_entries`` blocks and by ``max_tokens``, the
    ids it holds plus a quarter of its blocks' characters (its keys hold their text); the oldest
    entries go first. ``max_entries=0`` turns it off (a one-off render gains nothing from
    hashing its blocks).
    """

    def __init__(
        self, tokenizer: Tokenizer, *, max_entries: int = 65536, max_tokens: int = 1 << 20
    ) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[Block, tuple[int, ...]] = {}
        self._sizes: dict[Block, int] = {}
        self._held = 0
        self.max_entries = max_entries
        self.max_tokens = max_tokens
        self._short: dict[str, list[int]] = {}

    @property
    def size(self) -> tuple[int, int]:
        """Blocks cached, and their size as the bound counts it."""
        return len(self._cache), self._held

    def encode_block(self, block: Block) -> tuple[int, ...]:
        """The ids of one block (cached)."""
        hit = self._cache.get(block)
        return hit if hit is not None else self._encode_new(block)

    def _encode_new(self, block: Block) -> tuple[int, ...]:
        ids: list[int] = []
        tok = self.tokenizer
        controls = tok.controls
        encode = tok.encode_text
        short = self._short
        chars = 0
        for seg in block.segments:
            if type(seg) is Text:
                text = seg[0]
                n = len(text)
                chars += n
                if n <= 16:
                    # Layout text such as "\n" or "assistant\n" recurs in every turn.
                    hit = short.get(text)
                    if hit is None:
                        hit = encode(text) if text else []
                        if len(short) < 4096:
                            short[text] = hit
                    ids += hit
                else:
                    ids += encode(text)
            elif seg[0] in controls:
                ids.append(controls[seg[0]])
            elif seg.required:  # type: ignore[union-attr]
                tok.control_id(seg[0])  # raises TokenizerError naming the missing token
            else:
                ids += encode(seg[0])
        result = tuple(ids)
        if self.max_entries:
            self._remember(block, result, len(result) + chars // 4)
        return result

    def _remember(self, block: Block, ids: tuple[int, ...], size: int) -> None:
        if size > self.max_tokens:
            return  # bigger than the whole cache
        cache, sizes = self._cache, self._sizes
        while cache and (len(cache) >= self.max_entries or self._held + size > self.max_tokens):
            oldest = next(iter(cache))
            del cache[oldest]
            self._held -= sizes.pop(oldest)
        cache[block] = ids
        sizes[block] = size
        self._held += size

    def encode(self, blocks: Sequence[Block]) -> RenderedPrompt:
        """Encode blocks into a :class:`RenderedPrompt` with one span per block."""
        ids: list[int] = []
        spans: list[Span] = []
        get = self._cache.get if self.max_entries else _no_hit
        encode_new = self._encode_new
        append = spans.append
        start = 0
        for block in blocks:
            hit = get(block)
            ids += hit if hit is not None else encode_new(block)
            end = len(ids)
            append(Span(start, end, block.messages))
            start = end
        return RenderedPrompt(ids=ids, blocks=tuple(blocks), spans=tuple(spans))

    def count(self, blocks: Iterable[Block]) -> int:
        """Number of tokens of ``blocks`` (uses and fills the cache)."""
        return sum(len(self.encode_block(b)) for b in blocks)


def _no_hit(_block: Block) -> None:
    return None
