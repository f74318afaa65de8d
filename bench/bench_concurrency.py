"""Many users at once: ``chatfmt serve`` against raw ``llama-server --parallel N``.

    python bench/bench_concurrency.py                       # N = 1, 4, 8; then the two users
    python bench/bench_concurrency.py --levels 4 --rounds 1 --no-alternating

Part 1, for each N: N clients each stream one chat completion at once (greedy, ``--tokens``
each, distinct prompts). The peer is llama.cpp's own server started by hand with the same
GGUF, ``--parallel N``, the same context per slot and thread count, answering its own
``/v1/chat/completions``; then ``chatfmt serve --parallel N --no-web`` (the real entry point,
whose engine is the same llama-server binary as a managed child) gets the same requests.
Aggregate tokens/s = all completion tokens / wall time from the first request to the last
token, over ``--bursts`` bursts; TTFT = time to the first content token, p50 over all of
them. The two alternate per round; the median round is reported.

Part 2, two users alternating: two conversations whose histories are ~2,000 tokens each
take turns on one ``chatfmt serve``; each turn's TTFT is compared with a single warm user's
(one conversation, turn after turn). With one KV cache the users evict each other and every
turn re-reads the whole history; with a slot per conversation each turn reads only its new
message. The in-process engine (``--engine local``, one KV cache) is measured the same way
for comparison.
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
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped, unused-ignore]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_section

SLOT_CTX = 4096
TOPICS = ["rivers", "volcanoes", "bridges", "owls", "glaciers", "lighthouses", "deserts", "bees"]


def prompt(i: int, part: int = 0) -> list[dict[str, str]]:
    topic = TOPICS[i % len(TOPICS)]
    text = f"Write a long, detailed essay about {topic}, part {part + 1}."
    return [{"role": "user", "content": text}]


# ==== Servers ====


def wait_health(url: str, proc: subprocess.Popen[Any], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server not ready")


def start_raw(
    model: Path, parallel: int, threads: int, *extra: str
) -> tuple[subprocess.Popen[Any], str]:
    from chatfmt.engines.llama_server import find_llama_server
    from chatfmt.engines.supervisor import free_port

    port = free_port()
    argv = [
        str(find_llama_server()),
        *("--model", str(model), "--host", "127.0.0.1", "--port", str(port)),
        *("--parallel", str(parallel), "--ctx-size", str(SLOT_CTX * parallel)),
        *("--no-kv-unified", "--cont-batching", "--no-webui"),
        *("--threads", str(threads), "--threads-batch", str(threads)),
        *extra,
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_health(url, proc)
    return proc, url


def start_chatfmt(
    parallel: int, threads: int, engine: str = "llama-server", *extra: str
) -> tuple[subprocess.Popen[Any], str]:
    from chatfmt.engines.supervisor import free_port

    port = free_port()
    argv = [sys.executable, "-m", "chatfmt.cli", "serve", "--no-web", "--port", str(port)]
    argv += ["--threads", str(threads), "--engine", engine]
    if engine == "llama-server":
        argv += ["--parallel", str(parallel), "--n-ctx", str(SLOT_CTX)]
    argv += extra
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_health(url, proc)
    return proc, url


def stop(proc: subprocess.Popen[Any]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ==== Clients ====


async def stream_chat(
    client: httpx.AsyncClient, messages: list[dict[str, str]], tokens: int
) -> tuple[float, int, str, float]:
    """(TTFT, completion tokens, text, end time) of one streamed chat completion."""
    body = {
        "model": "default",
        "messages": messages,
        "temperature": 0,
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    ttft = 0.0
    parts: list[str] = []
    usage = 0
    # A new connection per request, for both servers: a kept-alive one can be closed by the
    # server just as the next request is sent on it, which httpx does not retry.
    headers = {"Connection": "close"}
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                usage = data["usage"]["completion_tokens"]
            for choice in data.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    if not ttft:
                        ttft = time.perf_counter() - start
                    parts.append(piece)
    return ttft, usage, "".join(parts), time.perf_counter()


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of process ``pid`` itself (its children, the engine, apart)."""
    if pid is None:
        return 0.0
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


