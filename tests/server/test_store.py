"""The response store on a real SQLite file: schema version, migrations on open, retention,
owners, and the errors that name the fix."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from chatfmt.errors import ChatFmtError
from chatfmt.server.store import ResponseStore, owner_of


def response(rid: str, previous: str | None = None) -> dict[str, object]:
    return {"id": rid, "object": "response", "previous_response_id": previous, "output": []}


def test_schema_is_versioned_and_reopening_keeps_the_data(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    store = ResponseStore(path)
    store.put("o", response("resp_1"), [{"id": "msg_1"}], [{"role": "user", "content": "hi"}])
    store.close()
    assert path.stat().st_mode & 0o777 == 0o600  # conversations are private
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again = ResponseStore(path)
    assert again.conversation("o", "resp_1") == [{"role": "user", "content": "hi"}]
    assert again.integrity() == "ok"


def test_a_newer_schema_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(ChatFmtError, match=r"newer than this chatfmt knows.*--no-store"):
        ResponseStore(path)


def test_owners_never_see_each_other(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3")
    alice, bob = owner_of("key-a"), owner_of("key-b")
    assert alice != bob and "key-a" not in alice
    store.put(alice, response("resp_a"), [], [])
    assert store.get(bob, "resp_a") is None and not store.delete(bob, "resp_a")
    assert store.get(alice, "resp_a") is not None
    assert store.delete_owner(alice) == (1, 0) and store.count() == 0


def test_old_rows_go_when_new_ones_come(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3", max_age_days=1)
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now - 2 * 86400)
    store.put("o", response("resp_old"), [], [])
    monkeypatch.setattr(time, "time", lambda: now)
    store.put("o", response("resp_new"), [], [])
    assert store.get("o", "resp_old") is None and store.get("o", "resp_new") is not None


def test_an_unwritable_path_names_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ChatFmtError, match=r"cannot open the response store.*--store"):
        ResponseStore(blocker / "r.sqlite3")


def test_a_chain_with_a_deleted_link_says_so(tmp_path: Path) -> None:
    from chatfmt.server.store import BrokenChain

    store = ResponseStore(tmp_path / "r.sqlite3")
    store.put("o", response("resp_1"), [], [{"role": "user", "content": "a"}])
    store.put("o", response("resp_2", "resp_1"), [], [{"role": "user", "content": "b"}])
    assert [m["content"] for m in store.conversation("o", "resp_2") or ()] == ["a", "b"]
    store.delete("o", "resp_1")
    with pytest.raises(BrokenChain, match=r"resp_1.*is gone"):
        store.conversation("o", "resp_2")


def test_exact_ids_are_kept_as_each_rows_addition(tmp_path: Path) -> None:
    from chatfmt.server.store import ExactIds

    store = ResponseStore(tmp_path / "r.sqlite3")
    say = [{"role": "user", "content": "x"}]
    store.put("o", response("r1"), [], say, ExactIds("v1", 0, [1, 2, 3, 70000], 2))
    store.put("o", response("r2", "r1"), [], say, ExactIds("v2", 4, [5, 6], 1))
    store.put("o", response("r3", "r2"), [], say, ExactIds("v3", 6, [7], 1))
    chain = store.chain("o", "r3")
    assert chain is not None and chain.ids == [1, 2, 3, 70000, 5, 6, 7] and chain.view == "v3"
    assert chain.reply == 1
    assert len(chain.messages) == 3
    # A row that starts over (base 0) is an anchor: what came before is not needed.
    store.put("o", response("r4", "r3"), [], say, ExactIds("v4", 0, [9, 9], 1))
    assert store.chain("o", "r4").ids == [9, 9]  # type: ignore[union-attr]
    # A row without ids (a reply its ids did not match) breaks the exact chain, not the
    # conversation; so does a row claiming more ids than its predecessor kept.
    store.put("o", response("r5", "r4"), [], say)
    store.put("o", response("r6", "r5"), [], say, ExactIds("v6", 3, [1], 1))
    store.put("o", response("r7", "r4"), [], say, ExactIds("v7", 5, [1], 1))
    store.put("o", response("r8", "r4"), [], say, ExactIds("v8", 1, [1], 1))  # too few
    for rid in ("r5", "r6", "r7", "r8"):
        chain = store.chain("o", rid)
        assert chain is not None and chain.ids is None and len(chain.messages) >= 5


def test_version_3_rows_migrate_and_continue_by_rendering(tmp_path: Path) -> None:
    from chatfmt.server import store as store_module

    path = tmp_path / "r.sqlite3"
    with sqlite3.connect(path) as db:  # a database as chatfmt's previous schema left it
        for script in store_module._MIGRATIONS[:3]:
            db.executescript(script)
        db.execute("PRAGMA user_version = 3")
        db.execute(
            "INSERT INTO responses (id, owner, previous_id, created_at, response, input_items,"
            " conversation, messages) VALUES ('r1', 'o', NULL, ?, '{}', '[]', 'null', ?)",
            (time.time(), '[{"role": "user", "content": "old"}]'),
        )
    store = ResponseStore(path)
    chain = store.chain("o", "r1")
    assert chain is not None and chain.messages[0]["content"] == "old" and chain.ids is None
    assert store.info()["schema_version"] == 4


def test_the_size_limit_deletes_the_oldest_first(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3", max_mb=0.25)
    text = "y" * 20_000
    for i in range(40):
        store.put("o", response(f"r{i}"), [], [{"role": "user", "content": text}])
    info = store.info()
    assert info["bytes_used"] <= 0.25 * 1024 * 1024
    assert 0 < info["responses"] < 40
    assert store.get("o", "r39") is not None and store.get("o", "r0") is None


def test_the_size_limit_takes_from_the_key_that_stores_the_most(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3", max_mb=0.5)
    alice, bob = owner_of("a"), owner_of("b")
    say = [{"role": "user", "content": "y" * 10_000}]
    for i in range(20):
        store.put(alice, response(f"a{i}"), [], say)
    for i in range(40):  # Bob writes twice as much, two responses a conversation
        store.put(bob, response(f"b{i}", f"b{i - 1}" if i % 2 else None), [], say)
    rows = store._db.execute("SELECT owner, id, previous_id FROM responses").fetchall()
    kept = {o: [i for oo, i, _ in rows if oo == o] for o in (alice, bob)}
    # Bob's oldest went, not all of Alice's; his newest conversation is whole.
    assert len(kept[alice]) >= 10 and "a19" in kept[alice], kept
    assert "b0" not in kept[bob] and {"b38", "b39"} <= set(kept[bob])
    # A conversation goes with its start: no response is left continuing a gone one.
    ids = {i for _, i, _ in rows}
    assert all(p is None or p in ids for _, _, p in rows)
    assert store.info()["bytes_used"] <= 0.5 * 1024 * 1024


def test_a_key_whose_one_conversation_outgrows_the_store_evicts_no_one(tmp_path: Path) -> None:
    from chatfmt.server.store import StoreFull

    store = ResponseStore(tmp_path / "r.sqlite3", max_mb=0.5)
    alice, bob = owner_of("a"), owner_of("b")
    say = [{"role": "user", "content": "y" * 10_000}]
    for i in range(10):
        store.put(bob, response(f"b{i}"), [], say)
    store.save_conversation(bob, "c1", "Bob's", {"messages": say})
    previous = None
    with pytest.raises(StoreFull, match="--store-max-mb"):
        for i in range(120):  # Alice continues one conversation, turn after turn
            store.put(alice, response(f"a{i}", previous), [], say)
            previous = f"a{i}"
    # Alice's conversation stopped being kept; Bob's data is all there.
    assert all(store.get(bob, f"b{i}") is not None for i in range(10))
    assert store.load_conversation(bob, "c1") is not None
    assert store.chain(alice, previous) is not None  # what was kept still continues
    assert store.info()["bytes_used"] <= 0.6 * 1024 * 1024


def test_a_keys_data_deleted_leaves_no_copy_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    store = ResponseStore(path)
    alice, bob = owner_of("key-a"), owner_of("key-b")
    secret = "alice-secret-" + "s" * 64
    store.put(alice, response("ra"), [], [{"role": "user", "content": secret}])
    store.save_conversation(alice, "c1", "t", {"messages": [{"content": secret}]})
    store.put(bob, response("rb"), [], [{"role": "user", "content": "bob's"}])
    assert store.delete_owner(alice) == (1, 1)
    assert store.get(bob, "rb") is not None
    on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert secret.encode() not in on_disk and b"bob's" in on_disk
    # Set on the connection, also where SQLite's build leaves it off (this one has it on).
    assert store._db.execute("PRAGMA secure_delete").fetchone()[0] == 1


def test_prune_applies_the_age_limit_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3", max_age_days=1)
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now - 2 * 86400)
    store.put("o", response("r_old"), [], [])
    store.save_conversation("o", "c_old", "t", {})
    monkeypatch.setattr(time, "time", lambda: now)
    assert store.prune() == 2 and store.info()["responses"] == 0
