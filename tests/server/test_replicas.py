"""Two real ``chatfmt serve`` processes (replicas) on one PostgreSQL store, in front of one
engine: a Responses chain started on one continues on the other on its exact ids (the
engine's ``cached_tokens`` reported), a web conversation saved through one opens on the
other, both write at once and lose nothing, and ``kill -9`` of one mid-stream loses no
response a client was already given.

The first test's engine is a scripted vLLM stand-in in this process (``/v1/models`` and a
streamed ``/v1/completions`` with token ids), shared by both replicas as a cluster's router
would be; it keeps a prefix cache of every sequence it has seen, as vLLM's prefix caching
does, and reports the prompt tokens it found there, so the test can check each prompt. The
second runs the same story on a real engine: llama.cpp's ``llama-server`` with the default
model, two slots, both replicas in front of it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx", reason="the server extra (chatfmt[server]) is not installed")
pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")
pytest.importorskip("psycopg", reason="the postgres extra (chatfmt[postgres]) is not installed")

from chatfmt.tokenizers.base import Tokenizer  # noqa: E402

IM_END = 151645
KEY = {"Authorization": "Bearer replica-key"}
REPLY = "Hello there!"
#: The words of a long reply, streamed slowly while a replica is killed.
SLOW_WORDS = 200


class FakeCluster:
    """A vLLM stand-in: the prompts it was sent, and a prefix cache of what it has seen."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self.prompts: list[list[int]] = []
        self.reported: list[int] = []  # the cached tokens each request was told of
        self.seen: list[list[int]] = []
        self.slow = threading.Event()  # the next replies are long and slow
        self.streaming = threading.Event()  # a slow reply has started
        self.lock = threading.Lock()

    def cached(self, prompt: list[int]) -> int:
        """The longest prefix of ``prompt`` among the sequences generated before."""
        best = 0
        for seq in self.seen:
            n = 0
            for a, b in zip(prompt, seq, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return best

    def reply(self, prompt: list[int]) -> Iterator[bytes]:
        with self.lock:
            self.prompts.append(prompt)
            cached = self.cached(prompt)
            self.reported.append(cached)
        slow = self.slow.is_set()
        ids = self.tok.encode_text(" word" * SLOW_WORDS if slow else REPLY)
        for token in ids:
            if slow:
                self.streaming.set()
                time.sleep(0.05)
            text = self.tok.decode([token])
            chunk = {"choices": [{"index": 0, "text": text, "token_ids": [token]}]}
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        with self.lock:
            self.seen.append([*prompt, *ids, IM_END])
        end = {
            "choices": [{"index": 0, "text": "", "token_ids": [IM_END], "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(ids) + 1,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
        yield b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n"


def serve_cluster(cluster: FakeCluster) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            card = {"id": "served", "object": "model", "owned_by": "vllm", "max_model_len": 4096}
            body = json.dumps({"object": "list", "data": [card]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert request["return_token_ids"] is True and isinstance(request["prompt"], list)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for part in cluster.reply(request["prompt"]):
                    self.wfile.write(part)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the replica asking went away (killed)
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Replica:
    """One ``chatfmt serve`` process on the shared store, its URL once it accepts."""

    def __init__(self, engine_url: str, store_url: str) -> None:
        argv = [
            sys.executable, "-m", "chatfmt.cli", "serve", "--engine", "remote",
            "--engine-url", engine_url, "--tokenizer", "qwen2.5", "--dialect", "qwen2.5",
            "--store", store_url, "--port", "0", "--no-interpreter", "--api-key", "replica-key",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        self.output: list[str] = []
        self.url = ""
        deadline = time.monotonic() + 90
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            found = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
            if found:
                self.url = found.group(1)
                break
            assert time.monotonic() < deadline, "".join(self.output)
        assert self.url, "".join(self.output)
        # Keep reading what it prints, so that a full pipe never blocks it.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def replicas(qwen: Tokenizer, postgres_server: Any) -> Iterator[tuple[FakeCluster, Any, Any, str]]:
    cluster = FakeCluster(qwen)
    engine = serve_cluster(cluster)
    store_url = postgres_server.database(password="replica-db-secret")
    engine_url = f"http://127.0.0.1:{engine.server_address[1]}/v1"
    started: list[Replica] = []
    try:
        # One after the other: the first creates the store's tables (the second would wait
        # for it anyway, under the migration lock).
        started.append(Replica(engine_url, store_url))
        started.append(Replica(engine_url, store_url))
        yield cluster, started[0], started[1], store_url
    finally:
        for replica in started:
            replica.stop()
        engine.shutdown()
        for replica in started:
            assert "replica-db-secret" not in "".join(replica.output)


def respond(
    replica: Replica, text: str, previous: str | None = None, **settings: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "served", "input": text, **settings}
    if previous is not None:
        body["previous_response_id"] = previous
    r = httpx.post(f"{replica.url}/v1/responses", json=body, headers=KEY, timeout=30)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    assert answer["store"] is True, answer
    return answer


def stream_until_killed(replica: Replica, body: dict[str, Any], events: list[str]) -> None:
    """Stream ``body`` from ``replica`` into ``events`` until it ends or the replica dies."""
    try:
        with httpx.stream(
            "POST", f"{replica.url}/v1/responses", json=body, headers=KEY, timeout=60
        ) as r:
            for line in r.iter_lines():
                events.append(line)
    except httpx.HTTPError:
        pass  # the replica died under it


def test_two_replicas_share_chains_conversations_and_survive_a_kill(
    replicas: tuple[FakeCluster, Replica, Replica, str], qwen: Tokenizer
) -> None:
    cluster, a, b, _ = replicas
    # A chain started on A continues on B, on the exact ids of A's exchange.
    first = respond(a, "hi")
    assert first["output"][0]["content"][0]["text"] == REPLY
    second = respond(b, "and again", first["id"])
    exchange = [*cluster.prompts[0], *qwen.encode_text(REPLY)]
    assert cluster.prompts[1][: len(exchange)] == exchange
    cached = second["usage"]["input_tokens_details"]["cached_tokens"]
    assert cached == cluster.reported[1] >= len(exchange), (cluster.prompts, cluster.seen)
    metrics = httpx.get(f"{b.url}/metrics", headers=KEY, timeout=10).text
    assert re.search(r'chatfmt_responses_continued_total\{prompt="exact"\} 1\.0', metrics)
    # And back on A, which never saw the second turn.
    third = respond(a, "once more", second["id"])
    assert cluster.prompts[2][: len(cluster.prompts[1])] == cluster.prompts[1]
    gone = httpx.get(f"{b.url}/v1/responses/{third['id']}", timeout=10)
    assert gone.status_code == 401  # keys hold on every replica
    assert (
        httpx.get(f"{b.url}/v1/responses/{third['id']}", headers=KEY, timeout=10).json()["id"]
        == third["id"]
    )

    # A web conversation saved through A opens on B.
    state = {"messages": [{"role": "user", "content": "kept across replicas"}]}
    cid = "conv-replicas-1"
    put = httpx.put(f"{a.url}/api/conversations/{cid}", json=state, headers=KEY, timeout=10)
    assert put.status_code == 200, put.text
    opened = httpx.get(f"{b.url}/api/conversations/{cid}", headers=KEY, timeout=10)
    assert opened.status_code == 200 and opened.json()["messages"] == state["messages"]

    # Both write at once: six chains of three turns, each turn on the other replica.
    def chain(n: int) -> list[str]:
        ids: list[str] = []
        previous = None
        for turn in range(3):
            replica = (a, b)[(n + turn) % 2]
            previous = respond(replica, f"chain {n} turn {turn}", previous)["id"]
            ids.append(previous)
        return ids

    results: list[list[str]] = []
    threads = [threading.Thread(target=lambda n=n: results.append(chain(n))) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 6
    for ids in results:
        for rid in ids:
            found = httpx.get(f"{a.url}/v1/responses/{rid}", headers=KEY, timeout=10)
            assert found.status_code == 200, (rid, found.text)

    # kill -9 of A in the middle of a stream: every response already given stays, on B.
    cluster.slow.set()
    given = [first["id"], second["id"], third["id"], *(r for ids in results for r in ids)]
    events: list[str] = []

    body = {"model": "served", "input": "tell me a long story", "stream": True}
    body["previous_response_id"] = third["id"]
    reader = threading.Thread(target=stream_until_killed, args=(a, body, events))
    reader.start()
    assert cluster.streaming.wait(30)
    time.sleep(0.3)  # a few deltas are out
    os.kill(a.proc.pid, signal.SIGKILL)
    a.proc.wait(10)
    reader.join(30)
    assert any("response.output_text.delta" in e for e in events), events[:5]
    assert not any("response.completed" in e for e in events)
    cluster.slow.clear()
    for rid in given:
        found = httpx.get(f"{b.url}/v1/responses/{rid}", headers=KEY, timeout=10)
        assert found.status_code == 200, (rid, found.text)
    # The conversation A was streaming continues on B from its last acknowledged turn.
    fourth = respond(b, "where were we?", third["id"])
    assert fourth["previous_response_id"] == third["id"]
    listed = httpx.get(f"{b.url}/api/conversations", headers=KEY, timeout=10).json()
    assert [c["id"] for c in listed["conversations"]] == [cid]


# ==== The same on a real engine: llama-server with the default model ====

#: Greedy and short, so that the real model's turns are quick and repeatable.
REAL = {"temperature": 0, "max_output_tokens": 12}


def test_two_replicas_in_front_of_a_real_llama_server(
    default_model_path: Path,
    raw_llama_server: Callable[..., AbstractContextManager[str]],
    postgres_server: Any,
) -> None:
    store_url = postgres_server.database(password="replica-db-secret")
    args = ("--parallel", "2", "--threads", "1", "--ctx-size", "8192")
    with raw_llama_server(default_model_path, *args) as engine_url:
        started: list[Replica] = []
        try:
            started.append(Replica(engine_url, store_url))
            started.append(Replica(engine_url, store_url))
            a, b = started
            # A chain started on A continues on B on A's exact ids: the engine finds the
            # whole first exchange in its cache (it evaluates the last token again).
            first = respond(a, "Name one colour.", **REAL)
            second = respond(b, "Name another.", first["id"], **REAL)
            replied = first["usage"]["output_tokens"] - 1  # without its stop token
            cached = second["usage"]["input_tokens_details"]["cached_tokens"]
            assert cached >= first["usage"]["input_tokens"] + replied - 1, (first, second)
            metrics = httpx.get(f"{b.url}/metrics", headers=KEY, timeout=10).text
            assert re.search(r'chatfmt_responses_continued_total\{prompt="exact"\} 1\.0', metrics)

            # A web conversation saved through B opens on A.
            state = {"messages": [{"role": "user", "content": "kept across replicas"}]}
            put = httpx.put(
                f"{b.url}/api/conversations/conv-real", json=state, headers=KEY, timeout=10
            )
            assert put.status_code == 200, put.text
            opened = httpx.get(f"{a.url}/api/conversations/conv-real", headers=KEY, timeout=10)
            assert opened.status_code == 200 and opened.json()["messages"] == state["messages"]

            # Both replicas write at once: four chains of two turns, alternating replicas.
            results: list[list[str]] = []

            def chain(n: int) -> None:
                one = respond((a, b)[n % 2], f"Say the number {n}.", **REAL)
                two = respond((b, a)[n % 2], "And the next one?", one["id"], **REAL)
                results.append([one["id"], two["id"]])

            threads = [threading.Thread(target=chain, args=(n,)) for n in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            assert len(results) == 4

            # kill -9 of A while it streams a long reply: nothing already given is lost.
            given = [first["id"], second["id"], *(r for ids in results for r in ids)]
            events: list[str] = []
            body = {"model": "served", "input": "Write a long story about a lighthouse.",
                    "stream": True, "temperature": 0, "max_output_tokens": 400,
                    "previous_response_id": second["id"]}  # fmt: skip
            reader = threading.Thread(target=stream_until_killed, args=(a, body, events))
            reader.start()
            deadline = time.monotonic() + 120
            while sum("output_text.delta" in e for e in events) < 5:
                assert time.monotonic() < deadline and reader.is_alive(), events[:10]
                time.sleep(0.05)
            os.kill(a.proc.pid, signal.SIGKILL)
            a.proc.wait(10)
            reader.join(60)
            assert not any("response.completed" in e for e in events)
            for rid in given:
                found = httpx.get(f"{b.url}/v1/responses/{rid}", headers=KEY, timeout=10)
                assert found.status_code == 200, (rid, found.text)
            # The conversation A was streaming continues on B from its last given turn.
            third = respond(b, "Where were we?", second["id"], **REAL)
            assert third["previous_response_id"] == second["id"]
            assert third["output"][0]["content"][0]["text"]
        finally:
            for replica in started:
                replica.stop()
            for replica in started:
                assert "replica-db-secret" not in "".join(replica.output)
