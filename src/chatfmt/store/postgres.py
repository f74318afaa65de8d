"""The PostgreSQL backend of :class:`~.protocol.Storage`: one database that several
``chatfmt serve`` processes (replicas) share, with the SQLite store's semantics.

**Why a pooled, blocking driver.** The server awaits a store through
:class:`~.aio.AsyncStore`, which runs a backend's calls on small thread pools of its own; a
blocking psycopg pool fits that as the SQLite backend does (the API code stays as it is, and
``chatfmt store`` uses the same class without an event loop). psycopg releases the GIL while it
waits for the server, so the threads wait in parallel; the pool holds up to as many
connections as those threads (:data:`POOL_SIZE`), checked before each use so that a database
restart costs a reconnect, not an error.

**What stands in for SQLite's single writer.** SQLite runs one write transaction at a time;
here transactions of many processes overlap, so each write says what it must not overlap
with, by transaction-scoped advisory locks (released at commit or rollback, also when a
process dies, since its connection goes):

- every write holds :data:`~.pg_schema.WRITE_LOCK` shared and its key's own lock
  exclusively: one key's writes run one at a time, so a response is checked to continue a
  whole chain (:func:`.pg_rows.check_continues`) and inserted with no delete of that key's in
  between, and ``delete_owner`` leaves nothing of an in-flight write behind; different keys
  write in parallel;
- eviction takes :data:`~.pg_schema.WRITE_LOCK` exclusively: it reads what every key stores,
  chooses rows and deletes them, and must see no other write meanwhile. A write finding the
  store past its limit rolls back and runs again holding it (evictions are rare: once per
  twentieth of the limit written);
- pruning by age runs in a transaction of its own (at most once a minute per process), under
  a lock that others skip instead of waiting for: one process prunes at a time;
- locks are always taken in that order (the write lock, then one key's), and a transaction
  holds at most one key's lock, so writers never wait on each other in a cycle. The ``usage``
  rows the triggers update are row-locked until commit; a deadlock PostgreSQL still finds
  there (an age prune and a delete of the same old row) is retried (:data:`ATTEMPTS`).

Reads take no lock: each is one statement, on a committed snapshot (a chain is read back in one
recursive statement).

A store's URL may hold a password: it is shown only through :func:`~.location.redact`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlsplit

from .._imports import require
from ..errors import StoreError, StoreUnavailable
from . import listing, pg_policy, pg_rows
from .aio import READERS, WRITERS
from .chains import response_row
from .listing import ExportQuery
from .location import HIDDEN, redact
from .pg_schema import (
    OWNER_SEED,
    PG_SCHEMA_VERSION,
    PRUNE_LOCK,
    SCHEMA,
    WRITE_LOCK,
    migrate,
    read_version,
)
from .policy import PRUNE_EVERY, Limits
from .types import Chain, NewResponse, StoredExchange, StoredRef, StoredResponse

if TYPE_CHECKING:
    from .pg_schema import Conn

_T = TypeVar("_T")

#: Connections per process: one for each thread of the server's two store facades (the API's
#: and the web chat's, :class:`~.aio.AsyncStore` each), so that no call waits for another's.
POOL_SIZE = 2 * (READERS + WRITERS)
#: How long opening a connection may take, and how long a call waits for a free one.
CONNECT_S = 10
WAIT_S = 30.0
#: Tries of a transaction that PostgreSQL chose to abort (a deadlock it broke).
ATTEMPTS = 5
#: Each pooled session's bounds: a write waits at most ``lock_timeout`` for a lock (then
#: fails with a StoreError, as an unreachable store does), and a transaction left open by a
#: replica that froze while holding the write lock is ended by PostgreSQL after
#: ``idle_in_transaction_session_timeout``, its locks released: without them one stalled
#: replica would hold every other replica's writes until TCP noticed (hours).
SESSION_SETTINGS = (("lock_timeout", "30s"), ("idle_in_transaction_session_timeout", "60s"))
#: libpq's TCP keepalives, unless the URL sets its own: a replica whose peer vanished finds out
#: in about a minute.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


class PostgresUnavailable(StoreUnavailable):
    """The database cannot be reached or migrated; the message names the URL without its
    password, and the fix."""

    def __init__(self, url: str, reason: str) -> None:
        StoreError.__init__(
            self,
            f"cannot open the response store {url} ({reason}); check that the server runs and "
            "that the URL's user may connect and create tables, or give --no-store",
        )
        self.path, self.reason = url, reason


def _configure(conn: Conn) -> None:
    """A new pooled connection's session settings (:data:`SESSION_SETTINGS`)."""
    for name, value in SESSION_SETTINGS:
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))


