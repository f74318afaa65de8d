"""``chatfmt store`` on a real store file and on a PostgreSQL database, as an operator runs
it: what it holds, one key's data deleted (the other key's kept), pruning, and the errors that
name the fix (``--store`` of a scheme no backend serves among them)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from chatfmt.store import NewResponse, ResponseStore, open_store, owner_of


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatfmt.cli", "store", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def fill(location: Path | str) -> None:
    store = open_store(location)
    for key, n in (("alice-key", 3), ("bob-key", 2), (None, 1)):
        for i in range(n):
            rid = f"resp_{key}_{i}"
            body = {"id": rid, "previous_response_id": None, "output": []}
            store.put(
                owner_of(key), NewResponse(body, [], [{"role": "user", "content": f"{key} {i}"}])
            )
    store.save_conversation(owner_of("alice-key"), "c1", "Alice's chat", {"messages": []})
    store.close()


def test_info_delete_and_prune(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite3"
    fill(path)
    info = run("info", "--store", str(path))
    assert info.returncode == 0, info.stderr
    shown = json.loads(info.stdout)
    assert shown["responses"] == 6 and shown["conversations"] == 1
    assert shown["owners_with_responses"] == 3 and shown["schema_version"] == 6

    keys = tmp_path / "keys.txt"
    keys.write_text("# Alice asked for her data to be deleted\nalice-key\n")
    gone = run("delete", "--store", str(path), "--api-key-file", str(keys))
    assert gone.returncode == 0, gone.stderr
    assert "deleted 3 response(s) and 1 web chat conversation(s)" in gone.stdout
    store = ResponseStore(path)
    assert store.get(owner_of("alice-key"), "resp_alice-key_0") is None
    assert store.get(owner_of("bob-key"), "resp_bob-key_0") is not None
    store.close()
    assert b"alice-key 0" not in path.read_bytes()

    keyless = run("delete", "--store", str(path), "--no-key")
    assert "deleted 1 response(s)" in keyless.stdout
    kept = run("prune", "--store", str(path), "--max-age-days", "30")
    assert kept.stdout.strip() == "deleted 0 row(s) past the limits"
    # Rows from before the age limit go.
    with sqlite3.connect(path) as db:
        db.execute("UPDATE responses SET created_at = ?", (time.time() - 3 * 86400,))
    pruned = run("prune", "--store", str(path), "--max-age-days", "1")
    assert pruned.stdout.strip() == "deleted 2 row(s) past the limits"


def test_errors_name_the_fix(tmp_path: Path) -> None:
    missing = run("info", "--store", str(tmp_path / "nope.sqlite3"))
    assert missing.returncode == 2 and "--store PATH" in missing.stderr
    assert not (tmp_path / "nope.sqlite3").exists()  # looked at, never created
    path = tmp_path / "r.sqlite3"
    fill(path)
    unsaid = run("delete", "--store", str(path))
    assert unsaid.returncode == 2 and "--api-key" in unsaid.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    none = run("delete", "--store", str(path), "--api-key-file", str(empty))
    assert none.returncode == 2 and "holds no key" in none.stderr
    nothing = run("prune", "--store", str(path))
    assert nothing.returncode == 2 and "--max-age-days or --max-mb" in nothing.stderr
    negative = run("prune", "--store", str(path), "--max-mb", "-1")
    assert negative.returncode == 2 and "--max-mb must be positive" in negative.stderr
    outputs = [unsaid, none, missing, nothing, negative]
    # Not a store, or an older one: said, and the file is left as it was.
    empty_db = tmp_path / "empty.sqlite3"
    empty_db.touch()
    old = tmp_path / "old.sqlite3"
    with sqlite3.connect(old) as db:
        db.executescript("CREATE TABLE responses (id TEXT); PRAGMA user_version = 3;")
    before = old.read_bytes()
    for store, needle in ((empty_db, "not a chatfmt response store"), (old, "upgrade an older")):
        shown = run("info", "--store", str(store))
        assert shown.returncode == 2 and needle in shown.stderr, shown.stderr
        outputs.append(shown)
    assert empty_db.stat().st_size == 0 and old.read_bytes() == before
    assert all("Traceback" not in r.stderr for r in outputs)


def test_info_leaves_a_live_store_as_it_is(tmp_path: Path) -> None:
    """Beside a server writing (its rows still in the write-ahead log), ``info`` counts them
    and changes nothing: no checkpoint into the file, no new mode."""
    path = tmp_path / "r.sqlite3"
    live = ResponseStore(path)
    body = {"id": "resp_1", "previous_response_id": None, "output": []}
    live.put(owner_of("k"), NewResponse(body, [], [{"role": "user", "content": "hi"}]))
    path.chmod(0o640)
    before = path.read_bytes()
    shown = run("info", "--store", str(path))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["responses"] == 1
    assert path.read_bytes() == before and path.stat().st_mode & 0o777 == 0o640
    live.close()


# ==== On a PostgreSQL store (a URL), and --store's forms ====


def test_info_delete_and_prune_on_postgresql(postgres_server: Any, tmp_path: Path) -> None:
    """The same commands on a URL; its password is never printed."""
    url = postgres_server.database(password="hunter2-secret")
    fill(url)
    info = run("info", "--store", url)
    assert info.returncode == 0, info.stderr
    shown = json.loads(info.stdout)
    assert shown["responses"] == 6 and shown["conversations"] == 1
    assert shown["owners_with_responses"] == 3 and shown["url"].count("***") == 1
    keys = tmp_path / "keys.txt"
    keys.write_text("alice-key\n")
    gone = run("delete", "--store", url, "--api-key-file", str(keys))
    assert gone.returncode == 0, gone.stderr
    assert "deleted 3 response(s) and 1 web chat conversation(s)" in gone.stdout
    kept = run("prune", "--store", url, "--max-age-days", "30")
    assert kept.stdout.strip() == "deleted 0 row(s) past the limits", kept.stderr
    store = open_store(url)
    assert store.get(owner_of("bob-key"), "resp_bob-key_0") is not None
    assert store.get(owner_of("alice-key"), "resp_alice-key_0") is None
    store.close()
    empty = postgres_server.database(password="hunter2-secret")
    nothing = run("info", "--store", empty)
    assert nothing.returncode == 2 and "no response store in" in nothing.stderr
    for done in (info, gone, kept, nothing):
        assert "hunter2" not in done.stdout + done.stderr


def test_a_url_of_another_scheme_is_an_error_not_a_folder(tmp_path: Path) -> None:
    """``--store mysql://…`` used to create a folder named ``mysql:`` with a SQLite file in
    it; now serve and store both refuse it, naming the forms, and create nothing."""
    url = "mysql://app:hunter2@db.example/chat"
    shown = run("info", "--store", url, cwd=tmp_path)
    serve = subprocess.run(
        [sys.executable, "-m", "chatfmt.cli", "serve", "--store", url, "--no-web"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    for done in (shown, serve):
        assert done.returncode == 2, done.stderr
        assert "no store backend for mysql:// URLs" in done.stderr
        assert "postgresql://" in done.stderr and "hunter2" not in done.stderr
        assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_info_reads_with_the_urls_password(postgres_server: Any, monkeypatch: Any) -> None:
    """The URL is shown without its password but read with it (the test server trusts any
    password, so the URL ``info`` opens is checked: it once opened the masked one)."""
    import chatfmt.store
    from chatfmt.cli.main import main

    url = postgres_server.database(password="hunter2-secret")
    fill(url)
    opened: list[str] = []
    real = chatfmt.store.read_info

    def spy(location: str) -> dict[str, Any]:
        opened.append(str(location))
        return real(location)

    monkeypatch.setattr(chatfmt.store, "read_info", spy)
    assert main(["store", "info", "--store", url]) == 0
    assert opened == [url]
