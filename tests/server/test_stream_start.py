"""Streams answer at once while the engine reads a long prompt, in chat completions and the
Responses API as in the Messages API: headers and the first events within
``FIRST_TOKEN_WAIT``, then ``: ping`` comments every ``PING_SECONDS`` until the first token
(clients' SSE parsers skip comments), and a client that leaves meanwhile stops the engine's
generation, its prompt read included. Over ASGI and over real HTTP (uvicorn), with a scripted
engine that takes its time before its first token."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from server_helpers import ServerThread, parse_named_sse, parse_sse

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.tokenizers import Tokenizer

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
RESPONSES = {"model": "m", "input": "hi", "stream": True}
PATHS = [("/v1/chat/completions", CHAT), ("/v1/responses", RESPONSES)]


@pytest.fixture
def quick_pings(monkeypatch: pytest.MonkeyPatch) -> None:
    from chatfmt.server.http import sse

    monkeypatch.setattr(sse, "FIRST_TOKEN_WAIT", 0.05)
    monkeypatch.setattr(sse, "PING_SECONDS", 0.05)


def _app(engine: FakeEngine) -> Any:
    return create_app(engine, get_dialect("qwen2.5"), model_name="m", store=None)


def _text_of(path: str, body: str) -> str:
    if path == "/v1/responses":
        events = parse_named_sse(body)
        assert events[-1][0] == "response.completed"
        return str(events[-1][1]["response"]["output"][0]["content"][0]["text"])
    chunks, done = parse_sse(body)
    assert done
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


@pytest.mark.parametrize(("path", "body"), PATHS)
def test_a_slow_prompt_read_gets_headers_and_pings(
    qwen: Tokenizer, quick_pings: None, path: str, body: dict[str, Any]
) -> None:
    engine = FakeEngine(qwen, ["Hello there!<|im_end|>"], first_delay=0.6)
    with ServerThread(_app(engine)) as srv, httpx.Client(base_url=srv.url, timeout=10) as c:
        started = time.monotonic()
        with c.stream("POST", path, json=body) as r:
            assert r.status_code == 200
            headers_after = time.monotonic() - started
            lines = list(r.iter_lines())
    # The headers and the opening events came long before the first token.
    assert headers_after < 0.5
    text = "\n".join(lines)
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data: "))
    pings = [i for i, line in enumerate(lines) if line == ": ping"]
    assert len(pings) >= 3 and first_data < pings[0]  # the opening event, then pings
    assert _text_of(path, text + "\n\n") == "Hello there!"
    assert engine.finished == 1 and engine.cancelled == 0


@pytest.mark.parametrize(("path", "body"), PATHS)
def test_a_fast_engine_sends_no_pings(
    qwen: Tokenizer, path: str, body: dict[str, Any]
) -> None:
    import asyncio

    async def go() -> str:
        transport = httpx.ASGITransport(app=_app(FakeEngine(qwen, ["Hi!<|im_end|>"])))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return (await c.post(path, json=body)).text

    text = asyncio.run(go())
    assert ": ping" not in text and _text_of(path, text) == "Hi!"


@pytest.mark.parametrize(("path", "body"), PATHS)
def test_a_client_leaving_during_the_prompt_read_stops_the_engine(
    qwen: Tokenizer, quick_pings: None, path: str, body: dict[str, Any]
) -> None:
    engine = FakeEngine(qwen, ["Hello there!<|im_end|>"], first_delay=30)
    with ServerThread(_app(engine)) as srv, httpx.Client(base_url=srv.url, timeout=10) as c:
        with c.stream("POST", path, json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            while next(lines) != ": ping":  # the engine is reading the prompt
                pass
        left = time.monotonic()
        while engine.cancelled == 0 and time.monotonic() < left + 5:
            time.sleep(0.02)
        stopped_after = time.monotonic() - left
    assert engine.cancelled == 1 and engine.finished == 0
    assert stopped_after < 1.0  # not the 30 s the prompt read would have taken


def test_an_engine_down_within_the_wait_is_still_a_status(qwen: Tokenizer) -> None:
    import asyncio

    engine = FakeEngine(qwen, ["Hi!<|im_end|>"], fail_after=0)

    async def go(path: str, body: dict[str, Any]) -> httpx.Response:
        transport = httpx.ASGITransport(app=_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post(path, json=body)

    for path, body in PATHS:
        r = asyncio.run(go(path, body))
        assert r.status_code == 502, r.text
        assert "failed as scripted" in r.json()["error"]["message"]
