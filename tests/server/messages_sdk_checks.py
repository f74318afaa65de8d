"""What the official ``anthropic`` SDK must be able to do against ``/v1/messages``, written once
for both servers it is run against: a scripted engine (unit tier, ``test_messages_sdk.py``) and
the real default model (slow tier, ``test_messages_real.py``). Every body and event the SDK
receives is also validated against the SDK's own models (its client only constructs them)."""

from __future__ import annotations

from typing import Any

import anthropic
from anthropic import types

#: The key both servers are started with.
KEY = "test-key"

WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name."}},
        "required": ["city"],
    },
}

#: Greedy sampling: the SDK's create() has no temperature argument any more; the API takes it.
GREEDY = {"extra_body": {"temperature": 0}}

ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris right now?"}]

_EVENTS: dict[str, Any] = {
    "message_start": types.RawMessageStartEvent,
    "content_block_start": types.RawContentBlockStartEvent,
    "content_block_delta": types.RawContentBlockDeltaEvent,
    "content_block_stop": types.RawContentBlockStopEvent,
    "message_delta": types.RawMessageDeltaEvent,
    "message_stop": types.RawMessageStopEvent,
}


def client_of(url: str, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=300)


def validated(message: types.Message) -> types.Message:
    """``message`` re-read by the SDK's model with validation (the client only constructs)."""
    checked = types.Message.model_validate(message.to_dict())
    assert checked.id.startswith("msg_") and checked.type == "message"
    return checked


def check_create(client: anthropic.Anthropic) -> types.Message:
    raw = client.messages.with_raw_response.create(
        model="claude-opus-4-8",
        max_tokens=24,
        system="Answer in one short sentence.",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        **GREEDY,
    )
    message = validated(raw.parse())
    assert types.Message.model_validate(raw.http_response.json()) == message
    assert message.model == "claude-opus-4-8"  # the name the client sent
    assert message.stop_reason in ("end_turn", "max_tokens")
    [block] = message.content
    assert isinstance(block, types.TextBlock) and block.text.strip()
    assert 1 <= message.usage.output_tokens <= 24 and message.usage.input_tokens > 0
    return message


def check_stream_helper(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=24,
        messages=[{"role": "user", "content": "Name three primary colors."}],
        **GREEDY,
    ) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    validated(final)
    [block] = final.content
    assert isinstance(block, types.TextBlock) and block.text == "".join(texts) and texts
    assert final.stop_reason in ("end_turn", "max_tokens")


def check_raw_events(client: anthropic.Anthropic) -> None:
    """``stream=True``: the raw events, each valid for its SDK model, in Anthropic's order."""
    stream = client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=16,
        messages=[{"role": "user", "content": "Say hello."}],
        stream=True,
        **GREEDY,
    )
    events = list(stream)
    names = [e.type for e in events]
    for event in events:
        _EVENTS[event.type].model_validate(event.to_dict())
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names[1:-2].count("content_block_start") == names.count("content_block_stop") >= 1
    end = events[-2]
    assert isinstance(end, types.RawMessageDeltaEvent)
    assert end.delta.stop_reason in ("end_turn", "max_tokens") and end.usage.output_tokens >= 1


def check_tool_round_trip(
    client: anthropic.Anthropic, answer_choice: dict[str, Any] | None = None
) -> tuple[types.Message, types.Message]:
    """A call (the model must use a tool: ``any``), its result sent back as the SDK writes it,
    and the answer, which must come from the result (``answer_choice``: the ``tool_choice`` of
    that second request; a small model may call again where it may)."""
    first = validated(
        client.messages.create(
            model="claude-opus-4-8",
            max_tokens=64,
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice={"type": "any"},
            messages=ASK_WEATHER,  # type: ignore[arg-type]
            **GREEDY,
        )
    )
    assert first.stop_reason == "tool_use", first
    [call] = [b for b in first.content if isinstance(b, types.ToolUseBlock)]
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    assert isinstance(call.input, dict) and "paris" in str(call.input.get("city", "")).lower()
    result = {
        "type": "tool_result",
        "tool_use_id": call.id,
        "content": [{"type": "text", "text": "21 C, sunny"}],
    }
    extra = {"tool_choice": answer_choice} if answer_choice is not None else {}
    second = validated(
        client.messages.create(
            model="claude-opus-4-8",
            max_tokens=48,
            tools=[WEATHER],  # type: ignore[list-item]
            messages=[
                *ASK_WEATHER,
                first.to_param(),  # the SDK's own way to send a reply back
                {"role": "user", "content": [result]},
            ],  # type: ignore[list-item]
            **extra,  # type: ignore[arg-type]
            **GREEDY,
        )
    )
    assert second.stop_reason in ("end_turn", "max_tokens"), second
    text = "".join(b.text for b in second.content if isinstance(b, types.TextBlock))
    # The answer read the result.
    assert "21" in text or "sunny" in text.lower(), second
    return first, second


def check_forced_tool(client: anthropic.Anthropic) -> None:
    """``tool_choice`` naming a tool: the reply is that call, though the question is not one
    a tool answers."""
    message = validated(
        client.messages.create(
            model="claude-opus-4-8",
            max_tokens=48,
            tools=[WEATHER, {**WEATHER, "name": "get_time", "description": "Local time."}],  # type: ignore[list-item]
            tool_choice={"type": "tool", "name": "get_weather"},
            messages=[{"role": "user", "content": "I am going to Paris tomorrow."}],
            **GREEDY,
        )
    )
    assert message.stop_reason == "tool_use", message
    [call] = message.content
    assert isinstance(call, types.ToolUseBlock) and call.name == "get_weather"
    assert isinstance(call.input.get("city"), str)


def check_count_tokens(client: anthropic.Anthropic) -> None:
    request: dict[str, Any] = {
        "model": "claude-opus-4-8",
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "tools": [WEATHER],
        "messages": ASK_WEATHER,
    }
    counted = client.messages.count_tokens(**request)
    types.MessageTokensCount.model_validate(counted.to_dict())
    message = validated(client.messages.create(max_tokens=8, **request, **GREEDY))
    usage = message.usage
    # Anthropic's rule: the prompt is input_tokens plus what was read from the cache (the
    # engine's prompt cache; 0 the first time a prompt is seen).
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)
    if not usage.cache_read_input_tokens:
        assert counted.input_tokens == usage.input_tokens


def check_errors(client: anthropic.Anthropic, url: str) -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
    }
    try:
        client.messages.create(
            model="claude-opus-4-8",
            max_tokens=8,
            messages=[{"role": "user", "content": [image]}],  # type: ignore[list-item]
        )
        raise AssertionError("an image block was served")
    except anthropic.BadRequestError as exc:
        assert exc.status_code == 400
        assert isinstance(exc.body, dict) and exc.body["error"]["type"] == "invalid_request_error"
        assert "messages.0.content.0.type: image blocks" in exc.body["error"]["message"]
    try:
        client_of(url, key="wrong-key").messages.create(
            model="claude-opus-4-8",
            max_tokens=8,
            messages=ASK_WEATHER,  # type: ignore[arg-type]
        )
        raise AssertionError("a wrong key was served")
    except anthropic.AuthenticationError as exc:
        assert isinstance(exc.body, dict) and exc.body["error"]["type"] == "authentication_error"
    try:
        client.messages.batches.retrieve("msgbatch_nope")
        raise AssertionError("a batch was found")
    except anthropic.NotFoundError as exc:
        assert isinstance(exc.body, dict) and exc.body["error"]["type"] == "not_found_error"
