"""What a build and an export both count: the tokens they wrote and trained, and the rows they
left out, by reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class LeftOut:
    """Rows left out, counted by reason, with the first of each: where it was, and why."""

    counts: Counter[str] = field(default_factory=Counter)
    #: The first row left out for each reason: where it was and the message.
    first: dict[str, str] = field(default_factory=dict)

    def add(self, reason: str, where: str, message: str) -> None:
        self.counts[reason] += 1
        self.first.setdefault(reason, f"{where}: {message}")

    def as_dict(self, verb: str) -> dict[str, Any]:
        """As a report writes it, ``verb`` naming what befell the rows (``dropped``)."""
        return {
            f"rows_{verb}": sum(self.counts.values()),
            f"{verb}_by_reason": dict(self.counts),
            f"first_{verb}": self.first,
        }


@dataclass(slots=True)
class Tokens:
    """The tokens written, and those of them that carry loss."""

    tokens: int = 0
    trained_tokens: int = 0

    @property
    def trained_share(self) -> float:
        return self.trained_tokens / self.tokens if self.tokens else 0.0
