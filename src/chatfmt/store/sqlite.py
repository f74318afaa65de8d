"""The SQLite backend of :class:`~.protocol.Storage`: one embedded database file, so that
``previous_response_id`` chains, ``GET /v1/responses/{id}`` and the web chat's conversations
outlive the request and the server's restarts.

This class only puts the pieces together: the connection, schema and transactions
(:mod:`.connection`), response rows and their exact ids (:mod:`.responses`), web conversations
(:mod:`.conversations`), the age and size limits (:mod:`.policy`) and the operator's commands
(:mod:`.admin`). Its methods block; the server calls them through
:class:`~.aio.AsyncStore`, on the store's own threads.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import admin, conversations, listing, responses
from .chains import response_row
from .connection import Database
from .listing import ExportQuery
from .policy import Limits
from .types import Chain, NewResponse, StoredExchange, StoredRef, StoredResponse


class ResponseStore:
    """The store in the SQLite file at ``path`` (``":memory:"`` for tests), rows older than
    ``max_age_days`` deleted as new ones come, and at most ``max_mb`` on disk (``None``: no
    limit); :class:`~chatfmt.errors.StoreUnavailable` when the file cannot be opened."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_age_days: float | None = 30.0,
        max_mb: float | None = None,
    ) -> None:
        self._database = Database(path)
        self._limits = Limits(max_age_days, max_mb)
        self._database.wal_limit = self._limits.wal_limit
        if self._limits.wal_limit is not None:
            # A checkpoint that could not empty the log (a reader was in it) still cuts it
            # back to this size the next time the log starts over.
            with self._database.locked() as db:
                db.execute(f"PRAGMA journal_size_limit = {self._limits.wal_limit}")

    @property
    def path(self) -> str:
        return self._database.path

    # ==== Responses ====

    def put(self, owner: str, new: NewResponse) -> None:
        """Keep a response, its input items, the chat messages it added and, when known, the
        exact ids of its exchange; :class:`~chatfmt.errors.BrokenChain` when the conversation
        it continues lost a response meanwhile, :class:`~chatfmt.errors.StoreFull` (see
        :mod:`.policy`): either way nothing is kept."""
        now = time.time()
        previous = new.response.get("previous_response_id")
        with self._database.transaction() as db:
            self._limits.apply_age(db, now)
            if previous is not None:
                responses.check_continues(db, owner, previous)
            row = response_row(owner, new, now)
            responses.insert(db, row)
            self._limits.fit_size(db, writer=owner, keep=new.response["id"])

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        """The owner's response ``response_id`` (``None``: none, or another owner's)."""
        with self._database.reading() as db:
            return responses.get(db, owner, response_id)

    def chain(self, owner: str, response_id: str) -> Chain | None:
        """The conversation up to and including ``response_id`` (``None``: no such response
        of this owner), with its exact ids where every row they come from kept them;
        :class:`~chatfmt.errors.BrokenChain` when an earlier response of it is gone."""
        with self._database.reading() as db:
            return responses.chain(db, owner, response_id)

    def conversation(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The chat messages of :meth:`chain`."""
        found = self.chain(owner, response_id)
        return None if found is None else found.messages

    def delete(self, owner: str, response_id: str) -> bool:
        with self._database.transaction() as db:
            return responses.delete(db, owner, response_id)

    # ==== Export (chatfmt dataset export) ====

    def export_refs(
        self, query: ExportQuery, *, after: StoredRef | None = None, limit: int = 500
    ) -> list[StoredRef]:
        """A page of every owner's responses or web conversations (see
        :func:`.listing.refs_query`)."""
        sql, args = listing.refs_query(query, after=after, limit=limit)
        with self._database.reading() as db:
            return listing.refs(db.execute(sql, args).fetchall())

    def exchanges(self, owner: str, response_id: str) -> list[StoredExchange] | None:
        """The responses of the conversation up to ``response_id``, oldest first, each with
        its exact ids (``None``: no such response of this owner);
        :class:`~chatfmt.errors.BrokenChain` when an earlier one is gone."""
        with self._database.reading() as db:
            return responses.exchanges(db, owner, response_id)

    # ==== The web chat's conversations ====

    def save_conversation(self, owner: str, cid: str, title: str, state: dict[str, Any]) -> None:
        """Keep (or replace) a web conversation of ``owner``; :class:`~chatfmt.errors.StoreFull`
        (nothing kept) as for :meth:`put`."""
        now = time.time()
        with self._database.transaction() as db:
            self._limits.apply_age(db, now)
            conversations.save(db, owner, cid, title, state, now)
            self._limits.fit_size(db, writer=owner, keep_conversation=(owner, cid))

    def conversations(self, owner: str, limit: int = 100) -> list[dict[str, Any]]:
        """``owner``'s web conversations, newest first: id, title, updated_at."""
        with self._database.reading() as db:
            return conversations.listing(db, owner, limit)

    def load_conversation(self, owner: str, cid: str) -> dict[str, Any] | None:
        with self._database.reading() as db:
            return conversations.load(db, owner, cid)

    def delete_conversation(self, owner: str, cid: str) -> bool:
        with self._database.transaction() as db:
            return conversations.delete(db, owner, cid)

    # ==== Administration ====

    def delete_owner(self, owner: str) -> tuple[int, int]:
        """Delete everything one key stored (see :func:`.admin.delete_owner`)."""
        return admin.delete_owner(self._database, owner)

    def prune(self) -> int:
        """Apply the age and size limits now; how many rows went."""
        return admin.prune(self._database, self._limits)

    def info(self) -> dict[str, Any]:
        """What the store holds: schema version, rows, owners, bytes in use and on disk; its
        limits."""
        with self._database.reading() as db:
            held = admin.describe(db)
        return {
            "path": self.path,
            **held,
            "disk_bytes": self._database.disk_bytes(),
            "max_age_days": self._limits.max_age_days,
            "max_mb": self._limits.max_mb,
        }

    def count(self) -> int:
        """How many responses are stored."""
        with self._database.reading() as db:
            n: int = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        return n

    def integrity(self) -> str:
        """``PRAGMA integrity_check``'s answer (``"ok"`` when the database is sound)."""
        with self._database.reading() as db:
            answer: str = db.execute("PRAGMA integrity_check").fetchone()[0]
        return answer

    def close(self) -> None:
        self._database.close()
