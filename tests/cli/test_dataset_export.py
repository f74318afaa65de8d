"""``chatfmt dataset export``: its columns in Parquet, filters by key and date, and the errors
that stop it before anything is written (exit status 2, the problem and the fix named)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chatfmt.cli.dataset import owner_hash, parse_date
from chatfmt.cli.main import main
from chatfmt.store import ExactIds, NewResponse, ResponseStore, owner_of

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is missing (chatfmt[dataset])")


def export(*argv: str) -> int:
    return main(["dataset", "export", *argv])


def a_store(path: Path, stop: int | None = 9) -> Path:
    store = ResponseStore(path)
    say = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    body = {"id": "resp_1", "object": "response", "previous_response_id": None}
    store.put(
        owner_of("key-a"), NewResponse(body, [], say, ExactIds("v", 0, [5, 6, 7, 8], 2, stop))
    )
    store.close()
    return path


def test_parquet_columns(tmp_path: Path) -> None:
    store = a_store(tmp_path / "r.sqlite3")
    out = tmp_path / "out.parquet"
    assert export("--store", str(store), "-o", str(out)) == 0
    table = pq.read_table(out)
    assert table.column_names == [
        "id", "owner", "created_at", "kind", "source", "input_ids", "labels",
        "attention_mask", "num_tokens", "num_trained",
    ]  # fmt: skip
    [row] = table.to_pylist()
    # The stored ids, then the stop token the reply ended on: trained with the reply.
    assert row["input_ids"] == [5, 6, 7, 8, 9] and row["labels"] == [-100, -100, 7, 8, 9]
    assert (row["id"], row["owner"], row["source"]) == ("resp_1", owner_of("key-a"), "exact")
    assert row["num_tokens"] == 5 and row["num_trained"] == 3


def test_rows_stored_before_stops_were_kept_are_counted(tmp_path: Path, capsys: Any) -> None:
    store = a_store(tmp_path / "r.sqlite3", stop=None)
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    assert export("--store", str(store), "-o", str(out), "--report", str(report)) == 0
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["input_ids"] == [5, 6, 7, 8] and row["labels"] == [-100, -100, 7, 8]
    assert "ending without their last stop token" in capsys.readouterr().err
    assert json.loads(report.read_text())["exact_without_stop"] == 1


def test_owner_and_dates(tmp_path: Path) -> None:
    store = a_store(tmp_path / "r.sqlite3")
    out = tmp_path / "out.jsonl"
    for owner, rows in (("key-a", 1), (owner_of("key-a"), 1), ("key-b", 0), ("", 0)):
        assert export("--store", str(store), "-o", str(out), "--owner", owner) == 0
        assert len(out.read_text().splitlines()) == rows
    assert export("--store", str(store), "-o", str(out), "--since", "2999-01-01") == 0
    assert out.read_text() == ""
    assert owner_hash("key-a") == owner_of("key-a") and owner_hash("") == ""
    # --until takes a day alone through its end; a time or zone as given.
    assert parse_date("2025-05-01", "--until", end_of_day=True) == parse_date(
        "2025-05-02T00:00", "--until"
    )
    assert parse_date("2025-05-01T02:00+02:00", "--since") == parse_date("2025-05-01", "--since")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--store", "mysql://u@h/db"], "no store backend for mysql:// URLs"),
        (["--store", "{missing}"], "no response store at"),
        (["--store", "{store}", "--dialect", "qwen2.5"], "--dialect and --tokenizer go together"),
        (["--store", "{store}", "--include-web"], "--include-web needs --dialect and --tokenizer"),
        (["--store", "{store}", "--since", "yesterday"], "--since 'yesterday' is not a date"),
        (["--store", "{notastore}"], "is not a readable SQLite database"),
        (["--store", "{store}", "--dialect", "nope", "--tokenizer", "qwen2.5"], "nope"),
    ],
)
def test_errors_exit_2_and_write_nothing(
    tmp_path: Path, capsys: Any, argv: list[str], message: str
) -> None:
    places = {
        "store": str(a_store(tmp_path / "r.sqlite3")),
        "missing": str(tmp_path / "nothing.sqlite3"),
        "notastore": str(tmp_path / "junk.sqlite3"),
    }
    (tmp_path / "junk.sqlite3").write_bytes(b"not a database, " * 100)
    out = tmp_path / "out.parquet"
    code = export(*[a.format(**places) for a in argv], "-o", str(out))
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "out.parquet.partial").exists()
    assert not (tmp_path / "nothing.sqlite3").exists()  # not created by looking for it
