"""Which backend ``--store`` names: a PostgreSQL URL, a SQLite path, or an error for any other
scheme (it used to become a folder named after the scheme); a URL shown without its
password."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatfmt.errors import StoreError
from chatfmt.store import is_postgres, open_store, redact


def test_postgres_urls_and_paths() -> None:
    for url in ("postgresql://u@h/db", "postgres://u:p@h:5433/db", "POSTGRESQL://h/db"):
        assert is_postgres(url)
    for path in ("r.sqlite3", "/var/lib/chatfmt/r.sqlite3", "C:\\data\\r.sqlite3", "a:b/c"):
        assert not is_postgres(path)
    assert not is_postgres(Path("postgresql://x"))  # a Path is a path, whatever it reads


@pytest.mark.parametrize("url", ["mysql://u:hunter2@h/db", "http://h/x", "sqlite:///r.db"])
def test_another_scheme_is_refused_naming_the_fix(url: str, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"no store backend for \w+:// URLs.*postgresql://") as e:
        open_store(url)
    assert "hunter2" not in str(e.value)
    assert not Path(url.split("://")[0] + ":").exists()  # no folder named after the scheme


def test_a_password_is_never_shown() -> None:
    assert redact("postgresql://app:s3cret@db:5432/chat") == "postgresql://app:***@db:5432/chat"
    assert redact("postgresql://app@db/chat") == "postgresql://app@db/chat"
    shown = redact("postgres://db/chat?user=app&password=s3cret&sslmode=require")
    assert "s3cret" not in shown and "password=***" in shown and "sslmode=require" in shown
    assert redact("postgresql://a:p%40ss@h/db") == "postgresql://a:***@h/db"
    assert redact("/tmp/r.sqlite3") == "/tmp/r.sqlite3"
