"""Parse goldens: model output → events → message, for every dialect, streamed and whole.

Each case in ``tests/golden/<dialect>/parse/`` is output as a model wrote it (control tokens
written out). It is parsed through the decode pipeline in 3-character chunks; the merged events
and the final message must equal the golden files, and parsing the whole output at once must
give the same message. A case whose name ends in ``_length`` was cut by ``max_tokens``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from goldens import check_json, check_jsonl, parse_cases, read_text

from chatfmt import get_dialect
from chatfmt.decoding import TurnDecoder
from chatfmt.events import Event, ParseResult, event_json, merge_deltas

DIALECTS = ("chatml", "qwen2.5", "chatglm3", "glm4", "harmony", "mistral-v11", "qwen3")
CASES = [(d, case) for d in DIALECTS for case in parse_cases(d)]


def _ids() -> itertools.count[int]:
    return itertools.count()


def _parse(
    dialect_name: str, output: str, chunk: int, *, length: bool
) -> tuple[list[Event], ParseResult]:
    dialect = get_dialect(dialect_name)
    counter = _ids()
    parser = dialect.stream_parser(id_factory=lambda: f"call_{next(counter)}")  # type: ignore[call-arg]
    turn = TurnDecoder(dialect, parser=parser)
    events = [
        e for k in range(0, len(output), chunk) for e in turn.feed_text(output[k : k + chunk])
    ]
    events += turn.finish("length" if length else "stop")
    return events, turn.result()


@pytest.mark.parametrize(("dialect", "case"), CASES, ids=[f"{d}/{c.name}" for d, c in CASES])
def test_parse_golden(dialect: str, case: Path) -> None:
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    events, streamed = _parse(dialect, output, 3, length=length)
    _, whole = _parse(dialect, output, max(len(output), 1), length=length)
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in merge_deltas(events)])
    message = streamed.to_openai()
    check_json(case / "expected_message.json", message)
    assert whole.to_openai() == message


def test_parse_cases_exist() -> None:
    assert {d for d, _ in CASES} == set(DIALECTS)
    assert len(CASES) >= 15