async def bursts(
    url: str, n: int, tokens: int, count: int, pid: int | None = None
) -> dict[str, float]:
    """``count`` bursts of ``n`` simultaneous requests (new prompts each time: no cache hits);
    with ``pid``, that process's CPU time per completion token over them too."""
    limits = httpx.Limits(max_connections=n + 2)
    total, wall, ttfts = 0, 0.0, []
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await stream_chat(client, prompt(99, 99), 8)  # warm-up
        cpu = cpu_seconds(pid)
        # At least a dozen TTFT samples per level: one burst of one request is one sample.
        for b in range(max(count, -(-12 // n))):
            start = time.perf_counter()
            results = await asyncio.gather(
                *(stream_chat(client, prompt(i, b), tokens) for i in range(n))
            )
            total += sum(r[1] for r in results)
            wall += max(r[3] for r in results) - start
            ttfts += [r[0] for r in results]
        cpu = cpu_seconds(pid) - cpu
    return {
        "tok_s": total / wall,
        "ttft_p50": statistics.median(ttfts),
        "ttft_max": max(ttfts),
        "tokens": total,
        "cpu_us": cpu / total * 1e6,
    }


def history(user: str, target_tokens: int) -> list[dict[str, str]]:
    """A conversation of about ``target_tokens`` tokens, different for each user."""
    words = [f"{user}-{i} note on item {i * 7 % 101} of the {user} ledger." for i in range(400)]
    text = " ".join(words)
    chars = target_tokens * 3  # ~3 characters per token for this text
    return [
        {"role": "system", "content": f"You help {user} with their ledger."},
        {"role": "user", "content": "Here is my ledger:\n" + text[:chars]},
        {"role": "assistant", "content": "Thanks, I have read your ledger."},
    ]


async def conversation_turns(
    url: str, users: list[str], turns: int, history_tokens: int
) -> list[float]:
    """TTFT of every turn after each user's first, users taking turns in order."""
    chats = {u: history(u, history_tokens) for u in users}
    ttfts: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        for turn in range(turns):
            for user in users:
                chats[user].append({"role": "user", "content": f"Question {turn}: what is item 3?"})
                ttft, _, text, _ = await stream_chat(client, chats[user], 12)
                chats[user].append({"role": "assistant", "content": text})
                if turn > 0:
                    ttfts.append(ttft)
    return ttfts


# ==== Main ====


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="1,4,8")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bursts", type=int, default=3, help="bursts per server start")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--history", type=int, default=2000)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--no-alternating", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    from chatfmt.engines.default_model import ensure_default_model

    model = ensure_default_model(progress=False)
    rows = []
    for n in [int(x) for x in args.levels.split(",")]:
        raw_runs, ours_runs = [], []
        for _ in range(args.rounds):
            proc, url = start_raw(model, n, args.threads)
            try:
                raw_runs.append(asyncio.run(bursts(url, n, args.tokens, args.bursts)))
            finally:
                stop(proc)
            proc, url = start_chatfmt(n, args.threads)
            try:
                ours_runs.append(asyncio.run(bursts(url, n, args.tokens, args.bursts, proc.pid)))
            finally:
                stop(proc)
        raw = sorted(raw_runs, key=lambda r: r["tok_s"])[len(raw_runs) // 2]
        ours = sorted(ours_runs, key=lambda r: r["tok_s"])[len(ours_runs) // 2]
        row = (
            f"| {n} | {ours['tok_s']:.1f} tok/s, TTFT p50 {ours['ttft_p50']:.2f} s "
            f"(max {ours['ttft_max']:.2f}) | {raw['tok_s']:.1f} tok/s, TTFT p50 "
            f"{raw['ttft_p50']:.2f} s (max {raw['ttft_max']:.2f}) | "
            f"{ours['tok_s'] / raw['tok_s']:.2f}× | {ours['ttft_p50'] / raw['ttft_p50']:.2f}× | "
            f"{ours['cpu_us']:.0f} µs |"
        )
        print(row, flush=True)
        rows.append(row)

    body = (
        f"N clients each stream one greedy chat completion of up to {args.tokens} tokens at "
        f"once (distinct prompts), {args.bursts} times per server start (at least 12 "
        f"requests per level, for a dozen TTFT samples), {args.threads} "
        f"threads, {SLOT_CTX} tokens of context per slot; the median of {args.rounds} "
        "alternating rounds. Peer: llama.cpp's `llama-server --parallel N` "
        "started by hand on the same GGUF, answering its own `/v1/chat/completions`.\n\n"
        "The last column is the chatfmt process's own CPU time (user + system, the "
        "llama-server child apart) per completion token over the measured bursts: the "
        "relay's cost, which competes with the engine for the same two cores.\n\n"
        "| concurrent chats | chatfmt serve | raw llama-server | throughput ratio | "
        "TTFT p50 ratio | chatfmt CPU per token |\n|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    if not args.no_alternating:
        lines = []
        for engine in ("llama-server", "local"):
            proc, url = start_chatfmt(4, args.threads, engine)
            try:
                single = asyncio.run(conversation_turns(url, ["ann"], args.turns, args.history))
                both = asyncio.run(conversation_turns(url, ["bob", "cy"], args.turns, args.history))
            finally:
                stop(proc)
            s, b = statistics.median(single), statistics.median(both)
            line = (
                f"| `--engine {engine}` | {s:.2f} s | {b:.2f} s (max {max(both):.2f}) | "
                f"{b / s:.2f}× |"
            )
            print(line, flush=True)
            lines.append(line)
        body += (
            f"\nTwo users alternating, histories of ~{args.history} tokens each, "
            f"{args.turns - 1} measured turns per user (TTFT of a new turn, median):\n\n"
            "| engine | single warm user | two alternating users | ratio |\n|---|---|---|---|\n"
            + "\n".join(lines)
            + "\n"
        )
    if not args.no_write:
        write_section("Many users at once", body, "bench/bench_concurrency.py")
    print(body)


if __name__ == "__main__":
    main()
