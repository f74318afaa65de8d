"""The chat service's render caches: prompts equal an uncached render, request after request."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import chatfmt
from chatfmt.engines.fake import FakeEngine
from chatfmt.render_cache import ConversationCache
from chatfmt.server.chat.schemas import ChatCompletionRequest
from chatfmt.server.chat.service import ChatService
from chatfmt.server.http.errors import ApiError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Looks a word up",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
        },
    }
]

TEXT = st.lists(st.sampled_from(["hi", "word", "北京", "<|im_end|>", "\n", "😀"]), max_size=6).map(
    " ".join
)


def _service(dialect: str, vocabulary: str, entries: int) -> ChatService:
    tok = chatfmt.load_tokenizer(vocabulary)
    service = ChatService(
        FakeEngine(tok, context_length=1 << 20), chatfmt.get_dialect(dialect), model_name="m"
    )
    service._conversations = ConversationCache(max_entries=entries)
    return service


def _prompt(service: ChatService, body: dict[str, Any]) -> list[int]:
    req = ChatCompletionRequest.model_validate(json.loads(json.dumps(body)))
    return service.prepare(req).prompt_ids


@pytest.mark.parametrize(
    ("dialect", "vocabulary"), [("qwen2.5", "qwen2.5"), ("qwen3", "qwen3"), ("llama4", "llama4")]
)
@given(texts=st.lists(TEXT, min_size=2, max_size=8), entries=st.integers(1, 2))
def test_a_growing_chat_renders_as_uncached(
    dialect: str, vocabulary: str, texts: list[str], entries: int
) -> None:
    service = _service(dialect, vocabulary, entries)
    other = {"messages": [{"role": "user", "content": "another chat"}], "tools": TOOLS}
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i, text in enumerate(texts):
        msgs.append({"role": "user", "content": text})
        if i % 3 == 2:
            call = {"id": f"c{i}", "type": "function", "function": {"name": "lookup"}}
            call["function"]["arguments"] = json.dumps({"word": text}, ensure_ascii=False)
            msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
            msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": text})
        body = {"messages": msgs, "tools": TOOLS}
        expected = chatfmt.get_dialect(dialect).render(
            msgs, chatfmt.load_tokenizer(vocabulary), tools=TOOLS
        )
        assert _prompt(service, body) == expected.ids
        if i % 2:
            _prompt(service, other)  # another conversation in between: evictions
        msgs.append({"role": "assistant", "content": f"answer {i}"})


def test_a_bad_message_in_a_returning_chat_is_the_same_400() -> None:
    service = _service("qwen2.5", "qwen2.5", 4)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    _prompt(service, {"messages": msgs})
    bad = [*msgs, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "x"}]
    with pytest.raises(ApiError) as cached:
        _prompt(service, {"messages": bad})
    with pytest.raises(ApiError) as fresh:
        _prompt(_service("qwen2.5", "qwen2.5", 4), {"messages": bad})
    assert str(cached.value) == str(fresh.value)
    assert "tool" in str(cached.value)


def test_messages_changed_by_the_caller_after_a_request_render_as_changed() -> None:
    # The request keeps the caller's dicts uncopied; the cache must keep its own.
    service = _service("qwen2.5", "qwen2.5", 4)
    tok = chatfmt.load_tokenizer("qwen2.5")
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "second"},
    ]
    req = ChatCompletionRequest.model_validate({"messages": msgs})
    assert req.messages is msgs  # taken as sent
    service.prepare(req)
    msgs[0]["content"] = "changed"
    again = service.prepare(ChatCompletionRequest.model_validate({"messages": msgs}))
    assert again.prompt_ids == chatfmt.get_dialect("qwen2.5").render(msgs, tok).ids


@pytest.mark.parametrize("messages", [[{"role": "user", "content": "hi"}, "text"], "text", [1]])
def test_messages_that_are_not_objects_get_pydantics_error(messages: Any) -> None:
    with pytest.raises(ValueError, match="messages"):
        ChatCompletionRequest.model_validate({"messages": messages})
