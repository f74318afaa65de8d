"""What coding agents meet on the real default model (the embedded llama-server behind a real
uvicorn server): a prompt near the context window with the huge ``max_tokens`` agents send
ends with the API's cut-off reason instead of a 400, in all three APIs; and a client that
leaves while the engine reads a long prompt: chatfmt closes its request to the engine at once,
llama-server frees the slot only once it has read the prompt (measured and printed: it does
not look at the closed connection before it has a token to send), and serves the next request
then."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import ServerThread, parse_named_sse, parse_sse

CONTEXT = 512
FILLER = "The quick brown fox jumps over the lazy dog. "
#: A prompt that leaves some 60 tokens, and a task that takes more.
TASK = FILLER * 42 + "\n\nNow count from 1 to 300, one number per line."


def _server(path: Path, n_ctx: int) -> tuple[Any, Any]:
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.llama_server import LlamaServerEngine
    from chatfmt.server import create_app

    threads = int(os.environ.get("CHATFMT_TEST_THREADS", "1"))
    engine = LlamaServerEngine(path, parallel=1, n_threads=threads, n_ctx=n_ctx)
    app = create_app(engine, get_dialect("qwen2.5"), model_name="default", store=None)
    return engine, app


@pytest.fixture(scope="module")
def small(default_model_path: Path, llama_server_binary: Path) -> Iterator[str]:
    engine, app = _server(default_model_path, CONTEXT)
    with ServerThread(app, startup=engine.connect) as srv:
        yield srv.url
        srv.call(engine.aclose())


def test_chat_near_the_window_with_a_huge_max_tokens_ends_with_length(small: str) -> None:
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": TASK}],
        "max_tokens": 32000,
        "temperature": 0,
    }
    r = httpx.post(f"{small}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    usage = out["usage"]
    assert usage["prompt_tokens"] > CONTEXT - 100  # near the window
    assert out["choices"][0]["finish_reason"] == "length"
    assert usage["prompt_tokens"] + usage["completion_tokens"] == CONTEXT
    # Streamed alike.
    r = httpx.post(f"{small}/v1/chat/completions", json={**body, "stream": True}, timeout=300)
    chunks, done = parse_sse(r.text)
    assert done
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert [f for f in finishes if f] == ["length"]


def test_responses_and_messages_near_the_window_are_cut_as_each_api_says(small: str) -> None:
    body = {"model": "default", "input": TASK, "max_output_tokens": 32000, "temperature": 0}
    r = httpx.post(f"{small}/v1/responses", json={**body, "stream": True}, timeout=300)
    assert r.status_code == 200, r.text
    name, last = parse_named_sse(r.text)[-1]
    assert name == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    usage = last["response"]["usage"]
    assert usage["input_tokens"] + usage["output_tokens"] == CONTEXT
    message = {
        "model": "default",
        "max_tokens": 32000,
        "temperature": 0,
        "messages": [{"role": "user", "content": TASK}],
    }
    r = httpx.post(f"{small}/v1/messages", json=message, timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["stop_reason"] == "model_context_window_exceeded"
    usage = out["usage"]
    # (Anthropic counts the prompt tokens read from the cache apart.)
    prompt = usage["input_tokens"] + (usage.get("cache_read_input_tokens") or 0)
    assert prompt + usage["output_tokens"] == CONTEXT


def test_leaving_during_a_long_prompt_read_frees_the_slot(
    default_model_path: Path, llama_server_binary: Path
) -> None:
    engine, app = _server(default_model_path, 4096)
    prompt = FILLER * 150 + "\n\nSummarise this."  # some 1,500 tokens: seconds to read
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "max_tokens": 16,
    }
    with ServerThread(app, startup=engine.connect) as srv:
        try:
            with httpx.Client(base_url=srv.url, timeout=300) as c:
                with c.stream("POST", "/v1/chat/completions", json=body) as r:
                    assert r.status_code == 200
                    first = next(r.iter_lines())  # the role chunk, before the first token
                    assert json.loads(first[6:])["choices"][0]["delta"]["role"] == "assistant"
                    busy = srv.call(engine.load()).get("requests_processing")
                    assert busy == 1, "the prompt read ended before the client left"
                left = time.monotonic()
                while srv.call(engine.load()).get("requests_processing", 1) != 0:
                    assert time.monotonic() - left < 300, "the slot is still busy 300 s after"
                    time.sleep(0.05)
                freed = time.monotonic() - left
                again = {**body, "stream": False, "messages": [{"role": "user", "content": "hi"}]}
                assert c.post("/v1/chat/completions", json=again).status_code == 200
        finally:
            srv.call(engine.aclose())
    print(f"\nslot free {freed:.2f} s after the client left during a 1.5k-token prompt read")
