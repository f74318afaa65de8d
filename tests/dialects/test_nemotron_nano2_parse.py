"""Nemotron Nano v2 parsing: whole, streamed in text chunks and streamed as ids agree (reasoning
included, on a stand-in vocabulary with the family's control names); calls in a ``<TOOLCALL>``
JSON list; cut-off calls incomplete; parse goldens from the model's documented output."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from goldens import check_json, check_jsonl, parse_cases, read_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from standins import standin

from chatfmt.dialects.nemotron import NemotronNano2
from chatfmt.events import (
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    event_json,
)
from chatfmt.tokenizers.base import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from streams import run_in_chunks

from test_decoding import (
    CUTS,
    assert_whole_chunks_ids_agree,
    outputs,
)

CONTROLS = list(NemotronNano2.controls)
PARTS = [
    "<think>", "</think>", "\n", "\n\n", "hm, <TOOL isopropyl\n", "\n</think>\n\n", "</thi",
    "<TOOLCALL>", "</TOOLCALL>", "<SPECIAL_12>", "<SPECIAL_11>", "[", "]", ", ", "{",
    '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", "n": [1, 2]}}]</TOOLCALL>',
    '[{"name": "f", "arguments": {}}, {"name": "g", "arguments": {"a": "x',
    '{"name": "h", "arguments": 3}', '"arguments": {"x": 1}}', "oops",
]  # fmt: skip


@pytest.fixture(scope="module")
def nano2_standin() -> Tokenizer:
    return standin("nano2-standin", CONTROLS)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), thinking=st.booleans())
def test_whole_text_chunks_and_ids_agree(
    nano2_standin: Tokenizer, data: st.DataObject, thinking: bool
) -> None:
    """As ``tests/test_decoding.py`` checks every dialect, thinking on and off."""
    dialect = NemotronNano2().with_reasoning(enabled=thinking)
    pieces = data.draw(outputs(CONTROLS, PARTS), label="pieces")
    cuts = data.draw(CUTS, label="cuts")
    assert_whole_chunks_ids_agree(dialect, nano2_standin, pieces, cuts)


_run = run_in_chunks


def _calls(*calls: tuple[str, str]) -> str:
    objects = ", ".join(f'{{"name": "{n}", "arguments": {a}}}' for n, a in calls)
    return f"<TOOLCALL>[{objects}]</TOOLCALL>"


# ==== By hand ====


def test_reasoning_then_calls() -> None:
    out = "Plan.\n</think>\n\nRunning it.\n" + _calls(("run", '{"cmd": "ls"}'), ("g", "{}"))
    dialect = NemotronNano2()
    events, result = _run(dialect, out, len(out))
    assert _run(dialect, out, 1)[0] == events
    assert events[:3] == [
        ReasoningDelta("Plan."),
        TextDelta("Running it.\n"),
        ToolCallStart(0, "call_0", "run"),
    ]
    assert events[3:5] == [ToolCallDelta(0, '{"cmd": "ls"}'), ToolCallEnd(0)]
    assert [c.name for c in result.tool_calls] == ["run", "g"]
    assert result.reasoning == "Plan." and result.finish_reason == "tool_calls"
    assert result.content == "Running it.\n"


def test_thinking_off_reads_the_answer_from_the_start() -> None:
    dialect = NemotronNano2().with_reasoning(enabled=False)
    _, result = _run(dialect, "Hello.", 2)
    assert result.content == "Hello." and result.reasoning is None


def test_a_call_is_complete_only_when_its_object_closes() -> None:
    out = "</think>" + _calls(("run", '{"cmd": "x"}'))
    cut = out[: out.index('"}') + 1]
    for length in (False, True):
        _, result = _run(NemotronNano2(), cut, 4, length=length)
        assert not result.tool_calls
        assert [(c.name, c.arguments) for c in result.incomplete_calls] == [("run", '{"cmd": "x"')]
        assert result.finish_reason == ("length" if length else "stop")


# ==== Goldens ====

CASES = parse_cases("nemotron-nano2")


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_parse_golden(case: Path) -> None:
    """Each case is a reply after the generation prompt with thinking on (it starts inside the
    thought)."""
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    dialect = NemotronNano2()
    events, streamed = _run(dialect, output, 3, length=length)
    _, whole = _run(dialect, output, max(len(output), 1), length=length)
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in events])
    message = streamed.to_openai()
    check_json(case / "expected_message.json", message)
    assert whole.to_openai() == message


def test_golden_cases_exist() -> None:
    assert len(CASES) >= 6
