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
``max_age_days`` are deleted as new ones are written (at most once a minute); past ``max_mb``
space is freed from the key that stores the most (see :meth:`ResponseStore._fit_size`).
Deleted rows are overwritten on disk (``secure_delete``), so a key's data deleted is gone, not
left in free pages.

A row also keeps the exact token ids of its exchange (:class:`ExactIds`): the prompt the engine
saw and the reply it produced, as the part added to the previous response's ids, so that a
continued conversation is sent to the engine as the very ids it has cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ChatFmtError

_T = TypeVar("_T")

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
    # The exact ids of each exchange (ExactIds); NULL in older rows (continued by rendering).
    """
    ALTER TABLE responses ADD COLUMN view TEXT;
    ALTER TABLE responses ADD COLUMN ids_base INTEGER;
    ALTER TABLE responses ADD COLUMN ids BLOB;
    ALTER TABLE responses ADD COLUMN reply INTEGER;
    CREATE INDEX responses_previous ON responses (previous_id);
    """,
)
#: How often (seconds) writes also delete rows past their age.
_PRUNE_EVERY = 60.0
#: The longest chain :meth:`ResponseStore.conversation` follows.
MAX_CHAIN = 10_000
#: What a response row holds, in bytes (SQL).
_ROW_BYTES = (
    "length(CAST(response AS BLOB)) + length(CAST(input_items AS BLOB)) + "
    "COALESCE(length(CAST(messages AS BLOB)), 0) + "
    "COALESCE(length(CAST(conversation AS BLOB)), 0) + COALESCE(length(ids), 0)"
)


#: The schema version this chatfmt writes.
SCHEMA_VERSION = len(_MIGRATIONS)


def store_version(path: str | Path) -> int:
    """The schema version of the response store at ``path``, read without changing the file;
    :class:`~chatfmt.errors.ChatFmtError` when it is not one."""
    return _read_only(path, lambda db: _version(db, path))


def read_info(path: str | Path) -> dict[str, Any]:
    """:meth:`ResponseStore.info` of the store at ``path`` (of this schema version), read on a
    read-only connection: the file is not changed (no migration, no checkpoint)."""

    def describe(db: sqlite3.Connection) -> dict[str, Any]:
        version = _version(db, path)
        if version != SCHEMA_VERSION:
            raise ChatFmtError(
                f"{path} has schema version {version}, this chatfmt reads {SCHEMA_VERSION}; "
                "chatfmt serve, store delete and store prune upgrade an older one"
            )
        return {"path": str(path), **_describe(db)}

    return _read_only(path, describe)


def _read_only(path: str | Path, read: Callable[[sqlite3.Connection], _T]) -> _T:
    try:
        db = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
        try:
            return read(db)
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise ChatFmtError(f"{path} is not a readable SQLite database ({exc})") from None


def _version(db: sqlite3.Connection, path: str | Path) -> int:
    version: int = db.execute("PRAGMA user_version").fetchone()[0]
    table = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'responses'"
    ).fetchone()
    if table is None or version < 1:
        raise ChatFmtError(f"{path} is not a chatfmt response store")
    return version


def _used_bytes(db: sqlite3.Connection) -> int:
    page_size, pages, free = (
        db.execute(f"PRAGMA {name}").fetchone()[0]
        for name in ("page_size", "page_count", "freelist_count")
    )
    return int(page_size * (pages - free))


def _describe(db: sqlite3.Connection) -> dict[str, Any]:
    responses, owners = db.execute(
        "SELECT COUNT(*), COUNT(DISTINCT owner) FROM responses"
    ).fetchone()
    oldest = db.execute(
        "SELECT MIN(t) FROM (SELECT MIN(created_at) AS t FROM responses "
        "UNION ALL SELECT MIN(updated_at) FROM conversations)"
    ).fetchone()[0]
    return {
        "schema_version": db.execute("PRAGMA user_version").fetchone()[0],
        "responses": responses,
        "conversations": db.execute("SELECT COUNT(*) FROM conversations").fetchone()[0],
        "owners_with_responses": owners,
        "bytes_used": _used_bytes(db),
        "oldest": oldest,
    }


