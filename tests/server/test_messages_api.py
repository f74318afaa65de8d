"""/v1/messages over ASGI with a scripted engine: the request rendered as its chat equivalent
(system, every block type, tools, tool_choice, thinking), the message's blocks, stop reasons
and usage, and count_tokens."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("anthropic", reason="the anthropic SDK (a dev dependency) checks the shapes")

from messages_helpers import (
    CALL,
    WEATHER,
    WEATHER_CHAT,
    body,
    create,
    post,
)

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.messages import Tool
from chatfmt.server import create_app
from chatfmt.server.messages.thinking import thinking_of_signature
from chatfmt.tokenizers import load_tokenizer


def app_of(fake: FakeEngine, dialect: str = "qwen2.5", **kwargs: Any) -> Any:
    return create_app(fake, get_dialect(dialect), model_name="served-model", **kwargs)


def rendered(
    tok: Any, dialect: Any, messages: list[dict[str, Any]], tools: Any = None
) -> list[int]:
    """The prompt ids chat completions render for the same conversation."""
    if tools:
        dialect = dialect.with_tools([Tool(definition=t) for t in tools])
    return list(dialect.render(messages, tok, tools=tools).ids)


def test_a_plain_message(make_fake, qwen_dialect, qwen) -> None:
    fake = make_fake()
    out = create(app_of(fake), body("hi"))
    assert out["id"].startswith("msg_") and len(out["id"]) > len("msg_") + 16
    assert out["type"] == "message" and out["role"] == "assistant"
    # The model name the client sent is answered (the served model does the work).
    assert out["model"] == "claude-test-1"
    assert out["content"] == [{"type": "text", "text": "Hello there!"}]
    assert out["stop_reason"] == "end_turn" and out["stop_sequence"] is None
    assert fake.prompts[0] == rendered(qwen, qwen_dialect, [{"role": "user", "content": "hi"}])
    assert out["usage"] == {
        "input_tokens": len(fake.prompts[0]),
        "output_tokens": 4,  # "Hello there!" and the <|im_end|> that ended it
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def test_system_and_text_blocks_render_as_paragraphs(make_fake, qwen_dialect, qwen) -> None:
    fake = make_fake()
    system = [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Answer in French."},
    ]
    content = [
        {"type": "text", "text": "<context>x</context>"},
        {"type": "text", "text": "Say hi.", "cache_control": {"type": "ephemeral"}},
    ]
    create(app_of(fake), body(content, system=system))
    expected = [
        {"role": "system", "content": "You are terse.\n\nAnswer in French."},
        {"role": "user", "content": "<context>x</context>\n\nSay hi."},
    ]
    assert fake.prompts[0] == rendered(qwen, qwen_dialect, expected)
    # A system string is the same system message.
    create(app_of(fake), body(content, system="You are terse.\n\nAnswer in French."))
    assert fake.prompts[1] == fake.prompts[0]


def test_a_tool_call_and_its_result_round_trip(make_fake, qwen_dialect, qwen) -> None:
    fake = make_fake([CALL, "It is sunny in Paris.<|im_end|>"])
    app = app_of(fake)
    first = create(app, body("Weather in Paris?", tools=[WEATHER]))
    assert first["stop_reason"] == "tool_use"
    [call] = first["content"]
    assert call["type"] == "tool_use" and call["name"] == "get_weather"
    assert call["input"] == {"city": "Paris"}  # an object, not a JSON string
    assert call["id"].startswith("toolu_")
    user = {"role": "user", "content": "Weather in Paris?"}
    assert fake.prompts[0] == rendered(qwen, qwen_dialect, [user], [WEATHER_CHAT])
    # The client sends the call back with its result, as the SDK's to_param() gives it.
    history = [
        user,
        {"role": "assistant", "content": first["content"]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "21 C"}],
        },
    ]
    second = create(app, body(history, tools=[WEATHER]))
    assert second["content"] == [{"type": "text", "text": "It is sunny in Paris."}]
    assert second["stop_reason"] == "end_turn"
    chat_call = {
        "id": call["id"],
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    expected = [
        user,
        {"role": "assistant", "content": None, "tool_calls": [chat_call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "21 C"},
    ]
    assert fake.prompts[1] == rendered(qwen, qwen_dialect, expected, [WEATHER_CHAT])


def test_tool_results_as_blocks_errors_and_text_after_them(make_fake, qwen_dialect, qwen) -> None:
    fake = make_fake()
    use = [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    results = [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [{"type": "text", "text": "18 C"}, {"type": "text", "text": "cloudy"}],
            "cache_control": {"type": "ephemeral"},
        },
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "timeout", "is_error": True},
        {"type": "text", "text": "And tomorrow?"},
    ]
    history = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": use},
        {"role": "user", "content": results},
    ]
    create(app_of(fake), body(history, tools=[WEATHER]))

    def call(i: str, city: str) -> dict[str, Any]:
        arguments = json.dumps({"city": city})
        return {
            "id": i,
            "type": "function",
            "function": {"name": "get_weather", "arguments": arguments},
        }

    expected = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [call("toolu_1", "Rome"), call("toolu_2", "Oslo")],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C\n\ncloudy"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: timeout"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert fake.prompts[0] == rendered(qwen, qwen_dialect, expected, [WEATHER_CHAT])


@pytest.fixture(scope="module")
def qwen3() -> Any:
    return load_tokenizer("qwen3")


THOUGHT = "<think>\nThe user says hi.\n</think>\n\nHello!<|im_end|>"
OFF_TAIL = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_thinking_comes_back_as_a_thinking_block(qwen3: Any) -> None:
    app = app_of(FakeEngine(qwen3, [THOUGHT]), "qwen3")
    out = create(app, body("hi"))
    thinking, text = out["content"]
    assert thinking["type"] == "thinking" and thinking["thinking"] == "The user says hi."
    assert thinking_of_signature(thinking["signature"]) == "The user says hi."
    assert text == {"type": "text", "text": "Hello!"}


def test_thinking_omitted_is_carried_by_the_signature(qwen3: Any) -> None:
    fake = FakeEngine(qwen3, [THOUGHT, "Fine.<|im_end|>"])
    app = app_of(fake, "qwen3")
    out = create(app, body("hi", thinking={"type": "adaptive", "display": "omitted"}))
    thinking = out["content"][0]
    assert thinking["thinking"] == ""
    assert thinking_of_signature(thinking["signature"]) == "The user says hi."


@pytest.mark.parametrize(
    ("thinking", "off"),
    [
        ({"type": "disabled"}, True),
        ({"type": "enabled", "budget_tokens": 2048}, False),
        ({"type": "adaptive"}, False),  # Qwen3's default: on
        (None, False),
    ],
)
def test_the_thinking_switch_reaches_the_prompt(qwen3: Any, thinking: Any, off: bool) -> None:
    fake = FakeEngine(qwen3, ["Hello!<|im_end|>"])
    extra = {"thinking": thinking} if thinking is not None else {}
    create(app_of(fake, "qwen3"), body("hi", **extra))
    assert qwen3.decode(fake.prompts[-1]).endswith(OFF_TAIL) is off


def test_earlier_thinking_is_the_messages_reasoning_and_redacted_is_dropped(qwen3: Any) -> None:
    fake = FakeEngine(qwen3, ["Done.<|im_end|>"])
    app = app_of(fake, "qwen3")
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"}

    def history(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": "Weather in Rome?"},
            {"role": "assistant", "content": [*blocks, use]},
            {"role": "user", "content": [result]},
        ]

    thought = {"type": "thinking", "thinking": "I should call the tool.", "signature": "sig"}
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    create(app, body(history(thought), tools=[WEATHER]))
    create(app, body(history(redacted, thought), tools=[WEATHER]))
    create(app, body(history(), tools=[WEATHER]))
    # Qwen3 keeps the reasoning of the tool loop under way: it is in the prompt.
    assert "I should call the tool." in qwen3.decode(fake.prompts[0])
    assert fake.prompts[1] == fake.prompts[0]  # the redacted block changed nothing
    assert "I should call the tool." not in qwen3.decode(fake.prompts[2])
    # A thinking block whose text was omitted renders the thought its signature carries.
    own = create(app_of(FakeEngine(qwen3, [THOUGHT]), "qwen3"), body("x"))["content"][0]
    hidden = {"type": "thinking", "thinking": "", "signature": own["signature"]}
    create(app, body(history(hidden), tools=[WEATHER]))
    assert "The user says hi." in qwen3.decode(fake.prompts[3])


@pytest.mark.parametrize(
    ("choice", "tail", "shown"),
    [
        ({"type": "any"}, "<tool_call>\n", 2),
        (
            {"type": "tool", "name": "get_time"},
            '<tool_call>\n{"name": "get_time", "arguments": ',
            1,
        ),
        ({"type": "auto"}, "<|im_start|>assistant\n", 2),
        ({"type": "none"}, "<|im_start|>assistant\n", 0),
    ],
)
def test_tool_choice_maps_onto_chat_completions(
    make_fake, qwen, choice: dict[str, Any], tail: str, shown: int
) -> None:
    time_tool = {**WEATHER, "name": "get_time", "description": "Get the local time."}
    fake = make_fake(['{"city": "Rome"}}\n</tool_call><|im_end|>'])
    create(app_of(fake), body("Rome?", tools=[WEATHER, time_tool], tool_choice=choice))
    text = qwen.decode(fake.prompts[0])
    # Without grammars (the fake engine), a forced call is opened in the prompt.
    assert text.endswith(tail), text[-80:]
    assert text.count('"name": "get_') - tail.count('"name": "') == shown


def test_disable_parallel_tool_use_keeps_one_call(make_fake) -> None:
    two = CALL.removesuffix("<|im_end|>") + "\n" + CALL
    fake = make_fake([two])
    choice = {"type": "auto", "disable_parallel_tool_use": True}
    out = create(app_of(fake), body("Paris?", tools=[WEATHER], tool_choice=choice))
    kinds = [b["type"] for b in out["content"]]
    # The second call is not returned as a call: its JSON is text, as chat completions do.
    assert kinds == ["tool_use", "text"]
    assert json.loads(out["content"][1]["text"])["name"] == "get_weather"
    assert out["stop_reason"] == "tool_use"


def test_sampling_fields_reach_the_engine(make_fake) -> None:
    fake = make_fake(sampling=["top_k"])  # the fake refuses a field it is not told it takes
    create(app_of(fake), body("hi", temperature=0.25, top_p=0.5, top_k=7, max_tokens=12))
    params = fake.params[0]
    assert (params.temperature, params.top_p, params.top_k, params.max_tokens) == (0.25, 0.5, 7, 12)
    create(app_of(fake), body("hi"))
    assert (fake.params[1].temperature, fake.params[1].top_k) == (1.0, 0)  # Anthropic's defaults
    # An engine that cannot honour top_k refuses it before generating, naming it.
    r = post(app_of(make_fake()), "/v1/messages", body("hi", top_k=7))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith(
        "top_k cannot be honoured"
    )


def test_a_stop_sequence_is_reported(make_fake) -> None:
    fake = make_fake(["Hello. END of it<|im_end|>"])
    out = create(app_of(fake), body("hi", stop_sequences=["STOP", "END"]))
    assert out["content"] == [{"type": "text", "text": "Hello. "}]
    assert out["stop_reason"] == "stop_sequence" and out["stop_sequence"] == "END"


def test_max_tokens_cuts_the_reply(make_fake) -> None:
    out = create(
        app_of(make_fake(["one two three four five six<|im_end|>"])), body("hi", max_tokens=2)
    )
    assert out["stop_reason"] == "max_tokens" and out["usage"]["output_tokens"] == 2
    assert out["content"] == [{"type": "text", "text": "one two"}]


def test_a_call_cut_by_max_tokens_is_never_a_tool_use_block(make_fake) -> None:
    fake = make_fake([CALL])
    out = create(app_of(fake), body("Paris?", tools=[WEATHER], max_tokens=14))
    assert out["stop_reason"] == "max_tokens"
    assert [b["type"] for b in out["content"]] == ["text"]
    text = out["content"][0]["text"]
    # What the model wrote of it, never completed into a runnable call.
    assert text.startswith('{"name": "get_weather", "arguments": {')
    with pytest.raises(ValueError):
        json.loads(text)


def test_max_tokens_over_the_context_is_bounded_by_the_window(make_fake) -> None:
    fake = make_fake(["word " * 40 + "<|im_end|>"], context_length=64)
    out = create(app_of(fake), body("hi", max_tokens=32000))
    room = 64 - len(fake.prompts[0])
    assert fake.params[0].max_tokens == room
    assert out["stop_reason"] == "model_context_window_exceeded"
    assert out["usage"]["output_tokens"] == room


def test_count_tokens_is_the_prompt_of_the_same_request(make_fake) -> None:
    fake = make_fake([CALL])
    app = app_of(fake)
    request = body(
        "Weather in Paris?",
        system=[{"type": "text", "text": "Be brief."}],
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    counted = post(
        app, "/v1/messages/count_tokens", {k: v for k, v in request.items() if k != "max_tokens"}
    )
    assert counted.status_code == 200, counted.text
    from anthropic.types import MessageTokensCount

    MessageTokensCount.model_validate(counted.json())
    out = create(app, request)
    # The forced call's opening is part of the prompt, and of both counts.
    assert counted.json() == {"input_tokens": out["usage"]["input_tokens"]}
    assert out["usage"]["input_tokens"] == len(fake.prompts[0])
    # count_tokens takes no generation fields (Anthropic's does not either).
    r = post(app, "/v1/messages/count_tokens", request)
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]


def test_cached_prompt_tokens_are_cache_reads(qwen) -> None:
    class Cached(FakeEngine):
        async def stream(self, prompt_ids, params):  # type: ignore[no-untyped-def,override]
            from dataclasses import replace

            async for chunk in super().stream(prompt_ids, params):
                yield replace(chunk, cached_tokens=10) if chunk.finish_reason else chunk

    fake = Cached(qwen, ["Hi!<|im_end|>"])
    out = create(app_of(fake), body("hi"))
    usage = out["usage"]
    assert usage["cache_read_input_tokens"] == 10
    # Anthropic's rule: the prompt is the sum of the input fields.
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == len(fake.prompts[0])


def test_output_config_format_constrains_the_reply(make_fake) -> None:
    fake = make_fake(['{"a": 1}<|im_end|>'], grammar_support="lazy")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    config = {"effort": "high", "format": {"type": "json_schema", "schema": schema}}
    out = create(app_of(fake), body("json", output_config=config))
    assert out["content"] == [{"type": "text", "text": '{"a": 1}'}]
    grammar = fake.params[0].grammar
    assert grammar is not None and not grammar.lazy and '\\"a\\"' in grammar.gbnf


def test_documented_no_op_fields_and_headers_are_accepted(make_fake) -> None:
    fake = make_fake()
    app = app_of(fake)
    plain = create(app, body("hi"))
    noted = create(
        app,
        body(
            "hi",
            metadata={"user_id": "u-1"},
            cache_control={"type": "ephemeral"},
            context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
            service_tier="auto",
            speed="standard",
            inference_geo="us",
            output_config={"effort": "low"},
        ),
        params={"beta": "true"},
        headers={
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "context-management-2025-06-27",
        },
    )
    assert fake.prompts[1] == fake.prompts[0]  # they change nothing
    assert noted["content"] == plain["content"]


def test_openai_routes_keep_their_shape_and_models_list_the_served_model(make_fake) -> None:
    app = app_of(make_fake())
    r = post(app, "/v1/chat/completions", {"messages": []})
    assert r.status_code == 400 and set(r.json()) == {"error"}
    import asyncio

    import httpx

    async def get() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get("/v1/models"), await client.head("/")

    models, probe = asyncio.run(get())
    assert [m["id"] for m in models.json()["data"]] == ["served-model"]
    assert probe.status_code == 200  # Claude Code's probe of its base URL
