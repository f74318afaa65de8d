"""Messages API requests generated with their real shapes (blocks of every type, right and
wrong, tools, tool_choice, thinking): whatever arrives, the answer is never a 5xx, every error
is Anthropic's shape, and a stream that starts never fails. (``test_fuzz.py`` fuzzes every
operation from its published schema too.)"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("anthropic", reason="the anthropic SDK (a dev dependency) checks the shapes")

from messages_helpers import WEATHER, post

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.tokenizers import load_tokenizer
from profiles import examples

REPLIES = (
    "Hello there!<|im_end|>",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
    '{"name": "nope", "arguments": {}}<|im_end|>',
)
APP = create_app(
    FakeEngine(load_tokenizer("qwen2.5"), REPLIES, grammar_support="lazy", context_length=4096),
    get_dialect("qwen2.5"),
    model_name="m",
)

_text = st.text(max_size=30)
_id = st.one_of(st.just("toolu_1"), st.text(alphabet="abc_01", max_size=8), st.integers())
_any = st.one_of(_text, st.integers(), st.none(), st.booleans(), st.lists(_text, max_size=2))
_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(_text, st.integers())}),
    st.fixed_dictionaries(
        {"type": st.just("tool_use"), "id": _id, "name": st.sampled_from(["get_weather", ""])},
        optional={"input": st.one_of(st.just({"city": "Rome"}), _any)},
    ),
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": _id},
        optional={
            "content": st.one_of(
                _text, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _text}))
            ),
            "is_error": _any,
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("thinking"), "thinking": st.one_of(_text, st.none())},
        optional={"signature": st.one_of(_text, st.just("chatfmt-thinking-v1:!!"))},
    ),
    st.fixed_dictionaries({"type": st.just("redacted_thinking"), "data": _text}),
    st.fixed_dictionaries({"type": st.sampled_from(["image", "document", "x", ""])}),
    st.dictionaries(
        st.sampled_from(["type", "text", "cache_control", "citations"]), _any, max_size=3
    ),
)
_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system", "tool"]),
        "content": st.one_of(_text, st.lists(_block, max_size=3), st.none()),
    }
)


@given(
    messages=st.lists(_message, max_size=5),
    stream=st.booleans(),
    extra=st.fixed_dictionaries(
        {},
        optional={
            "system": st.one_of(_text, st.lists(_block, max_size=2)),
            "tools": st.just([WEATHER]),
            "tool_choice": st.one_of(
                st.fixed_dictionaries(
                    {"type": st.sampled_from(["auto", "any", "none", "tool", "x"])},
                    optional={"name": _any, "disable_parallel_tool_use": _any},
                ),
                _any,
            ),
            "thinking": st.fixed_dictionaries(
                {"type": st.sampled_from(["enabled", "disabled", "adaptive"])},
                optional={"budget_tokens": _any, "display": _any},
            ),
            "max_tokens": st.integers(min_value=-1, max_value=64),
            "stop_sequences": st.lists(_text, max_size=2),
            "top_k": st.integers(min_value=-1, max_value=5),
        },
    ),
)
@settings(max_examples=examples(0.5), suppress_health_check=list(HealthCheck))
def test_generated_requests_never_5xx(
    messages: list[dict[str, Any]], stream: bool, extra: dict[str, Any]
) -> None:
    body = {"model": "claude-x", "max_tokens": 16, "messages": messages, "stream": stream, **extra}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        sent = body if path == "/v1/messages" else {"model": "m", "messages": messages}
        r = post(APP, path, sent)
        assert r.status_code < 500, (sent, r.text[:500])
        if r.status_code != 200:
            error = r.json()
            assert error["type"] == "error" and error["error"]["message"], error
        elif stream and path == "/v1/messages":
            assert "event: error" not in r.text, r.text[-500:]
