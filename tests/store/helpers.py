"""What the store tests share: a response body, the store's files on disk."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from chatfmt.store import ResponseStore


def response(rid: str, previous: str | None = None) -> dict[str, Any]:
    return {"id": rid, "object": "response", "previous_response_id": previous, "output": []}


def on_disk(path: Path) -> int:
    """The bytes of the store's files: the database, its write-ahead log and its index."""
    files = (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
    return sum(f.stat().st_size for f in files if f.exists())


def rows(store: ResponseStore, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """``sql`` on a connection of its own to the store's file (what is committed)."""
    with sqlite3.connect(store.path) as db:
        return db.execute(sql, args).fetchall()
