"""A reasoning model's reply end to end through a real llama-server: Qwen3's vocabulary in a
GGUF, the exact prompt ids with thinking on and off, the ``<think>`` tokens coming back as ids,
and the reasoning separated in chat completions, the Responses API and the web chat's agent.

The model is the tiny bigram machine of ``tiny_gguf.py`` (no small Qwen3 model is available
offline): after the generation prompt ``<|im_start|>assistant\\n`` it writes
``<think>Hmm</think>Hello<|im_end|>``; after thinking was closed in the prompt
(``<think>\\n\\n</think>\\n\\n``) it writes ``Sure<|im_end|>``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chatfmt.dialects import get_dialect
from chatfmt.server import create_app
from tiny_gguf import write_bigram_gguf

pytestmark = pytest.mark.slow

THINK, THINK_END, IM_END = 151667, 151668, 151645
NEWLINE, BLANK_LINE = 198, 271
HMM, HELLO, SURE = 80022, 9707, 39814
ADDED = {
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": THINK,
    "</think>": THINK_END,
}
USER = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer_json: Path) -> Path:
    return write_bigram_gguf(
        tmp_path_factory.mktemp("gguf") / "tiny-qwen3.gguf",
        qwen_tokenizer_json,
        added=ADDED,
        chains=[[NEWLINE, THINK, HMM, THINK_END, HELLO, IM_END], [BLANK_LINE, SURE, IM_END]],
        eos_id=IM_END,
    )


@pytest.fixture(scope="module")
def app(tiny_qwen3: Path, llama_server_binary: Path) -> Iterator[Any]:
    from chatfmt.engines.llama_server import LlamaServerEngine
    from chatfmt.web.routes import mount_web

    # One event loop for the module: the engine's child process belongs to the loop it ran on.
    loop = asyncio.new_event_loop()
    engine = LlamaServerEngine(
        tiny_qwen3, parallel=1, n_threads=1, n_ctx=4096, binary=llama_server_binary
    )
    try:
        dialect = get_dialect("qwen3")
        application = create_app(engine, dialect, model_name="tiny-qwen3")
        mount_web(application, engine=engine, dialect=dialect, model_name="tiny-qwen3")
        application.state.test_loop = loop
        yield application
    finally:
        loop.run_until_complete(engine.aclose())
        loop.close()


def post(app: Any, url: str, body: dict[str, Any]) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        base = "http://127.0.0.1"
        async with httpx.AsyncClient(transport=transport, base_url=base, timeout=120) as c:
            return await c.post(url, json=body)

    loop: asyncio.AbstractEventLoop = app.state.test_loop
    return loop.run_until_complete(go())


def test_chat_completions_separate_the_reasoning(app: Any) -> None:
    r = post(app, "/v1/chat/completions", {"messages": USER, "max_tokens": 16})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["reasoning_content"] == "Hmm"
    assert choice["message"]["content"] == "Hello"
    assert choice["finish_reason"] == "stop"

    streamed = post(app, "/v1/chat/completions", {"messages": USER, "stream": True})
    chunks = [
        json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")
    ]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "Hmm"
    assert "".join(d.get("content") or "" for d in deltas) == "Hello"


def test_thinking_off_reaches_the_model(app: Any) -> None:
    body = {"messages": USER, "chat_template_kwargs": {"enable_thinking": False}}
    r = post(app, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "Sure"}
    r = post(app, "/v1/chat/completions", {"messages": USER, "reasoning_effort": "none"})
    assert r.json()["choices"][0]["message"]["content"] == "Sure"


def test_responses_api_returns_a_reasoning_item(app: Any) -> None:
    r = post(app, "/v1/responses", {"input": "Hi", "include": ["reasoning.encrypted_content"]})
    assert r.status_code == 200, r.text
    output = r.json()["output"]
    assert [item["type"] for item in output] == ["reasoning", "message"]
    assert output[0]["content"][0]["text"] == "Hmm"
    assert output[1]["content"][0]["text"] == "Hello"
    # Sent back without state, the reasoning item continues the conversation.
    follow = {"input": [*output, {"role": "user", "content": "And?"}], "store": False}
    assert post(app, "/v1/responses", follow).status_code == 200
    off = post(app, "/v1/responses", {"input": "Hi", "reasoning": {"effort": "none"}})
    assert [item["type"] for item in off.json()["output"]] == ["message"]


def test_web_agent_streams_reasoning_events(app: Any) -> None:
    r = post(app, "/api/agent", {"messages": USER})
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    reasoning = "".join(e.get("text", "") for e in events if e.get("type") == "reasoning")
    assert reasoning == "Hmm"


@pytest.mark.parametrize("engine", ["llama-server", "local"])
def test_terminal_chat_shows_the_reasoning_apart(tiny_qwen3: Path, engine: str) -> None:
    import subprocess
    import sys

    command = [sys.executable, "-m", "chatfmt.cli", "chat", "--model", str(tiny_qwen3)]
    run = subprocess.run(
        [*command, "--dialect", "qwen3", "--engine", engine],
        input="Hi\n",
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    assert "[thinking]\nHmm\n[/thinking]\nHello" in run.stdout
