"""The Responses API's wire models (``server/responses/wire.py``): every event and item chatfmt
writes validates against the openai SDK's own types, the bytes are those the hand-built dicts
wrote before the models, a stream ends with the body the same request gets whole, and a stored
response reads back as it was answered."""

from __future__ import annotations

import json
import re
import typing
from typing import Any

import httpx
import pytest
from test_chat_fake import CALL, request

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.events import ReasoningDelta, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from chatfmt.server import create_app
from chatfmt.server.responses.output import BuiltEvent, OutputBuilder, PartDelta
from chatfmt.server.responses.wire import OutputEvent, StreamEvent
from chatfmt.store import ResponseStore
from chatfmt.tokenizers import Tokenizer, load_tokenizer

openai = pytest.importorskip("openai", reason="the openai SDK (a dev dependency) is missing")

from openai.types.responses import (  # noqa: E402
    Response,
    ResponseOutputItem,
    ResponseStreamEvent,
)
from pydantic import TypeAdapter  # noqa: E402

SDK_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
SDK_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseOutputItem)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
THINK_AND_CALL = (
    "<|channel|>analysis<|message|>I should call f.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"
)
F = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
ENCRYPTED = ["reasoning.encrypted_content"]


def qwen_app(qwen: Tokenizer, reply: str, **engine: Any) -> Any:
    fake = FakeEngine(qwen, [reply], **engine)
    store = ResponseStore(":memory:")
    return create_app(fake, get_dialect("qwen2.5"), model_name="m", store=store)


def harmony_app(reply: str = THINK_AND_CALL) -> Any:
    fake = FakeEngine(load_tokenizer("o200k_harmony"), [reply])
    store = ResponseStore(":memory:")
    return create_app(fake, get_dialect("harmony"), model_name="m", store=store)


def post(app: Any, body: dict[str, Any]) -> httpx.Response:
    r = request(app, "POST", "/v1/responses", json={"model": "m", **body})
    assert r.status_code == 200, r.text
    return r


def frames(text: str) -> list[dict[str, Any]]:
    """The events of a Responses stream, each checked against the name of its frame."""
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = block.split("\n", 1)
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        out.append(event)
    return out


def normal(text: str) -> str:
    """Ids and times as placeholders, numbered by first appearance."""
    seen: dict[str, str] = {}

    def sub(m: re.Match[str]) -> str:
        return seen.setdefault(m.group(0), f"{m.group(1)}_{len(seen)}")

    text = re.sub(r"\b(msg|fc|rs|resp|call)_[0-9a-zA-Z]{8,}", sub, text)
    return re.sub(r'"created_at": ?\d+', '"created_at": 0', text)


def event_types() -> set[str]:
    """Every ``type`` the wire models can write."""
    return {
        value
        for model in typing.get_args(StreamEvent)
        for value in typing.get_args(model.model_fields["type"].annotation)
    }


def test_every_event_and_item_validates_against_the_sdks_types(qwen: Tokenizer) -> None:
    streams = [
        post(qwen_app(qwen, "Hi é😀\u2028\x01<|im_end|>"), {"input": "hi", "stream": True}),
        post(qwen_app(qwen, CALL), {"input": "w?", "tools": [WEATHER], "stream": True}),
        post(qwen_app(qwen, "a b c d e f<|im_end|>"), {"input": "hi", "max_output_tokens": 2,
                                                       "stream": True}),
        post(qwen_app(qwen, "a b c<|im_end|>", fail_after=2), {"input": "hi", "stream": True}),
        post(harmony_app(), {"input": "f?", "tools": [F], "include": ENCRYPTED, "stream": True}),
    ]  # fmt: skip
    seen = set()
    for r in streams:
        events = frames(r.text)
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        for event in events:
            parsed = SDK_EVENT.validate_python(event)
            assert parsed.type == event["type"]
            seen.add(event["type"])
            item = event.get("item")
            if item is not None:
                SDK_ITEM.validate_python(item)
            if "response" in event:
                Response.model_validate(event["response"])
                for item in event["response"]["output"]:
                    SDK_ITEM.validate_python(item)
    assert seen == event_types()
    kinds = {i["type"] for r in streams for i in frames(r.text)[-1]["response"]["output"]}
    assert kinds == {"message", "reasoning", "function_call"}


