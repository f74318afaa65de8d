"""Stored responses: an embedded SQLite database, so that ``previous_response_id`` chains and
``GET /v1/responses/{id}`` outlive the request, and the server's restarts.

Each row is one response: its JSON, the input items the request gave, and the chat messages it
added (its input and its reply; system instructions aside, as OpenAI does not carry them over)
with a link to the response before it, so that a conversation is its chain of rows. Rows
belong to the API key that made them (an owner string derived from the key; ``""`` on a server
without keys): one key never reads, lists or deletes another's.

WAL mode lets readers go on while one request writes; every call runs on a worker thread with
its own short transaction, under one lock (SQLite serialises writers anyway). The schema
carries its version in ``PRAGMA user_version`` and is migrated on open. Rows older than
``max_age_days`` are deleted as new ones are written (at most once a minute).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ChatFmtError

#: Each migration takes the schema from its index to the next version.
_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE responses (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        previous_id TEXT,
        created_at REAL NOT NULL,
        response TEXT NOT NULL,
        input_items TEXT NOT NULL,
        conversation TEXT NOT NULL
    );
    CREATE INDEX responses_owner_created ON responses (owner, created_at);
    """,
    # Each row keeps only the messages it added (its input and its reply), not the whole
    # conversation again: a chain's storage grows with its length, not with its square.
    # Rows of version 1 keep their whole conversation in `conversation` (messages NULL).
    """
    ALTER TABLE responses ADD COLUMN messages TEXT;
    CREATE INDEX responses_created ON responses (created_at);
    """,
    # The web chat's conversations, as its page keeps them (messages, images, mode, system).
    """
    CREATE TABLE conversations (
        id TEXT NOT NULL,
        owner TEXT NOT NULL,
        title TEXT NOT NULL,
        updated_at REAL NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (owner, id)
    );
    CREATE INDEX conversations_updated ON conversations (updated_at);
    """,
)
#: How often (seconds) writes also delete rows past their age.
_PRUNE_EVERY = 60.0
#: The longest chain :meth:`ResponseStore.conversation` follows.
MAX_CHAIN = 10_000


def owner_of(api_key: str | None) -> str:
    """The owner string of a key: a hash, so the database never holds the key itself."""
    if api_key is None:
        return ""
    return hashlib.sha256(b"chatfmt-owner\0" + api_key.encode()).hexdigest()[:32]


class BrokenChain(ChatFmtError):
    """An earlier response of a conversation is gone (deleted, or past its age)."""


class StoredResponse:
    """One row: the response JSON and its input items."""

    __slots__ = ("id", "input_items", "response")

    def __init__(
        self, id: str, response: dict[str, Any], input_items: list[dict[str, Any]]
    ) -> None:
        self.id = id
        self.response = response
        self.input_items = input_items


