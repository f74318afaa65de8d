"""MiniMax-M2 parsing: whole, streamed in text chunks and streamed as ids agree (reasoning
included, on a stand-in vocabulary with MiniMax's control names); values typed by the tools'
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
from streams import run_in_chunks, run_turn

from chatfmt import get_dialect
from chatfmt.dialects.minimax import MiniMaxM2
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
                    "force": {"type": "boolean"},
                    "env": {"type": ["object", "null"]},
                },
            },
        },
    }
]
CONTROLS = list(MiniMaxM2.controls)
PARTS = [
    "<think>", "</think>", "\n\n", "hm, <minimax:tool isopropyl\n\n", "\n</think>\n\n", "</thi",
    "[e~[", "]~b]", "<minimax:tool_call>", "</minimax:tool_call>",
    '\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris </par'
    '</parameter>\n<parameter name="n">[1, 2]</parameter>\n</invoke>\n</minimax:tool_call>',
    '<minimax:tool_call>\n<invoke name="f">\n</invoke>\n<invoke name="g">\n</invoke>\n',
    '<minimax:tool_call>\n<invoke name="h">\n<parameter name="cut">x',
    '<invoke name="', "</parameter>", "<minimax:tool_call>oops", '<invoke name="bad>',
]  # fmt: skip


@pytest.fixture(scope="module")
def minimax_standin() -> Tokenizer:
    return standin("minimax-standin", CONTROLS)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_whole_text_chunks_and_ids_agree(minimax_standin: Tokenizer, data: st.DataObject) -> None:
    """As ``tests/test_decoding.py`` checks every dialect."""
    dialect = MiniMaxM2()
    pieces = data.draw(outputs(CONTROLS, PARTS), label="pieces")
    cuts = data.draw(CUTS, label="cuts")
    assert_whole_chunks_ids_agree(dialect, minimax_standin, pieces, cuts)


_run = run_in_chunks


def invoke(name: str, **params: str) -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params.items())
    return f'<invoke name="{name}">\n{body}</invoke>\n'


# ==== By hand ====


def test_values_typed_by_the_request_tools() -> None:
    out = (
        "Plan.\n</think>\n\nRunning it.\n<minimax:tool_call>\n"
        + invoke("run", cmd="ls -l\n", times="3", force="true", env="null")
        + "</minimax:tool_call>"
    )
    dialect = MiniMaxM2().with_tools(TOOLS)
    events, result = _run(dialect, out, len(out))
    assert _run(dialect, out, 1)[0] == events
    assert events[:3] == [
        ReasoningDelta("Plan."),
        TextDelta("Running it."),
        ToolCallStart(0, "call_0", "run"),
    ]
    args = '{"cmd": "ls -l\\n", "times": 3, "force": true, "env": null}'
    assert events[3:][:2] == [ToolCallDelta(0, args), ToolCallEnd(0)]
    assert result.content == "Running it." and result.reasoning == "Plan."
    assert result.finish_reason == "tool_calls"
    # Without the tools: what looks like JSON is JSON, the rest strings.
    _, plain = _run(MiniMaxM2(), out, len(out))
    assert plain.tool_calls[0].arguments_dict() == {
        "cmd": "ls -l\n", "times": 3, "force": True, "env": None
    }  # fmt: skip
    assert (
        _run(MiniMaxM2().with_tools(TOOLS), out.replace(">3<", ">three<"), 5)[1]
        .tool_calls[0]
        .arguments_dict()["times"]
        == "three"
    )  # not an integer: kept as written


def test_parameters_stream_as_they_close() -> None:
    out = "</think>" + "<minimax:tool_call>\n" + invoke("f", a="1", b="x") + "</minimax:tool_call>"
    parser = MiniMaxM2().stream_parser(id_factory=lambda: "id")
    deltas = []
    for ch in out:
        deltas += [e.arguments for e in parser.feed(ch) if isinstance(e, ToolCallDelta)]
    assert deltas == ['{"a": 1', ', "b": "x"', "}"]


def test_a_call_is_complete_only_at_its_invoke_end() -> None:
    head = "</think>\n\n<minimax:tool_call>\n" + invoke("f", a="1")
    cut = head[: -len("</invoke>\n")]
    for length in (False, True):
        _, result = _run(MiniMaxM2(), cut, 4, length=length)
        assert not result.tool_calls
        assert [(c.name, c.arguments) for c in result.incomplete_calls] == [("f", '{"a": 1')]
        assert result.finish_reason == ("length" if length else "stop")
    # A second call that is cut leaves the first one whole.
    _, result = _run(MiniMaxM2(), head + '<invoke name="g">\n<parameter name="b">2', 3)
    assert [c.name for c in result.tool_calls] == ["f"]
    assert [c.name for c in result.incomplete_calls] == ["g"]
    assert result.finish_reason == "stop"


# ==== Goldens ====

CASES = parse_cases("minimax-m2")


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_parse_golden(case: Path) -> None:
    """Each case is a reply after the generation prompt (it starts inside the thought); a
    ``tools.json`` beside it is the request's tools, which type the values."""
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    dialect = MiniMaxM2()
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


def test_a_repeated_parameter_makes_the_call_incomplete() -> None:
    """Arguments holding a key twice ({"a": 1, "a": 2}) are not a call a client may run:
    strict JSON readers reject them, lenient ones keep either value."""
    out = (
        "</think>\n"
        "\n"
        "<minimax:tool_call>\n"
        '<invoke name="f">\n'
        '<parameter name="a">1</parameter>\n'
        '<parameter name="a">2</parameter>\n'
        "</invoke>\n"
        "</minimax:tool_call>"
    )
    dialect = get_dialect("minimax-m2")
    result = dialect.parse(out)
    assert not result.message.tool_calls and result.finish_reason == "stop"
    assert [c.arguments for c in result.incomplete_calls] == ['{"a": 1']
    warning = "tool call 0 repeats parameter 'a'; it is incomplete and not runnable"
    assert warning in result.warnings
    assert run_turn(dialect, None, list(out)) == run_turn(dialect, None, [out])
