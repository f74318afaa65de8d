"""Soak: mixed clients on both store backends for ``--minutes``, over one llama-server.

    python bench/soak.py               # 30 minutes; writes its section of docs/benchmarks.md
    python bench/soak.py --minutes 2   # a smoke run: printed only (under 30 minutes)

Two real ``chatfmt serve --no-web`` processes on 127.0.0.1, one API key, each with a store
limited (``--store-max-mb``) so that eviction runs: ``--sqlite-mb`` counts the SQLite files (an
empty store takes 52 KB), ``--pg-mb`` what PostgreSQL's rows hold (each limit's own measure).

- the SQLite replica: the default setup, a store file in a temporary folder and the managed
  llama-server (default model, ``--parallel 2``, ``--threads``, 1 by default);
- the PostgreSQL replica: ``--store postgresql://...`` on a server this script starts in a
  temporary folder, and ``--engine remote`` pointed at the SQLite replica's llama-server (its
  port and key read from the child process), so both backends are soaked at once on one
  engine, as replicas sharing an engine are deployed. Skipped, with a message, when PostgreSQL
  is not installed.

``--workers`` clients per replica (official ``openai`` client, no retries) loop until the time
is up, each request chosen at random: chat completions plain and streamed, Responses plain and
streamed continuing a chain of 2–4 turns with ``previous_response_id``, a forced tool call and
its result sent back, and streams closed by the client after a few events. ``max_tokens`` is
16–48, so many requests complete. Every 30 s: the RSS of each process (children included, the
engine counted apart), the store's size and rows, and ``chatfmt_requests_in_flight``.

It fails (exit 1) on any error (a non-2xx answer, an exception, a stream without its final
event; the intentional disconnects are not errors), when requests are still in flight once the
clients are done, when a store's size passes its limit by more than 10 %, or when a process's
RSS at the end exceeds its RSS at 5 minutes (half the run, for shorter runs) by more than
``max(25 %, 50 MB)``: a slow leak over a 30-minute run, not allocator noise.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import random
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped, unused-ignore]
from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_section

ROOT = Path(__file__).resolve().parent.parent

KB, MB = 1024, 1024 * 1024
SAMPLE_EVERY = 30.0
RSS_SHARE, RSS_SLACK = 0.25, 50 * MB  # end RSS may exceed the baseline by the larger of these
STORE_SLACK = 1.10  # a store may pass its limit by the write that triggers eviction
REQUEST_TIMEOUT = 600.0  # generous: a forced tool call queued on a busy 2-core machine
TOPICS = ["rivers", "owls", "bridges", "glaciers", "bees", "deserts", "tides", "comets"]
FOLLOW_UPS = ["Say more.", "Why is that?", "Give one example.", "Summarise in five words."]
CITIES = ["Paris", "Lima", "Oslo", "Nairobi", "Osaka"]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# Weights: the Responses chains are what the stores hold, the rest exercises the paths around.
KINDS = {"chat": 2, "chat_stream": 2, "chat_cut": 1, "resp": 2, "resp_stream": 2,
         "resp_cut": 1, "tool": 1}  # fmt: skip


class Unexpected(Exception):
    """An answer of the wrong shape (a 2xx that is still a failure)."""


@dataclass
class Replica:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    store: str
    limit_mb: float
    ok: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)
    stores: list[tuple[int, int]] = field(default_factory=list)  # (bytes, responses kept)
    in_flight: list[int] = field(default_factory=list)


@dataclass
class Chain:
    """A worker's Responses conversation: the last response id and the turns left."""

    prev: str | None = None
    left: int = 0


# ==== Processes ====


