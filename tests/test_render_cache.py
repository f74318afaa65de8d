"""The server's render caches give exactly the ids of an uncached render, evictions included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import chatfmt
from chatfmt.messages import Message, Tool, conversation_of, from_openai
from chatfmt.render_cache import ConversationCache, ToolsCache
from chatfmt.segments import BlockEncoder

#: Dialects (with an offline vocabulary) whose turns render independently, and some whose
#: turns do not (Qwen3 drops earlier reasoning; DeepSeek and harmony have rules of their own).
DIALECTS = [
    ("qwen2.5", "qwen2.5"),
    ("chatml", "qwen2.5"),
    ("qwen3", "qwen3"),
    ("qwen3-coder", "qwen3"),
    ("harmony", "o200k_harmony"),
    ("llama4", "llama4"),
    ("deepseek-v3.1", "deepseek-v3"),
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}},
]

WORDS = st.sampled_from(
    ["hello", "weather", "北京", "naïve", "😀", "<|im_start|>", "<think>", "\n", "  ", "42", "{"]
)
TEXT = st.one_of(st.lists(WORDS, max_size=8).map(" ".join), st.text(max_size=12))


@st.composite
def turns(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Turns of a chat: a user message, maybe calls and their results, an answer."""
    out: list[list[dict[str, Any]]] = []
    calls = 0
    for _ in range(draw(st.integers(1, 5))):
        turn: list[dict[str, Any]] = [{"role": "user", "content": draw(TEXT)}]
        made = []
        for _ in range(draw(st.integers(0, 2))):
            calls += 1
            args = {"city": draw(TEXT)} if draw(st.booleans()) else {"days": calls}
            made.append(
                {
                    "id": f"call_{calls}",
                    "type": "function",
                    "function": {
                        "name": draw(st.sampled_from(["get_weather", "now"])),
                        "arguments": json.dumps(args, ensure_ascii=False),
                    },
                }
            )
        if made:
            turn.append(
                {"role": "assistant", "content": draw(st.none() | TEXT), "tool_calls": made}
            )
            turn += [{"role": "tool", "tool_call_id": c["id"], "content": draw(TEXT)} for c in made]
        turn.append({"role": "assistant", "content": draw(TEXT)})
        out.append(turn)
    return out


def _outcome(fn: Any) -> tuple[str, object]:
    try:
        return ("ids", list(fn()))
    except chatfmt.ChatFmtError as exc:
        return (type(exc).__name__, str(exc))


def _requests(chat: list[list[dict[str, Any]]], system: str | None) -> list[list[dict[str, Any]]]:
    """What a client sends along the chat: the history up to each user message and each
    tool result (as new JSON every time), then the whole chat again."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    requests = []
    for turn in chat:
        for m in turn:
            msgs.append(m)
            if m["role"] in ("user", "tool"):
                requests.append(json.loads(json.dumps(msgs)))
    requests.append(json.loads(json.dumps(msgs)))
    return requests


@pytest.mark.parametrize(("name", "vocabulary"), DIALECTS)
@given(
    chat=turns(),
    system=st.none() | TEXT,
    with_tools=st.booleans(),
    entries=st.integers(1, 3),
    tokens=st.sampled_from([1, 40, 400, 1 << 20]),
    encoder_entries=st.sampled_from([0, 2, 1000]),
    shuffle=st.randoms(use_true_random=False),
)
def test_cached_render_equals_uncached(
    name: str,
    vocabulary: str,
    chat: list[list[dict[str, Any]]],
    system: str | None,
    with_tools: bool,
    entries: int,
    tokens: int,
    encoder_entries: int,
    shuffle: Any,
) -> None:
    dialect = chatfmt.get_dialect(name)
    tok = chatfmt.load_tokenizer(vocabulary)
    tools = TOOLS if with_tools else []
    # Small bounds: entries are evicted (by count and by size) between the requests.
    cache = ConversationCache(max_entries=entries, max_tokens=tokens)
    encoder = BlockEncoder(tok, max_entries=encoder_entries, max_tokens=max(tokens, 1))
    tool_objects = ToolsCache().tools(tools)
    requests = _requests(chat, system)
    # Mostly in order (the returning conversation), sometimes an older request again.
    if shuffle.random() < 0.3:
        requests.append(requests[shuffle.randrange(len(requests))])
    for raw in requests:

        def uncached(raw: list[dict[str, Any]] = raw) -> list[int]:
            return dialect.render(raw, tok, tools=tools).ids

        expected = _outcome(uncached)

        def cached(raw: list[dict[str, Any]] = raw) -> list[int]:
            lookup = cache.messages(json.loads(json.dumps(raw)))
            conv = conversation_of(tuple(lookup.messages), tool_objects)
            return cache.render(dialect, conv, encoder, lookup).ids

        assert _outcome(cached) == expected


def test_returning_conversation_hits_and_bad_messages_fail_alike() -> None:
    dialect = chatfmt.get_dialect("qwen2.5")
    tok = chatfmt.load_tokenizer("qwen2.5")
    cache = ConversationCache()
    encoder = BlockEncoder(tok)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"q{i}"} for i in range(1)]
    for i in range(6):
        msgs += [{"role": "assistant", "content": f"a{i}"}, {"role": "user", "content": f"q{i}"}]
        lookup = cache.messages(json.loads(json.dumps(msgs)))
        conv = conversation_of(tuple(lookup.messages))
        assert cache.render(dialect, conv, encoder, lookup).ids == dialect.render(msgs, tok).ids
    assert cache.hits >= 4
    bad = [*msgs, {"role": "user", "content": 5}]
    with pytest.raises(chatfmt.ValidationError) as cached_error:
        cache.messages(bad)
    with pytest.raises(chatfmt.ValidationError) as plain_error:
        from_openai(bad)
    assert str(cached_error.value) == str(plain_error.value)


def test_tools_cache_checks_once_and_raises_alike() -> None:
    cache = ToolsCache()
    first = cache.tools(TOOLS)
    assert cache.tools(json.loads(json.dumps(TOOLS))) is first
    assert first == tuple(Tool(definition=t) for t in TOOLS)
    with pytest.raises(chatfmt.ValidationError, match="non-empty 'name'"):
        cache.tools([{"type": "function", "function": {"name": ""}}])


def test_equal_dicts_with_numbers_are_not_taken_for_each_other() -> None:
    # 1 == True: a message whose arguments are an object (numbers in it) is converted by the
    # validating path and never lends its messages to another request.
    dialect = chatfmt.get_dialect("qwen2.5")
    tok = chatfmt.load_tokenizer("qwen2.5")
    cache = ConversationCache()
    encoder = BlockEncoder(tok)

    def chat(value: object) -> list[dict[str, Any]]:
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "f", "arguments": {"a": value}},
        }
        return [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ]

    for value in (1, True, 1.0):
        lookup = cache.messages(chat(value))
        conv = conversation_of(tuple(lookup.messages))
        ids = cache.render(dialect, conv, encoder, lookup).ids
        assert ids == dialect.render(chat(value), tok).ids


def test_messages_are_plain_messages() -> None:
    raw = [{"role": "user", "content": "hi", "name": "ann"}]
    (fast,) = ConversationCache().messages(raw).messages
    assert fast == Message.model_validate(raw[0])
