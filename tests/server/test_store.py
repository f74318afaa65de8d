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
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3
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
    assert store.delete_owner(alice) == 1 and store.count() == 0


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
