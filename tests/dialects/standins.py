"""Stand-in vocabularies for families whose tokenizer is not available offline: Qwen's ranks
carry the family's control names (at ids after Qwen's ranks, not the family's own), so the
id-by-id decode path is exercised with real control ids. They check parsing, never a family's
ids."""

from __future__ import annotations

from collections.abc import Iterable

from chatfmt.tokenizers.base import Tokenizer


def standin(name: str, controls: Iterable[str]) -> Tokenizer:
    """A tokenizer named ``name`` with Qwen2.5's ranks and ``controls`` as control tokens."""
    from chatfmt.tokenizers import load_tokenizer
    from chatfmt.tokenizers.tiktoken import TiktokenTokenizer

    qwen = load_tokenizer("qwen2.5")
    enc = qwen.encoding  # type: ignore[attr-defined]
    first = enc.max_token_value + 1
    return TiktokenTokenizer(
        name,
        pat_str=enc._pat_str,
        mergeable_ranks=enc._mergeable_ranks,
        controls={t: first + i for i, t in enumerate(dict.fromkeys(controls))},
    )