def wire(event: BuiltEvent) -> OutputEvent:
    """The wire model of a builder's event (its per-token deltas are plain tuples)."""
    return event.event() if isinstance(event, PartDelta) else event


def test_an_incomplete_call_and_encrypted_reasoning_validate() -> None:
    builder = OutputBuilder(encrypted_reasoning=True)
    events = builder.feed(
        [
            ReasoningDelta("Think."),
            TextDelta("Calling."),
            ToolCallStart(0, "c1", "f"),
            ToolCallDelta(0, '{"x": "ab'),
        ]
    )
    events += builder.finish(cut=True)
    for event in map(wire, events):
        SDK_EVENT.validate_python({**event.model_dump(mode="json"), "sequence_number": 0})
    reasoning, message, call = (SDK_ITEM.validate_python(i.model_dump()) for i in builder.items)
    assert reasoning.encrypted_content and reasoning.content[0].text == "Think."
    assert message.status == "completed" and message.content[0].text == "Calling."
    assert call.status == "incomplete" and call.arguments == '{"x": "ab'


def test_events_show_each_item_as_it_was() -> None:
    """The stream writes an event after the builder moved on: the event keeps its moment."""
    builder = OutputBuilder()
    events = builder.feed([TextDelta("a"), TextDelta("b"), ToolCallStart(0, "c1", "f")])
    events += builder.feed([ToolCallDelta(0, "{}"), ToolCallEnd(0, complete=True)])
    events = [wire(e) for e in events + builder.finish()]
    added = [e.model_dump(exclude={"sequence_number"}) for e in events if "added" in e.type]
    assert [a.get("item") or a.get("part") for a in added] == [
        {"id": builder.items[0].id, "type": "message", "status": "in_progress",
         "role": "assistant", "content": []},
        {"type": "output_text", "text": "", "annotations": (), "logprobs": ()},
        {"id": builder.items[1].id, "type": "function_call", "status": "in_progress",
         "call_id": "c1", "name": "f", "arguments": ""},
    ]  # fmt: skip
    assert [i.status for i in builder.items] == ["completed", "completed"]
    assert builder.items[0].content[0].text == "ab"  # type: ignore[union-attr]


