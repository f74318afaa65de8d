"""The tokenizer interface every dialect renders through.

A tokenizer here has two vocabularies that never mix: *text* (encoded with special-token
parsing off, so ``"<|im_start|>"`` typed by a user is ordinary text) and *control tokens*
(looked up by name, only by renderers and decoders).
"""

from __future__ import annotations

import codecs
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum

from ..errors import TokenizerError
from ..segments import Control

Piece = str | Control
"""What a decoder yields: text, or a control token the model produced."""

#: Bounds of :meth:`Tokenizer.split_bytes` (a few tokens that end inside one character).
MAX_SPLIT_TOKENS = 4
MAX_SPLIT_BYTES = 64


class SpecialTokenPolicy(Enum):
    """What :meth:`Tokenizer.decode` does with control ids."""

    KEEP = "keep"  #: write the control token's text
    IGNORE = "ignore"  #: drop it
    RAISE = "raise"  #: raise TokenizerError


class Tokenizer(ABC):
    """Text ↔ ids, with control tokens kept apart from text."""

    #: A short name for messages and the CLI (``"cl100k_base"``, a file path, ...).
    name: str = "tokenizer"

    # ==== Encoding ====

    @abstractmethod
    def encode_text(self, text: str) -> list[int]:
        """Encode ``text`` as ordinary text: control-token strings in it are never special."""

    @property
    @abstractmethod
    def controls(self) -> Mapping[str, int]:
        """Control token text → id."""

    def has_control(self, token: str) -> bool:
        """Whether the vocabulary has control token ``token``."""
        return token in self.controls

    def control_id(self, token: str) -> int:
        """The id of control token ``token``; :class:`TokenizerError` if the vocabulary lacks it."""
        try:
            return self.controls[token]
        except KeyError:
            raise TokenizerError(
                f"tokenizer {self.name!r} has no control token {token!r}; "
                "use a tokenizer made for this dialect (see `chatfmt render --help`)"
            ) from None

    # ==== Decoding ====

    @abstractmethod
    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of a non-control token."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, control tokens included."""

    def control_name(self, token_id: int) -> str | None:
        """The control token text of ``token_id``, or ``None`` if it is ordinary text."""
        return self._control_names.get(token_id)

    @property
    def _control_names(self) -> dict[int, str]:
        cache: dict[int, str] | None = self.__dict__.get("_control_names_cache")
        if cache is None:
            cache = {i: t for t, i in self.controls.items()}
            self.__dict__["_control_names_cache"] = cache
        return cache

    def decoder(self) -> StreamDecoder:
        """A fresh incremental decoder for one generated sequence."""
        return StreamDecoder(self)

    def decode_pieces(self, ids: Iterable[int]) -> list[Piece]:
        """Decode ids into text runs and control tokens."""
        dec = self.decoder()
        out: list[Piece] = []
        for i in ids:
            out.extend(dec.feed(i))
        out.extend(dec.flush())
        return _merge_text(out)

    def encode_pieces(self, pieces: Iterable[Piece]) -> list[int]:
        """Ids of text runs and control tokens (the inverse of :meth:`decode_pieces`): each run
        encoded with special-token parsing off, each control token by its id."""
        ids: list[int] = []
        for piece in pieces:
            if isinstance(piece, Control):
                ids.append(self.control_id(piece.token))
            elif piece:
                ids.extend(self.encode_text(piece))
        return ids

    def decode(
        self, ids: Sequence[int], *, specials: SpecialTokenPolicy = SpecialTokenPolicy.KEEP
    ) -> str:
        """Decode ids to text; control ids are handled by ``specials``."""
        parts: list[str] = []
        for piece in self.decode_pieces(ids):
            if isinstance(piece, str):
                parts.append(piece)
            elif specials is SpecialTokenPolicy.KEEP:
                parts.append(piece.token)
            elif specials is SpecialTokenPolicy.RAISE:
                raise TokenizerError(
                    f"control token {piece.token!r} found while decoding; "
                    "pass specials=SpecialTokenPolicy.KEEP or IGNORE to allow it"
                )
        return "".join(parts)

    def count_text(self, text: str) -> int:
        """Number of tokens of ``text`` encoded as ordinary text."""
        return len(self.encode_text(text))

    def split_bytes(self, data: bytes, count: int) -> tuple[int, ...] | None:
        """The ``count`` ordinary tokens whose bytes make up ``data``, if there is exactly one
        such sequence; ``None`` if there is none or several (the ids are then not known), or
        if ``data`` is longer than :data:`MAX_SPLIT_BYTES` or ``count`` over
        :data:`MAX_SPLIT_TOKENS`.

        This recovers ids an engine left out of its stream from the text it did send (see
        :mod:`chatfmt.engines.remote`). The first call maps the vocabulary's bytes to ids.
        """
        n = len(data)
        if not 1 <= count <= min(n, MAX_SPLIT_TOKENS) or n > MAX_SPLIT_BYTES:
            return None
        ids_of = self.byte_index()
        # ways[k][i]: in how many ways data[i:] is k tokens (2 stands for "several").
        ways = [[0] * (n + 1) for _ in range(count + 1)]
        ways[0][n] = 1
        for k in range(1, count + 1):
            for i in range(n - 1, -1, -1):
                total = 0
                for j in range(i + 1, n + 1):
                    if ways[k - 1][j] and ids_of.get(data[i:j], -1) >= 0:
                        total += ways[k - 1][j]
                ways[k][i] = min(total, 2)
        if ways[count][0] != 1:
            return None
        ids: list[int] = []
        i = 0
        for k in range(count, 0, -1):  # the one path: the first piece that leads to an end
            j = next(
                j for j in range(i + 1, n + 1) if ways[k - 1][j] and ids_of.get(data[i:j], -1) >= 0
            )
            ids.append(ids_of[data[i:j]])
            i = j
        return tuple(ids)

    def byte_index(self) -> Mapping[bytes, int]:
        """Each ordinary token's bytes → its id (-1 where several ids share them), as
        :meth:`split_bytes` reads it. Built on the first call: up to a second for a large
        vocabulary read through its library, so an engine that may need it builds it off the
        event loop when it connects."""
        cache: dict[bytes, int] | None = self.__dict__.get("_byte_index_cache")
        if cache is None:
            cache = {}
            controls = self._control_names
            for token_id in range(self.vocab_size):
                if token_id not in controls:
                    data = self.token_bytes(token_id)
                    if data:
                        cache[data] = -1 if data in cache else token_id
            self.__dict__["_byte_index_cache"] = cache
        return cache

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class StreamDecoder:
    """Turns generated ids into text and control pieces, one id at a time.

    UTF-8 sequences split across tokens are buffered until complete, so no piece ever holds a
    replacement character that the whole decode would not have.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> list[Piece]:
        """Pieces completed by ``token_id`` (possibly none)."""
        name = self.tokenizer.control_name(token_id)
        if name is not None:
            pending = self._utf8.decode(b"", final=True)
            self._utf8.reset()
            return [pending, Control(name)] if pending else [Control(name)]
        text = self._utf8.decode(self.tokenizer.token_bytes(token_id))
        return [text] if text else []

    def flush(self) -> list[Piece]:
        """Whatever is still buffered (an incomplete UTF-8 sequence becomes U+FFFD)."""
        text = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return [text] if text else []


def _merge_text(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] = out[-1] + p
        else:
            out.append(p)
    return out
