"""ChatGLM3's training render against the rule of its official fine-tuning demo.

The demo (``finetune_demo`` in THUDM/ChatGLM3, its ``process_batch``) builds a plain
conversation's ids as ``[gMASK] sop``, then per message the role token, the encoded header line
(the metadata, which it leaves empty, and a newline) and the encoded content, then ``</s>``.
A token carries a label when the token *before* it belongs to a message that is neither system
nor user: so an assistant turn's role token carries none, its newline and content do, and so
does the token right after it — the next role token, or the final ``</s>``. The oracle below
restates that rule on SentencePiece directly, apart from chatfmt's tokenizer and renderer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatfmt import get_dialect
from chatfmt.training import IGNORE_INDEX, TrainingError, render_for_training

#: ChatGLM3's tokens after the SentencePiece vocabulary, in the order its tokenizer adds them.
SPECIALS = ["[MASK]", "[gMASK]", "[sMASK]", "sop", "eop"]
SPECIALS += ["<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"]


@pytest.fixture(scope="module")
def sp(chatglm3_model_path: Path) -> Any:
    spm = pytest.importorskip("sentencepiece")
    return spm.SentencePieceProcessor(model_file=str(chatglm3_model_path))


def demo_example(sp: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """``input_ids`` and ``labels`` by the demo's rule (plain conversations only)."""
    special = {name: sp.vocab_size() + k for k, name in enumerate(SPECIALS)}
    ids = [special["[gMASK]"], special["sop"]]
    trains = [False, False]
    for m in messages:
        piece = [special[f"<|{m['role']}|>"], *sp.encode("\n"), *sp.encode(m["content"])]
        ids += piece
        trains += [m["role"] not in ("system", "user")] * len(piece)
    ids.append(sp.eos_id())
    # A token is labelled by whether the token before it is trained (the first is not).
    before = [False, *trains]
    labels = [t if flag else IGNORE_INDEX for t, flag in zip(ids, before, strict=True)]
    return ids, labels


TEXT = st.lists(
    st.sampled_from([*"abc XYZ019.,!?\n\t 你好世界é🙂`#*-", "  ", "\n\n", "```", "isopropyl"]),
    max_size=16,
).map("".join)


@st.composite
def plain_conversations(draw: st.DrawFn) -> list[dict[str, str]]:
    msgs = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(TEXT)})
    for _ in range(draw(st.integers(1, 4))):
        msgs.append({"role": "user", "content": draw(TEXT)})
        msgs.append({"role": "assistant", "content": draw(TEXT)})
    return msgs


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=plain_conversations())
def test_ids_and_labels_match_the_official_finetune_demo(
    messages: list[dict[str, str]], sp: Any, glm: Any
) -> None:
    example = render_for_training(messages, get_dialect("chatglm3"), glm)
    ids, labels = demo_example(sp, messages)
    assert example.input_ids == ids
    assert example.labels == labels


def test_a_known_conversation(sp: Any, glm: Any) -> None:
    messages = [
        {"role": "system", "content": "You are ChatGLM3."},
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "你好！"},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Goodbye."},
    ]
    example = render_for_training(messages, get_dialect("chatglm3"), glm)
    assert (example.input_ids, example.labels) == demo_example(sp, messages)
    trained = [glm.decode(example.input_ids[s.start : s.end]) for s in example.spans]
    assert [t.strip() for t in trained] == ["你好！<|user|>", "Goodbye.</s>"]


def test_tool_turns_follow_chatfmts_rule_where_the_demo_has_none(glm: Any) -> None:
    """The demo refuses tools and would train an observation's text; chatfmt trains the call
    (its metadata line and fenced call) and the ``<|observation|>`` token that stops it, and
    never the result."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ]  # fmt: skip
    example = render_for_training(messages, get_dialect("chatglm3"), glm, tools=tools)
    trained = [glm.decode(example.input_ids[s.start : s.end]) for s in example.spans]
    assert trained[0].endswith('tool_call(city="Paris")\n```<|observation|>')
    assert trained[0].startswith("get_weather\n")
    assert trained[1].strip() == "It is sunny.</s>"
    assert "sunny" not in "".join(t for t in trained if "It is" not in t)


def test_a_conversation_ending_with_a_user_turn_ends_at_the_last_reply(glm: Any) -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    example = render_for_training(messages, get_dialect("chatglm3"), glm)
    assert example.input_ids[-1] == glm.control_id("</s>")
    with pytest.raises(TrainingError, match="no assistant message"):
        render_for_training(messages[:1], get_dialect("chatglm3"), glm)
