"""The engine's token log-probabilities as the APIs write them: a token's text and UTF-8 bytes
from the vocabulary, its log-probability, and its likeliest alternatives.

A token's text is its bytes decoded, with U+FFFD for the bytes of a character it holds only
part of (``bytes`` is exact: join the bytes of consecutive tokens to read such a character); a
control token is written as its name. A log-probability that is not a finite number (a token the
engine gives no chance) is written as -9999.0, OpenAI's value for "very unlikely": JSON has no
infinity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from ...engines.base import TokenLogprob
from ...errors import ChatFmtError
from ...tokenizers.base import Tokenizer
from .schemas import ChoiceLogprobs, TopLogprob
from .schemas import TokenLogprob as WireTokenLogprob

#: What a log-probability that is no finite number is written as.
VERY_UNLIKELY = -9999.0


class Token(NamedTuple):
    """One token as written: its text, its bytes (``None``: not in the vocabulary) and its
    log-probability."""

    token: str
    bytes: list[int] | None
    logprob: float


class Entry(NamedTuple):
    """A generated token and its alternatives, as written."""

    token: Token
    top: list[Token]


def _finite(value: float) -> float:
    return value if math.isfinite(value) else VERY_UNLIKELY


class LogprobWriter:
    """Writes :class:`~chatfmt.engines.base.TokenLogprob` entries of one vocabulary (each
    token's text and bytes looked up once, then kept)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._texts: dict[int, tuple[str, list[int] | None]] = {}

    def _text(self, token_id: int) -> tuple[str, list[int] | None]:
        known = self._texts.get(token_id)
        if known is not None:
            return known
        tok = self._tokenizer
        name = tok.control_name(token_id)
        found: tuple[str, list[int] | None]
        if name is not None:
            found = (name, list(name.encode()))
        else:
            try:
                data = tok.token_bytes(token_id)
            except (ChatFmtError, KeyError, IndexError, ValueError):
                data = None  # an id past the vocabulary (a padded model's)
            found = ("", None) if data is None else (data.decode("utf-8", "replace"), list(data))
        if len(self._texts) < 65536:  # bounded: a vocabulary's worth at most
            self._texts[token_id] = found
        return found

    def entries(self, entries: Sequence[TokenLogprob]) -> list[Entry]:
        """The entries as written, in order."""
        out: list[Entry] = []
        for e in entries:
            if e.text is None:
                text, data = self._text(e.token_id)
            else:
                text, data = e.text.decode("utf-8", "replace"), list(e.text)
            top = [Token(*self._text(i), _finite(lp)) for i, lp in e.top]
            out.append(Entry(Token(text, data, _finite(e.logprob)), top))
        return out

    def chat(self, entries: Sequence[TokenLogprob]) -> ChoiceLogprobs:
        """A chat choice's ``logprobs`` holding ``entries``."""
        content = []
        for t, top in self.entries(entries):
            alternatives = [TopLogprob(token=a[0], bytes=a[1], logprob=a[2]) for a in top]
            content.append(
                WireTokenLogprob(
                    token=t.token, bytes=t.bytes, logprob=t.logprob, top_logprobs=alternatives
                )
            )
        return ChoiceLogprobs(content=content)


__all__ = ["VERY_UNLIKELY", "Entry", "LogprobWriter", "Token"]
