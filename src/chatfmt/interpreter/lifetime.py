"""``with`` blocks for the interpreter's resources: started on entry, closed on exit."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import TypeVar

_R = TypeVar("_R", bound="Resource")


class Resource(ABC):
    """Something with processes behind it (a kernel, a pool of kernels): :meth:`start` it, or
    use it in a ``with`` block, and :meth:`close` it when done."""

    @abstractmethod
    def start(self: _R) -> _R:
        """Start the processes (idempotent); returns ``self``."""

    @abstractmethod
    def close(self) -> None:
        """Stop the processes (idempotent)."""

    def __enter__(self: _R) -> _R:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
