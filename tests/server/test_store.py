"""The store as the server uses it, through the HTTP app with two keys: a store busy evicting
(or just slow) never holds up requests that do not use it; a continuation whose conversation
lost a response while it was generated says it was not stored; the web chat's conversation
routes answer 400 for what cannot be stored. Each runs on both backends, SQLite and
PostgreSQL. (The store's own tests are in tests/store/.)"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")

from fastapi import Request

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.server.http.bodies import require_bearer
from chatfmt.store import ResponseStore, StoredResponse, open_store, owner_of
from chatfmt.tokenizers.base import Tokenizer
from chatfmt.web.conversation_routes import mount_conversations

pytestmark = pytest.mark.anyio

KEYS = ["key-a", "key-b"]
A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}
#: A chat whose prompt is rendered on a worker thread (past the inline size).
BIG_CHAT = {"messages": [{"role": "user", "content": "word " * 4000}]}
#: Generous: alone, this chat takes a few tens of milliseconds.
BOUND_S = 2.5
#: More store calls waiting than the default thread pool has threads (at most 32).
WAITING = 40


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


#: ``make_store(**limits)``: the test's store (the same one each call), and ``fill(owner, n)``
#: with ``n`` web conversations of ~1 KB written straight into its tables (fast).
MakeStore = Callable[..., Any]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[MakeStore, Callable[[str, int], None]]]:
    location = str(tmp_path / "r.sqlite3")
    if request.param == "postgresql":
        location = request.getfixturevalue("postgres_server").database()
    opened: list[Any] = []

    def make(**limits: Any) -> Any:
        opened.append(open_store(location, **limits))
        return opened[-1]

    def fill(owner: str, n: int) -> None:
        if request.param == "sqlite":
            fill_conversations(Path(location), owner, n)
            return
        import psycopg

        open_store(location).close()
        state = json.dumps({"messages": [{"role": "user", "content": "x" * 900}]})
        start = time.time() - 3600
        with psycopg.connect(location) as conn:  # one statement: its triggers run once
            conn.execute(
                "INSERT INTO chatfmt.conversations SELECT 'conv-' || lpad(i::text, 6, '0'), "
                "%s, 't', %s + i * 1e-3, %s FROM generate_series(0, %s - 1) AS i",
                (owner, start, state, n),
            )

    yield make, fill
    for store in opened:
        store.close()


def make_app(tok: Tokenizer, store: Any, script: Any = None) -> Any:
    engine = FakeEngine(tok, script or ("Hello there!<|im_end|>",))
    app = create_app(engine, get_dialect("qwen2.5"), model_name="m", store=store, api_key=KEYS)

    def check(request: Request) -> str | None:
        return require_bearer(request, KEYS)

    mount_conversations(app, store, check=check)
    return app


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


def fill_conversations(path: Path, owner: str, n: int) -> None:
    """``n`` web conversations of ~1 KB, written straight into the file (fast)."""
    ResponseStore(path).close()
    state = json.dumps({"messages": [{"role": "user", "content": "x" * 900}]})
    start = time.time() - 3600
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO conversations VALUES (?, ?, 't', ?, ?)",
            ((f"conv-{i:06d}", owner, start + i * 1e-3, state) for i in range(n)),
        )


async def timed_chat_beside(
    c: httpx.AsyncClient, busy: Any, after_chat: Any = None
) -> tuple[float, list[Any]]:
    """Key B's chat completion while ``busy`` runs and B's own store lookups wait: its time,
    and what the others answered (after ``after_chat()``)."""
    others = [asyncio.create_task(busy)]
    await asyncio.sleep(0.05)  # the store is busy now
    others += [
        asyncio.create_task(c.get("/v1/responses/resp_nothing", headers=B)) for _ in range(WAITING)
    ]
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    chat = await c.post("/v1/chat/completions", json=BIG_CHAT, headers=B)
    took = time.perf_counter() - start
    assert chat.status_code == 200, chat.text
    if after_chat is not None:
        after_chat()
    return took, await asyncio.gather(*others)


async def test_evicting_for_one_key_does_not_stall_another_keys_chat(
    qwen: Tokenizer, backend: tuple[MakeStore, Any]
) -> None:
    """Key A's save evicts thousands of its conversations (16 MB store, full): each used to
    cost a sort of all of A's conversations under the store's lock (seconds), while store
    calls waiting for it filled the thread pool that rendering uses, and B's chat waited."""
    make_store, fill = backend
    fill(owner_of("key-a"), 17_000)
    # PostgreSQL's limit counts the rows' contents (about 16 MB here), SQLite's its pages.
    store = make_store(max_mb=16 if isinstance(make_store(), ResponseStore) else 13)
    app = make_app(qwen, store)
    state = {"messages": [{"role": "user", "content": "one more"}]}
    async with client(app) as c:
        save = c.put("/api/conversations/conv-evicting", json=state, headers=A)
        took, (saved, *lookups) = await timed_chat_beside(c, save)
    assert saved.status_code == 200, saved.text
    assert all(r.status_code == 404 for r in lookups)
    assert store.info()["conversations"] < 15_000  # it did evict
    assert took < BOUND_S, f"key B's chat took {took:.2f} s beside key A's eviction"