def test_reasoning_streams_its_content_part() -> None:
    """As OpenAI's gpt-oss server streams it: the reasoning_text part is added before its
    deltas and done after them, as an output_text part is."""
    events = frames(post(harmony_app(), {"input": "f?", "tools": [F], "stream": True}).text)
    kinds = [e["type"] for e in events if e.get("output_index") == 0]
    # Deltas made while the client was taking earlier ones are merged: one or more.
    assert kinds.count("response.reasoning_text.delta") >= 1
    thought = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    assert "".join(thought) == "I should call f."
    assert kinds == [
        "response.output_item.added",
        "response.content_part.added",
        *["response.reasoning_text.delta"] * (len(kinds) - 5),
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    parts = [e["part"] for e in events if e["type"].startswith("response.content_part")]
    assert parts == [
        {"type": "reasoning_text", "text": ""},
        {"type": "reasoning_text", "text": "I should call f."},
    ]


@pytest.mark.parametrize(
    "case",
    ["text", "call", "cut", "reasoning", "encrypted", "params"],
)
def test_a_stream_ends_with_the_whole_body_and_the_store_keeps_it(
    qwen: Tokenizer, case: str
) -> None:
    app, body = {
        "text": (qwen_app(qwen, "Hello there!<|im_end|>"), {"input": "hi"}),
        "call": (qwen_app(qwen, CALL), {"input": "w?", "tools": [WEATHER]}),
        "cut": (qwen_app(qwen, CALL), {"input": "w?", "tools": [WEATHER],
                                       "max_output_tokens": 12}),
        "reasoning": (harmony_app(), {"input": "f?", "tools": [F]}),
        "encrypted": (harmony_app(), {"input": "f?", "tools": [F], "include": ENCRYPTED}),
        "params": (qwen_app(qwen, "Hi<|im_end|>"), {
            "input": "hi", "instructions": "Be brief.", "metadata": {"k": "v"},
            "temperature": 1, "top_p": 1e-05, "parallel_tool_calls": False,
        }),
    }[case]  # fmt: skip
    whole = post(app, body)
    final = frames(post(app, {**body, "stream": True}).text)[-1]
    assert final["type"] == f"response.{whole.json()['status']}"
    assert normal(json.dumps(final["response"])) == normal(json.dumps(whole.json()))
    stored = request(app, "GET", f"/v1/responses/{whole.json()['id']}")
    assert stored.text == whole.text
    streamed = request(app, "GET", f"/v1/responses/{final['response']['id']}")
    assert streamed.json() == final["response"]


def test_the_bytes_of_a_text_reply(qwen: Tokenizer) -> None:
    """The whole body is written as ``json.dumps`` writes it (as the store does, so a number
    the request sent reads the same everywhere); the events compactly."""
    app = qwen_app(qwen, "Hi é😀\u2028\x01<|im_end|>")
    r = post(app, {"input": "hi", "top_p": 1e-05})
    n = r.json()["usage"]["input_tokens"]
    message = (
        '{"id": "msg_1", "type": "message", "status": "completed", "role": "assistant", '
        '"content": [{"type": "output_text", "text": "Hi é😀\u2028\\u0001", "annotations": [], '
        '"logprobs": []}]}'
    )
    assert normal(r.text) == (
        '{"id": "resp_0", "object": "response", "created_at": 0, "status": "completed", '
        '"error": null, "incomplete_details": null, "instructions": null, '
        f'"max_output_tokens": null, "model": "m", "output": [{message}], '
        '"parallel_tool_calls": true, "previous_response_id": null, "reasoning": null, '
        '"store": true, "temperature": null, "text": {"format": {"type": "text"}}, '
        '"tool_choice": "auto", "tools": [], "top_p": 1e-05, "truncation": "disabled", '
        f'"usage": {{"input_tokens": {n}, "input_tokens_details": {{"cached_tokens": 0, '
        '"cache_write_tokens": 0}, "output_tokens": 7, "output_tokens_details": '
        f'{{"reasoning_tokens": 0}}, "total_tokens": {n + 7}}}, "metadata": {{}}}}'
    )
    stream = normal(post(app, {"input": "hi", "top_p": 1e-05, "stream": True}).text)
    # The deltas (one or more: those made while the client was busy are merged), compact,
    # numbered on from the part's announcement, together the whole text.
    deltas = re.findall(
        r"event: response\.output_text\.delta\n"
        r'data: \{"type":"response\.output_text\.delta","item_id":"msg_1","output_index":0,'
        r'"content_index":0,"delta":("(?:[^"\\]|\\.)*"),"logprobs":\[\],'
        r'"sequence_number":(\d+)\}\n\n',
        stream,
    )
    assert deltas and [int(n) for _, n in deltas] == list(range(4, 4 + len(deltas)))
    assert "".join(json.loads(d) for d, _ in deltas) == "Hi é😀\u2028\x01"
    assert stream.count("response.output_text.delta") == 2 * len(deltas)
    assert '"top_p":1e-05,' in stream


def test_reasoning_has_encrypted_content_only_when_asked() -> None:
    plain = post(harmony_app(), {"input": "f?", "tools": [F]}).json()["output"][0]
    asked = post(harmony_app(), {"input": "f?", "tools": [F], "include": ENCRYPTED})
    assert "encrypted_content" not in plain
    assert asked.json()["output"][0]["encrypted_content"].startswith("chatfmt-reasoning-v1:")
    body = {"input": "f?", "tools": [F], "include": ENCRYPTED, "stream": True}
    streamed = frames(post(harmony_app(), body).text)
    reasoning = [e["item"] for e in streamed if e.get("item", {}).get("type") == "reasoning"]
    assert ["encrypted_content" in item for item in reasoning] == [False, True]  # added, done