def start_serve(
    name: str, store: str, key: str, tmp: Path, limit_mb: float, *extra: str
) -> Replica:
    from chatfmt.engines.supervisor import free_port

    port = free_port()
    argv = [sys.executable, "-m", "chatfmt.cli", "serve", "--no-web", "--port", str(port),
            "--api-key", key, "--store", store, "--store-max-mb", f"{limit_mb:g}",
            *extra]  # fmt: skip
    with open(tmp / f"{name}.log", "wb") as log:  # the child keeps its own copy of the fd
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (tmp / f"{name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} replica exited with {proc.returncode}:\n{tail}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                # One answer before the clock starts: the model's pages are read in by then.
                body = {"model": "default", "max_tokens": 4,
                        "messages": [{"role": "user", "content": "Hi"}]}  # fmt: skip
                auth = {"Authorization": f"Bearer {key}"}
                httpx.post(url + "/v1/chat/completions", json=body, headers=auth, timeout=600)
                return Replica(name, proc, url, store, limit_mb)
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{name} replica not ready in 300 s")


def engine_of(serve: subprocess.Popen[bytes]) -> tuple[psutil.Process, str, str]:
    """The managed llama-server of ``serve``: the process, its URL and its API key (the
    supervisor passes a random key in the child's environment; we are the same user)."""
    for child in psutil.Process(serve.pid).children(recursive=True):
        if "llama-server" in child.name():
            argv = child.cmdline()
            port = argv[argv.index("--port") + 1]
            return child, f"http://127.0.0.1:{port}", child.environ()["LLAMA_API_KEY"]
    raise RuntimeError("the SQLite replica has no llama-server child")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()  # SIGTERM: chatfmt drains and stops its engine
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rss(pid: int, leave_out: int | None = None) -> int:
    """RSS of ``pid`` and its children, except ``leave_out`` (the engine, counted apart)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        if p.pid == leave_out:
            continue
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def store_size(rep: Replica) -> tuple[int, int]:
    """(bytes, responses kept): for SQLite the database and its log on disk, what the limit
    bounds; for PostgreSQL what the keys store (the usage table, what its limit bounds)."""
    if rep.store.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(rep.store, autocommit=True) as conn:
            used = conn.execute("SELECT COALESCE(SUM(bytes), 0) FROM chatfmt.usage").fetchone()
            rows = conn.execute("SELECT count(*) FROM chatfmt.responses").fetchone()
        return int(used[0] if used else 0), int(rows[0] if rows else 0)
    path = Path(rep.store)
    size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        kept = db.execute("SELECT count(*) FROM responses").fetchone()[0]
    finally:
        db.close()
    return size, int(kept)


def pg_database_size(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


def in_flight(rep: Replica, key: str) -> int:
    """Requests in flight, this scrape left out (it counts itself)."""
    text = httpx.get(rep.url + "/metrics", headers={"Authorization": f"Bearer {key}"}).text
    for line in text.splitlines():
        if line.startswith("chatfmt_requests_in_flight "):
            return int(float(line.split()[1])) - 1
    raise RuntimeError(f"{rep.name}: no chatfmt_requests_in_flight in /metrics")


# ==== Clients ====


async def chat(c: AsyncOpenAI, model: str, rng: random.Random, mode: str) -> None:
    msgs: Any = [{"role": "user", "content": f"In one sentence, what are {rng.choice(TOPICS)}?"}]
    n = rng.randint(16, 48)
    if mode == "plain":
        r = await c.chat.completions.create(model=model, messages=msgs, max_tokens=n)
        if not r.choices or r.choices[0].finish_reason is None:
            raise Unexpected(f"chat completion without a finish reason: {r}")
        return
    stream = await c.chat.completions.create(model=model, messages=msgs, max_tokens=n, stream=True)
    seen, finish = 0, None
    async for chunk in stream:
        seen += 1
        if mode == "cut" and seen >= 2:
            await stream.close()  # the client goes away mid-stream
            return
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    if finish is None:
        raise Unexpected("chat stream ended without a finish reason")


async def respond(c: AsyncOpenAI, model: str, rng: random.Random, chain: Chain, mode: str) -> None:
    if chain.left <= 0:
        chain.prev, chain.left = None, rng.randint(2, 4)  # a new conversation
    text = f"Tell me about {rng.choice(TOPICS)}." if chain.prev is None else rng.choice(FOLLOW_UPS)
    kw: dict[str, Any] = {"model": model, "input": text, "max_output_tokens": rng.randint(16, 48)}
    if chain.prev is not None:
        kw["previous_response_id"] = chain.prev
    if mode == "plain":
        r = await c.responses.create(**kw)
        if r.status not in ("completed", "incomplete"):
            raise Unexpected(f"response {r.id} is {r.status}")
        chain.prev, chain.left = r.id, chain.left - 1
        return
    stream = await c.responses.create(**kw, stream=True)
    seen, final = 0, None
    async for event in stream:
        seen += 1
        if mode == "cut" and seen >= 3:
            await stream.close()  # mid-stream: the response is not kept, the chain goes on
            return
        if event.type in ("error", "response.failed"):
            raise Unexpected(f"in-band {event.type}: {event}")
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response.id
    if final is None:
        raise Unexpected("Responses stream ended without response.completed")
    chain.prev, chain.left = final, chain.left - 1


async def tool_round_trip(c: AsyncOpenAI, model: str, rng: random.Random) -> None:
    city = rng.choice(CITIES)
    msgs: Any = [{"role": "user", "content": f"What is the weather in {city}?"}]
    tools: Any = [WEATHER]
    r = await c.chat.completions.create(
        model=model, messages=msgs, tools=tools, tool_choice="required", max_tokens=64
    )
    calls = r.choices[0].message.tool_calls if r.choices else None
    if not calls:
        raise Unexpected(f"a forced tool call came back without one: {r}")
    if r.choices[0].finish_reason != "tool_calls":
        # max_tokens cut the last call (finish_reason "length"): it is not runnable, and its
        # partial arguments are refused if sent back, as a careful client knows.
        return
    msgs.append({"role": "assistant", "content": None,
                 "tool_calls": [call.model_dump() for call in calls]})  # fmt: skip
    for call in calls:
        result = {"city": city, "temperature_c": rng.randint(-5, 30), "sky": "clear"}
        msgs.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    await c.chat.completions.create(
        model=model, messages=msgs, tools=tools, max_tokens=rng.randint(16, 48)
    )


async def worker(rep: Replica, key: str, seed: int, deadline: float, most: int) -> None:
    client = AsyncOpenAI(
        base_url=rep.url + "/v1", api_key=key, max_retries=0, timeout=REQUEST_TIMEOUT
    )
    rng, chain = random.Random(seed), Chain()
    model = (await client.models.list()).data[0].id
    actions: dict[str, Callable[[], Awaitable[None]]] = {
        "chat": lambda: chat(client, model, rng, "plain"),
        "chat_stream": lambda: chat(client, model, rng, "stream"),
        "chat_cut": lambda: chat(client, model, rng, "cut"),
        "resp": lambda: respond(client, model, rng, chain, "plain"),
        "resp_stream": lambda: respond(client, model, rng, chain, "stream"),
        "resp_cut": lambda: respond(client, model, rng, chain, "cut"),
        "tool": lambda: tool_round_trip(client, model, rng),
    }
    # Bounded in time and in count: no request starts after the deadline, and a worker
    # never sends more than 2 a second (far above what one CPU engine answers).
    for _ in range(most):
        if time.monotonic() >= deadline:
            break
        kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        try:
            await actions[kind]()
            rep.ok[kind] += 1
        except Exception as exc:
            rep.errors[kind] += 1
            rep.messages.append(f"{rep.name} {kind}: {type(exc).__name__}: {exc}"[:400])
            chain.left = 0
    await client.close()


# ==== Sampling and the report ====


class Sampler:
    """RSS of each process and each replica's store and in-flight, every ``SAMPLE_EVERY``."""

    def __init__(self, reps: list[Replica], engine: psutil.Process, key: str) -> None:
        self.reps, self.engine, self.key = reps, engine, key
        self.rss: dict[str, list[tuple[float, int]]] = {}
        self.pg_db: list[int] = []
        self.t0 = time.monotonic()

    def sample(self) -> None:
        t = time.monotonic() - self.t0
        for rep in self.reps:
            self.rss.setdefault(f"chatfmt serve ({rep.name})", []).append(
                (t, rss(rep.proc.pid, self.engine.pid))
            )
            rep.stores.append(store_size(rep))
            rep.in_flight.append(in_flight(rep, self.key))
            if rep.name == "PostgreSQL":
                self.pg_db.append(pg_database_size(rep.store))
        self.rss.setdefault("llama-server (shared)", []).append((t, rss(self.engine.pid)))
        line = ", ".join(f"{k} {v[-1][1] / MB:.0f} MB" for k, v in self.rss.items())
        stores = ", ".join(f"{r.name} {r.stores[-1][0] / KB:.0f} KB" for r in self.reps)
        done = sum(sum(r.ok.values()) for r in self.reps)
        errs = sum(sum(r.errors.values()) for r in self.reps)
        print(f"[{t / 60:5.1f} min] {done} ok, {errs} errors; RSS {line}; store {stores}; "
              f"in flight {[r.in_flight[-1] for r in self.reps]}", flush=True)  # fmt: skip

    async def run(self, done: asyncio.Event) -> None:
        """Sample until ``done`` (the clients finish their last requests past the deadline)."""
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), SAMPLE_EVERY)
            except asyncio.TimeoutError:
                await asyncio.to_thread(self.sample)


