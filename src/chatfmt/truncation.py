"""Cut long text to a budget, with a visible marker.

A model that sees a silently cut observation draws wrong conclusions ("the file has 20 lines"),
so every cut leaves ``…[truncated N characters]`` where the text was removed. A core module,
below the layers that cut text: tool results (:mod:`chatfmt.tools`), interpreter output
(:mod:`chatfmt.interpreter`) and the context budget (:mod:`chatfmt.context`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

Keep = Literal["head", "head_tail"]
"""What a cut keeps: the start, or both ends (errors and final results come last)."""


def marker(removed: int) -> str:
    """The marker that replaces ``removed`` characters."""
    return f"…[truncated {removed} characters]"


def _cut(text: str, kept: int, keep: Keep) -> str:
    removed = len(text) - kept
    if keep == "head":
        return text[:kept] + marker(removed)
    # Errors and final results come last, so head_tail keeps both ends of the output.
    tail = kept // 2
    head = kept - tail
    return text[:head] + "\n" + marker(removed) + "\n" + (text[-tail:] if tail else "")


def truncate(
    text: str,
    *,
    max_chars: int | None = None,
    max_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    keep: Keep = "head",
) -> str:
    """Return ``text`` cut to at most ``max_chars`` characters and/or ``max_tokens`` tokens.

    The budget includes the marker. Token budgets need ``count_tokens``; the cut point is found
    by binary search (O(log n) calls of ``count_tokens``). A budget smaller than the marker
    itself yields just the marker.
    """
    if max_tokens is not None and count_tokens is None:
        raise ValueError("max_tokens needs count_tokens")
    kept = len(text)
    if max_chars is not None and len(text) > max_chars:
        extra = 2 if keep == "head_tail" else 0
        # The marker is longest when nothing is kept, so this kept count always fits.
        kept = max(0, max_chars - len(marker(len(text))) - extra)
        # The marker shrinks as more is kept; take the characters that frees (a digit or two).
        while (
            kept < len(text) and kept + 1 + len(marker(len(text) - kept - 1)) + extra <= max_chars
        ):
            kept += 1
    out = text if kept == len(text) else _cut(text, kept, keep)
    if max_tokens is not None and count_tokens is not None and count_tokens(out) > max_tokens:
        lo, hi = 0, min(kept, len(text) - 1)
        while lo < hi:  # the largest kept count whose rendering fits the token budget
            mid = (lo + hi + 1) // 2
            if count_tokens(_cut(text, mid, keep)) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        out = _cut(text, lo, keep)
    return out
