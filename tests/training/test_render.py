"""The training render, for every dialect: labels are -100 exactly off the trained spans, each
span parses back to its assistant message (and ends with the token that stops it), and the ids
before each trained turn are the ids serving sends for it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatfmt import get_dialect
from chatfmt.dialects import list_dialects
from chatfmt.dialects.base import Dialect
from chatfmt.errors import ValidationError
from chatfmt.messages import Conversation, as_conversation
from chatfmt.tokenizers.base import Tokenizer
from chatfmt.training import (
    IGNORE_INDEX,
    TrainingError,
    TrainingExample,
    TrainingRenderer,
    render_for_training,
)
from chatfmt.training.rules import closing_token, end_rule
from profiles import examples

EXAMPLES = examples(0.2)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: Each dialect, and its thinking variants where it has a switch.
VARIANTS = [(name, None) for name in list_dialects()] + [
    (name, think)
    for name in list_dialects()
    for think in (True, False)
    if get_dialect(name).reasoning == "switch"
]
#: What cannot be trained from its history rendering at all (docs/training.md says why): the
#: generation prompt writes a thought opening (or an empty thought) that the history never has.
UNTRAINABLE = {("qwq", None), ("qwq", True), ("qwq", False), ("deepseek-r1", None)}
UNTRAINABLE |= {("deepseek-v3.2", None), ("deepseek-v3.2", False)}
#: Nemotron 3 thinking: the prompt opens ``<think>\n``; a reply without reasoning shows
#: ``<think></think>``.
UNTRAINABLE |= {("nemotron3", None), ("nemotron3", True)}
#: GLM-4.7 thinking: the prompt opens ``<think>``; a reply without reasoning shows ``</think>``.
UNTRAINABLE |= {("glm4.7", None), ("glm4.7", True)}
#: Gemma 4 thinking off (its default): the prompt writes an empty thought channel that history
#: never has.
UNTRAINABLE |= {("gemma4", None), ("gemma4", False)}
#: MiniMax-M2: its prompt opens ``<think>\n`` and history drops the thought of earlier turns.
UNTRAINABLE |= {("minimax-m2", None)}
#: Dialects whose parser reads every reply as starting inside a thought, where the prompt after
#: tool results opens none (DeepSeek R1, V3.1 thinking): the answer is checked as what the parse
#: holds in all.
THOUGHT_PARSERS = {"deepseek-r1", "deepseek-v3.1"}
#: Nemotron Nano v2 (thinking on) writes a final answer inside the thought it opened (its
#: template never closes it for the last message): the answer parses as reasoning.
THOUGHT_PARSERS |= {"nemotron-nano2"}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "d",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
            },
        },
    }
    for name in ("get_weather", "find_city")
]
WORDS = st.text(st.sampled_from("abc xyzé你.,!?"), min_size=1, max_size=12).map(str.strip)
words = WORDS.filter(bool)
arguments = st.fixed_dictionaries({}, optional={"city": words, "n": st.integers(0, 999)})


@st.composite
def conversations(draw: st.DrawFn, *, tools: bool, reasoning: bool) -> dict[str, Any]:
    """A system prompt or not, then rounds of a user query and the assistant's reply: text,
    or (with tools) calls answered by results before a final answer; reasoning on replies."""
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(words)})
    calls_seen = 0
    for _ in range(draw(st.integers(1, 3))):
        msgs.append({"role": "user", "content": draw(words)})
        if tools and draw(st.booleans()):
            name = draw(st.sampled_from(["get_weather", "find_city"]))
            cid = f"call_{calls_seen}"
            calls_seen += 1
            function = {"name": name, "arguments": json.dumps(draw(arguments))}
            call = {"id": cid, "type": "function", "function": function}
            msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
            msgs.append({"role": "tool", "tool_call_id": cid, "content": draw(words)})
        answer: dict[str, Any] = {"role": "assistant", "content": draw(words)}
        if reasoning and draw(st.booleans()):
            answer["reasoning_content"] = draw(words)
        msgs.append(answer)
    return {"messages": msgs, "tools": TOOLS if tools else None}


def configured(name: str, think: bool | None) -> Dialect:
    dialect = get_dialect(name)
    return dialect if think is None else dialect.with_reasoning(enabled=think)


def check(
    example: TrainingExample, conv: Conversation, dialect: Dialect, tok: Tokenizer, *, thought: bool
) -> None:
    """The invariants of the issue, for one example."""
    ids, labels = example.input_ids, example.labels
    assert len(labels) == len(ids) == len(example.attention_mask) == len(example.message_index)
    trained = set()
    for start, end, _ in example.spans:
        assert 0 < start < end <= len(ids)
        trained |= set(range(start, end))
    # -100 exactly where no loss goes, the id itself where it does.
    assert [k for k, label in enumerate(labels) if label != IGNORE_INDEX] == sorted(trained)
    assert all(labels[k] == ids[k] for k in trained)
    assert example.trained_tokens == len(trained)
    stops = set(dialect.stop_ids(tok))
    closing = closing_token(dialect, tok)
    last = max(s.message for s in example.spans)
    for start, end, i in example.spans:
        m = conv.messages[i]
        assert m.role == "assistant"
        # Serving sends exactly these ids before the turn (training ids == serving ids).
        served = dialect.render(conv.messages[:i], tok, tools=conv.tools, strict=False).ids
        assert ids[: len(served)] == served
        assert start >= len(served)  # the generation prompt is never trained
        # The reply (from where the prompt ends; a thought left untrained is in it, unlabelled)
        # parses back to the message.
        result = dialect.parse(ids[len(served) : end], tok)
        content = (result.content or "").strip()
        if dialect.name in THOUGHT_PARSERS and not content:
            content = (result.reasoning or "").strip()
        assert content == (m.content or "").strip()
        got = [(c.name, json.loads(c.arguments)) for c in result.tool_calls]
        assert got == [(c.name, c.arguments_dict()) for c in m.tool_calls or ()]
        if thought and m.reasoning:
            assert (result.reasoning or "").strip() == m.reasoning.strip()
        # It ends with the token that stops the model, by the family rule.
        rule = end_rule(dialect)
        if i == last or rule.history_end is None:
            assert ids[end - 1] in stops | {closing}, tok.decode(ids[start:end])


@pytest.mark.parametrize(("name", "think"), VARIANTS, ids=lambda v: str(v))
@SETTINGS
@given(data=st.data())
def test_every_trained_span_is_the_reply_the_model_was_served(
    name: str, think: bool | None, data: st.DataObject, vocabulary: Any
) -> None:
    dialect = configured(name, think)
    tok = vocabulary(dialect)
    body = data.draw(
        conversations(tools=data.draw(st.booleans()), reasoning=dialect.reasoning != "never")
    )
    conv = as_conversation(body["messages"], body["tools"])
    train_reasoning = data.draw(st.booleans())
    for train_on in ("all_assistant", "last_assistant"):
        try:
            example = render_for_training(
                conv, dialect, tok, train_on=train_on, unstable="skip",
                train_reasoning=train_reasoning,
            )  # fmt: skip
        except ValidationError:
            return  # the format refuses this conversation (Gemma 3 and tools, say)
        except TrainingError:
            # Refused turns are refused for a reason the error names.
            assert (name, think) in UNTRAINABLE or any(m.reasoning for m in conv.messages), (
                f"{name} refused a conversation it renders"
            )
            continue
        check(example, conv, dialect, tok, thought=train_reasoning)
        assistants = [i for i, m in enumerate(conv.messages) if m.role == "assistant"]
        final = max(s.message for s in example.spans)
        if train_on == "last_assistant":
            assert [s.message for s in example.spans] == [assistants[-1]]
        else:
            # Every assistant turn is trained or listed as skipped, with the reason.
            covered = {s.message for s in example.spans} | set(example.skipped)
            assert covered == set(assistants)
            assert all(i in example.skipped for i in assistants if i > final)
            assert len(example.problems) == len(example.skipped)


@pytest.mark.parametrize("name", list_dialects())
def test_a_plain_conversation_trains_or_says_why(name: str, vocabulary: Any) -> None:
    """The last turn of a plain chat trains for every dialect but those whose history cannot
    show what the model produced; those are refused with the reason and the fix."""
    dialect = get_dialect(name)
    tok = vocabulary(dialect)
    msgs = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there."},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Goodbye."},
    ]
    if (name, None) in UNTRAINABLE:
        with pytest.raises(TrainingError, match="generation prompt does not begin"):
            render_for_training(msgs, dialect, tok, train_on="last_assistant")
        return
    example = render_for_training(msgs, dialect, tok, train_on="last_assistant")
    check(example, as_conversation(msgs), dialect, tok, thought=True)
    (span,) = example.spans
    assert span.message == 3
    assert "Goodbye." in tok.decode(example.input_ids[span.start : span.end])


@pytest.mark.parametrize("name", ["chatml", "qwen2.5", "llama3", "harmony", "qwen3-coder"])
def test_the_whole_conversation_is_its_history_render(name: str, vocabulary: Any) -> None:
    """Where the history keeps each turn as served, the example is the conversation's own
    render (harmony: with the final ``<|return|>`` the model emitted for the ``<|end|>`` its
    history writes)."""
    dialect = get_dialect(name)
    tok = vocabulary(dialect)
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there."},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Goodbye."},
    ]
    example = render_for_training(msgs, dialect, tok)
    history = dialect.render(msgs, tok, add_generation_prompt=False).ids
    rule = end_rule(dialect)
    if rule.history_end is not None:
        assert history[-1] == tok.control_id(rule.history_end)
        history = [*history[:-1], tok.control_id(rule.served_end or "")]
    assert example.input_ids == history
    assert [s.message for s in example.spans] == [2, 4]


def test_qwen3_all_assistant_refuses_earlier_turns_and_names_the_fix(vocabulary: Any) -> None:
    """Qwen3 drops the thought of turns before the last query: an earlier turn is not shown as
    the model produced it, so training it is an error (or skipped, when asked)."""
    dialect = get_dialect("qwen3")
    tok = vocabulary(dialect)
    msgs = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi.", "reasoning_content": "greet"},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Goodbye.", "reasoning_content": "part"},
    ]
    with pytest.raises(TrainingError, match=r"message 1: later turns .*--train-on last"):
        render_for_training(msgs, dialect, tok)
    skipped = render_for_training(msgs, dialect, tok, unstable="skip")
    assert skipped.skipped == (1,)
    assert [s.message for s in skipped.spans] == [3]
    last = render_for_training(msgs, dialect, tok, train_on="last_assistant")
    assert last.input_ids == skipped.input_ids and last.labels == skipped.labels


def test_reasoning_can_be_left_untrained(vocabulary: Any) -> None:
    dialect = get_dialect("qwen3")
    tok = vocabulary(dialect)
    msgs = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi.", "reasoning_content": "greet them"},
    ]
    full = render_for_training(msgs, dialect, tok)
    answer = render_for_training(msgs, dialect, tok, train_reasoning=False)
    assert full.input_ids == answer.input_ids
    (a,), (b,) = full.spans, answer.spans
    assert a.end == b.end and a.start < b.start
    assert "greet them" in tok.decode(full.input_ids[a.start : a.end])
    assert tok.decode(answer.input_ids[b.start : b.end]).startswith("</think>")


def test_a_thinking_format_that_drops_the_thought_is_refused(vocabulary: Any) -> None:
    """DeepSeek V3.1 never writes a thought into its history: a reply with reasoning would be
    trained as an empty thought, which teaches the model to skip thinking."""
    dialect = get_dialect("deepseek-v3.1").with_reasoning(enabled=True)
    tok = vocabulary(dialect)
    msgs = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi.", "reasoning_content": "greet"},
    ]
    with pytest.raises(TrainingError, match=r"leaves its reasoning out.*--no-train-reasoning"):
        render_for_training(msgs, dialect, tok)
    example = render_for_training(msgs, dialect, tok, train_reasoning=False)
    assert example.trained_tokens > 0


def test_no_assistant_message_is_an_error(vocabulary: Any) -> None:
    dialect = get_dialect("chatml")
    with pytest.raises(TrainingError, match="no assistant message"):
        render_for_training([{"role": "user", "content": "x"}], dialect, vocabulary(dialect))


def test_bad_options_name_the_choices(vocabulary: Any) -> None:
    dialect = get_dialect("chatml")
    with pytest.raises(TrainingError, match="all_assistant, last_assistant"):
        TrainingRenderer(dialect, vocabulary(dialect), train_on="every")  # type: ignore[arg-type]
