"""Helpers of the Messages API tests: requests over ASGI, the named event stream, and every
body and event checked against the official ``anthropic`` SDK's own models."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from server_helpers import parse_named_sse

CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
)

WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name."}},
        "required": ["city"],
    },
}

#: The same tool as chat completions declare it (what a Messages tool renders as).
WEATHER_CHAT: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": WEATHER["description"],
        "parameters": WEATHER["input_schema"],
    },
}


def body(messages: Any = "hi", **fields: Any) -> dict[str, Any]:
    """A Messages request: ``messages`` a list, or one user message's content."""
    if not (isinstance(messages, list) and messages and "role" in messages[0]):
        messages = [{"role": "user", "content": messages}]
    return {"model": "claude-test-1", "max_tokens": 256, "messages": messages, **fields}


def post(app: Any, path: str, json: Any, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(path, json=json, **kwargs)

    return asyncio.run(go())


def create(app: Any, request: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A whole message (200 asserted), checked against the SDK's ``Message``."""
    r = post(app, "/v1/messages", request, **kwargs)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    sdk_message(data)
    return data


def error_of(r: httpx.Response, status: int) -> dict[str, Any]:
    """The Anthropic-shaped error of ``r`` (checked: status, shape), as ``{type, message}``."""
    assert r.status_code == status, r.text
    data = r.json()
    assert set(data) == {"type", "error"} and data["type"] == "error", data
    assert set(data["error"]) == {"type", "message"}, data
    if data["error"]["type"] != "request_too_large":  # a type the SDK's union leaves out
        from anthropic.types.shared import ErrorResponse

        ErrorResponse.model_validate(data)
    error: dict[str, Any] = data["error"]
    return error


def stream(app: Any, request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The named events of a streamed reply, each checked against the SDK's event model."""
    r = post(app, "/v1/messages", {**request, "stream": True})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = parse_named_sse(r.text)
    for name, data in events:
        assert data["type"] == name
        sdk_event(data)
    return events


def sdk_message(data: dict[str, Any]) -> Any:
    from anthropic.types import Message

    message = Message.model_validate(data)
    # Validated, not merely constructed: every block is of its declared type.
    assert [b.type for b in message.content] == [b["type"] for b in data["content"]]
    return message


def sdk_event(data: dict[str, Any]) -> Any:
    from anthropic import types

    models: dict[str, Any] = {
        "message_start": types.RawMessageStartEvent,
        "content_block_start": types.RawContentBlockStartEvent,
        "content_block_delta": types.RawContentBlockDeltaEvent,
        "content_block_stop": types.RawContentBlockStopEvent,
        "message_delta": types.RawMessageDeltaEvent,
        "message_stop": types.RawMessageStopEvent,
    }
    if data["type"] == "ping":
        assert data == {"type": "ping"}
        return None
    if data["type"] == "error":
        from anthropic.types.shared import ErrorResponse

        return ErrorResponse.model_validate(data)
    return models[data["type"]].model_validate(data)


def rebuild(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The message a client assembles from the events (as the SDK's accumulator does, input
    JSON joined and parsed once the block stops)."""
    import json

    message: dict[str, Any] = dict(events[0][1]["message"])
    message["content"] = []
    partial: dict[int, str] = {}
    for name, data in events[1:]:
        if name == "content_block_start":
            assert data["index"] == len(message["content"])  # blocks numbered in order
            message["content"].append(dict(data["content_block"]))
        elif name == "content_block_delta":
            block, delta = message["content"][data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            else:
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop":
            if data["index"] in partial:
                message["content"][data["index"]]["input"] = json.loads(partial[data["index"]])
        elif name == "message_delta":
            message.update(data["delta"])
            message["usage"] = {**message["usage"], **data["usage"]}
    return message


def check_order(events: list[tuple[str, dict[str, Any]]]) -> None:
    """Anthropic's event grammar: message_start, ping, then per block start, deltas, stop (one
    block at a time), then message_delta and message_stop; pings may come between blocks."""
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"], names
    assert names[-2:] == ["message_delta", "message_stop"], names
    open_block: int | None = None
    for name, data in events[2:-2]:
        if name == "ping":
            assert open_block is None, names
        elif name == "content_block_start":
            assert open_block is None, names
            open_block = data["index"]
        elif name in ("content_block_delta", "content_block_stop"):
            assert data["index"] == open_block, names
            if name == "content_block_stop":
                open_block = None
        else:
            raise AssertionError(f"unexpected {name} inside the message: {names}")
    assert open_block is None, names
