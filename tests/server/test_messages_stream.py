"""/v1/messages with ``stream: true`` over ASGI with a scripted engine: Anthropic's named
events in their order, the message they assemble equal to the whole reply, thinking and
signatures, calls sent only once closed, and a failure after the stream began."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("anthropic", reason="the anthropic SDK (a dev dependency) checks the shapes")

from messages_helpers import (
    CALL,
    WEATHER,
    body,
    check_order,
    create,
    rebuild,
    stream,
)

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.server.messages.output import PartDelta
from chatfmt.server.messages.routes import frame
from chatfmt.server.messages.thinking import thinking_of_signature
from chatfmt.tokenizers import load_tokenizer


def same_but_ids(message: dict[str, Any]) -> dict[str, Any]:
    blocks = [{**b, "id": "toolu_"} if b["type"] == "tool_use" else b for b in message["content"]]
    return {**message, "id": "msg_", "content": blocks}


REPLIES = [
    "Hello there!<|im_end|>",
    CALL,
    "Let me look.\n" + CALL,
    CALL.removesuffix("<|im_end|>") + "\n" + CALL,
]


@pytest.mark.parametrize("reply", REPLIES, ids=["text", "call", "text-call", "two-calls"])
def test_the_stream_assembles_the_whole_message(make_fake, reply: str) -> None:
    request = body("Paris?", tools=[WEATHER])
    whole = create(create_app(make_fake([reply]), get_dialect("qwen2.5"), model_name="m"), request)
    events = stream(create_app(make_fake([reply]), get_dialect("qwen2.5"), model_name="m"), request)
    check_order(events)
    assembled = rebuild(events)
    # Ids are fresh per reply; everything else is the same.
    assert same_but_ids(assembled) == same_but_ids(whole)
    # One id, from message_start on; stop_reason only at the end.
    start = events[0][1]["message"]
    assert start["id"].startswith("msg_") and start["stop_reason"] is None
    assert start["content"] == [] and start["model"] == "claude-test-1"


def test_a_call_is_sent_whole_once_it_closed(make_fake) -> None:
    events = stream(
        create_app(make_fake([CALL]), get_dialect("qwen2.5"), model_name="m"),
        body("Paris?", tools=[WEATHER]),
    )
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    block = events[2][1]["content_block"]
    assert block["type"] == "tool_use" and block["input"] == {} and block["id"].startswith("toolu_")
    assert events[3][1]["delta"] == {
        "type": "input_json_delta",
        "partial_json": '{"city": "Paris"}',
    }
    assert events[5][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}


def test_a_call_cut_off_never_starts_a_tool_use_block(make_fake) -> None:
    events = stream(
        create_app(make_fake([CALL]), get_dialect("qwen2.5"), model_name="m"),
        body("Paris?", tools=[WEATHER], max_tokens=14),
    )
    check_order(events)
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["text"]
    assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"


def test_usage_comes_at_the_start_and_in_full_at_the_end(make_fake) -> None:
    fake = make_fake()
    events = stream(create_app(fake, get_dialect("qwen2.5"), model_name="m"), body("hi"))
    prompt = len(fake.prompts[0])
    assert events[0][1]["message"]["usage"]["input_tokens"] == prompt
    assert events[-2][1]["usage"] == {
        "input_tokens": prompt,
        "output_tokens": 4,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


@pytest.mark.parametrize("display", ["summarized", "omitted"])
def test_thinking_streams_then_its_signature(display: str) -> None:
    tok = load_tokenizer("qwen3")
    reply = "<think>\nThe user says hi.\n</think>\n\nHello!<|im_end|>"
    app = create_app(FakeEngine(tok, [reply]), get_dialect("qwen3"), model_name="m")
    thinking = {"type": "enabled", "budget_tokens": 1024, "display": display}
    events = stream(app, body("hi", thinking=thinking))
    check_order(events)
    kinds = [
        d["delta"]["type"] if n == "content_block_delta" else n
        for n, d in events
        if n.startswith("content_block")
    ]
    shown = ["thinking_delta"] if display == "summarized" else []
    # (The fake engine sends a token at a time: several thinking deltas, merged here.)
    merged = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert merged == [
        "content_block_start",
        *shown,
        "signature_delta",
        "content_block_stop",
        "content_block_start",
        "text_delta",
        "content_block_stop",
    ]
    message = rebuild(events)
    thought = message["content"][0]
    assert thought["thinking"] == ("The user says hi." if display == "summarized" else "")
    assert thinking_of_signature(thought["signature"]) == "The user says hi."
    assert message["content"][1] == {"type": "text", "text": "Hello!"}


def test_an_engine_failure_after_the_start_is_an_error_event(make_fake) -> None:
    fake = make_fake(["Hello there, a long reply<|im_end|>"], fail_after=2)
    events = stream(create_app(fake, get_dialect("qwen2.5"), model_name="m"), body("hi"))
    name, data = events[-1]
    assert name == "error"
    assert data["error"]["type"] == "api_error" and "failed" in data["error"]["message"]
    # The stream ends there: no message_delta or message_stop.
    assert "message_stop" not in [n for n, _ in events]


def test_per_token_deltas_are_the_bytes_of_their_models() -> None:
    for delta in (PartDelta(0, False, 'Hi "there"\n\u00e9\U0001f600'), PartDelta(3, True, "\\x")):
        assert frame(delta) == frame(delta.event())


def test_a_stop_sequence_split_across_tokens_is_held_back(make_fake) -> None:
    fake = make_fake(["Count: one two STOP three<|im_end|>"])
    app = create_app(fake, get_dialect("qwen2.5"), model_name="m")
    events = stream(app, body("count", stop_sequences=["STOP"]))
    message = rebuild(events)
    assert message["content"] == [{"type": "text", "text": "Count: one two "}]
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "STOP")


@pytest.fixture
def quick_pings(monkeypatch: pytest.MonkeyPatch) -> None:
    from chatfmt.server.http import sse

    monkeypatch.setattr(sse, "FIRST_TOKEN_WAIT", 0.05)
    monkeypatch.setattr(sse, "PING_SECONDS", 0.05)


def test_a_slow_first_token_gets_headers_and_pings_meanwhile(make_fake, quick_pings) -> None:
    class SlowPrompt(FakeEngine):
        async def stream(self, prompt_ids, params):  # type: ignore[no-untyped-def,override]
            await asyncio.sleep(0.4)  # reading a long prompt
            async for chunk in super().stream(prompt_ids, params):
                yield chunk

    fake = SlowPrompt(load_tokenizer("qwen2.5"), ["Hello there!<|im_end|>"])
    events = stream(create_app(fake, get_dialect("qwen2.5"), model_name="m"), body("hi"))
    check_order(events)
    names = [n for n, _ in events]
    first_block = names.index("content_block_start")
    assert names[:2] == ["message_start", "ping"] and names[2:first_block].count("ping") >= 2
    assert rebuild(events)["content"] == [{"type": "text", "text": "Hello there!"}]


def test_an_engine_down_after_the_headers_is_an_overloaded_error_event(quick_pings) -> None:
    from chatfmt.errors import EngineUnavailableError

    class GoesDown(FakeEngine):
        async def stream(self, prompt_ids, params):  # type: ignore[no-untyped-def,override]
            await asyncio.sleep(0.2)
            raise EngineUnavailableError("the engine restarted")
            yield  # an async generator

    app = create_app(GoesDown(load_tokenizer("qwen2.5")), get_dialect("qwen2.5"), model_name="m")
    events = stream(app, body("hi"))
    assert events[0][0] == "message_start"
    name, data = events[-1]
    assert name == "error" and data["error"]["type"] == "overloaded_error"
    assert "restarted" in data["error"]["message"]


def test_a_client_leaving_while_the_prompt_is_read_stops_the_engine(make_fake, quick_pings) -> None:
    from chatfmt.server.messages.request import MessagesRequest
    from chatfmt.server.messages.routes import _stream
    from chatfmt.server.messages.service import MessagesService

    fake = make_fake(["Hello there!<|im_end|>"], delay=0.5)  # half a second to the first token

    async def go() -> None:
        app = create_app(fake, get_dialect("qwen2.5"), model_name="m")
        svc = MessagesService(app.state.service)
        ex = await svc.prepare(MessagesRequest.model_validate(body("hi")))
        driver, _ = svc.chat.driver(ex.prep)
        opening = asyncio.ensure_future(driver.open())
        events = _stream(svc, ex, driver, opening)
        assert b"message_start" in await events.__anext__()
        assert b"ping" in await events.__anext__()  # the first ping of the wait
        await events.aclose()  # the client went away
        assert opening.cancelled()

    asyncio.run(go())
    assert fake.cancelled == 1 and fake.finished == 0


def test_a_client_that_disconnects_over_http_stops_the_engine(make_fake, quick_pings) -> None:
    import time

    import httpx
    from server_helpers import ServerThread

    fake = make_fake(["Hello there, a long reply!<|im_end|>"], delay=0.3)
    app = create_app(fake, get_dialect("qwen2.5"), model_name="m")
    with ServerThread(app) as srv, httpx.Client(base_url=srv.url, timeout=10) as client:
        with client.stream("POST", "/v1/messages", json=body("hi", stream=True)) as r:
            assert r.status_code == 200
            first = next(r.iter_lines())
            assert first == "event: message_start"
        deadline = time.monotonic() + 5
        while fake.cancelled == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert fake.cancelled == 1 and fake.finished == 0
