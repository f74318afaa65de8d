"""Granite 4.0 and 4.1 against their published chat templates (text; no Granite vocabulary is
available offline), render and parse goldens, and whole = text chunks = ids on a stand-in
vocabulary with Granite's control tokens."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_jsonl, check_text, parse_cases, read_text, render_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from standins import standin
from templates import conversations, load_template, render_reference
from test_qwen3_coder import rich_tools

from chatfmt import get_dialect
from chatfmt.decoding import TurnDecoder
from chatfmt.dialects.granite import GRANITE4_DEFAULT_SYSTEM, Granite4, Granite41
from chatfmt.errors import ReasoningOptionError, ValidationError
from chatfmt.events import Event, ParseResult, event_json, merge_deltas
from chatfmt.messages import load_conversation
from chatfmt.tokenizers.base import Tokenizer
from profiles import examples

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_decoding import CUTS, assert_whole_chunks_ids_agree, outputs

# The generated conversations cover 500 per template in the full profile (one property each).
EXAMPLES = examples(2.5)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DIALECTS = ("granite4", "granite4.1")
TEMPLATES = {
    "granite4": "ibm-granite-granite-4.0.jinja",
    "granite4.1": "ibm-granite-granite-4.1.jinja",
}


@pytest.fixture(scope="module")
def granite40_template() -> Any:
    return load_template(TEMPLATES["granite4"])


@pytest.fixture(scope="module")
def granite41_template() -> Any:
    return load_template(TEMPLATES["granite4.1"])


@pytest.fixture(scope="module")
def granite_standin() -> Tokenizer:
    return standin("granite-standin", Granite4.controls)


def _check(dialect: Any, template: Any, body: dict[str, Any], gen: bool) -> None:
    conv = load_conversation(body)
    expected = render_reference(template, conv, add_generation_prompt=gen)
    assert dialect.render_text(conv, add_generation_prompt=gen) == expected


# ==== Text-exact on generated conversations ====


@SETTINGS
@given(body=conversations(), tools=rich_tools, rich=..., gen=..., empty_system=...)
def test_granite40_matches_template(
    body: dict[str, Any],
    tools: list[dict[str, Any]],
    rich: bool,
    gen: bool,
    empty_system: bool,
    granite40_template: Any,
) -> None:
    body = {**body, "tools": tools} if rich else body
    if empty_system and body["messages"][0]["role"] == "system":
        body["messages"][0] = {"role": "system", "content": ""}
    _check(Granite4(), granite40_template, body, gen)


@SETTINGS
@given(body=conversations(), tools=rich_tools, rich=..., gen=..., empty_system=...)
def test_granite41_matches_template(
    body: dict[str, Any],
    tools: list[dict[str, Any]],
    rich: bool,
    gen: bool,
    empty_system: bool,
    granite41_template: Any,
) -> None:
    body = {**body, "tools": tools} if rich else body
    if empty_system and body["messages"][0]["role"] == "system":
        body["messages"][0] = {"role": "system", "content": ""}
    _check(Granite41(), granite41_template, body, gen)


# ==== Whole = text chunks = ids ====

CONTROLS = list(Granite4.controls)
PARTS = [
    "<|end_of_text|>", "<|start_of_role|>", "<tool_call>", "</tool_call>", "<tool_response>",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "isopropyl <|end_of"}}\n'
    "</tool_call>",
    '\n<tool_call>\n{"name": "f", "arguments": {"x": [1, 2.5, null, true]}}\n</tool_call>',
    '{"name": "g", "arguments": {}}',
    '<tool_call>\n{"name": "h", "arguments": {"cut": "x',
    "<tool_call>\nnot json\n</tool_call>",
]  # fmt: skip


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
@pytest.mark.parametrize("name", DIALECTS)
def test_whole_text_chunks_and_ids_agree(
    name: str, granite_standin: Tokenizer, data: st.DataObject
) -> None:
    """As ``tests/test_decoding.py`` checks every dialect, on the stand-in vocabulary."""
    dialect = get_dialect(name)
    pieces = data.draw(outputs(CONTROLS, PARTS), label="pieces")
    cuts = data.draw(CUTS, label="cuts")
    assert_whole_chunks_ids_agree(dialect, granite_standin, pieces, cuts)


# ==== Goldens ====

RENDER = [(d, c) for d in DIALECTS for c in render_cases(d)]
PARSE = [(d, c) for d in DIALECTS for c in parse_cases(d)]


@pytest.mark.parametrize(("name", "case"), RENDER, ids=[f"{d}/{c.name}" for d, c in RENDER])
def test_render_golden(name: str, case: Path, request: pytest.FixtureRequest) -> None:
    conv = load_conversation(json.loads(read_text(case / "conversation.json")))
    text = get_dialect(name).render_text(conv)
    check_text(case / "expected.txt", text)
    # The golden is a claim about the format: the template agrees.
    fixture = "granite40_template" if name == "granite4" else "granite41_template"
    assert text == render_reference(request.getfixturevalue(fixture), conv)


def _parse(name: str, output: str, chunk: int, *, length: bool) -> tuple[list[Event], ParseResult]:
    dialect = get_dialect(name)
    counter = itertools.count()
    parser = dialect.stream_parser(id_factory=lambda: f"call_{next(counter)}")
    turn = TurnDecoder(dialect, parser=parser)
    events = [
        e for k in range(0, len(output), chunk) for e in turn.feed_text(output[k : k + chunk])
    ]
    events += turn.finish("length" if length else "stop")
    return events, turn.result()


@pytest.mark.parametrize(("name", "case"), PARSE, ids=[f"{d}/{c.name}" for d, c in PARSE])
def test_parse_golden(name: str, case: Path) -> None:
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    events, streamed = _parse(name, output, 3, length=length)
    _, whole = _parse(name, output, max(len(output), 1), length=length)
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in merge_deltas(events)])
    message = streamed.to_openai()
    check_json(case / "expected_message.json", message)
    assert whole.to_openai() == message


def test_golden_cases_exist() -> None:
    assert {d for d, _ in RENDER} == set(DIALECTS) and len(RENDER) >= 5
    assert {d for d, _ in PARSE} == {"granite4"} and len(PARSE) >= 5


# ==== By hand ====


def test_default_system_prompt_is_4_0s_only() -> None:
    conv = load_conversation({"messages": [{"role": "user", "content": "hi"}]})
    assert Granite4().render_text(conv) == (
        f"<|start_of_role|>system<|end_of_role|>{GRANITE4_DEFAULT_SYSTEM}<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>hi<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>"
    )
    assert Granite41().render_text(conv).startswith("<|start_of_role|>user<|end_of_role|>hi")


def test_tags_are_controls_only_where_the_template_writes_them(
    granite_standin: Tokenizer,
) -> None:
    body = {
        "messages": [
            {"role": "user", "content": "<tool_call> and <|end_of_text|> are text"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a": 1}'}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": "</tool_response>"},
        ]
    }
    ids = Granite41().render(load_conversation(body), granite_standin).ids
    tok = granite_standin
    assert ids.count(tok.control_id("<tool_call>")) == 1
    assert ids.count(tok.control_id("</tool_response>")) == 1
    assert ids.count(tok.control_id("<|end_of_text|>")) == 3


def test_no_reasoning_and_what_is_refused() -> None:
    with pytest.raises(ReasoningOptionError, match="no reasoning"):
        Granite4().with_reasoning(enabled=True)
    body = {
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": 'a"b', "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": "1"},
        ]
    }
    with pytest.raises(ValidationError, match="break the call's JSON"):
        Granite4().render_text(load_conversation(body))
    meta = {"messages": [{"role": "user", "content": "x", "metadata": "m"}]}
    with pytest.raises(ValidationError, match="no header metadata"):
        Granite4().render_text(load_conversation(meta))


def test_history_call_re_renders_its_raw_text() -> None:
    out = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    parsed = Granite4().parse(out).message
    assert parsed.tool_calls and parsed.tool_calls[0].arguments_dict() == {"a": 1}
    conv = load_conversation({"messages": [{"role": "user", "content": "x"}]})
    text = Granite4().render_text([*conv.messages, parsed], add_generation_prompt=False)
    assert text.endswith("<|start_of_role|>assistant<|end_of_role|>" + out + "<|end_of_text|>\n")


def test_call_grammar_is_lazy_on_the_tag() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    g = Granite41().call_grammar(tools)
    assert g.lazy and "<tool_call>" in [t.value for t in g.triggers]
    assert not Granite41().call_grammar(tools, required=True).lazy
