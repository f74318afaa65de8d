"""The age and size limits: old rows go as new ones come; past the size limit the oldest go,
from the keys that store the most, indexed and in a few statements; the write-ahead log
counts against the limit, so the files on disk stay within it."""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
from pathlib import Path

import pytest

from chatfmt.errors import StoreFull
from chatfmt.store import NewResponse, ResponseStore, owner_of
from chatfmt.store.policy import _level

from .helpers import MakeStore, on_disk, response, rows

MB = 1024 * 1024


def test_old_rows_go_when_new_ones_come(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(max_age_days=1)
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now - 2 * 86400)
    store.put("o", NewResponse(response("resp_old"), [], []))
    store.save_conversation("o", "c_old", "t", {})
    monkeypatch.setattr(time, "time", lambda: now)
    store.put("o", NewResponse(response("resp_new"), [], []))
    assert store.get("o", "resp_old") is None and store.get("o", "resp_new") is not None
    assert store.load_conversation("o", "c_old") is None


def test_the_size_limit_deletes_the_oldest_first(make_store: MakeStore) -> None:
    store = make_store(max_mb=0.25)
    text = "y" * 20_000
    for i in range(40):
        store.put("o", NewResponse(response(f"r{i}"), [], [{"role": "user", "content": text}]))
    info = store.info()
    assert info["bytes_used"] <= 0.25 * MB
    assert 0 < info["responses"] < 40
    assert store.get("o", "r39") is not None and store.get("o", "r0") is None


def test_the_size_limit_takes_from_the_key_that_stores_the_most(make_store: MakeStore) -> None:
    store = make_store(max_mb=0.5)
    alice, bob = owner_of("a"), owner_of("b")
    say = [{"role": "user", "content": "y" * 10_000}]
    for i in range(20):
        store.put(alice, NewResponse(response(f"a{i}"), [], say))
    for i in range(40):  # Bob writes twice as much, two responses a conversation
        store.put(bob, NewResponse(response(f"b{i}", f"b{i - 1}" if i % 2 else None), [], say))
    kept_rows = rows(store, "SELECT owner, id, previous_id FROM responses")
    kept = {o: [i for oo, i, _ in kept_rows if oo == o] for o in (alice, bob)}
    # Bob's oldest went, not all of Alice's; his newest conversation is whole.
    assert len(kept[alice]) >= 10 and "a19" in kept[alice], kept
    assert "b0" not in kept[bob] and {"b38", "b39"} <= set(kept[bob])
    # A conversation goes with its start: no response is left continuing a gone one.
    ids = {i for _, i, _ in kept_rows}
    assert all(p is None or p in ids for _, _, p in kept_rows)
    assert store.info()["bytes_used"] <= 0.5 * MB


def test_web_conversations_and_responses_go_oldest_first_together(make_store: MakeStore) -> None:
    store = make_store(max_mb=0.5)
    state = {"messages": [{"content": "z" * 10_000}]}
    say = [{"role": "user", "content": "z" * 10_000}]
    for i in range(30):
        store.save_conversation("o", f"c{i}", "t", state)
        store.put("o", NewResponse(response(f"r{i}"), [], say))
    webs = [c["id"] for c in store.conversations("o", limit=1000)]
    kept = {i for (i,) in rows(store, "SELECT id FROM responses")}
    assert "c29" in webs and "r29" in kept and "c0" not in webs and "r0" not in kept
    # What is left is the newest of both kinds: the cut is one point in time.
    first_web = min(int(c[1:]) for c in webs)
    first_response = min(int(r[1:]) for r in kept)
    assert abs(first_web - first_response) <= 1


def test_a_key_whose_one_conversation_outgrows_the_store_evicts_no_one(
    make_store: MakeStore,
) -> None:
    store = make_store(max_mb=0.5)
    alice, bob = owner_of("a"), owner_of("b")
    say = [{"role": "user", "content": "y" * 10_000}]
    for i in range(10):
        store.put(bob, NewResponse(response(f"b{i}"), [], say))
    store.save_conversation(bob, "c1", "Bob's", {"messages": say})
    previous = None
    with pytest.raises(StoreFull, match="--store-max-mb"):
        for i in range(120):  # Alice continues one conversation, turn after turn
            store.put(alice, NewResponse(response(f"a{i}", previous), [], say))
            previous = f"a{i}"
    # Alice's conversation stopped being kept; Bob's data is all there.
    assert all(store.get(bob, f"b{i}") is not None for i in range(10))
    assert store.load_conversation(bob, "c1") is not None
    assert store.chain(alice, previous) is not None  # type: ignore[arg-type]
    assert store.info()["bytes_used"] <= 0.5 * MB


