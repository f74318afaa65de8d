"""``thought_first`` with a bracket close tag (Magistral's ``[THINK]`` … ``[/THINK]``), judged by
llama.cpp's grammar engine; the ``<think>`` form is unchanged."""

from __future__ import annotations

import json

from oracle import GrammarOracle

from chatfmt.dialects import get_dialect
from chatfmt.grammar import WORDS, thought_first

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CALL = "[TOOL_CALLS]get_weather[ARGS]" + json.dumps({"city": "Paris"})


def test_a_required_call_may_follow_a_bracket_thought(judge: GrammarOracle) -> None:
    g = get_dialect("magistral").call_grammar([TOOL], required=True)
    assert not g.lazy and {"[THINK]", "[/THINK]"} <= set(g.preserved)
    for ok in (CALL, "[THINK]Paris, so [a] [/x] call.[/THINK]" + CALL, "[THINK][/THINK]\n" + CALL):
        assert judge.accepts(g.gbnf, ok), ok
    for wrong in ("[THINK]no close" + CALL, "[THINK]x[/THINK]It is sunny.", "Sunny."):
        assert not judge.accepts(g.gbnf, wrong), wrong


def test_an_answer_in_words_may_follow_a_bracket_thought(judge: GrammarOracle) -> None:
    g = get_dialect("magistral").answer_grammar()
    assert g is not None
    assert judge.accepts(g.gbnf, "[THINK]hm[/THINK]It is sunny.")
    assert not judge.accepts(g.gbnf, "[THINK]hm[/THINK]" + CALL)


def test_the_xml_form() -> None:
    g = thought_first(WORDS, "<think>", "</think>")
    assert g.gbnf.startswith(
        'root ::= ( "<think>" ( [^<] | "<"+ [^</] | "<"+ "/" [^t] )* "</think>" [\\n]* )? '
        "answer-after-thought\n"
    )
