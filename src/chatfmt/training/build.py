"""A data set of conversations into training rows: render, fit to a length, pack, count.

Rows stream through: one conversation is rendered, fitted and written (or held for packing)
before the next is read, so memory does not grow with the data set.

- **Length** (``max_length``): a longer example is dropped (``truncation="drop"``), or its
  earliest rounds — a user message and all that answers it, calls and results included — are
  dropped until it fits (``"drop-turns"``; leading system messages and the tools stay). Neither
  cuts inside a message, so no call is ever cut from its arguments or from its result.
- **Packing** (``pack=True``): examples are laid end to end up to ``max_length`` per row
  (next fit, in input order), with ``position_ids`` restarting at each and ``seq_lengths``.
- **Bad rows** (``invalid="error"``): the first stops the build with its line number and the
  fix; ``"drop"`` leaves it out and counts it in the :class:`Report` by reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ChatFmtError
from ..messages import Conversation
from .render import TrainingExample, TrainingRenderer
from .sinks import OutRow, Sink
from .sources import Row, RowError
from .tally import LeftOut, Tokens

Truncation = Literal["drop", "drop-turns"]
TRUNCATIONS: tuple[str, ...] = ("drop", "drop-turns")
Invalid = Literal["error", "drop"]


@dataclass(slots=True)
class Report(Tokens):
    """What a build read, wrote and left out, and why."""

    rows_read: int = 0
    conversations: int = 0
    output_rows: int = 0
    shortened: int = 0
    turns_dropped: int = 0
    turns_untrained: int = 0
    #: The rows dropped, where each first was being its line.
    dropped: LeftOut = field(default_factory=LeftOut)

    def drop(self, reason: str, line: int, message: str) -> None:
        self.dropped.add(reason, f"line {line}", message)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows_read": self.rows_read,
            "conversations_written": self.conversations,
            "output_rows": self.output_rows,
            "tokens": self.tokens,
            "trained_tokens": self.trained_tokens,
            "trained_share": round(self.trained_share, 4),
            "rows_shortened": self.shortened,
            "turns_dropped_for_length": self.turns_dropped,
            "turns_left_untrained": self.turns_untrained,
            **self.dropped.as_dict("dropped"),
        }


class _TooLong(Exception):
    def __init__(self, tokens: int) -> None:
        self.tokens = tokens


def build(
    rows: Iterable[Row | RowError],
    renderer: TrainingRenderer,
    sink: Sink,
    *,
    max_length: int | None = None,
    truncation: Truncation = "drop",
    pack: bool = False,
    invalid: Invalid = "error",
    progress: Callable[[], None] | None = None,
) -> Report:
    """Render ``rows`` into ``sink``; the :class:`Report` of what happened. With
    ``invalid="error"`` the first bad row raises its :class:`RowError`."""
    if pack and max_length is None:
        raise ValueError("packing needs a maximum length: give max_length (--max-length)")
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation must be one of {', '.join(TRUNCATIONS)}")
    report = Report()
    packer = _Packer(sink, max_length or 0, report) if pack else None
    for row in rows:
        report.rows_read += 1
        if progress is not None:
            progress()
        if isinstance(row, RowError):
            if invalid == "error":
                raise row
            report.drop("unreadable", row.line, row.reason)
            continue
        try:
            example, dropped_turns = _fit(row.conversation, renderer, max_length, truncation)
        except _TooLong as long:
            report.drop(
                "too long",
                row.line,
                f"{long.tokens} tokens, over --max-length {max_length}",
            )
            continue
        except ChatFmtError as exc:
            if invalid == "error":
                message = " ".join(str(exc).split())
                raise RowError(
                    f"{message} (or build with --invalid drop to leave such rows out and count "
                    "them)",
                    line=row.line,
                ) from None
            report.drop("cannot be trained", row.line, " ".join(str(exc).split()))
            continue
        if dropped_turns:
            report.shortened += 1
            report.turns_dropped += dropped_turns
        report.conversations += 1
        report.tokens += len(example)
        report.trained_tokens += example.trained_tokens
        report.turns_untrained += len(example.skipped)
        if packer is not None:
            packer.add(row, example)
        else:
            sink.write(_out(row, example))
            report.output_rows += 1
    if packer is not None:
        packer.flush()
    return report


def _out(row: Row, example: TrainingExample) -> OutRow:
    return OutRow(
        ids=[row.id],
        lines=[row.line],
        input_ids=example.input_ids,
        labels=example.labels,
        seq_lengths=[len(example)],
        num_trained=example.trained_tokens,
    )


def _fit(
    conv: Conversation, renderer: TrainingRenderer, max_length: int | None, truncation: str
) -> tuple[TrainingExample, int]:
    """The example, fitted to ``max_length`` by the policy; with the rounds it dropped."""
    example = renderer.render(conv)
    if max_length is None or len(example) <= max_length:
        return example, 0
    if truncation == "drop":
        raise _TooLong(len(example))
    msgs = conv.messages
    head = 0
    while head < len(msgs) and msgs[head].role == "system":
        head += 1
    starts = [i for i in range(head + 1, len(msgs)) if msgs[i].role == "user"]
    for k, start in enumerate(starts, start=1):
        shorter = conv.model_copy(update={"messages": msgs[:head] + msgs[start:]})
        try:
            example = renderer.render(shorter)
        except ChatFmtError:
            continue  # what is left breaks a rule of the format: drop one more round
        if len(example) <= max_length:
            return example, k
    raise _TooLong(len(example))


class _Packer:
    """Examples laid end to end into rows of at most ``limit`` tokens (next fit)."""

    def __init__(self, sink: Sink, limit: int, report: Report) -> None:
        self._sink = sink
        self._limit = limit
        self._report = report
        self._row: OutRow | None = None

    def add(self, row: Row, example: TrainingExample) -> None:
        out = self._row
        if out is not None and len(out.input_ids) + len(example) > self._limit:
            self.flush()
            out = None
        if out is None:
            self._row = out = _out(row, example)
            out.input_ids = list(out.input_ids)  # grown in place by the next examples
            out.labels = list(out.labels)
            return
        out.ids.append(row.id)
        out.lines.append(row.line)
        out.input_ids.extend(example.input_ids)
        out.labels.extend(example.labels)
        out.seq_lengths.append(len(example))
        out.num_trained += example.trained_tokens

    def flush(self) -> None:
        if self._row is not None:
            self._sink.write(self._row)
            self._report.output_rows += 1
            self._row = None
