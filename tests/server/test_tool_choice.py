"""tool_choice "required" and named: the prompt opens the call, so the reply can only be one."""

from __future__ import annotations

import json
from typing import Any

from server_helpers import USER_HI, WEATHER_TOOL, parse_sse
from test_chat_fake import chat

import chatfmt
from chatfmt.server import create_app


def _body(choice: Any, **extra: Any) -> dict[str, Any]:
    return {"messages": USER_HI, "tools": [WEATHER_TOOL], "tool_choice": choice, **extra}


def test_named_tool_choice_prefills_the_call(make_fake, qwen_dialect, qwen) -> None:  # type: ignore[no-untyped-def]
    # The model only writes the arguments: the name was already in the prompt.
    engine = make_fake(['{"city": "Paris"}}\n</tool_call><|im_end|>'])
    app = create_app(engine, qwen_dialect, model_name="m")
    choice = {"type": "function", "function": {"name": "get_weather"}}
    r = chat(app, _body(choice))
    assert r.status_code == 200, r.text
    body = r.json()
    call = body["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    prompt = engine.prompts[0]
    opening = qwen.encode_text('\n{"name": "get_weather", "arguments": ')
    assert prompt[-len(opening) - 1 :] == [qwen.control_id("<tool_call>"), *opening]
    assert body["usage"]["prompt_tokens"] == len(prompt)


def test_named_tool_choice_streams_the_call(make_fake, qwen_dialect) -> None:  # type: ignore[no-untyped-def]
    engine = make_fake(['{"city": "Paris"}}\n</tool_call><|im_end|>'])
    app = create_app(engine, qwen_dialect, model_name="m")
    choice = {"type": "function", "function": {"name": "get_weather"}}
    r = chat(app, _body(choice, stream=True))
    events, done = parse_sse(r.text)
    assert done
    deltas = [
        c for e in events if e["choices"] for c in e["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert deltas[0]["function"]["name"] == "get_weather" and deltas[0]["index"] == 0
    args = "".join(d["function"].get("arguments", "") for d in deltas)
    assert json.loads(args) == {"city": "Paris"}
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_required_opens_a_call_the_model_names(make_fake, qwen_dialect) -> None:  # type: ignore[no-untyped-def]
    engine = make_fake(
        ['{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>']
    )
    app = create_app(engine, qwen_dialect, model_name="m")
    r = chat(app, _body("required"))
    call = r.json()["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"


def test_auto_and_none_prefill_nothing(make_fake, qwen_dialect, qwen) -> None:  # type: ignore[no-untyped-def]
    for choice in ("auto", "none"):
        engine = make_fake(["Hi.<|im_end|>"])
        app = create_app(engine, qwen_dialect, model_name="m")
        assert chat(app, _body(choice)).status_code == 200
        generation_prompt = [qwen.control_id("<|im_start|>"), *qwen.encode_text("assistant\n")]
        assert engine.prompts[0][-len(generation_prompt) :] == generation_prompt


def test_chatglm3_named_call_writes_the_metadata_line(small_glm) -> None:  # type: ignore[no-untyped-def]
    from chatfmt.engines.fake import FakeEngine

    engine = FakeEngine(small_glm, ['```python\ntool_call(city="Paris")\n```<|observation|>'])
    app = create_app(engine, chatfmt.get_dialect("chatglm3"), model_name="m")
    choice = {"type": "function", "function": {"name": "get_weather"}}
    r = chat(app, _body(choice))
    assert r.status_code == 200, r.text
    call = r.json()["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    prompt = engine.prompts[0]
    line = small_glm.encode_text("get_weather\n")
    assert prompt[-len(line) - 1 :] == [small_glm.control_id("<|assistant|>"), *line]


TWO_CALLS = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "other", "arguments": {}}\n</tool_call><|im_end|>'
)


def test_undeclared_tools_come_back_as_text(make_fake, qwen_dialect) -> None:  # type: ignore[no-untyped-def]
    app = create_app(make_fake([TWO_CALLS]), qwen_dialect, model_name="m")
    body = chat(app, _body("auto")).json()
    message = body["choices"][0]["message"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert '"name": "other"' in message["content"]
    events, _ = parse_sse(chat(app, _body("auto", stream=True)).text)
    names = [
        c["function"]["name"]
        for e in events
        if e["choices"]
        for c in e["choices"][0]["delta"].get("tool_calls", [])
        if "function" in c and c["function"].get("name")
    ]
    assert names == ["get_weather"]


def test_named_choice_and_parallel_false_keep_one_call(make_fake, qwen_dialect) -> None:  # type: ignore[no-untyped-def]
    two_weather = TWO_CALLS.replace('"other"', '"get_weather"')
    for extra in (
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"tool_choice": "auto", "parallel_tool_calls": False},
    ):
        engine = make_fake(
            [two_weather.removeprefix('<tool_call>\n{"name": "get_weather", "arguments": ')]
            if "function" in str(extra)
            else [two_weather]
        )
        app = create_app(engine, qwen_dialect, model_name="m")
        body = chat(app, {"messages": USER_HI, "tools": [WEATHER_TOOL], **extra}).json()
        assert len(body["choices"][0]["message"]["tool_calls"]) == 1, body


def test_tool_choice_none_returns_no_calls(make_fake, qwen_dialect) -> None:  # type: ignore[no-untyped-def]
    app = create_app(make_fake([TWO_CALLS]), qwen_dialect, model_name="m")
    body = chat(app, _body("none")).json()
    choice = body["choices"][0]
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"
    assert '"name": "get_weather"' in choice["message"]["content"]


def test_stop_string_inside_arguments_leaves_the_call_incomplete(make_fake, qwen_dialect) -> None:  # type: ignore[no-untyped-def]
    reply = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
        "\n</tool_call><|im_end|>"
    )
    app = create_app(make_fake([reply]), qwen_dialect, model_name="m")
    body = chat(app, _body("auto", stop="celsius")).json()
    choice = body["choices"][0]
    # The call is cut: it comes back with what the model wrote before the stop, never
    # completed, and the turn does not end in calls (as OpenAI returns a cut call).
    assert choice["finish_reason"] == "stop"
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["arguments"] == '{"city": "Paris", "unit": "'
    events, done = parse_sse(chat(app, _body("auto", stop="celsius", stream=True)).text)
    assert done
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    streamed = "".join(
        tc["function"].get("arguments") or ""
        for e in events
        for tc in e["choices"][0]["delta"].get("tool_calls") or ()
    )
    assert streamed == call["function"]["arguments"]


def test_a_chat_only_model_refuses_tools_in_every_api(make_fake, qwen_dialect) -> None:  # type: ignore[no-untyped-def]
    """Served for chat only (its template shows the model no tools): a request with tools is
    a 400 naming them, in chat completions, Responses and Messages alike; without, it runs."""
    from fastapi.testclient import TestClient

    engine = make_fake(["Hello!<|im_end|>"] * 2)
    app = create_app(engine, qwen_dialect, model_name="m", chat_only=True)
    r = chat(app, {"messages": USER_HI, "tools": [WEATHER_TOOL]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "tools" and error["code"] == "tools_not_supported"
    assert "served for chat only" in error["message"]
    assert chat(app, {"messages": USER_HI}).status_code == 200
    called = [
        *USER_HI,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]  # fmt: skip
    r = chat(app, {"messages": called})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1].tool_calls"
    fn = WEATHER_TOOL["function"]
    with TestClient(app) as client:
        tool = {"type": "function", **fn}
        r = client.post("/v1/responses", json={"input": "hi", "tools": [tool]})
        assert r.status_code == 400 and "served for chat only" in r.text, r.text
        anthropic_tool = {"name": fn["name"], "input_schema": fn["parameters"]}
        body = {"model": "m", "max_tokens": 8, "messages": USER_HI, "tools": [anthropic_tool]}
        r = client.post("/v1/messages", json=body)
        assert r.status_code == 400 and "served for chat only" in r.text, r.text
    assert engine.prompts == [engine.prompts[0]]  # only the request without tools ran
