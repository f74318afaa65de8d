"""Nemotron 3 Nano parsing: whole, streamed in text chunks and streamed as ids agree (reasoning
included, on a stand-in vocabulary with the family's control names); values typed by the tools'
schemas; cut-off calls incomplete; parse goldens from the model's documented output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from goldens import check_json, check_jsonl, parse_cases, read_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from standins import standin

from chatfmt.dialects.nemotron import Nemotron3
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

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "parameters": {
                "type": "object",
                "properties": {"cmd": {"type": "string"}, "times": {"type": "integer"}},
            },
        },
    }
]
CONTROLS = list(Nemotron3.controls)
PARTS = [
    "<think>", "</think>", "\n", "\n\n", "hm, <tool isopropyl\n", "\n</think>\n", "</thi",
    "<tool_call>", "</tool_call>", "<|im_end|>",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis </par\n</parameter>\n"
    "<parameter=n>\n[1, 2]\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=f>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n",
    "<tool_call>\n<function=h>\n<parameter=cut>\nx",
    "<function=", "</parameter>", "<tool_call>oops", "<function=bad>",
]  # fmt: skip


@pytest.fixture(scope="module")
def nemotron3_standin() -> Tokenizer:
    return standin("nemotron3-standin", CONTROLS)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), thinking=st.booleans())
def test_whole_text_chunks_and_ids_agree(
    nemotron3_standin: Tokenizer, data: st.DataObject, thinking: bool
) -> None:
    """As ``tests/test_decoding.py`` checks every dialect, thinking on and off."""
    dialect = Nemotron3().with_reasoning(enabled=thinking)
    pieces = data.draw(outputs(CONTROLS, PARTS), label="pieces")
    cuts = data.draw(CUTS, label="cuts")
    assert_whole_chunks_ids_agree(dialect, nemotron3_standin, pieces, cuts)


_run = run_in_chunks


def _call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>\n"


# ==== By hand ====


def test_reasoning_then_typed_call() -> None:
    out = "Plan.\n</think>\nRunning it.\n" + _call("run", cmd="ls -l", times="3")
    dialect = Nemotron3().with_tools(TOOLS)
    events, result = _run(dialect, out, len(out))
    assert _run(dialect, out, 1)[0] == events
    assert events[:3] == [
        ReasoningDelta("Plan."),
        TextDelta("Running it."),  # the layout newline before the call is dropped
        ToolCallStart(0, "call_0", "run"),
    ]
    assert events[3:5] == [ToolCallDelta(0, '{"cmd": "ls -l", "times": 3}'), ToolCallEnd(0)]
    assert result.reasoning == "Plan." and result.finish_reason == "tool_calls"


def test_thinking_off_reads_the_answer_from_the_start() -> None:
    dialect = Nemotron3().with_reasoning(enabled=False)
    _, result = _run(dialect, "Hello.", 2)
    assert result.content == "Hello." and result.reasoning is None


def test_a_call_is_complete_only_at_its_function_end() -> None:
    head = "</think>\n" + _call("run", cmd="x")
    cut = head[: head.index("</function>")]
    for length in (False, True):
        _, result = _run(Nemotron3().with_tools(TOOLS), cut, 4, length=length)
        assert not result.tool_calls
        assert [(c.name, c.arguments) for c in result.incomplete_calls] == [("run", '{"cmd": "x"')]
        assert result.finish_reason == ("length" if length else "stop")


# ==== Goldens ====

CASES = parse_cases("nemotron3")


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_parse_golden(case: Path) -> None:
    """Each case is a reply after the generation prompt with thinking on (it starts inside the
    thought); a ``tools.json`` beside it is the request's tools, which type the values."""
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    dialect = Nemotron3()
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
