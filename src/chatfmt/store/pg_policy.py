"""The age and size limits in PostgreSQL: :mod:`.policy`'s rules on the PostgreSQL tables.

**Age** as in SQLite: rows older than ``max_age_days`` go, at most once a minute per process,
along the time indexes.

**Size** counts what the keys store: the bytes of their rows' contents (the ``usage`` table,
kept by triggers), not the database's files. PostgreSQL's files do not shrink when rows are
deleted (their space is reused once vacuumed), and its write-ahead log, indexes and dead rows
are sized by its operator, so a limit on the files would evict without freeing anything.
Past ``max_mb``, eviction frees a twentieth of the limit more than the excess, from the keys
that store the most, brought down to one level, oldest first (:func:`.policy.shed`, the
same rule as SQLite's); a response goes with those that continue it; the response just
written, those it continues and the web conversation just saved stay;
:class:`~chatfmt.errors.StoreFull` when the writer stores the most and has nothing else to
give. Each key's rows are read oldest first a page at a time along the ``(owner, created_at,
id)`` and ``(owner, updated_at, id)`` indexes, and deleted in one statement per kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from . import pg_rows
from .pg_schema import SCHEMA
from .policy import STEP_SHARE, Limits, choose, kept_conversation, merge_oldest, shed

if TYPE_CHECKING:
    from .pg_schema import Conn

#: Rows read at a time when walking one key's rows oldest first.
PAGE = 256


def apply_age(conn: Conn, limits: Limits, now: float) -> int:
    """Delete rows past their age (the caller decides how often); how many went."""
    if limits.max_age_days is None:
        return 0
    cutoff = now - limits.max_age_days * 86400
    gone = conn.execute(f"DELETE FROM {SCHEMA}.responses WHERE created_at < %s", (cutoff,))
    webs = conn.execute(f"DELETE FROM {SCHEMA}.conversations WHERE updated_at < %s", (cutoff,))
    return gone.rowcount + webs.rowcount


def used_bytes(conn: Conn) -> int:
    """What the keys store, in bytes (the sum of the ``usage`` table)."""
    row = conn.execute(f"SELECT COALESCE(SUM(bytes), 0) FROM {SCHEMA}.usage").fetchone()
    return int(row[0]) if row is not None else 0


def excess(conn: Conn, limits: Limits) -> int:
    """How far the store is past its size limit (0 or less: within it)."""
    limit = limits.limit_bytes
    return 0 if limit is None else used_bytes(conn) - limit


def fit_size(
    conn: Conn,
    limits: Limits,
    *,
    writer: str | None = None,
    keep: str | None = None,
    keep_conversation: tuple[str, str] | None = None,
) -> None:
    """Free space past the limit (see the module's docstring), in the caller's transaction,
    which must be the only writer (:class:`~.postgres.PostgresStore` holds the exclusive write
    lock): what each key stores is read once, and eviction's choices must not race another
    transaction's writes."""
    over = excess(conn, limits)
    limit = limits.limit_bytes
    if limit is None or over <= 0:
        return
    remaining = over + int(limit * STEP_SHARE)
    rows = conn.execute(f"SELECT owner, bytes FROM {SCHEMA}.usage WHERE bytes > 0").fetchall()
    active: dict[str, int] = {owner: int(n) for owner, n in rows}
    protected = set(pg_rows.ancestry(conn, keep)) if keep is not None else set()

    def evict(owner: str, budget: int) -> int:
        kept_web = kept_conversation(keep_conversation, owner)
        return _evict(conn, owner, budget, protected, kept_web)

    shed(active, remaining, evict, writer=writer, max_mb=limits.max_mb)


def _evict(conn: Conn, owner: str, budget: int, protected: set[str], kept_web: str | None) -> int:
    """Delete ``owner``'s oldest rows until ``budget`` bytes are freed, or none is left that
    may go; the bytes freed."""

    def descendants(key: str) -> list[tuple[str, int]]:
        # The response and those continuing it, along the previous_id index.
        rows = conn.execute(
            f"{pg_rows.DESCENDANTS}SELECT id, {pg_rows.ROW_BYTES} FROM {SCHEMA}.responses "
            "WHERE id IN (SELECT id FROM doomed)",
            (key,),
        ).fetchall()
        return [(rid, int(n)) for rid, n in rows]

    candidates = _oldest_first(conn, owner, kept_web)
    chosen_responses, chosen_web, freed = choose(candidates, budget, protected, descendants)
    if chosen_responses:
        conn.execute(
            f"DELETE FROM {SCHEMA}.responses WHERE id = ANY(%s)", (sorted(chosen_responses),)
        )
    if chosen_web:
        conn.execute(
            f"DELETE FROM {SCHEMA}.conversations WHERE owner = %s AND id = ANY(%s)",
            (owner, chosen_web),
        )
    return freed


def _oldest_first(conn: Conn, owner: str, kept_web: str | None) -> Iterator[tuple[str, str, int]]:
    """``owner``'s responses and web conversations, oldest first (:func:`.policy.merge_oldest`),
    the bytes of a response being found when it is chosen. Each kind is read a page at a time,
    as eviction needs it."""
    responses = _paged(
        conn,
        f"SELECT created_at, id, 0 FROM {SCHEMA}.responses WHERE owner = %s "
        "AND (created_at, id) > (%s, %s) ORDER BY created_at, id LIMIT %s",
        (owner,),
    )
    webs = _paged(
        conn,
        f"SELECT updated_at, id, {pg_rows.CONVERSATION_ROW_BYTES} FROM {SCHEMA}.conversations "
        "WHERE owner = %s AND id IS DISTINCT FROM %s AND (updated_at, id) > (%s, %s) "
        "ORDER BY updated_at, id LIMIT %s",
        (owner, kept_web),
    )
    return merge_oldest(responses, webs)


def _paged(conn: Conn, sql: str, args: tuple[str | None, ...]) -> Iterator[tuple[float, str, int]]:
    """The rows of ``sql`` (keyset-paged on its ``(time, id)`` order), a page at a time."""
    after: tuple[float, str] = (float("-inf"), "")
    while True:
        page = conn.execute(sql, (*args, *after, PAGE)).fetchall()
        for t, key, n in page:
            yield float(t), str(key), int(n)
        if len(page) < PAGE:
            return
        after = (float(page[-1][0]), str(page[-1][1]))
