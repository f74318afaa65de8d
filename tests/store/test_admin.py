"""What an operator does: delete a key's data with no copy left on disk, prune now, look at a
store without changing it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from chatfmt.errors import StoreError
from chatfmt.store import NewResponse, ResponseStore, owner_of, read_info, store_version

from .helpers import MakeStore, response, rows


def test_a_keys_data_deleted_leaves_the_others(make_store: MakeStore) -> None:
    store = make_store()
    alice, bob = owner_of("key-a"), owner_of("key-b")
    for i in range(3):
        store.put(alice, NewResponse(response(f"ra{i}", f"ra{i - 1}" if i else None), [], []))
    store.save_conversation(alice, "c1", "t", {})
    store.save_conversation(bob, "c1", "t", {})
    store.put(bob, NewResponse(response("rb"), [], []))
    assert store.delete_owner(alice) == (3, 1) and store.delete_owner(alice) == (0, 0)
    assert store.get(bob, "rb") is not None and store.load_conversation(bob, "c1") == {}
    assert store.info()["owners_with_responses"] == 1
    assert rows(store, "SELECT owner FROM usage") == [(bob,)]


def test_a_keys_data_deleted_leaves_no_copy_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    store = ResponseStore(path)
    alice, bob = owner_of("key-a"), owner_of("key-b")
    secret = "alice-secret-" + "s" * 64
    store.put(alice, NewResponse(response("ra"), [], [{"role": "user", "content": secret}]))
    store.save_conversation(alice, "c1", "t", {"messages": [{"content": secret}]})
    store.put(bob, NewResponse(response("rb"), [], [{"role": "user", "content": "bob's"}]))
    assert store.delete_owner(alice) == (1, 1)
    assert store.get(bob, "rb") is not None
    on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert secret.encode() not in on_disk and b"bob's" in on_disk
    # Set on the connection, also where SQLite's build leaves it off (this one has it on).
    assert store._database.db.execute("PRAGMA secure_delete").fetchone()[0] == 1


def test_prune_applies_the_age_limit_now(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(max_age_days=1)
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now - 2 * 86400)
    store.put("o", NewResponse(response("r_old"), [], []))
    store.save_conversation("o", "c_old", "t", {})
    monkeypatch.setattr(time, "time", lambda: now)
    assert store.prune() == 2 and store.info()["responses"] == 0


def test_info_reads_without_changing_the_file(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    store = ResponseStore(path)
    store.put("o", NewResponse(response("r1"), [], []))
    store.save_conversation("p", "c1", "t", {})
    before = path.read_bytes()
    shown = read_info(path)
    assert shown["responses"] == 1 and shown["conversations"] == 1
    assert shown["owners_with_responses"] == 1 and store_version(path) == 6
    assert path.read_bytes() == before
    assert store.info()["max_mb"] is None and store.info()["disk_bytes"] > 0
    store.close()
    plain = tmp_path / "plain.sqlite3"
    with sqlite3.connect(plain) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="not a chatfmt response store"):
        store_version(plain)
