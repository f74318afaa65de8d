"""The PostgreSQL store's schema: versioned, migrated on open, each migration in one
transaction with its version, once when replicas open a database together; a newer schema
refused with the fix."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from chatfmt.errors import StoreUnavailable
from chatfmt.store import PG_SCHEMA_VERSION, NewResponse, PostgresStore
from chatfmt.store.pg_schema import MIGRATIONS, migrate, read_version

from .helpers import response, rows

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")


@pytest.fixture
def url(postgres_server: Any) -> str:
    return str(postgres_server.database())


def test_a_new_database_is_migrated_and_reopening_keeps_the_data(url: str) -> None:
    with psycopg.connect(url) as conn:
        assert read_version(conn) is None  # no store yet
    store = PostgresStore(url)
    store.put("o", NewResponse(response("r1"), [{"id": "m1"}], [{"role": "user", "content": "hi"}]))
    store.close()
    again = PostgresStore(url)
    assert again.conversation("o", "r1") == [{"role": "user", "content": "hi"}]
    assert again.info()["schema_version"] == PG_SCHEMA_VERSION == len(MIGRATIONS)
    assert rows(again, "SELECT version FROM schema_version") == [(PG_SCHEMA_VERSION,)]
    # The store's tables live in a schema of their own, apart from the database's others.
    tables = rows(again, "SELECT tablename FROM pg_tables WHERE schemaname = 'chatfmt' ORDER BY 1")
    assert tables == [("conversations",), ("responses",), ("schema_version",), ("usage",)]
    again.close()


def test_a_later_migration_runs_once_and_a_failing_one_changes_nothing(url: str) -> None:
    PostgresStore(url).close()
    later = (*MIGRATIONS, ("ALTER TABLE chatfmt.responses ADD COLUMN note text",))
    with psycopg.connect(url, autocommit=True) as conn:
        assert migrate(conn, later) == len(MIGRATIONS) + 1
        assert migrate(conn, later) == len(MIGRATIONS) + 1  # nothing left to do
        broken = (*later, ("CREATE TABLE chatfmt.extra (x int)", "SELECT no_such_function()"))
        with pytest.raises(psycopg.errors.UndefinedFunction):
            migrate(conn, broken)
        assert read_version(conn) == len(MIGRATIONS) + 1
        found = conn.execute("SELECT to_regclass('chatfmt.extra')").fetchone()
        assert found == (None,)  # the migration's first statement was rolled back too


def test_a_newer_schema_is_refused_with_the_fix(url: str) -> None:
    PostgresStore(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE chatfmt.schema_version SET version = 99")
    with pytest.raises(StoreUnavailable, match=r"newer than this chatfmt knows.*--no-store"):
        PostgresStore(url)


def test_replicas_opening_a_new_database_together_migrate_it_once(url: str) -> None:
    """Four processes open the store at once: one migrates (under the advisory lock), the
    others wait and find it done; none fails on a table another just created."""
    code = (
        "import sys; from chatfmt.store import NewResponse, PostgresStore; "
        "s = PostgresStore(sys.argv[1]); s.put('o', NewResponse({'id': sys.argv[2], "
        "'previous_response_id': None})); s.close()"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, url, f"r{i}"], stderr=subprocess.PIPE, text=True
        )
        for i in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    store = PostgresStore(url)
    assert store.count() == 4
    assert rows(store, "SELECT version FROM schema_version") == [(PG_SCHEMA_VERSION,)]
    store.close()


def test_an_unreachable_server_is_named_without_its_password() -> None:
    url = "postgresql://app:s3cret-pw@127.0.0.1:9/chat?connect_timeout=2"
    with pytest.raises(StoreUnavailable) as info:
        PostgresStore(url)
    message = str(info.value)
    assert "s3cret-pw" not in message and "app:***@127.0.0.1:9" in message
    assert "--no-store" in message
