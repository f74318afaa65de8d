"""Qwen3-Coder against its published chat template (text) and the Qwen3 vocabulary (ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_text, read_text, render_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from templates import (
    conversations,
    hf_tokenizer_with,
    load_template,
    names,
    render_reference,
    text,
    words,
)

from chatfmt.dialects import get_dialect
from chatfmt.dialects.qwen3_coder import Qwen3Coder, xml_call_grammar
from chatfmt.errors import ReasoningOptionError, ValidationError
from chatfmt.messages import Conversation, load_conversation
from chatfmt.segments import Control
from chatfmt.tokenizers.tiktoken import QWEN3_ADDED_TOKENS, QWEN25_ADDED_TOKENS
from profiles import examples

# The generated conversations cover 500 for this family in the full profile (one property).
EXAMPLES = examples(2.5)
QWEN3_NEW = {t: 151643 + i for i, t in enumerate(QWEN3_ADDED_TOKENS)}
QWEN3_NEW = {t: i for t, i in QWEN3_NEW.items() if t not in QWEN25_ADDED_TOKENS}

# Parameter schemas with what the template writes element by element: types (also lists),
# descriptions to trim, and keys it does not name (scalars through Python's str, JSON else).
_leaf = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer", "description": " count\n"},
        {"type": "boolean", "default": True},
        {"type": ["string", "null"], "default": None},
        {"type": "number", "minimum": 0.5, "maximum": 10},
        {"type": "array", "items": {"type": "string"}},
        {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
        {"enum": ["a", "b"], "description": "pick"},
        {"description": "no type"},
    ]
)
rich_tools = st.lists(
    st.builds(
        lambda name, desc, props, req, shape, extra: (
            {"type": "function", "function": _fn(name, desc, props, req, extra)}
            if shape
            else _fn(name, desc, props, req, extra)
        ),
        names,
        st.none() | words | text,
        st.dictionaries(names, _leaf, max_size=3),
        st.booleans(),
        st.booleans(),
        st.sampled_from([{}, {"strict": True}, {"strict": False, "tag": [1, None]}]),
    ),
    max_size=2,
    unique_by=lambda t: t.get("function", t)["name"],
)


def _fn(name: str, desc: Any, props: dict[str, Any], req: bool, extra: dict[str, Any]) -> Any:
    params: dict[str, Any] = {"type": "object", "properties": props}
    if req and props:
        params["required"] = sorted(props)[:1]
    fn: dict[str, Any] = {"name": name}
    if desc is not None:
        fn["description"] = desc
    return {**fn, "parameters": params, **extra}


@pytest.fixture(scope="module")
def coder_template() -> Any:
    return load_template("Qwen3-Coder.jinja")


@pytest.fixture(scope="module")
def hf_qwen3(qwen_tokenizer_json: Path) -> Any:
    """Qwen3's tokenizer as transformers loads it: Qwen2.5's plus the four added tokens."""
    return hf_tokenizer_with(qwen_tokenizer_json, QWEN3_NEW)


def _has_tags(conv: Conversation) -> bool:
    """Whether caller text holds a string the stock tokenizer would turn into a token."""
    texts = [m.text for m in conv.messages]
    texts += [c.arguments + c.name for m in conv.messages for c in m.tool_calls or ()]
    texts += [json.dumps(t.definition) for t in conv.tools]
    return any(tag in s for s in texts for tag in QWEN3_ADDED_TOKENS)


# ==== Text- and id-exact on generated conversations ====


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=conversations(), tools=rich_tools, rich=..., gen=...)
def test_qwen3_coder_matches_template(
    body: dict[str, Any],
    tools: list[dict[str, Any]],
    rich: bool,
    gen: bool,
    coder_template: Any,
    qwen3_tok: Any,
    hf_qwen3: Any,
) -> None:
    if rich:
        body = {**body, "tools": tools}
    conv = load_conversation(body)
    expected = render_reference(coder_template, conv, add_generation_prompt=gen, none_content="")
    dialect = Qwen3Coder()
    assert dialect.render_text(conv, add_generation_prompt=gen) == expected
    ids = dialect.render(conv, qwen3_tok, add_generation_prompt=gen).ids
    if not _has_tags(conv):
        assert ids == hf_qwen3.encode(expected, add_special_tokens=False).ids


# ==== Goldens ====


@pytest.mark.parametrize("case", render_cases("qwen3-coder"), ids=lambda p: p.name)
def test_render_golden(case: Path, qwen3_tok: Any, coder_template: Any, hf_qwen3: Any) -> None:
    body = json.loads(read_text(case / "conversation.json"))
    conv = load_conversation(body)
    rendered = get_dialect("qwen3-coder").render(conv, qwen3_tok)
    check_text(case / "expected.txt", rendered.text)
    check_json(case / "expected_ids.json", rendered.ids, compact=True)
    # The golden is a claim about the format: the template and its tokenizer agree.
    assert rendered.text == render_reference(coder_template, conv, none_content="")
    assert rendered.ids == hf_qwen3.encode(rendered.text, add_special_tokens=False).ids


def test_render_cases_exist() -> None:
    assert len(render_cases("qwen3-coder")) >= 3


# ==== By hand ====


def test_no_reasoning_and_no_thought_in_the_prompt() -> None:
    conv = load_conversation({"messages": [{"role": "user", "content": "hi"}]})
    assert Qwen3Coder().render_text(conv).endswith("<|im_start|>assistant\n")
    with pytest.raises(ReasoningOptionError, match="no reasoning"):
        Qwen3Coder().with_reasoning(enabled=True)
    # A reply that opens with <think> is text: the model does not reason.
    result = Qwen3Coder().parse("<think>x</think>ok")
    assert result.content == "<think>x</think>ok" and result.reasoning is None


def test_tags_are_tokens_in_the_template_and_text_in_content(qwen3_tok: Any) -> None:
    body = {
        "messages": [
            {"role": "user", "content": "<tool_call> is text"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a": 1}'}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": "42"},
        ]
    }
    ids = Qwen3Coder().render(load_conversation(body), qwen3_tok).ids
    assert ids.count(151657) == 1 and ids.count(151658) == 1  # the call's tags only
    assert ids.count(151665) == 1 and ids.count(151666) == 1  # the result's tags


def test_names_that_break_the_tags_are_refused() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a>b": 1}'}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": "42"},
        ]
    }
    with pytest.raises(ValidationError, match="break the call's XML tags"):
        Qwen3Coder().render_text(load_conversation(body))


def test_history_call_re_renders_its_raw_text() -> None:
    out = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"
    parsed = Qwen3Coder().parse(out).message
    conv = load_conversation({"messages": [{"role": "user", "content": "x"}]})
    history = Conversation(messages=[*conv.messages, parsed])
    blocks = Qwen3Coder().render_blocks(history, add_generation_prompt=False)
    assert Control("<tool_call>", False) in blocks[-1].segments
    assert "".join(b.text for b in blocks).endswith("assistant\n" + out + "<|im_end|>\n")


def test_call_grammar_is_lazy_on_the_tag() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "s": {"type": "string"}},
                    "required": ["a"],
                },
            },
        }
    ]
    grammar = Qwen3Coder().call_grammar(tools)
    assert grammar.lazy and [t.value for t in grammar.triggers] == ["<tool_call>"]
    assert grammar.preserved == ("<tool_call>", "</tool_call>")
    assert '"<function=f>\\n"' in grammar.gbnf and '"<parameter=a>\\n"' in grammar.gbnf
    required = xml_call_grammar(tools, required=True, single=True)
    assert not required.lazy and "root ::= tagged-call\n" in required.gbnf
