"""Exact counts and fitting conversations into a context window."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import chatfmt
from chatfmt.context import Budget, truncate_text, truncate_tool_results
from chatfmt.errors import ContextOverflowError


def _chat(turns: int) -> list[dict[str, object]]:
    msgs: list[dict[str, object]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"question {i} " + "word " * (i % 7)})
        msgs.append({"role": "assistant", "content": f"answer {i}"})
    msgs.append({"role": "user", "content": "last question"})
    return msgs


def test_count_equals_render(qwen) -> None:  # type: ignore[no-untyped-def]
    d = chatfmt.get_dialect("qwen2.5")
    conv = _chat(10)
    assert Budget(d, qwen).count(conv) == len(d.render(conv, qwen).ids)
    assert Budget(d, qwen).count(conv, add_generation_prompt=False) == len(
        d.render(conv, qwen, add_generation_prompt=False).ids
    )


def test_fit_keeps_system_and_newest_whole_turns(qwen) -> None:  # type: ignore[no-untyped-def]
    d = chatfmt.get_dialect("qwen2.5")
    conv = _chat(40)
    full = Budget(d, qwen).count(conv)
    result = Budget(d, qwen).fit(conv, context=full // 2, reserve=50)
    kept = result.conversation.messages
    assert kept[0].role == "system"
    assert kept[-1].content == "last question"
    assert kept[1].role == "user"  # whole turns only: a kept turn starts with its user message
    assert result.prompt_tokens == len(d.render(result.conversation, qwen).ids)
    assert result.prompt_tokens + 50 <= full // 2
    # Dropped messages are the oldest ones, contiguous after the system message.
    assert result.dropped == tuple(range(1, 1 + len(result.dropped)))


def test_fit_never_separates_tool_call_from_result(qwen) -> None:  # type: ignore[no-untyped-def]
    d = chatfmt.get_dialect("qwen2.5")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    conv: list[dict[str, object]] = [{"role": "system", "content": "s"}]
    for i in range(20):
        conv += [
            {"role": "user", "content": f"q{i} " * 20},
            {"role": "assistant", "content": None, "tool_calls": [dict(call, id=f"c{i}")]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "result " * 10},
            {"role": "assistant", "content": f"a{i}"},
        ]
    budget = Budget(d, qwen)
    result = budget.fit(conv, context=budget.count(conv) // 3)
    msgs = result.conversation.messages
    for i, m in enumerate(msgs):
        if m.role == "tool":
            assert msgs[i - 1].tool_calls, "a tool result lost its call"
        if m.tool_calls:
            assert msgs[i + 1].role == "tool", "a tool call lost its result"


def test_overflow_error_names_numbers(qwen) -> None:  # type: ignore[no-untyped-def]
    d = chatfmt.get_dialect("qwen2.5")
    conv = [{"role": "user", "content": "word " * 500}]
    with pytest.raises(ContextOverflowError, match=r"needs \d+ tokens.*512 reserved.*600") as err:
        Budget(d, qwen).fit(conv, context=600, reserve=512)
    assert err.value.prompt_tokens > 88
    with pytest.raises(ContextOverflowError, match="lower the reserve"):
        Budget(d, qwen).fit(conv, context=100, reserve=100)


@given(st.integers(min_value=60, max_value=2000), st.integers(min_value=0, max_value=30))
def test_fit_property(context: int, reserve: int) -> None:
    tok = chatfmt.load_tokenizer("cl100k_base")
    d = chatfmt.get_dialect("chatml")
    conv = _chat(15)
    budget = Budget(d, tok)
    try:
        result = budget.fit(conv, context=context, reserve=reserve)
    except ContextOverflowError as exc:
        assert exc.prompt_tokens + reserve > context
        return
    assert result.prompt_tokens + reserve <= context
    assert result.prompt_tokens == budget.count(result.conversation)


def test_truncate_tool_results_marks_cut(qwen) -> None:  # type: ignore[no-untyped-def]
    text = "数据 " * 400
    cut = truncate_text(text, qwen, 50)
    assert cut.endswith("characters]") and "…[truncated" in cut
    assert qwen.count_text(cut) <= 50
    assert "\ufffd" not in cut
    conv = truncate_tool_results(
        [
            {"role": "user", "content": text},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": text},
        ],
        qwen,
        50,
    )
    assert conv.messages[0].content == text  # only tool results are cut
    assert conv.messages[2].content == cut
