"""The SQLite file under the store: opened private to its user, in WAL mode, its schema
versioned in ``PRAGMA user_version`` and migrated on open; and the one transaction helper
every write goes through.

Two connections serve the store, each under a lock of its own: one writes (SQLite serialises
writers anyway), one reads, each read a snapshot of its own, so that reads never wait for a
write (an eviction, a checkpoint) and see only committed data (WAL mode). An in-memory
database has one connection for both. Deleted rows are overwritten on disk
(``secure_delete``), so a key's data deleted is gone, not left in free pages.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from ..errors import StoreError, StoreUnavailable

_T = TypeVar("_T")

#: What a response row holds, in bytes (SQL over its columns; ``row``: a prefix, e.g. ``OLD.``).
RESPONSE_BYTES = (
    "length(CAST({row}response AS BLOB)) + length(CAST({row}input_items AS BLOB)) + "
    "COALESCE(length(CAST({row}messages AS BLOB)), 0) + "
    "COALESCE(length(CAST({row}conversation AS BLOB)), 0) + COALESCE(length({row}ids), 0)"
)
#: What a web conversation row holds, in bytes (SQL).
CONVERSATION_BYTES = "length(CAST({row}state AS BLOB))"

#: Each migration takes the schema from its index to the next version; a migration and its
#: version land together, in one transaction.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE responses (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            previous_id TEXT,
            created_at REAL NOT NULL,
            response TEXT NOT NULL,
            input_items TEXT NOT NULL,
            conversation TEXT NOT NULL
        )""",
        "CREATE INDEX responses_owner_created ON responses (owner, created_at)",
    ),
    # Each row keeps only the messages it added (its input and its reply), not the whole
    # conversation again: a chain's storage grows with its length, not with its square.
    # Rows of version 1 keep their whole conversation in `conversation` (messages NULL).
    (
        "ALTER TABLE responses ADD COLUMN messages TEXT",
        "CREATE INDEX responses_created ON responses (created_at)",
    ),
    # The web chat's conversations, as its page keeps them (messages, images, mode, system).
    (
        """CREATE TABLE conversations (
            id TEXT NOT NULL,
            owner TEXT NOT NULL,
            title TEXT NOT NULL,
            updated_at REAL NOT NULL,
            state TEXT NOT NULL,
            PRIMARY KEY (owner, id)
        )""",
        "CREATE INDEX conversations_updated ON conversations (updated_at)",
    ),
    # The exact ids of each exchange (ExactIds); NULL in older rows (continued by rendering).
    (
        "ALTER TABLE responses ADD COLUMN view TEXT",
        "ALTER TABLE responses ADD COLUMN ids_base INTEGER",
        "ALTER TABLE responses ADD COLUMN ids BLOB",
        "ALTER TABLE responses ADD COLUMN reply INTEGER",
        "CREATE INDEX responses_previous ON responses (previous_id)",
    ),
    # One owner's web conversations oldest first, on an index: eviction walks them in order
    # instead of sorting them all for every conversation it deletes. What each owner stores,
    # kept by triggers as rows come and go, so that eviction need not sum every row first.
    (
        "CREATE INDEX conversations_owner_updated ON conversations (owner, updated_at)",
        "CREATE TABLE usage (owner TEXT PRIMARY KEY, bytes INTEGER NOT NULL) WITHOUT ROWID",
        f"INSERT INTO usage (owner, bytes) SELECT owner, SUM(n) FROM ("
        f"SELECT owner, {RESPONSE_BYTES.format(row='')} AS n FROM responses UNION ALL "
        f"SELECT owner, {CONVERSATION_BYTES.format(row='')} FROM conversations) GROUP BY owner",
        *(
            f"CREATE TRIGGER {table}_usage_{event} AFTER {event.upper()} ON {table} BEGIN "
            + (
                f"UPDATE usage SET bytes = bytes - ({size.format(row='OLD.')}) "
                "WHERE owner = OLD.owner; "
                "DELETE FROM usage WHERE owner = OLD.owner AND bytes <= 0; "
                if event != "insert"
                else ""
            )
            + (
                f"INSERT INTO usage (owner, bytes) VALUES (NEW.owner, {size.format(row='NEW.')}) "
                "ON CONFLICT (owner) DO UPDATE SET bytes = bytes + excluded.bytes; "
                if event != "delete"
                else ""
            )
            + "END"
            for table, size in (
                ("responses", RESPONSE_BYTES),
                ("conversations", CONVERSATION_BYTES),
            )
            for event in ("insert", "update", "delete")
        ),
    ),
    # The stop token each exact reply ended on (ExactIds.stop), for training exports.
    ("ALTER TABLE responses ADD COLUMN stop INTEGER",),
)