def _vacuum(conn: Conn) -> str:
    """Vacuum the store's tables; what PostgreSQL said if it skipped one ("" if none): a role
    that does not own a table gets a warning and no vacuum, not an error."""
    warnings: list[str] = []

    def heard(notice: Any) -> None:
        if notice.severity_nonlocalized == "WARNING":
            warnings.append(str(notice.message_primary))

    conn.add_notice_handler(heard)
    try:
        conn.execute(f"VACUUM {SCHEMA}.responses, {SCHEMA}.conversations, {SCHEMA}.usage")
    finally:
        conn.remove_notice_handler(heard)
    return "; ".join(warnings)


def _absent(key: str) -> bool:
    """Whether ``key`` (an id a client sent) can name no row: PostgreSQL text cannot hold a
    NUL, and SQLite, where it can, has no row with one either (ids are chatfmt's own)."""
    return "\x00" in key


class _Evict(Exception):
    """A write found the store past its size limit: it runs again, alone (see the module)."""


class PostgresStore:
    """The store in the PostgreSQL database at ``url`` (``postgresql://user:pw@host/db``),
    migrated to :data:`~.pg_schema.PG_SCHEMA_VERSION` on open, with the age and size limits of
    :class:`~.sqlite.ResponseStore`; :class:`PostgresUnavailable` when it cannot be reached."""

    def __init__(
        self,
        url: str,
        *,
        max_age_days: float | None = 30.0,
        max_mb: float | None = None,
    ) -> None:
        psycopg = require("psycopg", extra="postgres")
        pool = require("psycopg_pool", extra="postgres")
        self._url = url
        self.url = redact(url)
        self._limits = Limits(max_age_days, max_mb)
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_S) as conn:
                migrate(conn)
        except (psycopg.Error, StoreError) as exc:
            raise PostgresUnavailable(self.url, self._scrub(exc)) from None
        given = psycopg.conninfo.conninfo_to_dict(url)
        keepalives = {k: v for k, v in KEEPALIVES.items() if k not in given}
        self._pool = pool.ConnectionPool(
            url,
            min_size=1,
            max_size=POOL_SIZE,
            kwargs={"autocommit": True, **keepalives},
            configure=_configure,
            check=pool.ConnectionPool.check_connection,
            timeout=WAIT_S,
            name="chatfmt-store",
            open=True,
        )

    # ==== Transactions ====

    def _scrub(self, exc: BaseException) -> str:
        return scrub(self._url, exc)

    def _failed(self, exc: Exception) -> StoreError:
        return StoreError(f"the response store {self.url} failed: {self._scrub(exc)}")

    def _read(self, work: Callable[[Conn], _T]) -> _T:
        """``work`` on a pooled connection, each statement on its own committed snapshot."""
        import psycopg
        import psycopg_pool

        try:
            with self._pool.connection() as conn:
                return work(conn)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._failed(exc) from None

    def _write(
        self,
        work: Callable[[Conn, bool], _T],
        *,
        owner: str | None = None,
        alone: bool = False,
    ) -> _T:
        """``work(conn, alone)`` in a transaction holding the locks of the module's docstring:
        the write lock shared and ``owner``'s lock, or the write lock exclusively (``alone``,
        and after ``work`` raised :class:`_Evict`); retried when PostgreSQL broke a deadlock."""
        import psycopg
        import psycopg_pool
        from psycopg import errors

        attempt = 0
        while True:
            attempt += 1
            try:
                with self._pool.connection() as conn, conn.transaction():
                    if alone:
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                    else:
                        conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (WRITE_LOCK,))
                        if owner is not None:
                            conn.execute(
                                "SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))",
                                (owner, OWNER_SEED),
                            )
                    return work(conn, alone)
            except _Evict:
                alone = True  # rolled back: again, as the only writer
            except (errors.DeadlockDetected, errors.SerializationFailure) as exc:
                if attempt >= ATTEMPTS:
                    raise self._failed(exc) from None
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                raise self._failed(exc) from None

    def _fit(
        self,
        conn: Conn,
        alone: bool,
        *,
        writer: str,
        keep: str | None = None,
        keep_conversation: tuple[str, str] | None = None,
    ) -> None:
        """After a write: past the size limit, evict (holding the write lock alone) or have
        the write run again so that it can (:class:`_Evict`)."""
        if self._limits.limit_bytes is None:
            return
        if not alone:
            if pg_policy.excess(conn, self._limits) > 0:
                raise _Evict
            return
        pg_policy.fit_size(
            conn, self._limits, writer=writer, keep=keep, keep_conversation=keep_conversation
        )

    def _age(self, now: float) -> None:
        """Delete rows past their age, at most once a minute, in a transaction of its own;
        skipped when another process is pruning now."""
        limits = self._limits
        if limits.max_age_days is None or now - limits.pruned <= PRUNE_EVERY:
            return
        limits.pruned = now

        def prune(conn: Conn, _alone: bool) -> None:
            took = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (PRUNE_LOCK,)).fetchone()
            if took is not None and took[0]:
                pg_policy.apply_age(conn, limits, now)

        self._write(prune)

    # ==== Responses ====

    def put(self, owner: str, new: NewResponse) -> None:
        """Keep a response (see :meth:`.sqlite.ResponseStore.put`): nothing is kept on
        :class:`~chatfmt.errors.BrokenChain` or :class:`~chatfmt.errors.StoreFull`."""
        now = time.time()
        self._age(now)
        previous = new.response.get("previous_response_id")

        def write(conn: Conn, alone: bool) -> None:
            if previous is not None:
                pg_rows.check_continues(conn, owner, previous)
            row = response_row(owner, new, now)
            pg_rows.insert(conn, row)
            self._fit(conn, alone, writer=owner, keep=new.response["id"])

        self._write(write, owner=owner)

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        if _absent(response_id):
            return None
        return self._read(lambda conn: pg_rows.get(conn, owner, response_id))

    def chain(self, owner: str, response_id: str) -> Chain | None:
        if _absent(response_id):
            return None
        return self._read(lambda conn: pg_rows.chain(conn, owner, response_id))

    def conversation(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The chat messages of :meth:`chain`."""
        found = self.chain(owner, response_id)
        return None if found is None else found.messages

    def delete(self, owner: str, response_id: str) -> bool:
        if _absent(response_id):
            return False
        return self._write(lambda conn, _: pg_rows.delete(conn, owner, response_id), owner=owner)

    # ==== Export (chatfmt dataset export) ====

    def export_refs(
        self, query: ExportQuery, *, after: StoredRef | None = None, limit: int = 500
    ) -> list[StoredRef]:
        """A page of every owner's responses or web conversations (see
        :func:`.listing.refs_query`)."""
        sql, args = listing.refs_query(
            query, after=after, limit=limit, param="%s", schema=f"{SCHEMA}."
        )
        return self._read(lambda conn: listing.refs(conn.execute(sql, args).fetchall()))

    def exchanges(self, owner: str, response_id: str) -> list[StoredExchange] | None:
        if _absent(response_id):
            return None
        return self._read(lambda conn: pg_rows.exchanges(conn, owner, response_id))

    # ==== The web chat's conversations ====

    def save_conversation(self, owner: str, cid: str, title: str, state: dict[str, Any]) -> None:
        now = time.time()
        self._age(now)

        def write(conn: Conn, alone: bool) -> None:
            pg_rows.save_conversation(conn, owner, cid, title, state, now)
            self._fit(conn, alone, writer=owner, keep_conversation=(owner, cid))

        self._write(write, owner=owner)

    def conversations(self, owner: str, limit: int = 100) -> list[dict[str, Any]]:
        return self._read(lambda conn: pg_rows.conversations(conn, owner, limit))

    def load_conversation(self, owner: str, cid: str) -> dict[str, Any] | None:
        if _absent(cid):
            return None
        return self._read(lambda conn: pg_rows.load_conversation(conn, owner, cid))

    def delete_conversation(self, owner: str, cid: str) -> bool:
        if _absent(cid):
            return False
        return self._write(
            lambda conn, _: pg_rows.delete_conversation(conn, owner, cid), owner=owner
        )

    # ==== Administration ====

    def delete_owner(self, owner: str) -> tuple[int, int]:
        """Delete everything one key stored: how many responses and web conversations. The
        tables are vacuumed after, so that the rows' space is reclaimed (older copies stay in
        PostgreSQL's write-ahead log, standbys and backups until their own retention ends);
        :class:`~chatfmt.errors.StoreError` when the vacuum is refused."""

        def write(conn: Conn, _alone: bool) -> tuple[int, int]:
            gone = conn.execute(f"DELETE FROM {SCHEMA}.responses WHERE owner = %s", (owner,))
            webs = conn.execute(f"DELETE FROM {SCHEMA}.conversations WHERE owner = %s", (owner,))
            return gone.rowcount, webs.rowcount

        counts = self._write(write, owner=owner)
        try:
            refused = self._read(_vacuum)
        except StoreError as exc:
            refused = str(exc)
        if refused:
            raise StoreError(
                f"the rows are deleted, but vacuuming the store's tables failed ({refused}); run "
                f"VACUUM {SCHEMA}.responses, {SCHEMA}.conversations as their owner"
            )
        return counts

    def prune(self) -> int:
        """Apply the age and size limits now; how many rows went."""

        def write(conn: Conn, _alone: bool) -> int:
            before = _rows(conn)
            pg_policy.apply_age(conn, self._limits, time.time())
            pg_policy.fit_size(conn, self._limits)
            return before - _rows(conn)

        return self._write(write, alone=True)

    def info(self) -> dict[str, Any]:
        """What the store holds (see :func:`describe`) and its limits."""
        return {
            "url": self.url,
            **self._read(describe),
            "max_age_days": self._limits.max_age_days,
            "max_mb": self._limits.max_mb,
        }

    def count(self) -> int:
        """How many responses are stored."""
        sql = f"SELECT COUNT(*) FROM {SCHEMA}.responses"
        row = self._read(lambda conn: conn.execute(sql).fetchone())
        return int(row[0]) if row is not None else 0

    def close(self) -> None:
        self._pool.close()


def scrub(url: str, exc: BaseException) -> str:
    """An error's text without ``url``'s password, should the driver have quoted it."""
    text = str(exc).strip()
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    for secret in {password, unquote(password)} if password else ():
        text = text.replace(secret, HIDDEN)
    return text


def _rows(conn: Conn) -> int:
    row = conn.execute(
        f"SELECT (SELECT COUNT(*) FROM {SCHEMA}.responses) + "
        f"(SELECT COUNT(*) FROM {SCHEMA}.conversations)"
    ).fetchone()
    return int(row[0]) if row is not None else 0


def describe(conn: Conn) -> dict[str, Any]:
    """Schema version, rows, owners with responses, bytes the keys store, bytes the tables
    take (indexes and rows awaiting vacuum included), the oldest row's time."""
    count, owners, oldest_response = conn.execute(
        f"SELECT COUNT(*), COUNT(DISTINCT owner), MIN(created_at) FROM {SCHEMA}.responses"
    ).fetchone() or (0, 0, None)
    webs, oldest_web = conn.execute(
        f"SELECT COUNT(*), MIN(updated_at) FROM {SCHEMA}.conversations"
    ).fetchone() or (0, None)
    disk = conn.execute(
        "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
        (SCHEMA,),
    ).fetchone()
    times = [t for t in (oldest_response, oldest_web) if t is not None]
    return {
        "schema_version": read_version(conn),
        "responses": int(count),
        "conversations": int(webs),
        "owners_with_responses": int(owners),
        "bytes_used": pg_policy.used_bytes(conn),
        "disk_bytes": int(disk[0]) if disk is not None else 0,
        "oldest": min(times) if times else None,
    }


