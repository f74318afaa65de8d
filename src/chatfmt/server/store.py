"""Stored responses: an embedded SQLite database, so that ``previous_response_id`` chains and
``GET /v1/responses/{id}`` outlive the request, and the server's restarts.

Each row is one response: its JSON, the input items the request gave, and the whole chat
conversation after it (system instructions aside, as OpenAI does not carry them over), so that
continuing it is one lookup. Rows belong to the API key that made them (an owner string derived
from the key; ``""`` on a server without keys): one key never reads, lists or deletes another's.

WAL mode lets readers go on while one request writes; every call runs on a worker thread with
its own short transaction, under one lock (SQLite serialises writers anyway). The schema
carries its version in ``PRAGMA user_version`` and is migrated on open. Rows older than
``max_age_days`` are deleted as new ones are written.
"""

from __future__ import annotations

import hashlib
import json
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
)


def owner_of(api_key: str | None) -> str:
    """The owner string of a key: a hash, so the database never holds the key itself."""
    if api_key is None:
        return ""
    return hashlib.sha256(b"chatfmt-owner\0" + api_key.encode()).hexdigest()[:32]


class StoredResponse:
    """One row: the response JSON, its input items, the conversation after it."""

    __slots__ = ("conversation", "id", "input_items", "response")

    def __init__(
        self,
        id: str,
        response: dict[str, Any],
        input_items: list[dict[str, Any]],
        conversation: list[dict[str, Any]],
    ) -> None:
        self.id = id
        self.response = response
        self.input_items = input_items
        self.conversation = conversation


class ResponseStore:
    """The responses database at ``path`` (``":memory:"`` for tests)."""

    def __init__(self, path: str | Path, *, max_age_days: float | None = 30.0) -> None:
        self.path = str(path)
        self.max_age_days = max_age_days
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
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
        conversation: Sequence[dict[str, Any]],
    ) -> None:
        now = time.time()
        row = (
            response["id"],
            owner,
            response.get("previous_response_id"),
            now,
            json.dumps(response, ensure_ascii=False),
            json.dumps(list(input_items), ensure_ascii=False),
            json.dumps(list(conversation), ensure_ascii=False),
        )
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)", row)
                if self.max_age_days is not None:
                    cutoff = now - self.max_age_days * 86400
                    self._db.execute("DELETE FROM responses WHERE created_at < ?", (cutoff,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        """The owner's response ``response_id`` (``None``: none, or another owner's)."""
        with self._lock:
            row = self._db.execute(
                "SELECT response, input_items, conversation FROM responses "
                "WHERE id = ? AND owner = ?",
                (response_id, owner),
            ).fetchone()
        if row is None:
            return None
        return StoredResponse(response_id, *(json.loads(c) for c in row))

    def delete(self, owner: str, response_id: str) -> bool:
        with self._lock:
            cursor = self._db.execute(
                "DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner)
            )
        return cursor.rowcount > 0

    def delete_owner(self, owner: str) -> int:
        """Delete everything one key stored; the number of responses deleted."""
        with self._lock:
            cursor = self._db.execute("DELETE FROM responses WHERE owner = ?", (owner,))
        return cursor.rowcount

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
