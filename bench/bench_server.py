"""Server benchmarks: HTTP overhead over a direct engine call, and embedded-model decode speed
through the server versus raw llama-cpp-python.

    python bench/bench_server.py                 # both parts
    python bench/bench_server.py --overhead-only # no model needed
    python bench/bench_server.py --requests 2000 --tokens 128

Part 1 uses a FakeEngine that yields its tokens instantly, so every microsecond measured is
chatfmt's: request parsing, rendering, the engine call, parsing the output, and HTTP. It is
measured in-process (httpx over ASGI, no sockets) and against a real uvicorn server in a
separate process on 127.0.0.1 (keep-alive connection). Overhead = server p50 - direct p50,
where "direct" is rendering plus ``engine.generate`` plus parsing, called in-process.

Part 2 compares decode speed (tokens/s after the first token) of raw ``Llama.generate`` with a
streamed ``/v1/chat/completions`` from ``chatfmt serve`` (the real entry point, in its own
process), on the same prompt ids, greedy, same thread count. The two runs alternate so that
background load hits both alike; the median of the repetitions is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import httpx

PROMPT = "Write a long, detailed story about a lighthouse keeper and a storm."


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fmt_ms(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1e3:.3f} ms, p99 {pct(values, 0.99) * 1e3:.3f} ms"


# ==== Part 1: overhead ====


def fake_app() -> tuple[Any, Any, Any]:
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.fake import FakeEngine
    from chatfmt.server import create_app
    from chatfmt.tokenizers import load_tokenizer

    tok = load_tokenizer("qwen2.5")
    dialect = get_dialect("qwen2.5")
    fake = FakeEngine(tok, ["The answer is forty-two, as everyone knows.<|im_end|>"])
    return create_app(fake, dialect, model_name="fake"), fake, dialect


def body(stream: bool) -> dict[str, Any]:
    return {
        "model": "fake",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the answer to everything?"},
        ],
        "max_tokens": 64,
        "stream": stream,
    }


async def time_async(n: int, fn: Callable[[], Coroutine[Any, Any, Any]]) -> list[float]:
    for _ in range(min(200, n)):  # warm-up: caches, first-call imports
        await fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


def bench_overhead(n: int) -> dict[str, list[float]]:
    from chatfmt.engines import SamplingParams

    app, fake, dialect = fake_app()
    tok = fake.tokenizer
    msgs = body(False)["messages"]
    stop_ids = tuple(dialect.stop_ids(tok))

    async def direct() -> None:
        ids = dialect.render(msgs, tok).ids
        gen = await fake.generate(ids, SamplingParams(max_tokens=64, stop_ids=stop_ids))
        dialect.parse(gen.token_ids, tok)

    results: dict[str, list[float]] = {}

    async def in_process() -> None:
        results["direct (render + engine + parse)"] = await time_async(n, direct)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:

            async def health() -> None:
                assert (await client.get("/health")).status_code == 200

            results["ASGI in-process, GET /health (HTTP floor)"] = await time_async(n, health)
            for stream in (False, True):
                label = f"ASGI in-process, stream={stream}"

                async def call(stream: bool = stream) -> None:
                    r = await client.post("/v1/chat/completions", json=body(stream))
                    assert r.status_code == 200

                results[label] = await time_async(n, call)

    asyncio.run(in_process())

    proc, url = start_server_process(["--serve-fake"])
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            times = []
            for i in range(n + 200):
                t = time.perf_counter()
                assert client.get("/health").status_code == 200
                if i >= 200:
                    times.append(time.perf_counter() - t)
            results["uvicorn loopback, GET /health (HTTP floor)"] = times
            for stream in (False, True):
                times = []
                for i in range(n + 200):
                    t = time.perf_counter()
                    r = client.post("/v1/chat/completions", json=body(stream))
                    assert r.status_code == 200
                    if i >= 200:
                        times.append(time.perf_counter() - t)
                results[f"uvicorn loopback, stream={stream}"] = times
    finally:
        proc.terminate()
        proc.wait(10)
    return results


def start_server_process(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "http://" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    url = line[line.index("http://") :].strip().removesuffix("/v1")
    return proc, url


def serve_fake() -> None:
    import uvicorn

    app, _, _ = fake_app()
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)

    async def main() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        print(f"serving at http://127.0.0.1:{port}/v1", flush=True)
        await task

    asyncio.run(main())


# ==== Part 2: decode speed ====


def prompt_ids() -> list[int]:
    from chatfmt.dialects import get_dialect
    from chatfmt.tokenizers import load_tokenizer

    return (
        get_dialect("qwen2.5")
        .render([{"role": "user", "content": PROMPT}], load_tokenizer("qwen2.5"))
        .ids
    )


def raw_llama_rate(llm: Any, ids: list[int], tokens: int) -> tuple[float, int]:
    stamps = []
    for n, _ in enumerate(
        llm.generate(ids, temp=0.0, top_k=0, min_p=0.0, top_p=1.0, repeat_penalty=1.0, reset=True)
    ):
        stamps.append(time.perf_counter())
        if n + 1 >= tokens:
            break
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), len(stamps)


def server_rate(url: str, tokens: int) -> tuple[float, int]:
    req = {
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    first = last = 0.0
    completion = 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=req, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            now = time.perf_counter()
            if event.get("usage"):
                completion = event["usage"]["completion_tokens"]
                continue
            delta = event["choices"][0]["delta"]
            if delta.get("content") or delta.get("tool_calls"):
                first = first or now
                last = now
    # The first content chunk arrives with the first token (or one later if the parser held
    # a token back); either way the rate is over completion - 1 intervals.
    return (completion - 1) / (last - first), completion


def bench_decode(tokens: int, reps: int, threads: int) -> dict[str, Any]:
    import llama_cpp

    from chatfmt.engines.default_model import ensure_default_model

    path = ensure_default_model(progress=False)
    ids = prompt_ids()
    raw: list[float] = []
    served: list[float] = []
    counts: dict[str, int] = {}
    proc, url = start_server_process(["--serve-default", "--threads", str(threads)])
    try:
        llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=4096,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        server_rate(url, 8)  # warm-up
        raw_llama_rate(llm, ids, 8)
        for _ in range(reps):
            # Each run alone on the CPU: the other side is idle meanwhile.
            rate, counts["raw"] = raw_llama_rate(llm, ids, tokens)
            raw.append(rate)
            rate, counts["server"] = server_rate(url, tokens)
            served.append(rate)
    finally:
        proc.terminate()
        proc.wait(10)
    return {"raw": raw, "server": served, "counts": counts, "threads": threads}


def serve_default(threads: int) -> None:
    from chatfmt.cli.serve import run_server

    run_server(port=0, n_threads=threads)


# ==== Main ====


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="llama.cpp threads, both sides"
    )
    ap.add_argument("--overhead-only", action="store_true")
    ap.add_argument("--decode-only", action="store_true")
    ap.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--serve-default", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_fake:
        serve_fake()
        return
    if args.serve_default:
        serve_default(args.threads)
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"# chatfmt server benchmark ({os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
        f"load average {load:.1f} at start)"
    )
    if not args.decode_only:
        res = bench_overhead(args.requests)
        base = pct(res["direct (render + engine + parse)"], 0.5)
        print(f"\n## Overhead, {args.requests} requests each (FakeEngine, instant tokens)\n")
        print("| path | p50 | p99 | p50 minus direct |")
        print("|---|---|---|---|")
        for label, times in res.items():
            over = pct(times, 0.5) - base
            show = (
                "—" if label.startswith("direct") or "floor" in label else f"{over * 1e3:+.3f} ms"
            )
            print(
                f"| {label} | {pct(times, 0.5) * 1e3:.3f} ms | {pct(times, 0.99) * 1e3:.3f} ms "
                f"| {show} |"
            )
    if not args.overhead_only:
        res2 = bench_decode(args.tokens, args.reps, args.threads)
        raw, served = statistics.median(res2["raw"]), statistics.median(res2["server"])
        print(f"\n## Decode speed, default model, {res2['threads']} threads, greedy\n")
        print("| path | tokens | runs (tok/s) | median tok/s |")
        print("|---|---|---|---|")
        for label, key, med in (
            ("raw llama-cpp-python `Llama.generate`", "raw", raw),
            ("`chatfmt serve`, streamed over HTTP", "server", served),
        ):
            runs = ", ".join(f"{r:.1f}" for r in res2[key])
            print(f"| {label} | {res2['counts'][key]} | {runs} | {med:.1f} |")
        print(f"\nserver / raw = {served / raw:.3f}")


if __name__ == "__main__":
    main()
