"""The web chat's conversations in SQLite: one row per (owner, id), the page's state as JSON.

The functions take the connection in the state they need (a transaction for :func:`save`);
:class:`~.sqlite.ResponseStore` takes the lock and opens the transaction.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from .connection import CONVERSATION_BYTES

#: What a conversation row holds, in bytes (SQL).
ROW_BYTES = CONVERSATION_BYTES.format(row="")


def save(
    db: sqlite3.Connection, owner: str, cid: str, title: str, state: dict[str, Any], now: float
) -> None:
    db.execute(
        "INSERT INTO conversations VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner, id) "
        "DO UPDATE SET title = excluded.title, updated_at = excluded.updated_at, "
        "state = excluded.state",
        (cid, owner, title, now, json.dumps(state, ensure_ascii=False)),
    )


def listing(db: sqlite3.Connection, owner: str, limit: int) -> list[dict[str, Any]]:
    """Newest first, along the (owner, updated_at) index."""
    rows = db.execute(
        "SELECT id, title, updated_at FROM conversations WHERE owner = ? "
        "ORDER BY updated_at DESC LIMIT ?",
        (owner, limit),
    ).fetchall()
    return [{"id": i, "title": t, "updated_at": u} for i, t, u in rows]


def load(db: sqlite3.Connection, owner: str, cid: str) -> dict[str, Any] | None:
    row = db.execute(
        "SELECT state FROM conversations WHERE owner = ? AND id = ?", (owner, cid)
    ).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def delete(db: sqlite3.Connection, owner: str, cid: str) -> bool:
    cursor = db.execute("DELETE FROM conversations WHERE owner = ? AND id = ?", (owner, cid))
    return cursor.rowcount > 0
