"""Every XML call syntax's grammar, judged by llama.cpp's grammar engine: what the syntax's
renderer writes is what its grammar accepts, and nothing the tools do not allow."""

from __future__ import annotations

from typing import Any

import pytest
from oracle import GrammarOracle

from chatfmt.dialects.xmlsyntax import call_grammar
from xml_syntaxes import SYNTAXES

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "unit": {"enum": ["c", "f"]},
                    "where": {"type": "object", "properties": {"lat": {"type": "number"}}},
                },
                "required": ["city", "days"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time"}},
]
ARGS: dict[str, Any] = {
    "city": "Paris <3",
    "days": 3,
    "metric": True,
    "unit": "c",
    "where": {"lat": 1.5},
}


@pytest.mark.parametrize("family", SYNTAXES)
def test_the_renderers_calls_are_the_grammars(judge: GrammarOracle, family: str) -> None:
    syntax = SYNTAXES[family]
    one = syntax.render([("get_weather", ARGS)])
    two = syntax.render([("get_weather", ARGS), ("get_time", {"any": "thing"})])
    required = call_grammar(syntax, TOOLS, required=True).gbnf
    single = call_grammar(syntax, TOOLS, required=True, single=True).gbnf
    assert judge.accepts(required, one) and judge.accepts(single, one), one
    assert judge.accepts(required, two) and not judge.accepts(single, two), two
    lazy = call_grammar(syntax, TOOLS)
    assert judge.accepts(lazy.gbnf, one)
    for wrong in (
        one.replace("get_weather", "get_weather_now"),
        one.replace(">3<", ">three<").replace("\n3\n", "\nthree\n"),  # an integer
        syntax.render([("get_weather", {"city": "Paris"})]),  # a required argument missing
        syntax.render([("get_weather", {**ARGS, "unit": "k"})]),  # not in the enum
    ):
        assert wrong != one and not judge.accepts(required, wrong), wrong