def test_the_level_frees_what_is_asked_from_the_largest_first() -> None:
    assert _level([100, 50, 10], 30) == 70  # only the largest gives
    assert _level([100, 50, 10], 110) == 20  # both larger ones come down to one level
    assert _level([100, 50, 10], 1000) == 0  # everything
    for usage, amount in (([7, 7, 7], 5), ([1, 2, 3, 40], 41), ([5], 5)):
        level = _level(usage, amount)
        assert sum(max(0, u - level) for u in usage) >= amount
        assert sum(max(0, u - level - 1) for u in usage) < amount or level == 0


def fill_conversations(path: Path, owner: str, n: int) -> None:
    """``n`` web conversations of ~1 KB, written straight into the file (fast)."""
    ResponseStore(path).close()
    state = json.dumps({"messages": [{"content": "x" * 900}]})
    start = time.time() - 3600
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO conversations VALUES (?, ?, 't', ?, ?)",
            ((f"conv-{i:06d}", owner, start + i * 1e-3, state) for i in range(n)),
        )


def test_eviction_is_indexed_and_set_based(tmp_path: Path) -> None:
    """Evicting thousands of conversations reads them in index order and deletes them in a
    few statements: no statement per conversation, no sort (each evicted conversation cost
    a sort of all of its key's before)."""
    path = tmp_path / "r.sqlite3"
    fill_conversations(path, "o", 5000)
    store = ResponseStore(path, max_mb=4)
    statements: list[str] = []
    store._database.db.set_trace_callback(statements.append)
    store.save_conversation("o", "conv-new", "t", {"messages": []})
    store._database.db.set_trace_callback(None)
    evicted = 5001 - store.info()["conversations"]
    assert evicted > 1000, evicted
    # The trace repeats a statement for each statement of its triggers (one per row): what
    # the store issued is the runs of the same statement.
    issued = [sql for sql, _ in itertools.groupby(statements)]
    assert len(issued) < 30, issued
    db = store._database.db
    for sql in issued:
        if sql.lstrip().upper().startswith(("SELECT", "WITH", "DELETE")):
            plan = " ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + sql))
            # No sort, and no pass over every row (what each key stores is kept by triggers).
            assert "TEMP B-TREE" not in plan and "SCAN conversations" not in plan, (sql, plan)
    # The oldest went: the newest are all there.
    kept = {c["id"] for c in store.conversations("o", limit=10_000)}
    assert {f"conv-{i:06d}" for i in range(5000 - 500, 5000)} <= kept
    assert "conv-000000" not in kept and "conv-new" in kept


def test_the_files_on_disk_stay_within_the_limit(tmp_path: Path) -> None:
    """The write-ahead log counts: past a twentieth of the limit, and after an eviction, a
    checkpoint empties it (it used to grow to twice the limit and stay)."""
    path = tmp_path / "r.sqlite3"
    store = ResponseStore(path, max_mb=4)
    say = [{"role": "user", "content": "y" * 10_000}]
    state = {"messages": say}
    most = 0
    for i in range(1200):  # three times the limit
        if i % 3:
            store.put("o", NewResponse(response(f"r{i}"), [], say))
        else:
            store.save_conversation("p", f"c{i}", "t", state)
        most = max(most, on_disk(path))
    assert most <= 4 * MB, most / MB
    assert store.info()["disk_bytes"] <= 4 * MB
    assert store.info()["responses"] > 100  # and most of the limit is still used


def test_what_each_key_stores_is_kept_as_rows_come_and_go(make_store: MakeStore) -> None:
    """The triggers' totals (what eviction reads instead of summing every row) are the sums."""
    store = make_store(max_mb=0.5)
    say = [{"role": "user", "content": "y" * 7_000}]
    for i in range(60):
        owner = ("a", "b", "c")[i % 3]
        store.put(owner, NewResponse(response(f"r{i}"), [{"id": "x"}], say))
        store.save_conversation(owner, f"c{i % 7}", "t", {"messages": say[: i % 2]})
        if i % 5 == 0:
            store.delete(owner, f"r{i}")
            store.delete_conversation(owner, f"c{(i + 3) % 7}")
    store.delete_owner("c")
    rows(store, "UPDATE responses SET input_items = '[]' WHERE id = 'r1'")  # changed in place
    if isinstance(store, ResponseStore):
        size = (
            "length(CAST(response AS BLOB)) + length(CAST(input_items AS BLOB)) + "
            "length(CAST(messages AS BLOB)) + length(CAST(conversation AS BLOB))"
        )
        web = "length(CAST(state AS BLOB))"
    else:  # PostgreSQL has no whole-conversation column (no version-1 rows to read)
        size = "octet_length(response) + octet_length(input_items) + octet_length(messages)"
        web = "octet_length(state)"
    sums = dict(
        rows(
            store,
            f"SELECT owner, SUM(n) FROM (SELECT owner, {size} AS n FROM responses UNION ALL "
            f"SELECT owner, {web} FROM conversations) AS t GROUP BY owner",
        )
    )
    assert dict(rows(store, "SELECT owner, bytes FROM usage")) == sums
    assert set(sums) == {"a", "b"}  # a key with nothing left has no row