class ResponseStore:
    """The responses database at ``path`` (``":memory:"`` for tests)."""

    def __init__(self, path: str | Path, *, max_age_days: float | None = 30.0) -> None:
        self.path = str(path)
        self.max_age_days = max_age_days
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                # Conversations are private: the file (and SQLite's -wal and -shm files, which
                # take its mode) readable by this user only.
                os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
                os.chmod(self.path, 0o600)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise ChatFmtError(
                f"cannot open the response store {self.path!r} ({exc}); give a writable path "
                "with --store, or --no-store to keep no responses"
            ) from None
        self._lock = threading.Lock()
        self._pruned = 0.0

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(_MIGRATIONS):
            raise sqlite3.DatabaseError(
                f"schema version {version} is newer than this chatfmt knows ({len(_MIGRATIONS)})"
            )
        for number in range(version, len(_MIGRATIONS)):
            # One script, one transaction: a migration and its version land together or not.
            script = "BEGIN IMMEDIATE;\n" + _MIGRATIONS[number]
            script += f"\nPRAGMA user_version = {number + 1};\nCOMMIT;"
            try:
                self._db.executescript(script)
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    # ==== Reads and writes (blocking: call them on a worker thread) ====

    def put(
        self,
        owner: str,
        response: dict[str, Any],
        input_items: Sequence[dict[str, Any]],
        messages: Sequence[dict[str, Any]],
    ) -> None:
        """Keep a response, its input items and the chat messages it added."""
        now = time.time()
        row = (
            response["id"],
            owner,
            response.get("previous_response_id"),
            now,
            json.dumps(response, ensure_ascii=False),
            json.dumps(list(input_items), ensure_ascii=False),
            "null",
            json.dumps(list(messages), ensure_ascii=False),
        )
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO responses (id, owner, previous_id, created_at, response, "
                    "input_items, conversation, messages) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                if self.max_age_days is not None and now - self._pruned > _PRUNE_EVERY:
                    cutoff = now - self.max_age_days * 86400
                    self._db.execute("DELETE FROM responses WHERE created_at < ?", (cutoff,))
                    self._pruned = now
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        """The owner's response ``response_id`` (``None``: none, or another owner's)."""
        with self._lock:
            row = self._db.execute(
                "SELECT response, input_items FROM responses WHERE id = ? AND owner = ?",
                (response_id, owner),
            ).fetchone()
        if row is None:
            return None
        return StoredResponse(response_id, json.loads(row[0]), json.loads(row[1]))

    def conversation(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The chat messages of the conversation up to and including ``response_id``
        (``None``: no such response of this owner); :class:`BrokenChain` when an earlier
        response of it is gone."""
        parts: list[list[dict[str, Any]]] = []
        current: str | None = response_id
        with self._lock:
            while current is not None and len(parts) < MAX_CHAIN:
                row = self._db.execute(
                    "SELECT previous_id, conversation, messages FROM responses "
                    "WHERE id = ? AND owner = ?",
                    (current, owner),
                ).fetchone()
                if row is None:
                    if not parts:
                        return None
                    raise BrokenChain(
                        f"response {current!r}, an earlier part of this conversation, is gone "
                        "(deleted or past its age); start a new conversation"
                    )
                previous, whole, added = row
                if added is None:  # a version-1 row: it holds the whole conversation
                    parts.append(json.loads(whole))
                    break
                parts.append(json.loads(added))
                current = previous
        return [m for part in reversed(parts) for m in part]

    # ==== The web chat's conversations ====

    def save_conversation(self, owner: str, cid: str, title: str, state: dict[str, Any]) -> None:
        """Keep (or replace) a web conversation of ``owner``."""
        now = time.time()
        with self._lock:
            self._db.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner, id) DO "
                "UPDATE SET title = excluded.title, updated_at = excluded.updated_at, "
                "state = excluded.state",
                (cid, owner, title, now, json.dumps(state, ensure_ascii=False)),
            )
            if self.max_age_days is not None:
                cutoff = now - self.max_age_days * 86400
                self._db.execute("DELETE FROM conversations WHERE updated_at < ?", (cutoff,))

    def conversations(self, owner: str, limit: int = 100) -> list[dict[str, Any]]:
        """``owner``'s web conversations, newest first: id, title, updated_at."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, title, updated_at FROM conversations WHERE owner = ? "
                "ORDER BY updated_at DESC LIMIT ?",
                (owner, limit),
            ).fetchall()
        return [{"id": i, "title": t, "updated_at": u} for i, t, u in rows]

    def load_conversation(self, owner: str, cid: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT state FROM conversations WHERE owner = ? AND id = ?", (owner, cid)
            ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def delete_conversation(self, owner: str, cid: str) -> bool:
        with self._lock:
            cursor = self._db.execute(
                "DELETE FROM conversations WHERE owner = ? AND id = ?", (owner, cid)
            )
        return cursor.rowcount > 0

    def delete(self, owner: str, response_id: str) -> bool:
        with self._lock:
            cursor = self._db.execute(
                "DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner)
            )
        return cursor.rowcount > 0

    def delete_owner(self, owner: str) -> int:
        """Delete everything one key stored (responses and web conversations); how many."""
        with self._lock:
            cursor = self._db.execute("DELETE FROM responses WHERE owner = ?", (owner,))
            gone = self._db.execute("DELETE FROM conversations WHERE owner = ?", (owner,))
        return cursor.rowcount + gone.rowcount

    def count(self) -> int:
        with self._lock:
            n: int = self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        return n

    def integrity(self) -> str:
        """``PRAGMA integrity_check``'s answer (``"ok"`` when the database is sound)."""
        with self._lock:
            answer: str = self._db.execute("PRAGMA integrity_check").fetchone()[0]
        return answer

    def close(self) -> None:
        with self._lock:
            self._db.close()
