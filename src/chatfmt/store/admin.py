"""What an operator does with a store (``chatfmt store``): look at what it holds, delete
everything one key stored, apply the limits now.

:func:`store_version` and :func:`read_info` read a store's file on a read-only connection, so
that ``chatfmt store info`` beside a running server changes nothing (no migration, no
checkpoint, no new mode); the others run on the store's own connection
(:class:`~.sqlite.ResponseStore`).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from ..errors import StoreError
from .connection import SCHEMA_VERSION, Database, read_only, schema_version, used_bytes
from .policy import Limits


def store_version(path: str | Path) -> int:
    """The schema version of the store at ``path``, read without changing the file;
    :class:`~chatfmt.errors.StoreError` when it is not one."""
    return read_only(path, lambda db: schema_version(db, path))


def read_info(path: str | Path) -> dict[str, Any]:
    """:func:`describe` of the store at ``path`` (of this schema version), on a read-only
    connection: the file is not changed."""

    def read(db: sqlite3.Connection) -> dict[str, Any]:
        version = schema_version(db, path)
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{path} has schema version {version}, this chatfmt reads {SCHEMA_VERSION}; "
                "chatfmt serve, store delete and store prune upgrade an older one"
            )
        return {"path": str(path), **describe(db)}

    return read_only(path, read)


def describe(db: sqlite3.Connection) -> dict[str, Any]:
    """Schema version, rows, owners with responses, bytes in use, the oldest row's time."""
    count, owners = db.execute("SELECT COUNT(*), COUNT(DISTINCT owner) FROM responses").fetchone()
    oldest = db.execute(
        "SELECT MIN(t) FROM (SELECT MIN(created_at) AS t FROM responses "
        "UNION ALL SELECT MIN(updated_at) FROM conversations)"
    ).fetchone()[0]
    return {
        "schema_version": db.execute("PRAGMA user_version").fetchone()[0],
        "responses": count,
        "conversations": db.execute("SELECT COUNT(*) FROM conversations").fetchone()[0],
        "owners_with_responses": owners,
        "bytes_used": used_bytes(db),
        "oldest": oldest,
    }


def delete_owner(database: Database, owner: str) -> tuple[int, int]:
    """Delete everything ``owner`` stored: how many responses and web conversations. The rows
    are overwritten in the file and the write-ahead log is emptied, so no copy of them stays
    on disk; :class:`~chatfmt.errors.StoreError` when a reader on another connection keeps the
    log from being emptied."""
    with database.transaction() as db:
        gone = db.execute("DELETE FROM responses WHERE owner = ?", (owner,)).rowcount
        webs = db.execute("DELETE FROM conversations WHERE owner = ?", (owner,)).rowcount
    with database.locked():
        for _ in range(3):
            if database.checkpoint():
                break
            time.sleep(0.5)
        else:
            raise StoreError(
                "the rows are deleted, but an older copy stays in the write-ahead log "
                f"({database.path}-wal) while another connection is reading the database; "
                "run the command again when it is idle"
            )
    return gone, webs


def prune(database: Database, limits: Limits) -> int:
    """Apply the age and size limits now; how many rows went."""
    with database.transaction() as db:
        before = _rows(db)
        limits.apply_age(db, time.time(), force=True)
        limits.fit_size(db)
        return before - _rows(db)


def _rows(db: sqlite3.Connection) -> int:
    n: int = db.execute(
        "SELECT (SELECT COUNT(*) FROM responses) + (SELECT COUNT(*) FROM conversations)"
    ).fetchone()[0]
    return n
