"""The kit's parser for formats without a tool-call syntax: the whole turn is text."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from ...events import Event, Finish, ParseResult, TextDelta
from ...messages import Message
from ..base import StreamParser


class PlainParser(StreamParser):
    """One assistant turn of text; control tokens that are not stops read as their text."""

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Iterable[str] = (),
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._parts: list[str] = []

    def on_text(self, text: str) -> list[Event]:
        self._parts.append(text)
        return [TextDelta(text)]

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        return [Finish(reason)]

    def result(self) -> ParseResult:
        content = "".join(self._parts) or None
        return ParseResult([Message(role="assistant", content=content)], self._finish or "stop")
