"""What a parser of one assistant turn keeps: its text, its calls, its events and warnings.

Most formats read a reply as one assistant message (text and calls together, as it re-renders);
their parsers share this output side and differ only in how they read the syntax.
"""

from __future__ import annotations

from typing import Literal

from ...events import Event, ParseResult, TextDelta
from ..base import single_message_result
from .calls import CallStream


class TurnOutput:
    """Text and calls of one turn, and the events not yet handed out; a parser mixes it in
    before :class:`~chatfmt.dialects.base.StreamParser` and sets the attributes."""

    _content: list[str]
    _events: list[Event]
    _calls: CallStream
    _warnings: list[str]
    _finish: Literal["stop", "length"] | None

    def _emit(self, event: Event) -> None:
        self._events.append(event)

    def _out(self, text: str) -> None:
        """Visible text of the message."""
        if text:
            self._content.append(text)
            self._events.append(TextDelta(text))

    def _drain(self) -> list[Event]:
        """The events since the last call: what ``feed`` or ``finish`` returns."""
        out, self._events = self._events, []
        return out

    def result(self) -> ParseResult:
        calls = self._calls
        return single_message_result(
            self._content, calls.complete, self._finish, self._warnings, calls.incomplete
        )


class StepOutput(TurnOutput):
    """A turn read by steps: :meth:`_step` reads what it can of the text (a tag, a run of
    plain text, a held partial tag) and returns the rest."""

    def _step(self, text: str) -> str:
        raise NotImplementedError

    def on_text(self, text: str) -> list[Event]:
        while text:
            text = self._step(text)
        out, self._events = self._events, []
        return out
