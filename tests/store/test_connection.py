"""The store's SQLite file: private, in WAL mode, its schema versioned and migrated on open
(each migration in one transaction), and the errors that name the fix."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from chatfmt.errors import ChatFmtError, StoreError, StoreUnavailable
from chatfmt.store import SCHEMA_VERSION, NewResponse, ResponseStore
from chatfmt.store.connection import MIGRATIONS, Database

from .helpers import response, rows


def test_schema_is_versioned_and_reopening_keeps_the_data(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    store = ResponseStore(path)
    store.put(
        "o", NewResponse(response("resp_1"), [{"id": "msg_1"}], [{"role": "user", "content": "hi"}])
    )
    store.close()
    assert path.stat().st_mode & 0o777 == 0o600  # conversations are private
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again = ResponseStore(path)
    assert again.conversation("o", "resp_1") == [{"role": "user", "content": "hi"}]
    assert again.integrity() == "ok"


def test_a_newer_schema_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreUnavailable, match=r"newer than this chatfmt knows.*--no-store"):
        ResponseStore(path)


def test_an_unwritable_path_names_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ChatFmtError, match=r"cannot open the response store.*--store") as info:
        ResponseStore(blocker / "r.sqlite3")
    assert isinstance(info.value, StoreError) and info.value.reason  # type: ignore[attr-defined]


def test_version_3_rows_migrate_and_continue_by_rendering(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    with sqlite3.connect(path) as db:  # a database as chatfmt's schema 3 left it
        for migration in MIGRATIONS[:3]:
            for statement in migration:
                db.execute(statement)
        db.execute("PRAGMA user_version = 3")
        db.execute(
            "INSERT INTO responses (id, owner, previous_id, created_at, response, input_items,"
            " conversation, messages) VALUES ('r1', 'o', NULL, ?, '{}', '[]', 'null', ?)",
            (time.time(), '[{"role": "user", "content": "old"}]'),
        )
    store = ResponseStore(path)
    chain = store.chain("o", "r1")
    assert chain is not None and chain.messages[0]["content"] == "old" and chain.ids is None
    assert store.info()["schema_version"] == 6
    # Schema 5's index: one owner's web conversations in time order, for eviction.
    indexes = rows(store, "SELECT name FROM sqlite_master WHERE type = 'index'")
    assert ("conversations_owner_updated",) in indexes
    # And what each key stores, summed from the rows already there.
    size = len("{}") + len("[]") + len('[{"role": "user", "content": "old"}]') + len("null")
    assert rows(store, "SELECT owner, bytes FROM usage") == [("o", size)]


def test_a_failing_migration_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    with sqlite3.connect(path) as db:
        for migration in MIGRATIONS[:4]:
            for statement in migration:
                db.execute(statement)
        db.execute("PRAGMA user_version = 4")
        # In the way of migration 5: its index name is taken.
        db.execute("CREATE TABLE conversations_owner_updated (x)")
    with pytest.raises(StoreUnavailable, match="conversations_owner_updated"):
        ResponseStore(path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4


def test_the_transaction_helper_commits_or_rolls_back(tmp_path: Path) -> None:
    database = Database(tmp_path / "r.sqlite3")
    with database.transaction() as db:
        db.execute("INSERT INTO conversations VALUES ('c1', 'o', 't', 0, '{}')")
    with pytest.raises(RuntimeError), database.transaction() as db:
        db.execute("INSERT INTO conversations VALUES ('c2', 'o', 't', 0, '{}')")
        raise RuntimeError("half-way")
    with database.reading() as db:  # another connection: only what was committed
        assert db.execute("SELECT id FROM conversations").fetchall() == [("c1",)]
    with database.locked() as db:
        assert not db.in_transaction


def test_reads_do_not_wait_for_a_write(tmp_path: Path) -> None:
    """Reads have a connection of their own: a long write (an eviction, a checkpoint) holds
    up other writes only, and readers see what was committed before it."""
    database = Database(tmp_path / "r.sqlite3")
    with database.transaction() as db:
        db.execute("INSERT INTO conversations VALUES ('c1', 'o', 't', 0, '{}')")
        with database.reading() as reader:  # the write lock is held here
            assert reader.execute("SELECT id FROM conversations").fetchall() == []
    with database.reading() as reader:
        assert reader.execute("SELECT id FROM conversations").fetchall() == [("c1",)]
    database.close()
