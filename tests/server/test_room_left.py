"""A reply limit over the room the prompt leaves in the context window is bounded by that room
in all three APIs (agents ask for 8,000 or 32,000 tokens whatever the model), whole and
streamed, and the reply ends as each API says a cut reply ends; a prompt that fills the window
is still a 400 naming the numbers and the fix. Over ASGI, with a scripted engine whose context
is small."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from server_helpers import parse_named_sse, parse_sse

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.tokenizers import Tokenizer

CONTEXT = 96
LONG_REPLY = "word " * 200 + "<|im_end|>"


def _app(tok: Tokenizer) -> tuple[Any, FakeEngine]:
    engine = FakeEngine(tok, [LONG_REPLY], context_length=CONTEXT)
    return create_app(engine, get_dialect("qwen2.5"), model_name="m", store=None), engine


def _post(app: Any, path: str, body: dict[str, Any]) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post(path, json=body)

    return asyncio.run(go())


def _room(engine: FakeEngine) -> int:
    return CONTEXT - len(engine.prompts[-1])


USER = [{"role": "user", "content": "Write a long story."}]


@pytest.mark.parametrize(
    ("field", "value"), [("max_tokens", 32000), ("max_completion_tokens", 10**12)]
)
def test_chat_completion_bounded_ends_with_length(qwen: Tokenizer, field: str, value: int) -> None:
    app, engine = _app(qwen)
    r = _post(app, "/v1/chat/completions", {"model": "m", "messages": USER, field: value})
    assert r.status_code == 200, r.text
    body = r.json()
    room = _room(engine)
    assert 0 < room < value and engine.params[-1].max_tokens == room
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == room
    assert body["usage"]["prompt_tokens"] + room == CONTEXT


def test_chat_stream_bounded_ends_with_length(qwen: Tokenizer) -> None:
    app, engine = _app(qwen)
    body = {"model": "m", "messages": USER, "max_tokens": 8000, "stream": True}
    body["stream_options"] = {"include_usage": True}
    r = _post(app, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    events, done = parse_sse(r.text)
    assert done
    finishes = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
    assert [f for f in finishes if f] == ["length"]
    assert events[-1]["usage"]["completion_tokens"] == _room(engine)


def test_a_limit_within_the_room_is_kept(qwen: Tokenizer) -> None:
    app, engine = _app(qwen)
    r = _post(app, "/v1/chat/completions", {"model": "m", "messages": USER, "max_tokens": 5})
    assert r.status_code == 200 and engine.params[-1].max_tokens == 5
    assert r.json()["usage"]["completion_tokens"] == 5


def test_responses_bounded_are_incomplete(qwen: Tokenizer) -> None:
    app, engine = _app(qwen)
    body = {"model": "m", "input": "Write a long story.", "max_output_tokens": 32000}
    r = _post(app, "/v1/responses", body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["status"] == "incomplete"
    assert out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out["max_output_tokens"] == 32000  # echoed as sent
    assert out["usage"]["output_tokens"] == _room(engine) == engine.params[-1].max_tokens


def test_responses_stream_bounded_ends_incomplete(qwen: Tokenizer) -> None:
    app, engine = _app(qwen)
    body = {"model": "m", "input": "Write a long story.", "max_output_tokens": 32000}
    r = _post(app, "/v1/responses", {**body, "stream": True})
    assert r.status_code == 200, r.text
    events = parse_named_sse(r.text)
    name, last = events[-1]
    assert name == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["usage"]["output_tokens"] == _room(engine)


def test_messages_stream_bounded_by_the_window(qwen: Tokenizer) -> None:
    app, engine = _app(qwen)
    body = {"model": "c", "max_tokens": 32000, "messages": USER, "stream": True}
    r = _post(app, "/v1/messages", body)
    assert r.status_code == 200, r.text
    events = dict(parse_named_sse(r.text))
    delta = events["message_delta"]
    # Anthropic's own reason for a reply the window cut before max_tokens.
    assert delta["delta"]["stop_reason"] == "model_context_window_exceeded"
    assert delta["usage"]["output_tokens"] == _room(engine)


def test_a_prompt_that_fills_the_window_is_still_refused(qwen: Tokenizer) -> None:
    app, engine = _app(qwen)
    full = [{"role": "user", "content": "word " * CONTEXT}]
    r = _post(app, "/v1/chat/completions", {"model": "m", "messages": full, "max_tokens": 10})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
    assert str(CONTEXT) in err["message"] and "--n-ctx" in err["message"]
    r = _post(app, "/v1/responses", {"model": "m", "input": "word " * CONTEXT})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = _post(app, "/v1/messages", {"model": "c", "max_tokens": 10, "messages": full})
    assert r.status_code == 400 and "context length" in json.dumps(r.json())
    assert engine.prompts == []
