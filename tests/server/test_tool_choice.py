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
