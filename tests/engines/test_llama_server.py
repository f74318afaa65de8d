"""The managed engine against the real ``llama-server`` child running the default model:
token ids in and out, stop strings, a crash mid-stream, restarts, and no orphan processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from chatfmt.dialects import get_dialect
from chatfmt.engines import SamplingParams
from chatfmt.errors import EngineError, EngineUnavailableError

psutil = pytest.importorskip("psutil")
pytest.importorskip("httpx", reason="the managed engine needs httpx (chatfmt[server])")

IM_END = 151645
GREEDY = SamplingParams(max_tokens=24, temperature=0)


@pytest.fixture(scope="module")
def binary(llama_server_binary: Path) -> Path:
    return llama_server_binary


def run(
    model: Path, body: Callable[[Any], Awaitable[None]], **kw: Any
) -> None:  # one engine per test: its child and tasks belong to this test's event loop
    from chatfmt.engines.llama_server import LlamaServerEngine

    async def main() -> None:
        engine = LlamaServerEngine(model, n_threads=1, **{"parallel": 1, "n_ctx": 4096, **kw})
        try:
            await engine.connect()
            await body(engine)
        finally:
            await engine.aclose()

    asyncio.run(main())


def prompt(engine: Any, text: str) -> list[int]:
    messages = [{"role": "user", "content": text}]
    return get_dialect("qwen2.5").render(messages, engine.tokenizer).ids


def test_ids_in_ids_out(default_model_path: Path, binary: Path) -> None:
    async def body(engine: Any) -> None:
        gen = await engine.generate(prompt(engine, "Say hi"), GREEDY)
        assert gen.finish_reason == "stop"
        assert gen.token_ids[-1] == IM_END, "the end-of-turn token comes back as an id"
        assert engine.tokenizer.decode(gen.token_ids[:-1]) == gen.text
        assert gen.text.strip()
        # The context callers see is one slot's, as given.
        assert engine.context_length == 2048

    run(default_model_path, body, n_ctx=2048)


def test_stop_strings_and_length(default_model_path: Path, binary: Path) -> None:
    """Stop strings end the reply where its decoder finds them (llama-server is not sent them:
    the text it would hold back is what restores the ids it leaves out)."""
    from chatfmt.decoding import TurnDecoder
    from chatfmt.driver import TurnDriver

    async def body(engine: Any) -> None:
        ids = prompt(engine, "Count from 1 to 20, separated by commas.")
        full = await engine.generate(ids, SamplingParams(max_tokens=40, temperature=0))
        assert "5" in full.text
        params = SamplingParams(max_tokens=40, temperature=0, stop_strings=("5",))
        decoder = TurnDecoder(get_dialect("qwen2.5"), engine.tokenizer, stop_strings=("5",))
        driver = TurnDriver(engine, decoder, ids, params)
        cut = (await driver.run()).content or ""
        assert driver.finish_reason == "stop" and "5" not in cut
        assert full.text.startswith(cut) and len(cut) > 5
        short = await engine.generate(ids, SamplingParams(max_tokens=3, temperature=0))
        assert short.finish_reason == "length" and len(short.token_ids) == 3

    run(default_model_path, body)


def test_killed_mid_stream_then_restarted(default_model_path: Path, binary: Path) -> None:
    async def body(engine: Any) -> None:
        sup = engine.supervisor
        first_pid = sup.pid
        ids = prompt(engine, "Write a very long essay about rivers.")
        stream = engine.stream(ids, SamplingParams(max_tokens=1000, temperature=0))
        got = 0
        with pytest.raises(EngineUnavailableError, match="restarting") as info:
            async for _chunk in stream:
                got += 1
                if got == 3:
                    os.kill(first_pid, signal.SIGKILL)
        assert "lost" in str(info.value)
        # Until the new child is up, requests are refused as unavailable (503), not hung.
        assert await sup.wait_ready(60), sup.log_tail()
        assert sup.restarts == 1 and sup.pid != first_pid
        assert await engine.health()
        gen = await engine.generate(prompt(engine, "Say hi"), GREEDY)
        assert gen.token_ids and gen.finish_reason == "stop"
        assert not psutil.pid_exists(first_pid) or psutil.Process(first_pid).status() == "zombie"

    run(default_model_path, body)


def test_close_stops_the_child(default_model_path: Path, binary: Path) -> None:
    pids: list[int] = []

    async def body(engine: Any) -> None:
        pids.append(engine.supervisor.pid)
        assert psutil.Process(pids[0]).is_running()

    run(default_model_path, body)
    assert not psutil.pid_exists(pids[0])


def test_parent_killed_leaves_no_orphan(default_model_path: Path, binary: Path) -> None:
    """Even ``kill -9`` of the process running the engine takes llama-server with it."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from chatfmt.engines.llama_server import LlamaServerEngine

        async def main():
            engine = LlamaServerEngine(
                {str(default_model_path)!r}, parallel=1, n_threads=1, n_ctx=4096
            )
            await engine.connect()
            print(engine.supervisor.pid, flush=True)
            await asyncio.sleep(600)

        asyncio.run(main())
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert psutil.Process(child).ppid() == parent.pid
    finally:
        parent.kill()
        parent.wait(10)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.pid_exists(child), "llama-server outlived its parent"


