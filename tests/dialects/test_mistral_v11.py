"""Mistral v11 against ``mistral-common``'s ``InstructTokenizerV11``: every rendered id on the
goldens and on generated conversations, the vocabulary's controls, and the call syntax."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_text, read_text, render_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatfmt import get_dialect
from chatfmt.messages import load_conversation
from chatfmt.tokenizers.base import Tokenizer
from profiles import examples

pytest.importorskip("mistral_common", reason="mistral-common (the reference) is not installed")

from mistral_common.tokens.tokenizers.instruct import InstructTokenizerV11
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
from test_mistral import conversations, reference_ids

DIALECT = get_dialect("mistral-v11")


@pytest.fixture(scope="module")
def reference(mistral_v11_file: Path) -> Any:
    ref = MistralTokenizer.from_file(str(mistral_v11_file))
    assert isinstance(ref.instruct_tokenizer, InstructTokenizerV11)
    return ref


@pytest.mark.parametrize("case", render_cases("mistral-v11"), ids=lambda c: c.name)
def test_render_golden(case: Path, mistral_v11_tok: Tokenizer, reference: Any) -> None:
    conv = load_conversation(json.loads(read_text(case / "conversation.json")))
    prompt = DIALECT.render(conv, mistral_v11_tok)
    check_text(case / "expected.txt", prompt.text)
    check_json(case / "expected_ids.json", prompt.ids, compact=True)
    assert prompt.ids == reference_ids(reference, conv)
    assert DIALECT.render_text(conv) == prompt.text


def test_goldens_exist() -> None:
    assert len(render_cases("mistral-v11")) >= 6


@settings(max_examples=examples(2.5), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_conversations_match_the_reference(
    mistral_v11_tok: Tokenizer, reference: Any, data: st.DataObject
) -> None:
    conv = data.draw(conversations(True), label="conversation")
    assert DIALECT.render(conv, mistral_v11_tok).ids == reference_ids(reference, conv)


def test_controls_are_the_vocabularys(mistral_v11_tok: Tokenizer, reference: Any) -> None:
    raw = reference.instruct_tokenizer.tokenizer
    for token in DIALECT.controls:
        assert mistral_v11_tok.control_id(token) == raw.get_special_token(token), token
    typed = "[TOOL_CALLS]f[CALL_ID]abcdefghi[ARGS]{}"
    assert mistral_v11_tok.encode_text(typed) == raw.encode(typed, bos=False, eos=False)
    assert not set(mistral_v11_tok.encode_text(typed)) & {9, 32, 33}


def test_calls_render_between_controls_and_parse_back() -> None:
    call = {"id": "abcdefghi", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Zürich"}'}}  # fmt: skip
    conv = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me see.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "sunny"},
    ]
    text = DIALECT.render_text(conv)
    reply = '[TOOL_CALLS]get_weather[CALL_ID]abcdefghi[ARGS]{"city": "Zürich"}</s>'
    assert "[INST]Weather?[/INST]Let me see." + reply in text
    parsed = DIALECT.parse("Let me see." + reply).message
    assert parsed.content == "Let me see."
    [got] = parsed.tool_calls or ()
    assert (got.id, got.name, got.arguments_dict()) == (
        "abcdefghi",
        "get_weather",
        {"city": "Zürich"},
    )


def test_forced_call_prefix_parses_as_the_named_call() -> None:
    from chatfmt.decoding import TurnDecoder
    from chatfmt.segments import Control

    turn = TurnDecoder(DIALECT)
    prefix = DIALECT.forced_call_prefix("get_time")
    turn.prefill([p if isinstance(p, Control) else p.text for p in prefix])
    turn.feed_text('{"tz": "UTC"}</s>')
    turn.finish()
    [call] = turn.result().tool_calls
    assert (call.name, call.arguments_dict()) == ("get_time", {"tz": "UTC"})


def test_a_repeated_or_malformed_id_gets_a_fresh_one_so_results_can_answer_apart() -> None:
    out = "[TOOL_CALLS]f[CALL_ID]abcdefghi[ARGS]{}[TOOL_CALLS]g[CALL_ID]abcdefghi[ARGS]{}</s>"
    result = DIALECT.parse(out)
    first, second = result.tool_calls
    assert first.id == "abcdefghi" and second.id != "abcdefghi"
    assert result.warnings == ["tool call 1: id 'abcdefghi' repeats; a new one is used"]
    # The turn renders back with its results, as the reference would take it.
    history = [
        {"role": "user", "content": "go"},
        result.message.to_openai(),
        {"role": "tool", "tool_call_id": first.id, "content": "1"},
        {"role": "tool", "tool_call_id": second.id, "content": "2"},
    ]
    DIALECT.validate(load_conversation(history))
    [malformed] = DIALECT.parse("[TOOL_CALLS]f[CALL_ID]short[ARGS]{}").tool_calls
    assert malformed.id != "short"


def test_a_call_cut_by_the_next_call_is_incomplete_and_the_next_one_kept() -> None:
    result = DIALECT.parse('[TOOL_CALLS]f[ARGS]{"a": ["x", [TOOL_CALLS]g[ARGS]{"b": 2}</s>')
    assert [(c.name, c.arguments_dict()) for c in result.tool_calls] == [("g", {"b": 2})]
    assert [(c.index, c.name, c.arguments) for c in result.incomplete_calls] == [
        (0, "f", '{"a": ["x"')
    ]
    assert "tool call 0 is unterminated" in result.warnings[0]


def test_list_style_calls_degrade_to_text_as_soon_as_the_name_cannot_be_one() -> None:
    from chatfmt.decoding import TurnDecoder

    turn = TurnDecoder(DIALECT)
    events = turn.feed_text('[TOOL_CALLS][{"name": "f"')
    assert [getattr(e, "text", None) for e in events] == ['[TOOL_CALLS][{"name": "f"']
    turn.finish()
    assert turn.result().warnings == [
        "the text after [TOOL_CALLS] is not a function name; kept as text"
    ]
