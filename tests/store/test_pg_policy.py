"""Eviction in PostgreSQL reads a key's rows a page at a time, oldest first, along its indexes
and deletes what it chose in one statement per kind: thousands of rows evicted in a few dozen
statements, not one per row."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from chatfmt.store import PostgresStore

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")


def test_evicting_thousands_takes_a_few_statements(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres_server.database()
    PostgresStore(url).close()
    state = json.dumps({"messages": [{"content": "x" * 900}]})
    start = time.time() - 3600
    with psycopg.connect(url) as conn:  # one statement: its triggers run once
        conn.execute(
            "INSERT INTO chatfmt.conversations SELECT 'conv-' || lpad(i::text, 6, '0'), "
            "'o', 't', %s + i * 1e-3, %s FROM generate_series(0, 4999) AS i",
            (start, state),
        )
    store = PostgresStore(url, max_mb=3)
    issued: list[str] = []
    execute = psycopg.Connection.execute

    def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        issued.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counted)
    store.save_conversation("o", "conv-new", "t", {"messages": []})
    monkeypatch.undo()
    left = store.info()["conversations"]
    assert 5001 - left > 1000, left
    assert len(issued) < 40, issued
    kept = {c["id"] for c in store.conversations("o", limit=10_000)}
    assert {f"conv-{i:06d}" for i in range(4500, 5000)} <= kept
    assert "conv-000000" not in kept and "conv-new" in kept
    assert store.info()["bytes_used"] <= 3 * 1024 * 1024
    store.close()
