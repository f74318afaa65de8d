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


def _turns(draw, n: int, calls: bool, reasoning: bool = False) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    text = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)
    thought = st.none() | text if reasoning else st.none()
    out: list[dict[str, object]] = []
    for t in range(n):
        out.append({"role": "user", "content": draw(text)})
        if calls and draw(st.booleans()):
            k = draw(st.integers(min_value=1, max_value=2))
            ids = [f"c{t}_{j}" for j in range(k)]
            out.append(
                {
                    "role": "assistant",
                    "content": draw(st.one_of(st.none(), text.filter(bool))),
                    "reasoning_content": draw(thought),
                    "tool_calls": [
                        {"id": i, "function": {"name": "f", "arguments": '{"x": 1}'}} for i in ids
                    ],
                }
            )
            out += [{"role": "tool", "tool_call_id": i, "content": draw(text)} for i in ids]
        out.append({"role": "assistant", "content": draw(text), "reasoning_content": draw(thought)})
    return out


@pytest.mark.parametrize("name", ["chatml", "qwen2.5", "chatglm3", "harmony"])
@given(data=st.data())
def test_incremental_render_equals_full(name: str, small_glm, data) -> None:  # type: ignore[no-untyped-def]
    """Also where reasoning in history makes harmony re-render earlier turns."""
    tok = {"chatglm3": small_glm, "harmony": chatfmt.load_tokenizer("o200k_harmony")}.get(
        name, chatfmt.load_tokenizer("qwen2.5")
    )
    thinks = name == "harmony"
    dialect = chatfmt.get_dialect(name)
    system = data.draw(st.booleans())
    tools = (
        [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        if data.draw(st.booleans())
        else None
    )
    head = [{"role": "system", "content": "be brief"}] if system else []
    first = _turns(data.draw, data.draw(st.integers(1, 4)), calls=True, reasoning=thinks)
    more = _turns(data.draw, data.draw(st.integers(0, 2)), calls=True, reasoning=thinks)
    msgs = chatfmt.from_openai(head + first)
    extra = chatfmt.from_openai(more)
    budget = Budget(dialect, tok)
    gen = data.draw(st.booleans())
    assert (
        budget.render(msgs, tools=tools, add_generation_prompt=gen).ids
        == dialect.render(msgs, tok, tools=tools, add_generation_prompt=gen).ids
    )
    grown = msgs + extra
    incremental = budget.render(grown, tools=tools)
    full = dialect.render(grown, tok, tools=tools)
    assert incremental.ids == full.ids
    assert [s.messages for s in incremental.spans] == [s.messages for s in full.spans]
    assert [(s.start, s.end) for s in incremental.spans] == [(s.start, s.end) for s in full.spans]


def test_appending_reuses_the_rendered_prefix(qwen) -> None:  # type: ignore[no-untyped-def]
    d = chatfmt.get_dialect("qwen2.5")
    msgs = chatfmt.from_openai(_chat(200))
    budget = Budget(d, qwen)
    budget.render(msgs)
    calls: list[int] = []
    original = d.render_blocks

    def spy(conv, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(conv.messages))
        return original(conv, **kw)

    d.render_blocks = spy  # type: ignore[method-assign]
    grown = [*msgs, *chatfmt.from_openai([{"role": "assistant", "content": "ok"}])]
    assert budget.count(grown) == len(d.render(grown, qwen).ids)
    # Only the system message, the last turn and the appended message were rendered again.
    assert calls[0] <= 4


def test_dialects_that_move_text_between_turns_render_in_full(qwen) -> None:  # type: ignore[no-untyped-def]
    from chatfmt.dialects.chatml import Qwen25

    class Folding(Qwen25):
        turns_render_independently = False

    d = Folding()
    msgs = chatfmt.from_openai(_chat(20))
    budget = Budget(d, qwen)
    budget.render(msgs)
    sizes: list[int] = []
    original = d.render_blocks

    def spy(conv, **kw):  # type: ignore[no-untyped-def]
        sizes.append(len(conv.messages))
        return original(conv, **kw)

    d.render_blocks = spy  # type: ignore[method-assign]
    grown = [*msgs, *chatfmt.from_openai([{"role": "assistant", "content": "ok"}])]
    budget.render(grown)
    assert sizes == [len(grown)]
