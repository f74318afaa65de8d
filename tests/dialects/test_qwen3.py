"""Qwen3 and QwQ against their published chat templates (text) and the Qwen3 vocabulary (ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_text, read_text, render_cases
from hypothesis import HealthCheck, given, settings
from streams import run_turn
from templates import conversations, hf_tokenizer_with, load_template, render_reference

from chatfmt.dialects import get_dialect
from chatfmt.dialects.qwen3 import Qwen3, QwQ
from chatfmt.errors import ReasoningOptionError
from chatfmt.events import ReasoningDelta, TextDelta, ToolCallEnd, ToolCallStart
from chatfmt.messages import Conversation, load_conversation
from chatfmt.segments import Control
from chatfmt.tokenizers.tiktoken import QWEN3_ADDED_TOKENS, QWEN25_ADDED_TOKENS
from profiles import examples

# The generated conversations cover 500 per family in the full profile: two properties of
# half each.
EXAMPLES = examples(1.25)
QWEN3_NEW = {t: 151643 + i for i, t in enumerate(QWEN3_ADDED_TOKENS)}
QWEN3_NEW = {t: i for t, i in QWEN3_NEW.items() if t not in QWEN25_ADDED_TOKENS}


@pytest.fixture(scope="module")
def qwen3_template() -> Any:
    return load_template("Qwen-Qwen3-0.6B.jinja")


@pytest.fixture(scope="module")
def qwq_template() -> Any:
    return load_template("Qwen-QwQ-32B.jinja")


@pytest.fixture(scope="module")
def hf_qwen3(qwen_tokenizer_json: Path) -> Any:
    """Qwen3's tokenizer as transformers loads it: Qwen2.5's plus the four added tokens."""
    return hf_tokenizer_with(qwen_tokenizer_json, QWEN3_NEW)


def _has_tags(conv: Conversation) -> bool:
    """Whether caller text holds a string the stock tokenizer would turn into a token."""
    texts = [m.text + (m.reasoning or "") for m in conv.messages]
    texts += [c.arguments + c.name for m in conv.messages for c in m.tool_calls or ()]
    texts += [str(t.definition) for t in conv.tools]
    return any(tag in s for s in texts for tag in QWEN3_ADDED_TOKENS)


# ==== Text- and id-exact on generated conversations ====


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=conversations(), gen=..., thinking=...)
def test_qwen3_matches_template(
    body: dict[str, Any],
    gen: bool,
    thinking: bool,
    qwen3_template: Any,
    qwen3_tok: Any,
    hf_qwen3: Any,
) -> None:
    conv = load_conversation(body)
    dialect = Qwen3().with_reasoning(enabled=thinking)
    kwargs = {} if thinking else {"enable_thinking": False}
    expected = render_reference(
        qwen3_template, conv, add_generation_prompt=gen, none_content="", **kwargs
    )
    assert dialect.render_text(conv, add_generation_prompt=gen) == expected
    ids = dialect.render(conv, qwen3_tok, add_generation_prompt=gen).ids
    if not _has_tags(conv):
        assert ids == hf_qwen3.encode(expected, add_special_tokens=False).ids


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=conversations(), gen=..., thinking=...)
def test_qwq_matches_template(
    body: dict[str, Any],
    gen: bool,
    thinking: bool,
    qwq_template: Any,
    qwen3_tok: Any,
    hf_qwen3: Any,
) -> None:
    conv = load_conversation(body)
    dialect = QwQ().with_reasoning(enabled=thinking)
    expected = render_reference(
        qwq_template, conv, add_generation_prompt=gen, none_content="", enable_thinking=thinking
    )
    assert dialect.render_text(conv, add_generation_prompt=gen) == expected
    ids = dialect.render(conv, qwen3_tok, add_generation_prompt=gen).ids
    if not _has_tags(conv):
        assert ids == hf_qwen3.encode(expected, add_special_tokens=False).ids


# ==== Render goldens ====

GOLDEN = [(d, c) for d in ("qwen3", "qwq") for c in render_cases(d)]


@pytest.mark.parametrize(("name", "case"), GOLDEN, ids=[f"{d}/{c.name}" for d, c in GOLDEN])
def test_render_golden(
    name: str,
    case: Path,
    qwen3_tok: Any,
    hf_qwen3: Any,
    qwen3_template: Any,
    qwq_template: Any,
) -> None:
    body = json.loads(read_text(case / "conversation.json"))
    conv = load_conversation(body)
    thinking = body.get("enable_thinking")
    dialect = get_dialect(name).with_reasoning(enabled=thinking)
    rendered = dialect.render(conv, qwen3_tok)
    check_text(case / "expected.txt", rendered.text)
    check_json(case / "expected_ids.json", rendered.ids, compact=True)
    # A golden is a claim about the format: the template and the stock tokenizer agree.
    template = qwen3_template if name == "qwen3" else qwq_template
    kwargs = {} if thinking is None else {"enable_thinking": thinking}
    if name == "qwq" and thinking is None:
        # llama.cpp's copy closes the thought unless switched on; Qwen's own template (the
        # dialect's default) never does: the copy with its switch on renders the same.
        kwargs = {"enable_thinking": True}
    assert rendered.text == render_reference(template, conv, none_content="", **kwargs)
    assert rendered.ids == hf_qwen3.encode(rendered.text, add_special_tokens=False).ids


def test_render_cases_exist() -> None:
    assert {d for d, _ in GOLDEN} == {"qwen3", "qwq"} and len(GOLDEN) >= 5


# ==== The history rule, by hand ====


def _tool_loop() -> Conversation:
    return load_conversation(
        {
            "messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
                {"role": "user", "content": "second"},
                {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": "r2",
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "c", "content": "42"},
            ]
        }
    )


def test_reasoning_kept_only_after_the_last_query() -> None:
    text = Qwen3().render_text(_tool_loop())
    assert "r1" not in text  # an earlier query's turn drops its reasoning
    assert "<think>\nr2\n</think>\n\n<tool_call>" in text  # the tool loop in progress keeps it
    assert text.endswith("<|im_start|>assistant\n")


def test_think_tags_are_tokens_in_the_template_and_text_in_content(qwen3_tok: Any) -> None:
    conv = _tool_loop()
    ids = Qwen3().render(conv, qwen3_tok).ids
    assert ids.count(151667) == 1 and ids.count(151668) == 1  # r2's <think>, </think>
    assert ids.count(151665) == 1 and ids.count(151666) == 1  # the tool response tags
    forged = load_conversation({"messages": [{"role": "user", "content": "<think>x</think>"}]})
    ids = Qwen3().render(forged, qwen3_tok).ids
    assert 151667 not in ids and 151668 not in ids


def test_thinking_off_closes_an_empty_thought_in_the_prompt() -> None:
    conv = load_conversation({"messages": [{"role": "user", "content": "hi"}]})
    off = Qwen3().with_reasoning(enabled=False)
    assert off.render_text(conv).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    blocks = off.render_blocks(conv)
    assert Control("<think>", False) in blocks[-1].segments
    assert Qwen3().with_reasoning(effort="none").thinking is False
    assert Qwen3().with_reasoning(effort="high") is not None  # any level means "on"


def test_reasoning_controls_the_family_lacks_are_refused() -> None:
    with pytest.raises(ReasoningOptionError, match="no reasoning"):
        get_dialect("qwen2.5").with_reasoning(enabled=True)
    assert get_dialect("qwen2.5").with_reasoning(enabled=False).name == "qwen2.5"
    with pytest.raises(ReasoningOptionError, match="always thinks"):
        get_dialect("harmony").with_reasoning(enabled=False)
    with pytest.raises(ReasoningOptionError, match="low, medium, high"):
        get_dialect("harmony").with_reasoning(effort="extreme")


# ==== Parsing: reasoning, then the answer's text and calls ====


def _events(dialect: Any, chunks: list[str]) -> Any:
    return run_turn(dialect, None, chunks)


def test_parse_reasoning_then_call() -> None:
    out = (
        "<think>\nLet me look.\n\nIt is sunny?\n</think>\n\n"
        '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    )
    whole = _events(Qwen3(), [out])
    streamed = _events(Qwen3(), list(out))
    assert whole == streamed
    events, msgs, finish, warnings = whole
    assert events[0] == ReasoningDelta("Let me look.\n\nIt is sunny?")
    assert isinstance(events[1], ToolCallStart) and isinstance(events[-2], ToolCallEnd)
    assert msgs[0]["reasoning_content"] == "Let me look.\n\nIt is sunny?"
    assert finish == "tool_calls" and not warnings


def test_parse_ids_with_think_tokens(qwen3_tok: Any) -> None:
    ids = [
        151667,
        *qwen3_tok.encode_text("\nhm\n"),
        151668,
        *qwen3_tok.encode_text("\n\nHello"),
        151645,
    ]
    events, msgs, _, _ = run_turn(Qwen3(), qwen3_tok, ids)
    assert events[:2] == [ReasoningDelta("hm"), TextDelta("Hello")]
    assert msgs[0]["content"] == "Hello" and msgs[0]["reasoning_content"] == "hm"


def test_prompt_that_opened_the_thought() -> None:
    # QwQ with thinking on: the generation prompt wrote "<think>\n"; the reply starts inside.
    out = "step one\n</think>\n\nThe answer."
    _, msgs, _, _ = _events(QwQ().with_reasoning(enabled=True), [out])
    assert msgs[0]["reasoning_content"] == "step one" and msgs[0]["content"] == "The answer."
    # Cut off while thinking: all of it is reasoning, there is no answer.
    _, msgs, _, _ = run_turn(QwQ().with_reasoning(enabled=True), None, ["still thi"])
    assert msgs[0]["reasoning_content"] == "still thi" and msgs[0]["content"] is None


def test_reply_without_a_thought_is_plain_answer() -> None:
    _, msgs, _, _ = _events(Qwen3(), ["\nJust text."])
    assert msgs[0]["content"] == "\nJust text." and "reasoning_content" not in msgs[0]
