"""What the store tests share: a response body, the store's files on disk, SQL on the store's
own tables (either backend)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chatfmt.store import ResponseStore

#: The ``make_store`` fixture (tests/store/conftest.py): ``make_store(**limits)`` opens the
#: test's store, a SQLite ``ResponseStore`` or a ``PostgresStore``.
MakeStore = Callable[..., Any]


def response(rid: str, previous: str | None = None) -> dict[str, Any]:
    return {"id": rid, "object": "response", "previous_response_id": previous, "output": []}


def on_disk(path: Path) -> int:
    """The bytes of the store's files: the database, its write-ahead log and its index."""
    files = (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
    return sum(f.stat().st_size for f in files if f.exists())


def rows(store: Any, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """``sql`` (``?`` placeholders) on a connection of its own to the store's database (what
    is committed): the SQLite file, or the PostgreSQL database with the store's schema first
    on the search path (so that ``responses`` names its table)."""
    if isinstance(store, ResponseStore):
        with sqlite3.connect(store.path) as db:
            return db.execute(sql, args).fetchall()
    import psycopg

    with psycopg.connect(store._url, autocommit=True) as conn:
        conn.execute("SET search_path TO chatfmt, public")
        cursor = conn.execute(sql.replace("?", "%s"), args or None)
        return cursor.fetchall() if cursor.description is not None else []
