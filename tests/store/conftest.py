"""Every store test on both backends: ``make_store(**limits)`` opens the test's store, a SQLite
file or a database on the session's PostgreSQL server (``postgres_server`` in
tests/conftest.py), the same one each time it is called in a test; all are closed after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatfmt.store import open_store

from .helpers import MakeStore


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def location(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the test's store lives: a SQLite file's path, or a new database's URL."""
    if backend == "sqlite":
        return str(tmp_path / "r.sqlite3")
    server: Any = request.getfixturevalue("postgres_server")
    return str(server.database())


@pytest.fixture
def make_store(location: str) -> Iterator[MakeStore]:
    opened: list[Any] = []

    def make(**limits: Any) -> Any:
        store = open_store(location, **limits)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()
