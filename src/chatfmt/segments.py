"""A rendered prompt is a sequence of segments: control tokens and text.

Control tokens are named by their token text (``"<|im_start|>"``) and resolved to ids by the
tokenizer; text is encoded with special-token parsing off. That split is what makes a prompt
injection-proof: no text, whatever it contains, can become a control id.

Segments are grouped into :class:`Block` objects. A block is the unit of tokenization (each
:class:`Text` in it is one encoder call, exactly as the reference implementation calls its
tokenizer) and of caching, and it records which messages it renders.
"""

from __future__ import annotations

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
    its new blocks. The cache is bounded; the oldest entries go first. ``max_entries=0`` turns
    it off (a one-off render gains nothing from hashing its blocks).
    """

    def __init__(self, tokenizer: Tokenizer, *, max_entries: int = 65536) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[Block, tuple[int, ...]] = {}
        self._max = max_entries
        self._short: dict[str, list[int]] = {}

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
        for seg in block.segments:
            if type(seg) is Text:
                text = seg.text
                if len(text) <= 16:
                    # Layout text such as "\n" or "assistant\n" recurs in every turn.
                    hit = short.get(text)
                    if hit is None:
                        hit = encode(text) if text else []
                        if len(short) < 4096:
                            short[text] = hit
                    ids.extend(hit)
                else:
                    ids.extend(encode(text))
            elif seg[0] in controls:
                ids.append(controls[seg[0]])
            elif seg.required:  # type: ignore[union-attr]
                tok.control_id(seg[0])  # raises TokenizerError naming the missing token
            else:
                ids.extend(encode(seg[0]))
        result = tuple(ids)
        if self._max:
            if len(self._cache) >= self._max:
                del self._cache[next(iter(self._cache))]
            self._cache[block] = result
        return result

    def encode(self, blocks: Sequence[Block]) -> RenderedPrompt:
        """Encode blocks into a :class:`RenderedPrompt` with one span per block."""
        ids: list[int] = []
        spans: list[Span] = []
        get = self._cache.get if self._max else _no_hit
        for block in blocks:
            start = len(ids)
            hit = get(block)
            ids += hit if hit is not None else self._encode_new(block)
            spans.append(Span(start, len(ids), block.messages))
        return RenderedPrompt(ids=ids, blocks=tuple(blocks), spans=tuple(spans))

    def count(self, blocks: Iterable[Block]) -> int:
        """Number of tokens of ``blocks`` (uses and fills the cache)."""
        return sum(len(self.encode_block(b)) for b in blocks)


def _no_hit(_block: Block) -> None:
    return None
