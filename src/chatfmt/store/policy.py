"""The store's limits, applied as rows are written (and at once by ``chatfmt store prune``).

**Age.** Responses and web conversations older than ``max_age_days`` are deleted, at most once
a minute, along their time indexes.

**Size.** ``max_mb`` bounds what the store takes on disk: the database's pages in use plus its
write-ahead log. An eighth of the limit is left to the log (a write that leaves more than a
twentieth of it in the log empties it with a checkpoint, and so does every eviction), so the
pages in use may reach seven eighths. Past that, space is freed, a twentieth of the limit more
than the excess so that eviction runs once per twentieth of growth, from the keys that store
the most: each is brought down to one common level (the level that frees enough), oldest
first, web conversations and responses alike; a response goes with the responses that
continue it (a conversation without its start cannot be continued). The response just written
and those it continues, and the web conversation just saved, stay; when the key writing them
stores the most and has nothing else to give, :class:`~chatfmt.errors.StoreFull` (and nothing
is written): one key cannot evict the others to grow a conversation past the limit.

Eviction reads what each key stores from the ``usage`` table (kept by triggers as rows come
and go), walks each key's rows oldest first along the ``(owner, created_at)`` and ``(owner,
updated_at)`` indexes, stops as soon as it has enough, and deletes what it chose in a few
statements: its cost follows what it deletes, not the store's size.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import closing

from ..errors import StoreFull
from . import conversations, responses
from .connection import used_bytes

#: How often (seconds) writes also delete rows past their age.
PRUNE_EVERY = 60.0
#: The share of the size limit left to the write-ahead log.
LOG_SHARE = 1 / 8
#: Eviction frees this share of the limit beyond the excess; a write that leaves more than
#: this share in the write-ahead log empties it.
STEP_SHARE = 1 / 20
#: Rows deleted by one statement (SQLite's parameter limit is 999 on old builds).
_CHUNK = 500


class Limits:
    """The age and size limits of one store, and when age was last applied."""

    def __init__(self, max_age_days: float | None, max_mb: float | None) -> None:
        self.max_age_days = max_age_days
        self.max_mb = max_mb
        self.pruned = 0.0

    @property
    def limit_bytes(self) -> int | None:
        return None if self.max_mb is None else int(self.max_mb * 1024 * 1024)

    @property
    def wal_limit(self) -> int | None:
        """The write-ahead log's size past which a write ends with a checkpoint."""
        limit = self.limit_bytes
        return None if limit is None else int(limit * STEP_SHARE)

    def apply_age(self, db: sqlite3.Connection, now: float, *, force: bool = False) -> None:
        """Delete rows past their age (at most once a minute unless ``force``)."""
        if self.max_age_days is None or (not force and now - self.pruned <= PRUNE_EVERY):
            return
        cutoff = now - self.max_age_days * 86400
        db.execute("DELETE FROM responses WHERE created_at < ?", (cutoff,))
        db.execute("DELETE FROM conversations WHERE updated_at < ?", (cutoff,))
        self.pruned = now

    def fit_size(
        self,
        db: sqlite3.Connection,
        *,
        writer: str | None = None,
        keep: str | None = None,
        keep_conversation: tuple[str, str] | None = None,
    ) -> None:
        """Free space past the limit (see the module's docstring), in the caller's
        transaction. ``writer`` is the key writing, ``keep`` the response it wrote,
        ``keep_conversation`` the (owner, id) of the web conversation it saved."""
        limit = self.limit_bytes
        if limit is None:
            return
        excess = used_bytes(db) - int(limit * (1 - LOG_SHARE))
        if excess <= 0:
            return
        remaining = excess + int(limit * STEP_SHARE)
        # What each key stores, as the schema's triggers keep it (no pass over the rows).
        active: dict[str, int] = dict(
            db.execute("SELECT owner, bytes FROM usage WHERE bytes > 0").fetchall()
        )
        protected = set(responses.ancestry(db, keep)) if keep is not None else set()

        def evict(owner: str, budget: int) -> int:
            kept_web = kept_conversation(keep_conversation, owner)
            return _evict(db, owner, budget, protected, kept_web)

        shed(active, remaining, evict, writer=writer, max_mb=self.max_mb)


def kept_conversation(keep: tuple[str, str] | None, owner: str) -> str | None:
    """The id of ``owner``'s web conversation that eviction leaves, of ``keep`` (the (owner,
    id) of the one just saved): ``None`` for any other owner."""
    return keep[1] if keep is not None and keep[0] == owner else None


