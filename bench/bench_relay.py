"""The relay's CPU per token: what ``chatfmt serve`` spends between an engine and its clients.

    python bench/bench_relay.py                                # this tree, printed
    python bench/bench_relay.py --before OTHER/src --write     # before/after, in the docs

An engine that costs nothing to ask (a llama-server stand-in in its own process that streams
pre-encoded ``/completion`` events of the qwen2.5 vocabulary: one token of every stream at
each tick of one clock, ``--rate`` ticks a second, as a batching engine's decode steps; as
fast as it can with ``--rate 0``) sits behind ``chatfmt serve --engine remote``;
``--streams`` clients at once each stream a chat completion (or a Responses stream) of
``--tokens`` tokens. The serve process's own CPU time (user + system, from ``/proc``, its
children excluded) over the run, divided by the tokens relayed, is the relay's CPU per token:
reading the engine's stream, decoding and parsing, the call policy, serializing each delta
and writing it out. Each case runs ``--repeats`` times; the median is reported. With
``--before``, that checkout's ``src`` and this one alternate for ``--rounds`` rounds, and the
medians over the rounds are compared (``--write`` puts the table in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import httpx
import psutil  # type: ignore[import-untyped, unused-ignore]
from _report import write_section

ROOT = Path(__file__).resolve().parent.parent
TEXT = (
    "The river bends past the old mill, where the water slows and the light turns green. "
    "Children skip stones from the bank while herons wait in the shallows, patient as posts. "
)


# ==== The engine stand-in (runs in its own process: --engine-only) ====


def engine_events(tokens: int) -> list[bytes]:
    """The ``/completion`` events of one reply of ``tokens`` tokens, then the final event."""
    from chatfmt.tokenizers import load_tokenizer

    tok = load_tokenizer("qwen2.5")
    ids: list[int] = []
    while len(ids) < tokens:
        ids.extend(tok.encode_text(TEXT))
    out = []
    for n, token in enumerate(ids[:tokens]):
        body = {
            "index": 0,
            "content": tok.decode([token]),
            "tokens": [token],
            "stop": False,
            "id_slot": 0,
            "tokens_predicted": n + 1,
            "tokens_evaluated": 20,
        }
        out.append(b"data: " + json.dumps(body).encode() + b"\n\n")
    final = {
        "index": 0,
        "content": "",
        "tokens": [],
        "stop": True,
        "stop_type": "limit",
        "tokens_predicted": tokens,
        "tokens_evaluated": 20,
        "timings": {"cache_n": 0, "prompt_n": 20, "predicted_n": tokens},
    }
    out.append(b"data: " + json.dumps(final).encode() + b"\n\n")
    return out


def run_engine(port: int, tokens: int, rate: float) -> None:
    events = engine_events(tokens)
    models = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": "llamacpp"}]})
    props = json.dumps({"default_generation_settings": {"n_ctx": 8192}})
    period = 1 / rate if rate else 0.0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line = head.split(b"\r\n", 1)[0].decode()
                length = 0
                for h in head.split(b"\r\n")[1:]:
                    if h.lower().startswith(b"content-length:"):
                        length = int(h.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                if line.startswith("GET"):
                    body = (props if "/props" in line else models).encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    await writer.drain()
                    continue
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                for event in events:
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    if rate:
                        # Every stream's next token at the next tick of one clock, as a
                        # batching engine decodes one token for each of its slots per step.
                        await writer.drain()
                        now = time.monotonic()
                        await asyncio.sleep((now // period + 1) * period - now)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ==== Processes ====


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with status {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} was not ready in 60 s")


def start(
    args: argparse.Namespace, src: str | None, interval: int = 1
) -> tuple[subprocess.Popen[Any], subprocess.Popen[Any], str]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = str(Path(src).resolve())
    eport, sport = free_port(), free_port()
    engine = subprocess.Popen(
        [sys.executable, __file__, "--engine-only", str(eport), "--tokens", str(args.tokens),
         "--rate", str(args.rate)],
        env=env,
    )  # fmt: skip
    wait_ready(f"http://127.0.0.1:{eport}/v1/models", engine)
    serve = subprocess.Popen(
        [sys.executable, "-m", "chatfmt.cli", "serve", "--engine", "remote",
         "--engine-url", f"http://127.0.0.1:{eport}", "--tokenizer", "qwen2.5",
         "--dialect", "qwen2.5", "--port", str(sport), "--no-web", "--no-interpreter",
         *(("--stream-interval", str(interval)) if interval != 1 else ())],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{sport}"
    wait_ready(url + "/health", serve)
    return engine, serve, url


# ==== Clients ====


async def one_stream(client: httpx.AsyncClient, url: str, kind: str, tokens: int) -> int:
    """Stream one reply; the number of delta events received."""
    if kind == "chat":
        path, body = (
            "/v1/chat/completions",
            {
                "model": "m",
                "messages": [{"role": "user", "content": "Tell me about the river."}],
                "max_tokens": tokens,
                "stream": True,
            },
        )
        marker = b'"content":'
    else:
        path, body = (
            "/v1/responses",
            {
                "model": "m",
                "input": "Tell me about the river.",
                "max_output_tokens": tokens,
                "stream": True,
                "store": False,
            },
        )
        marker = b"response.output_text.delta"
    events = 0
    async with client.stream("POST", url + path, json=body) as r:
        r.raise_for_status()
        async for raw in r.aiter_bytes():
            events += raw.count(marker)
    return events


async def burst(url: str, kind: str, streams: int, tokens: int) -> float:
    async with httpx.AsyncClient(timeout=120) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(one_stream(client, url, kind, tokens) for _ in range(streams)))
        return time.perf_counter() - t0


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def measure(
    args: argparse.Namespace, kind: str, src: str | None, interval: int = 1
) -> tuple[float, float]:
    """(relay CPU µs per token, wall seconds per burst), medians over the repeats."""
    engine, serve, url = start(args, src, interval)
    try:
        asyncio.run(burst(url, kind, args.streams, args.tokens))  # warm-up
        proc = psutil.Process(serve.pid)
        per_token, walls = [], []
        for _ in range(args.repeats):
            before = cpu_seconds(proc)
            walls.append(asyncio.run(burst(url, kind, args.streams, args.tokens)))
            per_token.append((cpu_seconds(proc) - before) / (args.streams * args.tokens) * 1e6)
        return statistics.median(per_token), statistics.median(walls)
    finally:
        for p in (serve, engine):
            p.terminate()
            p.wait(30)


# ==== What the relay cannot go below: the floor ====


def reader_floor(args: argparse.Namespace) -> float:
    """CPU µs per token of only reading the engine's streams (aiohttp, each event parsed with
    orjson, nothing decoded or sent): this process's CPU time over a burst."""
    import aiohttp
    import orjson

    eport = free_port()
    engine = subprocess.Popen(
        [sys.executable, __file__, "--engine-only", str(eport), "--tokens", str(args.tokens),
         "--rate", str(args.rate)],
    )  # fmt: skip
    url = f"http://127.0.0.1:{eport}"
    try:
        wait_ready(url + "/v1/models", engine)

        async def burst() -> int:
            async with aiohttp.ClientSession() as session:

                async def one() -> int:
                    n, pending = 0, b""
                    async with session.post(url + "/completion", data=b"{}") as resp:
                        async for data in resp.content.iter_any():
                            *lines, pending = (pending + data).split(b"\n")
                            for line in lines:
                                if line.startswith(b"data:"):
                                    orjson.loads(line[5:])
                                    n += 1
                    return n

                return sum(await asyncio.gather(*(one() for _ in range(args.streams))))

        asyncio.run(burst())  # warm-up
        t0 = time.process_time()
        n = asyncio.run(burst())
        return (time.process_time() - t0) / n * 1e6
    finally:
        engine.terminate()
        engine.wait(30)


