"""Streaming helpers for dialect tests: one turn through the decode pipeline, and what two runs
of the same output must agree on (everything but the random call ids)."""

from __future__ import annotations

import itertools
from typing import Any

from chatfmt.decoding import TurnDecoder
from chatfmt.dialects.base import Dialect
from chatfmt.events import Event, ParseResult, ToolCallStart, merge_deltas
from chatfmt.tokenizers.base import Tokenizer


def outcome(events: list[Event], result: ParseResult) -> Any:
    """The merged events and the parsed turn, call ids blanked."""
    evs = [
        ToolCallStart(e.index, "", e.name) if isinstance(e, ToolCallStart) else e
        for e in merge_deltas(events)
    ]
    msgs = [m.to_openai() for m in result.messages]
    for m in msgs:
        for c in m.get("tool_calls") or ():
            c["id"] = ""
    return evs, msgs, result.finish_reason, result.warnings


def run_turn(dialect: Dialect, tokenizer: Tokenizer | None, feed: list[Any]) -> Any:
    """:func:`outcome` of feeding ``feed`` (ids one at a time with a tokenizer, else text
    chunks) and finishing."""
    turn = TurnDecoder(dialect, tokenizer)
    events = [e for x in feed for e in (turn.feed_ids([x]) if tokenizer else turn.feed_text(x))]
    return outcome(events + turn.finish(), turn.result())


def run_in_chunks(
    dialect: Dialect, output: str, chunk: int, *, length: bool = False
) -> tuple[list[Event], ParseResult]:
    """The merged events and result of ``output`` fed ``chunk`` characters at a time, call ids
    numbered from ``call_0`` (what the parse goldens record)."""
    counter = itertools.count()
    parser = dialect.stream_parser(id_factory=lambda: f"call_{next(counter)}")
    turn = TurnDecoder(dialect, parser=parser)
    events = [
        e for k in range(0, len(output), chunk) for e in turn.feed_text(output[k : k + chunk])
    ]
    events += turn.finish("length" if length else "stop")
    return merge_deltas(events), turn.result()
