"""Nemotron 3 Nano against its published chat template (text; no Nemotron vocabulary is
available offline) and its render goldens; the history rule and what is refused, by hand."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from goldens import check_text, read_text, render_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from templates import conversations, load_template, render_reference
from test_qwen3_coder import rich_tools

from chatfmt import get_dialect
from chatfmt.dialects.nemotron import Nemotron3
from chatfmt.errors import ValidationError
from chatfmt.messages import load_conversation
from chatfmt.segments import Block
from chatfmt.tokenizers.base import Tokenizer
from profiles import examples

# The generated conversations cover 500 for this family in the full profile: two properties
# of half each.
EXAMPLES = examples(1.25)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def nemotron3_template() -> Any:
    return load_template("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja")


def dialect_for(thinking: bool, truncate: bool) -> Nemotron3:
    dialect = Nemotron3().with_reasoning(enabled=thinking)
    assert isinstance(dialect, Nemotron3)
    if not truncate:
        dialect = copy.copy(dialect)
        dialect.truncate_history_thinking = False
    return dialect


def _check(body: dict[str, Any], gen: bool, thinking: bool, truncate: bool, template: Any) -> None:
    conv = load_conversation(body)
    expected = render_reference(
        template,
        conv,
        add_generation_prompt=gen,
        none_content="",
        enable_thinking=thinking,
        truncate_history_thinking=truncate,
    )
    assert dialect_for(thinking, truncate).render_text(conv, add_generation_prompt=gen) == expected


# ==== Text-exact on generated conversations ====


@SETTINGS
@given(body=conversations(), tools=rich_tools, rich=..., gen=..., truncate=...)
def test_nemotron3_thinking_matches_template(
    body: dict[str, Any],
    tools: list[dict[str, Any]],
    rich: bool,
    gen: bool,
    truncate: bool,
    nemotron3_template: Any,
) -> None:
    _check({**body, "tools": tools} if rich else body, gen, True, truncate, nemotron3_template)


# Content that holds the thought tags a client may have left in it (the template cuts at them).
_tagged = st.sampled_from(["", "<think>", "</think>", "<think>x</think>", " a</think> b\n"])


@SETTINGS
@given(body=conversations(), tools=rich_tools, rich=..., gen=..., truncate=..., tags=st.data())
def test_nemotron3_not_thinking_matches_template(
    body: dict[str, Any],
    tools: list[dict[str, Any]],
    rich: bool,
    gen: bool,
    truncate: bool,
    tags: st.DataObject,
    nemotron3_template: Any,
) -> None:
    for m in body["messages"]:
        if m["role"] == "assistant":
            m["content"] = tags.draw(_tagged) + m["content"] + tags.draw(_tagged)
    _check({**body, "tools": tools} if rich else body, gen, False, truncate, nemotron3_template)


# ==== Goldens ====


@pytest.mark.parametrize("case", render_cases("nemotron3"), ids=lambda p: p.name)
def test_render_golden(case: Path, nemotron3_template: Any) -> None:
    body = json.loads(read_text(case / "conversation.json"))
    conv = load_conversation(body)
    thinking = body.get("enable_thinking", True)
    text = get_dialect("nemotron3").with_reasoning(enabled=thinking).render_text(conv)
    check_text(case / "expected.txt", text)
    # The golden is a claim about the format: the template agrees.
    expected = render_reference(nemotron3_template, conv, none_content="", enable_thinking=thinking)
    assert text == expected


def test_render_cases_exist() -> None:
    assert len(render_cases("nemotron3")) >= 3


# ==== By hand ====


def _loop() -> dict[str, Any]:
    call = {"id": "c", "function": {"name": "f", "arguments": '{"n": 1, "s": "x"}'}}
    return {
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": "", "reasoning_content": "r2", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": "42"},
            {"role": "assistant", "content": "done", "reasoning_content": "r3"},
        ]
    }


def test_history_rule_empties_thoughts_before_the_last_user_message() -> None:
    text = Nemotron3().render_text(load_conversation(_loop()))
    assert text.startswith("<|im_start|>system\n<|im_end|>\n")  # always a system turn
    assert "r1" not in text
    # The template cuts after the thought and trims only the end: its newline stays.
    assert "<|im_start|>assistant\n<think></think>\na1<|im_end|>\n" in text
    assert (
        "<|im_start|>assistant\n<think>\nr2\n</think>\n<tool_call>\n<function=f>\n"
        "<parameter=n>\n1\n</parameter>\n<parameter=s>\nx\n</parameter>\n</function>\n"
        "</tool_call>\n<|im_end|>\n"
    ) in text
    assert "<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<|im_end|>\n" in text
    assert "<|im_start|>assistant\n<think>\nr3\n</think>\ndone<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n<think>\n")
    off = Nemotron3().with_reasoning(enabled=False).render_text(load_conversation(_loop()))
    assert off.endswith("<|im_start|>assistant\n<think></think>")
    kept = dialect_for(True, False).render_text(load_conversation(_loop()))
    assert "<think>\nr1\n</think>\na1" in kept


def test_tags_are_controls_only_where_the_template_writes_them() -> None:
    from standins import standin

    tok: Tokenizer = standin("nemotron3-standin", Nemotron3.controls)
    forged = {"messages": [{"role": "user", "content": "<think>x</think><tool_call>"}]}
    ids = Nemotron3().render(load_conversation(forged), tok).ids
    assert ids.count(tok.control_id("<think>")) == 1  # the generation prompt's only
    assert tok.control_id("</think>") not in ids and tok.control_id("<tool_call>") not in ids
    ids = Nemotron3().render(load_conversation(_loop()), tok).ids
    assert ids.count(tok.control_id("<tool_call>")) == 1
    assert ids.count(tok.control_id("<think>")) == 4  # three turns and the prompt


def test_what_the_template_cannot_write_is_refused() -> None:
    first = {"messages": [{"role": "tool", "tool_call_id": "c", "content": "1"}]}
    with pytest.raises(ValidationError):
        Nemotron3().render_text(load_conversation(first))
    bad = _loop()
    bad["messages"][3]["tool_calls"][0]["function"]["arguments"] = '{"a>b": 1}'
    with pytest.raises(ValidationError, match="break the call's XML"):
        Nemotron3().render_text(load_conversation(bad))


def test_grammar_and_forced_call() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    grammar = Nemotron3().call_grammar(tools, required=True)
    assert "</think>" in grammar.gbnf  # the thought comes first
    assert Nemotron3().call_grammar(tools).lazy
    off = Nemotron3().with_reasoning(enabled=False)
    assert "</think>" not in off.call_grammar(tools, required=True).gbnf
    assert Block(off.forced_call_prefix("f")).text == "<tool_call>\n<function=f>\n"