def pipeline_floor(args: argparse.Namespace, kind: str) -> float:
    """CPU µs per token of the relay's in-process part alone: a scripted engine's ids through
    the chat (or Responses) service's decode, parse, call policy and framing, no sockets."""
    import chatfmt
    from chatfmt.engines.fake import FakeEngine
    from chatfmt.server.chat.schemas import ChatCompletionRequest
    from chatfmt.server.chat.service import ChatService
    from chatfmt.server.responses.input import ResponsesRequest
    from chatfmt.server.responses.routes import _stream
    from chatfmt.server.responses.service import ResponsesService

    tok = chatfmt.load_tokenizer("qwen2.5")
    ids = tok.encode_text(TEXT * (args.tokens // 20 + 1))[: args.tokens]
    service = ChatService(FakeEngine(tok, [ids]), chatfmt.get_dialect("qwen2.5"), model_name="m")
    responses = ResponsesService(service, None)
    say = "Tell me about the river."
    chat = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": say}], "stream": True,
         "max_tokens": args.tokens}
    )  # fmt: skip
    respond = ResponsesRequest.model_validate(
        {"model": "m", "input": say, "stream": True, "max_output_tokens": args.tokens,
         "store": False}
    )  # fmt: skip

    async def run(times: int) -> None:
        for _ in range(times):
            if kind == "chat":
                prep = service.prepare(chat)
                driver, _ = service.driver(prep)
                frames = service.sse(prep, driver)
            else:
                ex = await responses.prepare(respond, "")
                driver, _ = service.driver(ex.prep)
                await driver.open()
                frames = _stream(responses, ex, driver)
            async for _frame in frames:
                pass

    asyncio.run(run(2))  # warm-up
    t0 = time.process_time()
    asyncio.run(run(20))
    return (time.process_time() - t0) / (20 * args.tokens) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine-only", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--src", help="run chatfmt from this source folder")
    ap.add_argument("--before", help="also run this source folder (the before), alternating")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds with --before")
    ap.add_argument("--streams", type=int, default=8, help="concurrent streams (default 8)")
    ap.add_argument("--tokens", type=int, default=400, help="tokens per stream (default 400)")
    ap.add_argument(
        "--rate", type=float, default=50.0,
        help="engine steps per second (a token of each stream); 0 = as fast as it can (default 50)",
    )  # fmt: skip
    ap.add_argument("--repeats", type=int, default=3, help="measured bursts (default 3)")
    ap.add_argument("--kinds", default="chat,responses", help="chat, responses or both")
    ap.add_argument(
        "--stream-interval", type=int, default=1, metavar="N",
        help="this tree also with `serve --stream-interval N` (N > 1: a column of its own)",
    )  # fmt: skip
    ap.add_argument("--write", action="store_true", help="write the section of the docs")
    ap.add_argument(
        "--floor", action="store_true", help="also measure reading alone and the in-process part"
    )
    args = ap.parse_args()
    if args.engine_only:
        run_engine(args.engine_only, args.tokens, args.rate)
        return
    kinds = args.kinds.split(",")
    if args.floor:
        print(
            f"reading the engine's streams alone: {reader_floor(args):.1f} µs CPU per token; "
            "the in-process part (decode, parse, policy, framing), per token: "
            + ", ".join(f"{kind} {pipeline_floor(args, kind):.1f} µs" for kind in kinds),
            flush=True,
        )
    interval = args.stream_interval
    if not args.before:
        for kind in kinds:
            for n in sorted({1, interval}):
                cpu, wall = measure(args, kind, args.src, n)
                print(
                    f"{kind}, stream interval {n}: {cpu:.1f} µs CPU per token relayed "
                    f"({args.streams} streams × {args.tokens} tokens, rate {args.rate:g}/s, "
                    f"{wall:.2f} s per burst)",
                    flush=True,
                )
        return
    trees = [("before", args.before, 1), ("after", args.src, 1)]
    if interval > 1:
        trees.append(("interval", args.src, interval))
    runs: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for kind in kinds:
            for tree, src, n in trees:
                cpu, _ = measure(args, kind, src, n)
                runs.setdefault((kind, tree), []).append(cpu)
                print(f"round {r + 1}: {kind} {tree}: {cpu:.1f} µs per token", flush=True)
    rows = []
    for kind in kinds:
        before = statistics.median(runs[(kind, "before")])
        after = statistics.median(runs[(kind, "after")])
        label = {"chat": "chat completions", "responses": "Responses"}.get(kind, kind)
        row = f"| {label} | {before:.0f} µs | {after:.0f} µs | **{before / after:.1f}×** less |"
        if interval > 1:
            grouped = statistics.median(runs[(kind, "interval")])
            row += f" {grouped:.0f} µs | **{before / grouped:.1f}×** less |"
        rows.append(row)
    head = "| stream | before | after | CPU per token |"
    rule = "|---|---:|---:|---:|"
    if interval > 1:
        head += f" after, `--stream-interval {interval}` | CPU per token |"
        rule += "---:|---:|"
    body = (
        f"{args.streams} streams at once, {args.tokens} tokens each, from an engine that costs "
        f"nothing to ask (a llama-server stand-in in its own process: one token of every stream "
        f"per step, {args.rate:g} steps a second) behind `chatfmt serve --engine remote`. The "
        "serve process's own CPU time (user + system) over the bursts, per token relayed; "
        f"median of {args.repeats} bursts, then of {args.rounds} alternating rounds. Before: "
        "the relay as it was (httpx reading the engine, pydantic per delta, uvicorn's h11 "
        "protocol on asyncio's loop). After: aiohttp and orjson reading it a batch at a time, "
        "deltas framed directly, the httptools protocol on uvloop."
        + (
            f" With `--stream-interval {interval}` (not the default), tokens after the first "
            f"are sent {interval} at a time, as vLLM's option of that name does."
            if interval > 1
            else ""
        )
        + f"\n\n{head}\n{rule}\n"
        + "\n".join(rows)
    )
    print(body)
    if args.write:
        write_section(
            "The relay's CPU per token",
            body,
            "bench/bench_relay.py --before <the tree before>/src --write",
        )


if __name__ == "__main__":
    main()