def shed(
    active: dict[str, int],
    remaining: int,
    evict: Callable[[str, int], int],
    *,
    writer: str | None,
    max_mb: float | None,
) -> None:
    """Free ``remaining`` bytes fairly, whatever the backend: ``active`` is what each key
    stores, ``evict(owner, budget)`` deletes that key's oldest rows until ``budget`` bytes went
    (or none may go) and says how many did. The keys that store the most are brought down to
    one common level (:func:`_level`); :class:`~chatfmt.errors.StoreFull` when the ``writer``
    is one of them and has nothing left to give."""
    while remaining > 0 and active:
        level = _level(list(active.values()), remaining)
        for owner in sorted(active, key=active.__getitem__, reverse=True):
            budget = active[owner] - level
            if budget <= 0:
                break
            freed = evict(owner, budget)
            remaining -= freed
            if freed >= budget:
                active[owner] -= freed
            elif owner == writer:
                raise StoreFull(
                    f"the response store is at its size limit ({max_mb:g} MB) and "
                    "this key stores the most, all of it the conversation being written; "
                    "it was not kept. Start a new conversation, or raise --store-max-mb"
                )
            else:
                del active[owner]  # nothing more of it may go


def _level(usage: Sequence[int], amount: int) -> int:
    """The highest level that frees ``amount`` when every owner above it is brought down to
    it: ``sum(max(0, u - level)) >= amount`` (0: everything must go)."""
    ordered = sorted(usage, reverse=True)
    total = 0
    for k, used in enumerate(ordered, 1):
        total += used
        level = (total - amount) // k
        if level >= (ordered[k] if k < len(ordered) else 0):
            return max(level, 0)
    return 0


def choose(
    candidates: Iterable[tuple[str, str, int]],
    budget: int,
    protected: set[str],
    descendants: Callable[[str], list[tuple[str, int]]],
) -> tuple[set[str], list[str], int]:
    """What goes of one key's rows to free ``budget`` bytes, whatever the backend:
    ``candidates`` are its rows oldest first (:func:`merge_oldest`), ``descendants(id)`` a
    response and those continuing it with their bytes (they go together); a response in
    ``protected`` stays. The responses and web conversations chosen, and the bytes they free
    (a row counts at least one, so that rows of no size still end the walk)."""
    chosen_responses: set[str] = set()
    chosen_web: list[str] = []
    freed = 0
    for kind, key, size in candidates:
        if freed >= budget:
            break
        if kind == "web":
            chosen_web.append(key)
            freed += max(size, 1)
        elif key not in protected and key not in chosen_responses:
            new = [(rid, n) for rid, n in descendants(key) if rid not in chosen_responses]
            chosen_responses.update(rid for rid, _ in new)
            freed += max(sum(n for _, n in new), 1)
    return chosen_responses, chosen_web, freed


def merge_oldest(
    responses: Iterable[tuple[float, str, int]], webs: Iterable[tuple[float, str, int]]
) -> Iterator[tuple[str, str, int]]:
    """One key's responses and web conversations, each given as ``(time, id, bytes)`` oldest
    first, as one walk oldest first (a response before a web conversation of the same time):
    ``(kind, id, bytes)``."""
    merged = heapq.merge(
        ((t, 0, key, n) for t, key, n in responses),
        ((t, 1, key, n) for t, key, n in webs),
        key=lambda item: item[:2],
    )
    for _t, kind, key, size in merged:
        yield ("web" if kind else "response"), key, size


def _evict(
    db: sqlite3.Connection, owner: str, budget: int, protected: set[str], kept_web: str | None
) -> int:
    """Delete ``owner``'s oldest rows until ``budget`` bytes are freed, or none is left that
    may go; the bytes freed."""

    def descendants(key: str) -> list[tuple[str, int]]:
        # The response and those continuing it, along the previous_id index.
        return db.execute(
            f"{responses.DESCENDANTS}SELECT id, {responses.ROW_BYTES} FROM responses "
            "WHERE id IN (SELECT id FROM doomed)",
            (key,),
        ).fetchall()

    # Chosen first, deleted after: the index cursors are not read across their own deletes.
    with closing(_oldest_first(db, owner, kept_web)) as candidates:
        chosen_responses, chosen_web, freed = choose(candidates, budget, protected, descendants)
    for chunk in _chunks(sorted(chosen_responses)):
        marks = ",".join("?" * len(chunk))
        db.execute(f"DELETE FROM responses WHERE id IN ({marks})", chunk)
    for chunk in _chunks(chosen_web):
        marks = ",".join("?" * len(chunk))
        db.execute(
            f"DELETE FROM conversations WHERE owner = ? AND id IN ({marks})", [owner, *chunk]
        )
    return freed


def _oldest_first(
    db: sqlite3.Connection, owner: str, kept_web: str | None
) -> Generator[tuple[str, str, int], None, None]:
    """``owner``'s responses and web conversations, oldest first (:func:`merge_oldest`), each
    read from its index as it is needed; the bytes of a response are found when it is chosen."""
    rows = db.execute(
        "SELECT created_at, id, 0 FROM responses WHERE owner = ? ORDER BY created_at, rowid",
        (owner,),
    )
    webs = db.execute(
        f"SELECT updated_at, id, {conversations.ROW_BYTES} FROM conversations "
        "WHERE owner = ? AND id IS NOT ? ORDER BY updated_at",
        (owner, kept_web),
    )
    try:
        yield from merge_oldest(rows, webs)
    finally:
        rows.close()
        webs.close()


def _chunks(items: Sequence[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), _CHUNK):
        yield list(items[start : start + _CHUNK])
