"""Gemma 4 parsing: whole, streamed in text chunks and streamed as ids agree (reasoning
included, on a stand-in vocabulary with Gemma 4's control names: no Gemma 4 vocabulary is
available offline); bare values typed by the tools' schemas; cut-off calls incomplete; parse
goldens from the template's own call notation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from goldens import check_json, check_jsonl, parse_cases, read_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from standins import standin
from streams import run_in_chunks, run_turn

from chatfmt import get_dialect
from chatfmt.dialects.gemma4 import Gemma4
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
from test_decoding import CUTS, assert_whole_chunks_ids_agree, outputs

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "parameters": {
                "type": "object",
                "properties": {
                    "cmd": {"type": "string"},
                    "times": {"type": "integer"},
                    "tag": {"type": "string"},
                },
            },
        },
    }
]
CONTROLS = list(Gemma4.controls)
PARTS = [
    "<|channel>", "thought\n", "<channel|>", "\n\n", "hm, <|tool isopropyl\n\n", "<channel",
    "<turn|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<|tool_response>", "call:",
    '<|tool_call>call:get_weather{city:<|"|>Paris, <tool_call|> "FR"<|"|>,days:3,'
    "x:[1,2.5,None,true],o:{a:<|\"|>b<|\"|>}}<tool_call|>",
    "<|tool_call>call:f{}<tool_call|><|tool_call>call:g{n:-1e+20}<tool_call|>",
    '<|tool_call>call:h{cut:<|"|>x', "<|tool_call>call:bad name{", "<|tool_call>oops",
    "<|tool_call>call:k{a:1,,b:2}<tool_call|>", "<|tool_call>call:m{a:[1}<tool_call|>",
]  # fmt: skip


@pytest.fixture(scope="module")
def gemma4_standin() -> Tokenizer:
    return standin("gemma4-standin", CONTROLS)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), thinking=st.booleans())
def test_whole_text_chunks_and_ids_agree(
    gemma4_standin: Tokenizer, data: st.DataObject, thinking: bool
) -> None:
    """As ``tests/test_decoding.py`` checks every dialect."""
    dialect = Gemma4().with_reasoning(enabled=thinking)
    pieces = data.draw(outputs(CONTROLS, PARTS), label="pieces")
    cuts = data.draw(CUTS, label="cuts")
    assert_whole_chunks_ids_agree(dialect, gemma4_standin, pieces, cuts)


_run = run_in_chunks


# ==== By hand ====


def test_a_thought_then_a_call_typed_by_the_request_tools() -> None:
    out = (
        "<|channel>thought\nPlan.\n<channel|>Running it."
        '<|tool_call>call:run{cmd:<|"|>ls -l\n<|"|>,tag:7,times:3}<tool_call|><|tool_response>'
    )
    dialect = Gemma4().with_tools(TOOLS)
    events, result = _run(dialect, out, len(out))
    assert _run(dialect, out, 1)[0] == events
    assert events[:3] == [
        ReasoningDelta("Plan."),
        TextDelta("Running it."),
        ToolCallStart(0, "call_0", "run"),
    ]
    args = '{"cmd": "ls -l\\n", "tag": "7", "times": 3}'
    assert events[3:5] == [ToolCallDelta(0, args), ToolCallEnd(0)]
    assert result.finish_reason == "tool_calls" and result.reasoning == "Plan."
    # Without the tools a bare 7 is a number.
    assert Gemma4().parse(out).tool_calls[0].arguments_dict()["tag"] == 7


def test_members_stream_as_they_close() -> None:
    out = '<|tool_call>call:f{a:1,b:<|"|>x,y<|"|>,c:{d:[1,2]}}<tool_call|>'
    parser = Gemma4().stream_parser(id_factory=lambda: "id")
    deltas = []
    for ch in out:
        deltas += [e.arguments for e in parser.feed(ch) if isinstance(e, ToolCallDelta)]
    assert deltas == ['{"a": 1', ', "b": "x,y"', ', "c": {"d": [1, 2]}', "}"]


def test_a_call_is_complete_when_its_arguments_close() -> None:
    head = '<|tool_call>call:f{a:1,b:<|"|>x<|"|>}'
    for length in (False, True):
        _, result = _run(Gemma4(), head[:-1], 4, length=length)
        assert not result.tool_calls
        assert [(c.name, c.arguments) for c in result.incomplete_calls] == [("f", '{"a": 1')]
        assert result.finish_reason == ("length" if length else "stop")
    _, result = _run(Gemma4(), head, 3)
    assert [c.name for c in result.tool_calls] == ["f"] and result.finish_reason == "tool_calls"


# ==== Goldens ====

CASES = parse_cases("gemma4")


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_parse_golden(case: Path) -> None:
    """Each case is a reply after the generation prompt (thinking on: the reply may open its
    thought); a ``tools.json`` beside it is the request's tools, which type bare values."""
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    dialect = Gemma4().with_reasoning(enabled=True)
    if (case / "tools.json").is_file():
        dialect = dialect.with_tools(json.loads(read_text(case / "tools.json")))
    events, streamed = _run(dialect, output, 3, length=length)
    _, whole = _run(dialect, output, max(len(output), 1), length=length)
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in events])
    message = streamed.to_openai()
    check_json(case / "expected_message.json", message)
    assert whole.to_openai() == message


def test_golden_cases_exist() -> None:
    assert len(CASES) >= 6


def test_a_repeated_argument_makes_the_call_incomplete() -> None:
    """Arguments holding a key twice ({"a": 1, "a": 2}) are not a call a client may run:
    strict JSON readers reject them, lenient ones keep either value."""
    out = "<|tool_call>call:f{a:1,a:2}<tool_call|>"
    dialect = get_dialect("gemma4")
    result = dialect.parse(out)
    assert not result.message.tool_calls and result.finish_reason == "stop"
    assert [c.arguments for c in result.incomplete_calls] == ['{"a": 1']
    assert "tool call 0 repeats argument 'a'; it is incomplete and not runnable" in result.warnings
    assert run_turn(dialect, None, list(out)) == run_turn(dialect, None, [out])