#: The schema version this chatfmt writes.
SCHEMA_VERSION = len(MIGRATIONS)
#: How long a statement waits for another connection's lock (a CLI command beside a server).
BUSY_S = 5.0


class Database:
    """The store's connections to ``path`` (``":memory:"`` for tests: one), writing
    (:attr:`db`, :meth:`transaction`) and reading (:attr:`reader`, :meth:`reading`), migrated
    to :data:`SCHEMA_VERSION`; :class:`~chatfmt.errors.StoreUnavailable` when it cannot be."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.lock = threading.Lock()
        #: Past this many bytes of write-ahead log, a write ends with a checkpoint that
        #: empties it (``None``: SQLite's own checkpoints, which keep the file's size).
        self.wal_limit: int | None = None
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                # Conversations are private: the file (and SQLite's -wal and -shm files, which
                # take its mode) readable by this user only.
                os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
                os.chmod(self.path, 0o600)
            self.db = sqlite3.connect(
                self.path, timeout=BUSY_S, check_same_thread=False, isolation_level=None
            )
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.execute("PRAGMA secure_delete=ON")
            self._migrate()
            self.reader, self.read_lock = self.db, self.lock
            if self.path != ":memory:":  # another in-memory connection is another database
                self.reader = sqlite3.connect(
                    self.path, timeout=BUSY_S, check_same_thread=False, isolation_level=None
                )
                self.reader.execute("PRAGMA query_only = ON")
                self.read_lock = threading.Lock()
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(self.path, str(exc)) from None

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {version} is newer than this chatfmt knows ({SCHEMA_VERSION})"
            )
        for number in range(version, SCHEMA_VERSION):
            with self.transaction() as db:
                for statement in MIGRATIONS[number]:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number + 1}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection in a write transaction, under the store's lock: committed when the
        block ends, rolled back when it raises. Past :attr:`wal_limit`, the write-ahead log
        is emptied after the commit."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
            if self.wal_limit is not None and self.wal_bytes() > self.wal_limit:
                # Without waiting: a reader on another connection (chatfmt store info) must
                # not hold up this write; a later one empties the log.
                self.checkpoint(wait=False)

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The reading connection in a read transaction: one snapshot for the whole block,
        taken without waiting for a write."""
        with self.read_lock:
            self.reader.execute("BEGIN")
            try:
                yield self.reader
            finally:
                self.reader.execute("COMMIT")

    @contextmanager
    def locked(self) -> Iterator[sqlite3.Connection]:
        """The writing connection outside a transaction (for pragmas and checkpoints)."""
        with self.lock:
            yield self.db

    def wal_bytes(self) -> int:
        """The write-ahead log's size on disk."""
        try:
            return os.path.getsize(self.path + "-wal")
        except OSError:
            return 0  # none (yet), or an in-memory database

    def checkpoint(self, *, wait: bool = True) -> bool:
        """Copy the write-ahead log into the database and truncate it (call under the lock,
        outside a transaction); ``False`` when another connection kept part of it (it is
        emptied by a later checkpoint). ``wait``: for that connection, up to its busy time."""
        if not wait:
            self.db.execute("PRAGMA busy_timeout = 0")
        try:
            busy: int = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        finally:
            if not wait:
                self.db.execute(f"PRAGMA busy_timeout = {int(BUSY_S * 1000)}")
        return not busy

    def disk_bytes(self) -> int:
        """What the store takes on disk: the database, its write-ahead log and its index."""
        if self.path == ":memory:":
            return 0
        return sum(_size(self.path + suffix) for suffix in ("", "-wal", "-shm"))

    def close(self) -> None:
        with self.read_lock:
            self.reader.close()
        with self.lock:
            self.db.close()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def used_bytes(db: sqlite3.Connection) -> int:
    """The bytes of the database's pages in use (its free pages left out)."""
    page_size, pages, free = (
        db.execute(f"PRAGMA {name}").fetchone()[0]
        for name in ("page_size", "page_count", "freelist_count")
    )
    return int(page_size * (pages - free))


def read_only(path: str | Path, read: Callable[[sqlite3.Connection], _T]) -> _T:
    """``read`` on a read-only connection to ``path``: the file is not changed (not created,
    migrated or checkpointed); :class:`~chatfmt.errors.StoreError` when it is no database."""
    try:
        db = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
        try:
            return read(db)
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise StoreError(f"{path} is not a readable SQLite database ({exc})") from None


def schema_version(db: sqlite3.Connection, path: str | Path) -> int:
    """The schema version of the store ``db`` (at ``path``, for the error), or
    :class:`~chatfmt.errors.StoreError` when it is not a chatfmt store."""
    version: int = db.execute("PRAGMA user_version").fetchone()[0]
    table = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'responses'"
    ).fetchone()
    if table is None or version < 1:
        raise StoreError(f"{path} is not a chatfmt response store")
    return version
