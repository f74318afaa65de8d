"""The PostgreSQL store's schema: its tables in a schema of their own (``chatfmt``), its
version in ``chatfmt.schema_version``, and the migrations that bring a database to it.

The tables are those of the SQLite store (:mod:`.connection`) without what only SQLite's
history needs (the whole-conversation column of version-1 rows): ``responses`` (one row per
response, chained by ``previous_id``, each with its exact ids as what it adds to its
predecessor's), ``conversations`` (the web chat's) and ``usage`` (what each key stores, kept
by triggers, read by eviction instead of summing every row). JSON is kept as ``text``, byte
for byte as written, so that a row's size is what the key stored (``jsonb`` would reorder
and re-space it).

Migrations run when a store is opened, each in one transaction with its version (PostgreSQL's
DDL is transactional: a failing migration leaves the database as it was), under an advisory
lock, so that replicas starting together migrate once: the others wait, then find the work
done. A failed migration's error propagates after rollback (the lock is released).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import StoreError

if TYPE_CHECKING:
    import psycopg

    #: A connection whose rows are tuples (psycopg's default).
    Conn = psycopg.Connection[tuple[Any, ...]]

#: The PostgreSQL schema (namespace) that holds the store's tables, apart from the database's
#: other tables.
SCHEMA = "chatfmt"

#: What a response row holds, in bytes (SQL over its columns; ``row``: a prefix, e.g. ``r.``).
RESPONSE_BYTES = (
    "octet_length({row}response) + octet_length({row}input_items) + "
    "octet_length({row}messages) + COALESCE(octet_length({row}ids), 0)"
)
#: What a web conversation row holds, in bytes (SQL).
CONVERSATION_BYTES = "octet_length({row}state)"

#: Advisory lock keys (``pg_advisory_xact_lock``), one namespace per purpose: migrating; the
#: writers' shared lock and eviction's exclusive one (:mod:`.postgres`); pruning by age. Each
#: key's data is locked under ``hashtextextended(owner, OWNER_SEED)``.
MIGRATE_LOCK = 0x63686D01
WRITE_LOCK = 0x63686D02
PRUNE_LOCK = 0x63686D03
OWNER_SEED = 0x63686D04


def _usage_triggers(table: str, size: str) -> tuple[str, ...]:
    """Statement triggers that keep ``usage`` as rows of ``table`` come, change and go: one
    update per key a statement touches (an eviction deleting thousands of rows updates its
    key's total once), from the statement's transition tables."""
    added = (
        f"INSERT INTO {SCHEMA}.usage (owner, bytes) "
        f"SELECT r.owner, SUM({size.format(row='r.')}) FROM new_rows r GROUP BY r.owner "
        f"ON CONFLICT (owner) DO UPDATE SET bytes = {SCHEMA}.usage.bytes + excluded.bytes;"
    )
    removed = (
        f"UPDATE {SCHEMA}.usage u SET bytes = u.bytes - d.n FROM "
        f"(SELECT r.owner, SUM({size.format(row='r.')}) AS n FROM old_rows r GROUP BY r.owner) d "
        "WHERE u.owner = d.owner; "
        f"DELETE FROM {SCHEMA}.usage WHERE bytes <= 0 "
        "AND owner IN (SELECT owner FROM old_rows);"
    )
    statements: list[str] = []
    for event, body, tables in (
        ("insert", added, "NEW TABLE AS new_rows"),
        ("update", removed + " " + added, "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
        ("delete", removed, "OLD TABLE AS old_rows"),
    ):
        function = f"{SCHEMA}.{table}_usage_{event}"
        statements += [
            f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN {body} RETURN NULL; END $$",
            f"CREATE TRIGGER {table}_usage_{event} AFTER {event.upper()} ON {SCHEMA}.{table} "
            f"REFERENCING {tables} FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
        ]
    return tuple(statements)


#: Each migration takes the schema from its index to the next version.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
        f"CREATE TABLE {SCHEMA}.schema_version (version integer NOT NULL)",
        f"""CREATE TABLE {SCHEMA}.responses (
            id text PRIMARY KEY,
            owner text NOT NULL,
            previous_id text,
            created_at double precision NOT NULL,
            response text NOT NULL,
            input_items text NOT NULL,
            messages text NOT NULL,
            view text,
            ids_base integer,
            ids bytea,
            reply integer
        )""",
        # One key's responses oldest first (eviction; id breaks ties, as rowid does in
        # SQLite), all of them by age (pruning), and the responses continuing one (a chain's
        # descendants go with it).
        f"CREATE INDEX responses_owner_created ON {SCHEMA}.responses (owner, created_at, id)",
        f"CREATE INDEX responses_created ON {SCHEMA}.responses (created_at)",
        f"CREATE INDEX responses_previous ON {SCHEMA}.responses (previous_id)",
        f"""CREATE TABLE {SCHEMA}.conversations (
            id text NOT NULL,
            owner text NOT NULL,
            title text NOT NULL,
            updated_at double precision NOT NULL,
            state text NOT NULL,
            PRIMARY KEY (owner, id)
        )""",
        f"CREATE INDEX conversations_owner_updated ON {SCHEMA}.conversations "
        "(owner, updated_at, id)",
        f"CREATE INDEX conversations_updated ON {SCHEMA}.conversations (updated_at)",
        f"CREATE TABLE {SCHEMA}.usage (owner text PRIMARY KEY, bytes bigint NOT NULL)",
        *_usage_triggers("responses", RESPONSE_BYTES),
        *_usage_triggers("conversations", CONVERSATION_BYTES),
    ),
    # The stop token each exact reply ended on (ExactIds.stop), for training exports.
    (f"ALTER TABLE {SCHEMA}.responses ADD COLUMN stop integer",),
)

#: The schema version this chatfmt writes in PostgreSQL (its own sequence: SQLite's
#: :data:`~.connection.SCHEMA_VERSION` counts SQLite's history).
PG_SCHEMA_VERSION = len(MIGRATIONS)


def read_version(conn: Conn) -> int | None:
    """The store's schema version in this database (``None``: it holds no chatfmt store)."""
    row = conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.schema_version",)).fetchone()
    if row is None or row[0] is None:
        return None
    found = conn.execute(f"SELECT max(version) FROM {SCHEMA}.schema_version").fetchone()
    return None if found is None or found[0] is None else int(found[0])


def migrate(conn: Conn, migrations: Sequence[Sequence[str]] = MIGRATIONS) -> int:
    """Bring the database to ``len(migrations)``, each migration in a transaction of its own
    with its version, under :data:`MIGRATE_LOCK` (``conn`` in autocommit mode); the version it
    is at. ``StoreError`` when it is newer than this chatfmt knows."""
    target = len(migrations)
    version = read_version(conn) or 0
    if version < target:
        # Replicas starting together: one migrates, the others wait here, then read the
        # version it left. A session lock, taken before the transactions: a transaction begun
        # before another's DDL committed would not see its tables (the catalog is read
        # afresh when a transaction starts, not when an advisory lock is granted).
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK,))
        try:
            version = read_version(conn) or 0
            while version < target:
                with conn.transaction():
                    for statement in migrations[version]:
                        conn.execute(statement)  # no parameters: no placeholders are read
                    if version == 0:
                        conn.execute(f"INSERT INTO {SCHEMA}.schema_version VALUES (1)")
                    else:
                        conn.execute(
                            f"UPDATE {SCHEMA}.schema_version SET version = %s", (version + 1,)
                        )
                version += 1
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK,))
    if version > target:
        raise StoreError(
            f"schema version {version} is newer than this chatfmt knows ({target}); use the "
            "chatfmt that wrote it, or --no-store"
        )
    return version