def test_child_that_cannot_start_says_why(default_model_path: Path, binary: Path) -> None:
    from chatfmt.engines.llama_server import LlamaServerEngine

    async def main() -> None:
        engine = LlamaServerEngine(default_model_path, extra_args=["--no-such-flag"])
        try:
            with pytest.raises(EngineError, match="exited with status") as info:
                await engine.connect()
            assert "no-such-flag" in str(info.value), "the child's own message is shown"
            assert not await engine.health()
            with pytest.raises(EngineUnavailableError):
                await engine.generate([1, 2, 3], GREEDY)
        finally:
            await engine.aclose()

    asyncio.run(main())


def test_the_host_prompt_cache_is_bounded(default_model_path: Path, binary: Path) -> None:
    """The child gets a bound on the host memory it keeps evicted prompts in (llama.cpp's own
    default, 8 GiB, is more than a small machine has to spare), and starts with it."""
    from chatfmt.engines.llama_server import DEFAULT_PROMPT_CACHE_MB, LlamaServerEngine

    seen: list[list[str]] = []

    async def body(engine: Any) -> None:
        seen.append(psutil.Process(engine.supervisor.pid).cmdline())
        await engine.generate(prompt(engine, "Say hi."), GREEDY)

    run(default_model_path, body, prompt_cache_mb=256)
    assert seen[0][seen[0].index("--cache-ram") + 1] == "256"
    default = LlamaServerEngine(default_model_path)._command(8080)
    assert default[default.index("--cache-ram") + 1] == str(DEFAULT_PROMPT_CACHE_MB)
    with pytest.raises(EngineError, match="prompt_cache_mb must be 0"):
        LlamaServerEngine(default_model_path, prompt_cache_mb=-1)


def test_stream_interval_on_the_real_child(default_model_path: Path, binary: Path) -> None:
    """With an interval of 4, the same greedy reply comes as its first token, then chunks of
    at least 4 tokens (the last may be shorter), as with no interval, token for token."""
    got: dict[int, list[tuple[int, ...]]] = {}

    def body_for(interval: int) -> Callable[[Any], Awaitable[None]]:
        async def body(engine: Any) -> None:
            params = SamplingParams(max_tokens=40, temperature=0)
            ids = prompt(engine, "Count from one to twenty in words.")
            got[interval] = [c.token_ids async for c in engine.stream(ids, params) if c.token_ids]

        return body

    for interval in (1, 4):
        run(default_model_path, body_for(interval), stream_interval=interval)
    flat = {k: [t for c in v for t in c] for k, v in got.items()}
    assert flat[4] == flat[1] and len(flat[1]) > 12
    sizes = [len(c) for c in got[4]]
    assert all(n >= 4 for n in sizes[1:-1]), sizes
    assert len(got[1]) > len(got[4])


def test_greedy_sends_top_k_1_and_gets_the_tokens_of_top_k_0(
    default_model_path: Path, binary: Path
) -> None:
    """Greedy requests go with top-k 1 (less sampling work); the child's reply is token for
    token what the whole vocabulary (top-k 0) gives."""
    import httpx

    async def body(engine: Any) -> None:
        ids = prompt(engine, "Write three sentences about rivers.")
        params = SamplingParams(max_tokens=48, temperature=0)
        gen = await engine.generate(ids, params)
        raw = {"prompt": ids, "n_predict": 48, "temperature": 0, "top_k": 0, "min_p": 0.0,
               "repeat_penalty": 1.0, "return_tokens": True, "cache_prompt": False}  # fmt: skip
        async with httpx.AsyncClient(timeout=120) as client:
            resp = await client.post(
                engine._remote.base_url + "/completion",
                json=raw,
                headers={"Authorization": f"Bearer {engine._key}"},
            )
        whole = resp.json()
        assert gen.token_ids[: len(whole["tokens"])] == whole["tokens"] and len(whole["tokens"]) > 8

    run(default_model_path, body)


def test_missing_binary_is_a_clear_error(default_model_path: Path, tmp_path: Path) -> None:
    from chatfmt.engines.llama_server import LlamaServerEngine

    with pytest.raises(EngineError, match="not found or not executable"):
        LlamaServerEngine(default_model_path, binary=tmp_path / "llama-server")


def test_parse_llamacpp_metrics() -> None:
    from chatfmt.engines.llama_server import parse_llamacpp_metrics

    page = (
        "# HELP llamacpp:requests_processing Number of requests processing.\n"
        "# TYPE llamacpp:requests_processing gauge\n"
        "llamacpp:requests_processing 2\n"
        "llamacpp:requests_deferred 0.5\n"
        "other_metric 9\n"
        "llamacpp:broken nan-ish\n"
    )
    assert parse_llamacpp_metrics(page) == {"requests_processing": 2.0, "requests_deferred": 0.5}


def test_busy_slots_queue_in_arrival_order(default_model_path: Path, binary: Path) -> None:
    """One slot, three requests: the later ones wait, and are served first come, first
    served (llama-server's queue), each complete and its own."""

    async def body(engine: Any) -> None:
        firsts: dict[int, float] = {}

        async def one(i: int) -> list[int]:
            await asyncio.sleep(0.05 * i)  # arrive in order 0, 1, 2
            ids: list[int] = []
            params = SamplingParams(max_tokens=12, temperature=0)
            async for chunk in engine.stream(prompt(engine, f"Count from {i} to {i + 9}."), params):
                if chunk.token_ids and i not in firsts:
                    firsts[i] = time.monotonic()
                ids.extend(chunk.token_ids)
            return ids

        results = await asyncio.gather(*(one(i) for i in range(3)))
        assert sorted(firsts, key=firsts.__getitem__) == [0, 1, 2]
        for i, ids in enumerate(results):
            assert str(i) in engine.tokenizer.decode(ids), (i, engine.tokenizer.decode(ids))

    run(default_model_path, body)
