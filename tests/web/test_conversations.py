"""The web chat's conversations kept on the server: save, list, reopen, delete, each key its
own, and the checks every page route has."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")

from chatfmt.store import ResponseStore
from chatfmt.tokenizers.base import Tokenizer

from .helpers import build_app

pytestmark = pytest.mark.anyio

CID = "conv-kept-00001"
STATE = {
    "messages": [
        {"role": "user", "content": "What is   the weather\\nin Paris? " + "x" * 100},
        {"role": "assistant", "content": "Sunny."},
    ],
    "images": {},
    "ok": {},
    "mode": "chat",
    "system": "Be brief.",
}


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("qwen2.5")


def client(app: Any, key: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", headers=headers
    )


async def test_save_list_open_delete(tok: Tokenizer) -> None:
    app, _ = build_app(tok, store=ResponseStore(":memory:"))
    async with client(app) as c:
        assert (await c.get("/api/conversations")).json() == {"stored": True, "conversations": []}
        r = await c.put(f"/api/conversations/{CID}", json=STATE)
        assert r.status_code == 200, r.text
        [row] = (await c.get("/api/conversations")).json()["conversations"]
        assert row["id"] == CID and row["title"].startswith("What is the weather\\nin Paris?")
        assert len(row["title"]) == 80 and row["title"].endswith("…")
        opened = (await c.get(f"/api/conversations/{CID}")).json()
        assert opened == {"id": CID, **STATE}
        assert (await c.delete(f"/api/conversations/{CID}")).json()["deleted"] is True
        assert (await c.get(f"/api/conversations/{CID}")).status_code == 404
        assert (await c.delete(f"/api/conversations/{CID}")).status_code == 404


async def test_a_title_is_one_line_of_printable_text_on_either_store(
    tok: Tokenizer, postgres_server: Any
) -> None:
    """Line breaks and control characters in the first message (a NUL, which PostgreSQL's
    text cannot hold: the save was a 500 there) become single spaces in the title."""
    from chatfmt.store import PostgresStore

    state = {**STATE, "messages": [{"role": "user", "content": "Hi\x00 there\n\tyou"}]}
    for store in (ResponseStore(":memory:"), PostgresStore(postgres_server.database())):
        app, _ = build_app(tok, store=store)
        async with client(app) as c:
            r = await c.put(f"/api/conversations/{CID}", json=state)
            assert r.status_code == 200, r.text
            [row] = (await c.get("/api/conversations")).json()["conversations"]
            assert row["title"] == "Hi there you"
            assert (await c.get(f"/api/conversations/{CID}")).json() == {"id": CID, **state}
        store.close()


async def test_each_key_sees_its_own(tok: Tokenizer) -> None:
    app, _ = build_app(tok, store=ResponseStore(":memory:"), api_key=["key-a", "key-b"])
    async with client(app, "key-a") as a, client(app, "key-b") as b, client(app) as anon:
        assert (await a.put(f"/api/conversations/{CID}", json=STATE)).status_code == 200
        assert (await b.get("/api/conversations")).json()["conversations"] == []
        assert (await b.get(f"/api/conversations/{CID}")).status_code == 404
        assert (await b.delete(f"/api/conversations/{CID}")).status_code == 404
        assert (await anon.get("/api/conversations")).status_code == 401
        assert len((await a.get("/api/conversations")).json()["conversations"]) == 1


async def test_checks(tok: Tokenizer) -> None:
    app, _ = build_app(tok, store=ResponseStore(":memory:"))
    async with client(app) as c:
        assert (await c.put("/api/conversations/bad!", json=STATE)).status_code == 400
        r = await c.put(
            f"/api/conversations/{CID}", json=STATE, headers={"Origin": "http://evil.example"}
        )
        assert r.status_code == 403
        r = await c.put(
            f"/api/conversations/{CID}", content=b"{}", headers={"Content-Type": "text/plain"}
        )
        assert r.status_code == 415
        r = await c.put(f"/api/conversations/{CID}", json={"messages": "nope"})
        assert r.status_code == 400
        assert (
            await c.get("/api/conversations", headers={"Host": "evil.example"})
        ).status_code == 403
    bare, _ = build_app(tok)
    async with client(bare) as c:
        assert (await c.get("/api/conversations")).json() == {"stored": False, "conversations": []}
        assert (await c.put(f"/api/conversations/{CID}", json=STATE)).status_code == 404