def owner_of(api_key: str | None) -> str:
    """The owner string of a key: a hash, so the database never holds the key itself."""
    if api_key is None:
        return ""
    return hashlib.sha256(b"chatfmt-owner\0" + api_key.encode()).hexdigest()[:32]


class BrokenChain(ChatFmtError):
    """An earlier response of a conversation is gone (deleted, or past its age)."""


class StoreUnavailable(ChatFmtError):
    """The store's file cannot be opened (or migrated); ``reason`` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"cannot open the response store {path!r} ({reason}); give a writable path with "
            "--store, or --no-store to keep no responses"
        )
        self.path, self.reason = path, reason


class StoreFull(ChatFmtError):
    """Keeping this would take the store past its size limit, and the key writing it already
    stores the most: it is not kept (the other keys' data is not evicted for it)."""


@dataclass(frozen=True, slots=True)
class ExactIds:
    """The ids of one stored exchange, kept so that continuing it re-uses them.

    ``view`` names the prompt as chatfmt renders the conversation before the reply (a digest of
    its ids): a continuation whose render starts with that same view may put the exact ids in
    its place. ``base`` ids come from the previous response's exact ids (0: none, this row
    holds all of them); ``tail`` is the rest: the new prompt ids, then the reply's. The last
    ``reply`` ids are the reply (a forced call's opening included).
    """

    view: str
    base: int
    tail: Sequence[int]
    reply: int


@dataclass(frozen=True, slots=True)
class Chain:
    """A stored conversation up to one response: its chat messages, and the exact ids of the
    whole exchange so far with the view of its last prompt (``None``: not kept)."""

    messages: list[dict[str, Any]]
    ids: list[int] | None = None
    view: str | None = None
    reply: int = 0


def view_of(ids: Sequence[int]) -> str:
    """The digest that names a rendered prompt (see :class:`ExactIds`)."""
    return hashlib.sha256(_pack(ids)).hexdigest()


def _pack(ids: Sequence[int]) -> bytes:
    packed = array("I", ids)
    if sys.byteorder == "big":  # the file is the same on every machine: little-endian
        packed.byteswap()
    return packed.tobytes()


def _unpack(blob: bytes) -> list[int]:
    ids = array("I")
    ids.frombytes(blob)
    if sys.byteorder == "big":
        ids.byteswap()
    return ids.tolist()


def _exact_ids(pieces: list[tuple[int, bytes]]) -> list[int] | None:
    """A chain's exact ids from its rows' pieces (newest first, ending at an anchor)."""
    if not pieces or pieces[-1][0] != 0:
        return None
    ids: list[int] = []
    for base, tail in reversed(pieces):
        if base != len(ids):
            return None  # each row continues its predecessor's whole exchange
        ids += _unpack(tail)
    return ids


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

    def __init__(
        self,
        path: str | Path,
        *,
        max_age_days: float | None = 30.0,
        max_mb: float | None = None,
    ) -> None:
        self.path = str(path)
        self.max_age_days = max_age_days
        self.max_mb = max_mb
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
            self._db.execute("PRAGMA secure_delete=ON")
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(self.path, str(exc)) from None
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
        exact: ExactIds | None = None,
    ) -> None:
        """Keep a response, its input items, the chat messages it added and, when known, the
        exact ids of its exchange."""
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
            None if exact is None else exact.view,
            None if exact is None else exact.base,
            None if exact is None else _pack(exact.tail),
            None if exact is None else exact.reply,
        )
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO responses (id, owner, previous_id, created_at, response, "
                    "input_items, conversation, messages, view, ids_base, ids, reply) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                if self.max_age_days is not None and now - self._pruned > _PRUNE_EVERY:
                    cutoff = now - self.max_age_days * 86400
                    self._db.execute("DELETE FROM responses WHERE created_at < ?", (cutoff,))
                    self._pruned = now
                self._fit_size(writer=owner, keep=response["id"])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _used_bytes(self) -> int:
        return _used_bytes(self._db)

    def _fit_size(
        self,
        writer: str | None = None,
        keep: str | None = None,
        keep_conversation: tuple[str, str] | None = None,
    ) -> None:
        """Over ``max_mb``, free a tenth of it more than the excess (so that this runs once per
        tenth of growth), taking from the key that stores the most: its oldest web
        conversation or its oldest response together with the responses that continue it (a
        conversation without its start cannot be continued). The response just written and
        the responses it continues (``keep``), and the web conversation just saved, stay;
        when the ``writer`` stores the most and has nothing else, :class:`StoreFull`."""
        if self.max_mb is None:
            return
        limit = self.max_mb * 1024 * 1024
        to_free = self._used_bytes() - limit
        if to_free <= 0:
            return
        to_free += limit / 10
        db = self._db
        usage: dict[str, int] = dict(
            db.execute(
                f"SELECT owner, SUM(n) FROM (SELECT owner, {_ROW_BYTES} AS n FROM responses "
                "UNION ALL SELECT owner, length(CAST(state AS BLOB)) FROM conversations) "
                "GROUP BY owner"
            ).fetchall()
        )
        protected = set(self._ancestry(keep)) if keep is not None else set()
        while to_free > 0 and usage:
            owner = max(usage, key=usage.__getitem__)
            freed = self._evict_oldest(owner, protected, keep_conversation)
            if freed == 0 and owner == writer:
                raise StoreFull(
                    f"the response store is at its size limit ({self.max_mb:g} MB) and this "
                    "key stores the most, all of it the conversation being written; it was "
                    "not kept. Start a new conversation, or raise --store-max-mb"
                )
            if freed == 0:
                del usage[owner]  # nothing of it may go
            else:
                usage[owner] -= freed
                to_free -= freed

    def _ancestry(self, response_id: str) -> list[str]:
        """``response_id`` and the responses it continues."""
        chain: list[str] = []
        current: str | None = response_id
        while current is not None and len(chain) < MAX_CHAIN:
            chain.append(current)
            row = self._db.execute(
                "SELECT previous_id FROM responses WHERE id = ?", (current,)
            ).fetchone()
            current = None if row is None else row[0]
        return chain

    def _evict_oldest(
        self, owner: str, protected: set[str], conversation: tuple[str, str] | None
    ) -> int:
        """Delete ``owner``'s oldest deletable item; the bytes it held (0: none)."""
        db = self._db
        kept_web = (
            conversation[1] if conversation is not None and conversation[0] == owner else None
        )
        responses = db.execute(
            "SELECT id, created_at FROM responses WHERE owner = ? ORDER BY created_at, rowid "
            "LIMIT ?",
            (owner, len(protected) + 1),
        ).fetchall()
        response = next((r for r in responses if r[0] not in protected), None)
        web = db.execute(
            "SELECT id, updated_at FROM conversations WHERE owner = ? AND id IS NOT ? "
            "ORDER BY updated_at LIMIT 1",
            (owner, kept_web),
        ).fetchone()
        if web is not None and (response is None or web[1] < response[1]):
            (size,) = db.execute(
                "SELECT length(CAST(state AS BLOB)) FROM conversations WHERE owner = ? AND id = ?",
                (owner, web[0]),
            ).fetchone()
            db.execute("DELETE FROM conversations WHERE owner = ? AND id = ?", (owner, web[0]))
            return int(size) or 1
        if response is None:
            return 0
        # The response and those continuing it, found along the previous_id index.
        doomed = (
            "WITH RECURSIVE doomed(id) AS (SELECT ? UNION SELECT r.id FROM responses r "
            "JOIN doomed d ON r.previous_id = d.id) "
        )
        (size,) = db.execute(
            f"{doomed}SELECT COALESCE(SUM({_ROW_BYTES}), 0) FROM responses "
            "WHERE id IN (SELECT id FROM doomed)",
            (response[0],),
        ).fetchone()
        db.execute(
            f"{doomed}DELETE FROM responses WHERE id IN (SELECT id FROM doomed)", (response[0],)
        )
        return int(size) or 1

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
        chain = self.chain(owner, response_id)
        return None if chain is None else chain.messages

    def chain(self, owner: str, response_id: str) -> Chain | None:
        """The conversation up to and including ``response_id`` (``None``: no such response
        of this owner), with its exact ids where every row they come from kept them;
        :class:`BrokenChain` when an earlier response of it is gone."""
        parts: list[list[dict[str, Any]]] = []
        pieces: list[tuple[int, bytes]] = []  # (base, tail) from the newest back to an anchor
        view: str | None = None
        reply = 0
        exact = True  # the ids are still being followed back
        current: str | None = response_id
        with self._lock:
            while current is not None and len(parts) < MAX_CHAIN:
                row = self._db.execute(
                    "SELECT previous_id, conversation, messages, view, ids_base, ids, reply "
                    "FROM responses WHERE id = ? AND owner = ?",
                    (current, owner),
                ).fetchone()
                if row is None:
                    if not parts:
                        return None
                    raise BrokenChain(
                        f"response {current!r}, an earlier part of this conversation, is gone "
                        "(deleted or past its age); start a new conversation"
                    )
                previous, whole, added, row_view, base, tail, row_reply = row
                if not parts:
                    view, reply = row_view, row_reply or 0
                if exact:
                    if tail is None or base is None:
                        pieces, exact = [], False  # not kept: the conversation is rendered
                    else:
                        pieces.append((base, tail))
                        exact = base > 0
                if added is None:  # a version-1 row: it holds the whole conversation
                    parts.append(json.loads(whole))
                    break
                parts.append(json.loads(added))
                current = previous
        messages = [m for part in reversed(parts) for m in part]
        ids = _exact_ids(pieces)
        if ids is None or view is None or not 0 <= reply <= len(ids):
            return Chain(messages)
        return Chain(messages, ids, view, reply)

    # ==== The web chat's conversations ====

    def save_conversation(self, owner: str, cid: str, title: str, state: dict[str, Any]) -> None:
        """Keep (or replace) a web conversation of ``owner``."""
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO conversations VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner, id) "
                    "DO UPDATE SET title = excluded.title, updated_at = excluded.updated_at, "
                    "state = excluded.state",
                    (cid, owner, title, now, json.dumps(state, ensure_ascii=False)),
                )
                if self.max_age_days is not None:
                    cutoff = now - self.max_age_days * 86400
                    self._db.execute("DELETE FROM conversations WHERE updated_at < ?", (cutoff,))
                self._fit_size(writer=owner, keep_conversation=(owner, cid))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

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

    def delete_owner(self, owner: str) -> tuple[int, int]:
        """Delete everything one key stored: how many responses and web conversations. The
        rows are overwritten in the file and the write-ahead log is emptied, so no copy of
        them stays on disk."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                responses = self._db.execute("DELETE FROM responses WHERE owner = ?", (owner,))
                conversations = self._db.execute(
                    "DELETE FROM conversations WHERE owner = ?", (owner,)
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            for _ in range(3):
                busy = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                if not busy:
                    break
                time.sleep(0.5)
            else:
                raise ChatFmtError(
                    "the rows are deleted, but an older copy stays in the write-ahead log "
                    f"({self.path}-wal) while another connection is reading the database; run "
                    "the command again when it is idle"
                )
        return responses.rowcount, conversations.rowcount

    def count(self) -> int:
        with self._lock:
            n: int = self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        return n

    def info(self) -> dict[str, Any]:
        """What the store holds: schema version, rows, owners, bytes in use; its limits."""
        with self._lock:
            held = _describe(self._db)
        return {"path": self.path, **held, "max_age_days": self.max_age_days, "max_mb": self.max_mb}

    def prune(self) -> int:
        """Apply the age and size limits now; how many rows went."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                before = self._rows()
                now = time.time()
                if self.max_age_days is not None:
                    cutoff = now - self.max_age_days * 86400
                    self._db.execute("DELETE FROM responses WHERE created_at < ?", (cutoff,))
                    self._db.execute("DELETE FROM conversations WHERE updated_at < ?", (cutoff,))
                self._fit_size()
                gone = before - self._rows()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._pruned = now
            return gone

    def _rows(self) -> int:
        n: int = self._db.execute(
            "SELECT (SELECT COUNT(*) FROM responses) + (SELECT COUNT(*) FROM conversations)"
        ).fetchone()[0]
        return n

    def integrity(self) -> str:
        """``PRAGMA integrity_check``'s answer (``"ok"`` when the database is sound)."""
        with self._lock:
            answer: str = self._db.execute("PRAGMA integrity_check").fetchone()[0]
        return answer

    def close(self) -> None:
        with self._lock:
            self._db.close()