async def idle(reps: list[Replica], key: str, timeout: float = 60) -> None:
    """Wait until no request is in flight (a closed stream takes the server a moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = [await asyncio.to_thread(in_flight, r, key) for r in reps]
        if not any(counts):
            return
        await asyncio.sleep(1)


async def load(reps: list[Replica], sampler: Sampler, key: str, opts: argparse.Namespace) -> float:
    start = time.monotonic()
    deadline = start + opts.minutes * 60
    most = int(opts.minutes * 120) + 1
    done = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(done))
    await asyncio.gather(
        *(worker(rep, key, i * 100 + w, deadline, most)
          for i, rep in enumerate(reps) for w in range(opts.workers))
    )  # fmt: skip
    done.set()
    await sampling
    loaded = time.monotonic() - start
    await idle(reps, key)
    await asyncio.to_thread(sampler.sample)  # the end
    return loaded


def report(
    reps: list[Replica], sampler: Sampler, loaded: float, skipped: str, opts: argparse.Namespace
) -> tuple[str, bool]:
    """The markdown body and whether every check passed."""
    failures = [m for r in reps for m in r.messages][:20]
    notes: list[str] = []
    limits = ", ".join(f"{r.name} {r.limit_mb:g} MB" for r in reps)
    out = [
        f"{opts.minutes:g} minutes of load ({loaded / 60:.1f} min until the last answer), "
        f"{opts.workers} client workers per replica (openai client, no retries) on one "
        f"llama-server (the default model, `--parallel 2`, `--threads {opts.threads}`), managed "
        "by the SQLite replica; the PostgreSQL replica uses it as `--engine remote`. Store "
        f"limits (`--store-max-mb`): {limits}. {skipped}\n",
        f"| requests | {' | '.join(r.name for r in reps)} |\n|---|{'---:|' * len(reps)}",
        *(f"| {kind} | {' | '.join(str(r.ok[kind]) for r in reps)} |" for kind in KINDS),
        f"| **errors** | {' | '.join(str(sum(r.errors.values())) for r in reps)} |",
    ]
    # The baseline: the first sample at 5 minutes, or half the run for shorter runs.
    at = min(300.0, opts.minutes * 30)
    out += [
        f"\n| process | RSS start | at {at / 60:.1f} min | peak | end | end bound |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, points in sampler.rss.items():
        base = next((v for t, v in points if t >= at), points[-1][1])
        end, bound = points[-1][1], base + max(RSS_SHARE * base, RSS_SLACK)
        peak = max(v for _, v in points)
        out.append(
            f"| {label} | {points[0][1] / MB:.0f} MB | {base / MB:.0f} MB | {peak / MB:.0f} MB "
            f"| {end / MB:.0f} MB | ≤ {bound / MB:.0f} MB |"
        )
        if end > bound:
            failures.append(f"{label}: RSS at the end {end / MB:.0f} MB > {bound / MB:.0f} MB")
    out += [
        "\n| store | limit | start | peak | end | responses kept at the end / stored |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for rep in reps:
        sizes = [size for size, _ in rep.stores]
        stored, kept = rep.ok["resp"] + rep.ok["resp_stream"], rep.stores[-1][1]
        what = "database + log on disk" if rep.name == "SQLite" else "rows' bytes (usage)"
        out.append(
            f"| {rep.name} ({what}) | {rep.limit_mb * MB / KB:.0f} KB | {sizes[0] / KB:.0f} KB "
            f"| {max(sizes) / KB:.0f} KB | {sizes[-1] / KB:.0f} KB | {kept} / {stored} |"
        )
        if kept >= stored:  # not a failure: the run was too short to fill it
            notes.append(f"{rep.name}'s store never reached its limit: nothing was evicted.")
        if max(sizes) > rep.limit_mb * MB * STORE_SLACK:
            failures.append(f"{rep.name}'s store reached {max(sizes) / KB:.0f} KB")
    if sampler.pg_db:
        db = sampler.pg_db
        notes.append(
            "PostgreSQL's database on disk (`pg_database_size`, which the limit does not bound): "
            f"{db[0] / MB:.1f} MB at the start, {max(db) / MB:.1f} MB at most, "
            f"{db[-1] / MB:.1f} MB at the end."
        )
    ends = {r.name: r.in_flight[-1] for r in reps}
    failures += [f"{k}: {v} requests in flight at the end" for k, v in ends.items() if v]
    out += [
        "\nRequests in flight once the clients were done (`chatfmt_requests_in_flight` less "
        f"the scrape): {', '.join(f'{k} {v}' for k, v in ends.items())}.",
        *(f"\n{note}" for note in notes),
        f"\nChecks: no errors; in flight 0 at the end; each store's peak at most "
        f"{STORE_SLACK:.2f}× its limit; each process's RSS at the end at most its RSS at "
        f"5 minutes plus the larger of {RSS_SHARE:.0%} and {RSS_SLACK // MB} MB: "
        + ("**failed**." if failures else "**passed**."),
    ]
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    return "\n".join(out) + "\n", not failures


def postgres_server() -> Any:
    """The store tests' throwaway PostgreSQL server (tests/store/pg_server.py: one recipe for
    both), as a context manager: the server, or why there is none (a string)."""
    path = ROOT / "tests/store/pg_server.py"
    spec = importlib.util.spec_from_file_location("chatfmt_pg_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.running_server()


def main(opts: argparse.Namespace) -> int:
    # A plain kill would leave the servers, llama-server and PostgreSQL running: exit through
    # the clean-up below instead.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="chatfmt-soak-"))
    key = "soak-" + secrets.token_urlsafe(16)
    reps: list[Replica] = []
    try:
        with postgres_server() as pg:
            sqlite_rep = start_serve("SQLite", str(tmp / "store.sqlite3"), key, tmp, opts.sqlite_mb,
                                     "--parallel", "2", "--threads", str(opts.threads))  # fmt: skip
            reps.append(sqlite_rep)
            engine, engine_url, engine_key = engine_of(sqlite_rep.proc)
            skipped = ""
            if isinstance(pg, str):
                skipped = f"The PostgreSQL half was skipped: {pg}."
                print(f"soak: {skipped}", file=sys.stderr)
            else:
                remote = ("--engine", "remote", "--engine-url", engine_url,
                          "--engine-api-key", engine_key, "--tokenizer", "qwen2.5")  # fmt: skip
                reps.append(start_serve("PostgreSQL", pg.database(), key, tmp, opts.pg_mb, *remote))
            sampler = Sampler(reps, engine, key)
            sampler.sample()  # the start
            loaded = asyncio.run(load(reps, sampler, key, opts))
            body, passed = report(reps, sampler, loaded, skipped, opts)
            # The engine's replica last: the other one's requests go to its llama-server.
            for rep in reversed(reps):
                stop(rep.proc)
            reps.clear()
    finally:
        for rep in reversed(reps):
            stop(rep.proc)
        shutil.rmtree(tmp, ignore_errors=True)
    command = "bench/soak.py" + "".join(f" {a}" for a in sys.argv[1:])
    print(f"\n`{command}`\n\n{body}")
    if opts.minutes >= 30 and not opts.no_write:
        write_section("Soak: both stores under mixed clients", body, command)
    else:
        print("(not written to docs/benchmarks.md: only runs of 30 minutes or more are)")
    return 0 if passed else 1


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="load duration (default 30)")
    ap.add_argument("--workers", type=int, default=3, help="clients per replica (default 3)")
    # Small, so that a 30-minute run evicts: ~1.7 KB a response, 52 KB for an empty SQLite store.
    ap.add_argument("--sqlite-mb", type=float, default=0.2, help="SQLite's limit (default 0.2)")
    ap.add_argument("--pg-mb", type=float, default=0.1, help="PostgreSQL's limit (default 0.1)")
    # 1 by default: the two replicas, the clients and PostgreSQL share this machine's 2 cores, and
    # llama.cpp's threads spin while they wait: 2 threads on busy cores decoded at 2-3 tokens/s
    # here where 1 thread decoded 9.
    ap.add_argument("--threads", type=int, default=1, help="llama-server threads (default 1)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    return ap.parse_args()


if __name__ == "__main__":
    sys.exit(main(parse_args()))
