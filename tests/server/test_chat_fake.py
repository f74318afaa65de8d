"""/v1/chat/completions over ASGI with a scripted engine: response and chunk shapes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_helpers import TIME_TOOL, USER_HI, WEATHER_TOOL, parse_sse

from chatfmt.server import create_app
from chatfmt.server.chat.schemas import ChatCompletionChunk
from profiles import examples

CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
)


def request(app: Any, method: str, url: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.request(method, url, **kwargs)

    return asyncio.run(go())


def chat(app: Any, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
    return request(app, "POST", "/v1/chat/completions", json=body, **kwargs)


def stream_events(app: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = chat(app, {**body, "stream": True})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events, done = parse_sse(r.text)
    assert done, "stream must end with data: [DONE]"
    return events


def check_chunks(events: list[dict[str, Any]]) -> None:
    """Rules every stream obeys: one id, schema-valid chunks, role first, one finish."""
    assert len({e["id"] for e in events}) == 1
    for e in events:
        ChatCompletionChunk.model_validate(e)
    first = events[0]["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": ""}
    assert first["finish_reason"] is None
    finishes = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(finishes) == 1
    assert finishes[0]["choices"][0]["delta"] == {}


def content_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])


def test_plain_completion(make_fake, qwen_dialect) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="test-model")
    r = chat(app, {"model": "whatever", "messages": USER_HI})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "test-model"
    assert body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "Hello there!"}
    assert choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(fake.prompts[0])
    # "Hello there!" is 3 tokens, plus the <|im_end|> that ended the turn.
    assert usage["completion_tokens"] == len(fake.reply_ids("Hello there!<|im_end|>")) == 4
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_prompt_is_the_dialect_render(make_fake, qwen_dialect, qwen) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    messages = [
        {"role": "developer", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "you"}],
        },
    ]
    assert chat(app, {"messages": messages}).status_code == 200
    expected = qwen_dialect.render(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello you"}], qwen
    )
    assert fake.prompts[0] == expected.ids
    params = fake.params[0]
    assert params.stop_ids == (151643, 151645)
    assert params.max_tokens == fake.context_length - len(expected.ids)


def test_stream_text(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    events = stream_events(app, {"messages": USER_HI})
    check_chunks(events)
    assert content_of(events) == "Hello there!"
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in e for e in events)
    assert all(e["object"] == "chat.completion.chunk" and e["model"] == "m" for e in events)


def test_stream_usage_chunk_last(make_fake, qwen_dialect) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    events = stream_events(app, {"messages": USER_HI, "stream_options": {"include_usage": True}})
    check_chunks(events)
    last = events[-1]
    assert last["choices"] == []
    assert last["usage"] == {
        "prompt_tokens": len(fake.prompts[0]),
        "completion_tokens": 4,
        "total_tokens": len(fake.prompts[0]) + 4,
    }
    assert all(e["usage"] is None for e in events[:-1])


def _tool_deltas(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d for e in events if e["choices"] for d in e["choices"][0]["delta"].get("tool_calls") or []
    ]


@pytest.mark.parametrize(
    "reply",
    [
        CALL,
        '{"name": "get_weather", "arguments": {"city": "Paris"}}<|im_end|>',
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```<|im_end|>',
    ],
    ids=["tagged", "bare-json", "fenced"],
)
def test_stream_tool_call(make_fake, qwen_dialect, reply: str) -> None:
    app = create_app(make_fake([reply]), qwen_dialect, model_name="m")
    events = stream_events(app, {"messages": USER_HI, "tools": [WEATHER_TOOL]})
    check_chunks(events)
    deltas = _tool_deltas(events)
    assert deltas, "expected tool_calls deltas"
    assert all(d["index"] == 0 for d in deltas)
    first, rest = deltas[0], deltas[1:]
    assert first["type"] == "function"
    assert first["id"].startswith("call_")
    assert first["function"]["name"] == "get_weather"
    for d in rest:
        assert set(d) == {"index", "function"}
        assert set(d["function"]) == {"arguments"}
    args = "".join(d["function"].get("arguments", "") for d in deltas)
    assert json.loads(args) == {"city": "Paris"}
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert content_of(events) == ""


def test_two_tool_calls_have_indices(make_fake, qwen_dialect) -> None:
    reply = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"city": "Rome"}}\n</tool_call><|im_end|>'
    )
    app = create_app(make_fake([reply]), qwen_dialect, model_name="m")
    events = stream_events(app, {"messages": USER_HI, "tools": [WEATHER_TOOL, TIME_TOOL]})
    check_chunks(events)
    deltas = _tool_deltas(events)
    starts = [d for d in deltas if "id" in d]
    assert [(d["index"], d["function"]["name"]) for d in starts] == [
        (0, "get_weather"),
        (1, "get_time"),
    ]
    for i, city in ((0, "Paris"), (1, "Rome")):
        args = "".join(d["function"].get("arguments", "") for d in deltas if d["index"] == i)
        assert json.loads(args) == {"city": city}
    # Non-streaming: the same two calls.
    body = chat(app, {"messages": USER_HI, "tools": [WEATHER_TOOL, TIME_TOOL]}).json()
    calls = body["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_non_stream_tool_call(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake([CALL]), qwen_dialect, model_name="m")
    body = chat(app, {"messages": USER_HI, "tools": [WEATHER_TOOL]}).json()
    msg = body["choices"][0]["message"]
    assert msg["content"] is None
    (call,) = msg["tool_calls"]
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_result_turn_renders(make_fake, qwen_dialect) -> None:
    fake = make_fake(["It is 22 degrees in Paris.<|im_end|>"])
    app = create_app(fake, qwen_dialect, model_name="m")
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 22}'},
    ]
    r = chat(app, {"messages": messages, "tools": [WEATHER_TOOL]})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "It is 22 degrees in Paris."
    text = fake.tokenizer.decode(fake.prompts[0])
    assert "<tool_response>" in text and '{"temp_c": 22}' in text


def test_max_tokens_finish_length(make_fake, qwen_dialect) -> None:
    fake = make_fake(["one two three four five six seven<|im_end|>"])
    app = create_app(fake, qwen_dialect, model_name="m")
    body = chat(app, {"messages": USER_HI, "max_tokens": 3}).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["message"]["content"] == "one two three"
    events = stream_events(app, {"messages": USER_HI, "max_completion_tokens": 2})
    check_chunks(events)
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    assert content_of(events) == "one two"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("stop", "expected"),
    [("STOP", "Hello "), (["xyz", "ld"], "Hello STOP wor"), (["Hello"], "")],
)
def test_stop_strings(make_fake, qwen_dialect, stream: bool, stop: Any, expected: str) -> None:
    fake = make_fake(["Hello STOP world and more text<|im_end|>"])
    app = create_app(fake, qwen_dialect, model_name="m")
    body = {"messages": USER_HI, "stop": stop}
    if stream:
        events = stream_events(app, body)
        check_chunks(events)
        assert content_of(events) == expected
        assert events[-1]["choices"][0]["finish_reason"] == "stop"
    else:
        out = chat(app, body).json()
        assert out["choices"][0]["message"]["content"] == expected
        assert out["choices"][0]["finish_reason"] == "stop"
    # Hitting a stop string stops the engine early.
    assert fake.cancelled == 1


def test_stop_string_split_across_tokens(make_fake, qwen_dialect, qwen) -> None:
    # Each character is its own token, so "END" arrives in three pieces.
    ids = [t for ch in "abcENDdef" for t in qwen.encode_text(ch)] + [151645]
    app = create_app(make_fake([ids]), qwen_dialect, model_name="m")
    events = stream_events(app, {"messages": USER_HI, "stop": "END"})
    assert content_of(events) == "abc"
    # A partial match that fails is released intact.
    app = create_app(make_fake([ids]), qwen_dialect, model_name="m")
    events = stream_events(app, {"messages": USER_HI, "stop": "ENX"})
    assert content_of(events) == "abcENDdef"


def test_tool_choice_none_hides_tools(make_fake, qwen_dialect, qwen) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    chat(app, {"messages": USER_HI, "tools": [WEATHER_TOOL], "tool_choice": "none"})
    assert fake.prompts[0] == qwen_dialect.render(USER_HI, qwen).ids
    chat(app, {"messages": USER_HI, "tools": [WEATHER_TOOL], "tool_choice": "required"})
    assert "get_weather" in qwen.decode(fake.prompts[1])


def test_tool_choice_named_renders_only_that_tool(make_fake, qwen_dialect, qwen) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    choice = {"type": "function", "function": {"name": "get_time"}}
    r = chat(app, {"messages": USER_HI, "tools": [WEATHER_TOOL, TIME_TOOL], "tool_choice": choice})
    assert r.status_code == 200
    text = qwen.decode(fake.prompts[0])
    assert "get_time" in text and "get_weather" not in text
    bad = {"type": "function", "function": {"name": "nope"}}
    r = chat(app, {"messages": USER_HI, "tools": [WEATHER_TOOL], "tool_choice": bad})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "tool_choice"
    assert "nope" in r.json()["error"]["message"]


def test_context_check_names_both_numbers(make_fake, qwen_dialect) -> None:
    fake = make_fake(context_length=64)
    app = create_app(fake, qwen_dialect, model_name="m")
    # Without max_tokens the remaining context is the budget (over it: see test_room_left).
    r = chat(app, {"messages": USER_HI})
    assert r.status_code == 200
    assert fake.params[-1].max_tokens == 64 - len(fake.prompts[-1])
    long = [{"role": "user", "content": "word " * 200}]
    r = chat(app, {"messages": long})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_models_health_and_tokenize(make_fake, qwen_dialect, qwen) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="my-model")
    models = request(app, "GET", "/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["my-model"]
    assert models["data"][0]["chat_format"] == {
        "dialect": "qwen2.5",
        "description": "the qwen2.5 dialect",
        "chat_only": False,
    }
    assert request(app, "GET", "/v1/models/my-model").json()["id"] == "my-model"
    missing = request(app, "GET", "/v1/models/gpt-4")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    health = request(app, "GET", "/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    tok = request(app, "POST", "/tokenize", json={"messages": USER_HI}).json()
    assert tok["tokens"] == qwen_dialect.render(USER_HI, qwen).ids
    assert tok["count"] == len(tok["tokens"])
    assert tok["text"].startswith("<|im_start|>system\n")


def test_api_key(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m", api_key="sekret")
    body = {"messages": USER_HI}
    r = chat(app, body)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert chat(app, body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert chat(app, body, headers={"Authorization": "Basic sekret"}).status_code == 401
    assert chat(app, body, headers={"Authorization": "Bearer sekret"}).status_code == 200
    assert request(app, "GET", "/v1/models").status_code == 401
    assert request(app, "GET", "/health").status_code == 200


def test_engine_failure_is_502_and_server_survives(make_fake, qwen_dialect) -> None:
    fake = make_fake(fail_after=0)
    app = create_app(fake, qwen_dialect, model_name="m")
    for stream in (False, True):
        r = chat(app, {"messages": USER_HI, "stream": stream})
        assert r.status_code == 502
        assert r.json()["error"]["type"] == "engine_error"
    fake.fail_after = None
    assert chat(app, {"messages": USER_HI}).status_code == 200


def test_engine_failure_mid_stream_reports_in_band(make_fake, qwen_dialect) -> None:
    fake = make_fake(["one two three four<|im_end|>"], fail_after=2)
    app = create_app(fake, qwen_dialect, model_name="m")
    r = chat(app, {"messages": USER_HI, "stream": True})
    assert r.status_code == 200
    events, done = parse_sse(r.text)
    assert not done
    assert events[-1]["error"]["type"] == "engine_error"
    assert content_of(events[:-1]) == "one two"


def test_an_internal_failure_mid_stream_ends_the_stream_cleanly(
    make_fake, qwen_dialect, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatfmt.server.chat import service

    calls = {"n": 0}
    real = service.choice_frames

    def broken(events):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("a bug")
        return real(events)

    monkeypatch.setattr(service, "choice_frames", broken)
    app = create_app(make_fake(["one two three four<|im_end|>"]), qwen_dialect, model_name="m")
    r = chat(app, {"messages": USER_HI, "stream": True})
    events, done = parse_sse(r.text)
    assert not done and events[-1]["error"]["type"] == "server_error"


def test_tool_choice_without_tools_is_refused(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    named = {"type": "function", "function": {"name": "nope"}}
    for choice in ("required", named):
        r = chat(app, {"messages": USER_HI, "tool_choice": choice})
        assert r.status_code == 400 and "no 'tools'" in r.json()["error"]["message"]
    for choice in ("auto", "none"):
        assert chat(app, {"messages": USER_HI, "tool_choice": choice}).status_code == 200


def test_no_docs_pages_from_cdns(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    for path in ("/docs", "/redoc"):
        assert request(app, "GET", path).status_code == 404
    assert request(app, "GET", "/openapi.json").status_code == 200


@pytest.mark.parametrize("key", ["", " abc", "abc ", "ключ", "a b"])
def test_unsendable_api_keys_are_refused(make_fake, qwen_dialect, key: str) -> None:
    from chatfmt.errors import ChatFmtError

    with pytest.raises(ChatFmtError, match="printable ASCII"):
        create_app(make_fake(), qwen_dialect, model_name="m", api_key=key)


def test_tools_render_exactly_as_sent(make_fake, qwen_dialect, qwen) -> None:
    # Key order and extra keys matter: Qwen2.5's template writes each tool with tojson.
    tool = {
        "function": {
            "parameters": {"type": "object", "properties": {}},
            "name": "ping",
            "strict": True,
            "description": "Ping.",
        },
        "type": "function",
    }
    fake = make_fake(grammar_support="lazy")  # a strict tool needs an engine that constrains
    app = create_app(fake, qwen_dialect, model_name="m")
    assert chat(app, {"messages": USER_HI, "tools": [tool]}).status_code == 200
    assert fake.prompts[0] == qwen_dialect.render(USER_HI, qwen, tools=[tool]).ids


def test_long_conversation_renders_in_a_worker_thread(make_fake, qwen_dialect, qwen) -> None:
    messages = []
    for i in range(40):
        messages.append({"role": "user", "content": f"question {i}: " + "lorem ipsum " * 60})
        messages.append({"role": "assistant", "content": f"answer {i}"})
    messages.append({"role": "user", "content": "last"})
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    for end in (len(messages) - 2, len(messages)):  # a growing chat reuses encoded turns
        assert chat(app, {"messages": messages[:end]}).status_code == 200
    assert fake.prompts[-1] == qwen_dialect.render(messages, qwen).ids


@settings(max_examples=examples(0.2), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(
        st.sampled_from(
            [
                "Sure. ",
                "<tool_call>",
                "\n",
                '{"name": "get_weather", "arguments": {"city": "Rome"}}',
                "</tool_call>",
                "```json\n",
                "```",
                '{"a": 1}',
                "é😀",
                " text",
            ]
        ),
        max_size=8,
    )
)
def test_stream_equals_whole(make_fake, qwen_dialect, parts: list[str]) -> None:
    reply = "".join(parts) + "<|im_end|>"
    app = create_app(make_fake([reply]), qwen_dialect, model_name="m")
    body = {"messages": USER_HI, "tools": [WEATHER_TOOL]}
    whole = chat(app, body).json()["choices"][0]
    events = stream_events(app, body)
    check_chunks(events)
    assert (content_of(events) or None) == (whole["message"]["content"] or None)
    calls: dict[int, dict[str, str]] = {}
    for d in _tool_deltas(events):
        call = calls.setdefault(d["index"], {"name": "", "arguments": ""})
        call["name"] += d.get("function", {}).get("name") or ""
        call["arguments"] += d.get("function", {}).get("arguments") or ""
    expected = [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in whole["message"].get("tool_calls") or []
    ]
    assert [calls[i] for i in sorted(calls)] == expected
    assert events[-1]["choices"][0]["finish_reason"] == whole["finish_reason"]


def test_response_format_on_an_engine_that_cannot_constrain(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    r = chat(app, {"messages": USER_HI, "response_format": fmt})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "unsupported_response_format"
    assert r.json()["error"]["param"] == "response_format"
    # Free text needs nothing; a json_schema without a schema is a malformed request.
    assert chat(app, {"messages": USER_HI, "response_format": {"type": "text"}}).status_code == 200
    bad = chat(app, {"messages": USER_HI, "response_format": {"type": "json_schema"}})
    assert bad.status_code == 400 and "json_schema" in bad.json()["error"]["message"]


# ==== Reasoning (gpt-oss's analysis channel) ====

HARMONY_REPLY = (
    "<|channel|>analysis<|message|>The user greets me.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>"
)


def test_reasoning_is_returned_apart_from_the_content_and_sent_back_in_history() -> None:
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.fake import FakeEngine
    from chatfmt.tokenizers import load_tokenizer

    tok = load_tokenizer("o200k_harmony")
    fake = FakeEngine(tok, [HARMONY_REPLY])
    app = create_app(fake, get_dialect("harmony"), model_name="m")
    body = {"messages": USER_HI}
    message = chat(app, body).json()["choices"][0]["message"]
    assert message["content"] == "Hello!"
    assert message["reasoning_content"] == "The user greets me."

    events = stream_events(app, body)
    check_chunks(events)
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "The user greets me."
    assert content_of(events) == "Hello!"
    assert all(not (d.get("content") and d.get("reasoning_content")) for d in deltas)

    # A tool loop under way keeps the reasoning of its call in the prompt (as gpt-oss expects).
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = [
        *USER_HI,
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Call f.",
            "tool_calls": [call],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert chat(app, {"messages": history, "tools": tools}).status_code == 200
    assert "<|channel|>analysis<|message|>Call f.<|end|>" in tok.decode(fake.prompts[-1])


def test_reasoning_on_a_user_message_is_refused_with_the_fix(
    qwen_dialect: Any, make_fake: Any
) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    bad = {"role": "user", "content": "hi", "reasoning_content": "x"}
    r = chat(app, {"messages": [bad]})
    assert r.status_code == 400
    assert "only assistant messages carry reasoning" in r.json()["error"]["message"]


def test_a_reply_cut_off_while_thinking_has_null_content_and_renders_back_as_reasoning() -> None:
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.fake import FakeEngine
    from chatfmt.tokenizers import load_tokenizer

    tok = load_tokenizer("o200k_harmony")
    fake = FakeEngine(tok, ["<|channel|>analysis<|message|>Thinking about it"])
    app = create_app(fake, get_dialect("harmony"), model_name="m")
    reply = chat(app, {"messages": USER_HI, "max_tokens": 5}).json()["choices"][0]
    message = reply["message"]
    assert message["content"] is None and message["reasoning_content"]
    history = [*USER_HI, message, {"role": "user", "content": "go on"}]
    assert chat(app, {"messages": history}).status_code == 200
    prompt = tok.decode(fake.prompts[-1])
    assert "<|channel|>analysis<|message|>" in prompt and "<|channel|>final" not in prompt


def test_a_bad_reasoning_content_is_named_as_sent(qwen_dialect: Any, make_fake: Any) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    bad = [*USER_HI, {"role": "assistant", "content": "x", "reasoning_content": 5}]
    r = chat(app, {"messages": bad})
    assert r.status_code == 400 and "reasoning_content:" in r.json()["error"]["message"]