# ==== chatfmt store, on a database it must not change ====


def _looking(url: str, read: Callable[[Conn], _T]) -> _T:
    """``read`` on a read-only connection to ``url``: nothing is created or migrated."""
    psycopg = require("psycopg", extra="postgres")
    shown = redact(url)
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_S) as conn:
            # (conn.read_only applies to transactions psycopg opens, and autocommit opens none.)
            conn.execute("SET default_transaction_read_only = on")
            return read(conn)
    except psycopg.Error as exc:
        raise StoreError(f"cannot read the response store {shown} ({scrub(url, exc)})") from None


def store_version(url: str) -> int:
    """The schema version of the store in the database at ``url``, read without changing it;
    :class:`~chatfmt.errors.StoreError` when the database holds none."""

    def read(conn: Conn) -> int:
        version = read_version(conn)
        if version is None:
            raise StoreError(
                f"no response store in {redact(url)}; give the URL chatfmt serve uses with "
                "--store URL (serve creates the store's tables)"
            )
        return version

    return _looking(url, read)


def read_info(url: str) -> dict[str, Any]:
    """:func:`describe` of the store at ``url`` (of this schema version), read-only."""

    def read(conn: Conn) -> dict[str, Any]:
        version = read_version(conn)
        if version is None:
            raise StoreError(f"no response store in {redact(url)}")
        if version != PG_SCHEMA_VERSION:
            raise StoreError(
                f"{redact(url)} has schema version {version}, this chatfmt reads "
                f"{PG_SCHEMA_VERSION}; chatfmt serve, store delete and store prune upgrade an "
                "older one"
            )
        return {"url": redact(url), **describe(conn)}

    return _looking(url, read)