async def test_a_slow_store_holds_up_only_store_calls(
    qwen: Tokenizer, backend: tuple[MakeStore, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store calls run on the store's own threads: however long they wait, a chat that does
    not use the store gets a thread to render on."""
    store = backend[0]()
    released = threading.Event()

    def slow_get(owner: str, rid: str) -> StoredResponse | None:
        released.wait(timeout=4 * BOUND_S)  # until the chat is done (or long past the bound)
        return None

    monkeypatch.setattr(store, "get", slow_get)
    app = make_app(qwen, store)

    async def slow_lookup() -> httpx.Response:
        return await c.get("/v1/responses/resp_slow", headers=A)

    async with client(app) as c:
        took, lookups = await timed_chat_beside(c, slow_lookup(), released.set)
    assert all(r.status_code == 404 for r in lookups)
    assert took < BOUND_S, f"key B's chat took {took:.2f} s beside a slow store"


async def test_a_continuation_whose_conversation_lost_a_response_is_not_stored(
    qwen: Tokenizer, backend: tuple[MakeStore, Any]
) -> None:
    """The response it continues is deleted while it generates: the answer comes, says
    ``store: false`` (it could not be continued), and is not found afterwards."""
    store = backend[0]()
    doomed: list[str] = []

    def reply(_prompt: list[int]) -> str:
        while doomed:  # deleted by its key while this reply is generated
            assert store.delete(owner_of("key-a"), doomed.pop())
        return "Hello there!<|im_end|>"

    app = make_app(qwen, store, reply)
    async with client(app) as c:
        first = await c.post("/v1/responses", json={"model": "m", "input": "hi"}, headers=A)
        assert first.json()["store"] is True
        for stream in (False, True):
            parent = (
                await c.post("/v1/responses", json={"model": "m", "input": "hi"}, headers=A)
            ).json()["id"]
            doomed.append(parent)
            body = {"model": "m", "input": "again", "previous_response_id": parent}
            r = await c.post("/v1/responses", json={**body, "stream": stream}, headers=A)
            assert r.status_code == 200, r.text
            if stream:
                lines = r.text.splitlines()
                events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
                answer = events[-1]["response"]
                assert events[-1]["type"] == "response.completed"
            else:
                answer = r.json()
            assert answer["store"] is False and answer["output"][0]["content"][0]["text"]
            gone = await c.get(f"/v1/responses/{answer['id']}", headers=A)
            assert gone.status_code == 404
    assert store.count() == 1  # the first response only


async def test_a_lone_surrogate_in_a_saved_conversation_is_a_400(
    qwen: Tokenizer, backend: tuple[MakeStore, Any]
) -> None:
    store = backend[0]()
    app = make_app(qwen, store)
    json_type = {**A, "Content-Type": "application/json"}
    async with client(app) as c:
        for raw in (
            '{"messages": [{"role": "user", "content": "\\udfff"}]}',
            '{"messages": [], "system": "a\\ud800b"}',
            '{"messages": [{"\\udfff": 1}]}',
        ):
            r = await c.put("/api/conversations/conv-surrogate", content=raw, headers=json_type)
            assert r.status_code == 400, r.text
            assert "lone surrogate" in r.json()["error"]["message"]
        assert (await c.get("/api/conversations/conv-surrogate", headers=A)).status_code == 404
        fine = '{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'  # a pair: text
        r = await c.put("/api/conversations/conv-surrogate", content=fine, headers=json_type)
        assert r.status_code == 200, r.text
        # Kept for its key only.
        assert (await c.get("/api/conversations/conv-surrogate", headers=B)).status_code == 404
