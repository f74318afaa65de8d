"""The XML call grammar (Qwen3-Coder, Qwen3.5), judged by llama.cpp's grammar engine: the
calls the dialects write are accepted, what the tools do not allow is refused."""

from __future__ import annotations

from typing import Any

import pytest
from oracle import GrammarOracle
from test_calls import ARGS, TOOLS, from_trigger, output_of

from chatfmt.dialects import get_dialect

XML = ["qwen3-coder", "qwen3.5"]


def _dialect(name: str) -> Any:
    # Qwen3.5 with thinking on starts its reply inside the thought: judge the call alone.
    dialect = get_dialect(name)
    return dialect.with_reasoning(enabled=False) if name == "qwen3.5" else dialect


@pytest.mark.parametrize("name", XML)
def test_the_dialects_own_calls_are_accepted(judge: GrammarOracle, name: str) -> None:
    dialect = _dialect(name)
    out = output_of(dialect, [("get_weather", ARGS), ("get_time", {})])
    lazy = dialect.call_grammar(TOOLS)
    assert lazy.lazy
    started = from_trigger(lazy, out)
    assert started is not None and judge.accepts(lazy.gbnf, started), out
    parsed = dialect.with_tools(TOOLS).parse(out).message.tool_calls
    assert [c.name for c in parsed] == ["get_weather", "get_time"]
    assert parsed[0].arguments_dict() == ARGS


@pytest.mark.parametrize("name", XML)
def test_required_calls(judge: GrammarOracle, name: str) -> None:
    dialect = _dialect(name)
    g = dialect.call_grammar(TOOLS, required=True)
    out = output_of(dialect, [("get_weather", ARGS)])
    assert not g.lazy and judge.accepts(g.gbnf, out), out
    assert not judge.accepts(g.gbnf, "It is sunny in Paris.")
    for wrong in (
        out.replace("get_weather", "get_weather_now"),
        out.replace("\n3\n", "\nthree\n"),  # an integer
        out.replace("\n3\n", "\n9\n"),  # above the maximum
        out.replace("celsius", "kelvin"),  # not in the enum
    ):
        assert wrong != out and not judge.accepts(g.gbnf, wrong), wrong
    missing = output_of(dialect, [("get_weather", {"unit": "celsius"})])
    assert not judge.accepts(g.gbnf, missing), missing
    single = dialect.call_grammar(TOOLS, required=True, single=True)
    two = output_of(dialect, [("get_weather", ARGS), ("get_time", {})])
    assert judge.accepts(g.gbnf, two) and not judge.accepts(single.gbnf, two)


def test_thinking_first(judge: GrammarOracle) -> None:
    g = get_dialect("qwen3.5").call_grammar(TOOLS, required=True)
    call = output_of(_dialect("qwen3.5"), [("get_time", {})])
    assert judge.accepts(g.gbnf, "I need the time.\n</think>\n\n" + call)
    assert not judge.accepts(g.gbnf, call)  # the prompt opened a thought: it closes first
