"""What a code interpreter is to its callers (the agent loop, a server's sessions): something
that runs code and answers with an :class:`~.results.ExecutionResult`.

It lives here, below both callers, so the interpreter package never imports its consumers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .results import ExecutionResult


class CodeRunner(Protocol):
    """What the loop needs from a code interpreter."""

    def execute(self, code: str, timeout: float | None = None) -> ExecutionResult: ...


__all__ = ["CodeRunner"]
