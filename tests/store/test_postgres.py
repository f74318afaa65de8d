"""The PostgreSQL backend under concurrent writers (threads with pools of their own, and
processes, as replicas are): nothing written is lost, every kept response continues a whole
chain, what each key stores adds up, and eviction stays fair and within the limit."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from chatfmt.errors import BrokenChain, StoreFull
from chatfmt.store import ExactIds, NewResponse, PostgresStore

from .helpers import response, rows

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

SAY = [{"role": "user", "content": "x" * 200}]


@pytest.fixture
def url(postgres_server: Any) -> str:
    return str(postgres_server.database())


def together(*work: Callable[[], None]) -> None:
    """Run each callable on a thread of its own, all started at once; re-raise any error."""
    start = threading.Barrier(len(work))
    errors: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        start.wait()
        try:
            job()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def check_consistent(store: PostgresStore) -> None:
    """Every kept response's predecessor is kept, and the usage totals are the rows' sums."""
    orphans = rows(
        store,
        "SELECT r.id FROM responses r WHERE r.previous_id IS NOT NULL AND NOT EXISTS "
        "(SELECT 1 FROM responses p WHERE p.id = r.previous_id)",
    )
    assert orphans == []
    sums = dict(
        rows(
            store,
            "SELECT owner, SUM(n) FROM (SELECT owner, octet_length(response) + "
            "octet_length(input_items) + octet_length(messages) + "
            "COALESCE(octet_length(ids), 0) AS n FROM responses UNION ALL "
            "SELECT owner, octet_length(state) FROM conversations) t GROUP BY owner",
        )
    )
    assert dict(rows(store, "SELECT owner, bytes FROM usage")) == sums


def test_two_stores_writing_one_keys_chains_lose_nothing(url: str) -> None:
    """Two stores (two pools, as two replicas) continue the same key's chains turn by turn,
    and save its web conversations, at the same time: every write is there afterwards."""
    a, b = PostgresStore(url), PostgresStore(url)

    def chains(store: PostgresStore, side: str) -> Callable[[], None]:
        def run() -> None:
            for n in range(4):  # four chains of ten turns each, exact ids on every turn
                previous = None
                for turn in range(10):
                    rid = f"{side}-{n}-{turn}"
                    exact = ExactIds(f"v{rid}", 3 * turn, [turn] * 3, 1)
                    store.put("k", NewResponse(response(rid, previous), [], SAY, exact))
                    previous = rid
                store.save_conversation("k", f"{side}-c{n}", "t", {"messages": SAY})

        return run

    together(chains(a, "a"), chains(b, "b"), chains(a, "c"), chains(b, "d"))
    assert a.count() == 160 and len(b.conversations("k", limit=100)) == 16
    for side in "abcd":
        found = b.chain("k", f"{side}-3-9")
        assert found is not None and len(found.messages) == 10
        assert found.ids == [t for t in range(10) for _ in range(3)]
    check_consistent(a)
    a.close()
    b.close()


def test_processes_writing_at_once_lose_nothing(url: str) -> None:
    """Three processes write 40 responses each (chains of one key, and a key each): all 120
    are there, as the usage totals say."""
    PostgresStore(url).close()  # migrated once, before they start
    code = (
        "import sys\n"
        "from chatfmt.store import NewResponse, PostgresStore\n"
        "s = PostgresStore(sys.argv[1]); me = sys.argv[2]\n"
        "for i in range(40):\n"
        "    owner = 'shared' if i % 2 else me\n"
        "    prev = f'{me}-{i - 2}' if i % 8 > 1 else None  # chains of four, one owner each\n"
        "    s.put(owner, NewResponse({'id': f'{me}-{i}', 'previous_response_id': prev}))\n"
        "s.close()\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, url, f"p{i}"], stderr=subprocess.PIPE)
        for i in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    store = PostgresStore(url)
    assert store.count() == 120
    check_consistent(store)
    store.close()


def test_a_delete_racing_a_continuation_never_leaves_a_broken_response(url: str) -> None:
    """One key's writes run one at a time: a continuation either lands before its chain's
    deletion (and goes with the key's data) or finds the chain gone (and is not kept)."""
    writer, deleter = PostgresStore(url), PostgresStore(url)
    for round_ in range(15):
        owner = f"o{round_}"
        writer.put(owner, NewResponse(response(f"{owner}-1"), [], SAY))
        refused: list[bool] = []

        def continue_it(owner: str = owner, refused: list[bool] = refused) -> None:
            try:
                writer.put(owner, NewResponse(response(f"{owner}-2", f"{owner}-1"), [], SAY))
            except BrokenChain:
                refused.append(True)

        def delete_all(owner: str = owner) -> None:
            deleter.delete_owner(owner)

        together(continue_it, delete_all)
        left = rows(writer, "SELECT id FROM responses WHERE owner = ?", owner)
        assert left == [], (round_, left, refused)
    check_consistent(writer)
    writer.close()
    deleter.close()


def test_concurrent_writers_past_the_limit_evict_fairly(url: str) -> None:
    """Four writers (two stores) fill a small store at once: eviction runs alone (the
    exclusive write lock), so the store ends within its limit, nothing half-evicted, every
    key's newest response kept; a key writing one conversation past the limit gets StoreFull."""
    limit_mb = 0.5
    stores = [PostgresStore(url, max_mb=limit_mb) for _ in range(2)]
    big = [{"role": "user", "content": "y" * 5_000}]

    def fill(store: PostgresStore, owner: str) -> Callable[[], None]:
        def run() -> None:
            for i in range(60):
                store.put(owner, NewResponse(response(f"{owner}-{i}"), [], big))

        return run

    together(*(fill(stores[i % 2], f"key{i}") for i in range(4)))
    info = stores[0].info()
    assert info["bytes_used"] <= limit_mb * 1024 * 1024, info
    for i in range(4):
        assert stores[1].get(f"key{i}", f"key{i}-59") is not None
    per_key = dict(rows(stores[0], "SELECT owner, bytes FROM usage"))
    # Eviction levels the keys; between evictions (a twentieth of the limit written) they
    # grow as they write, so they end apart by at most that step and a row.
    step = limit_mb * 1024 * 1024 / 20
    assert max(per_key.values()) - min(per_key.values()) <= step + 5_200, per_key
    check_consistent(stores[0])
    previous = None
    with pytest.raises(StoreFull):
        for i in range(200):
            stores[0].put("hog", NewResponse(response(f"hog-{i}", previous), [], big))
            previous = f"hog-{i}"
    for store in stores:
        store.close()


def test_a_write_waits_for_a_stalled_lock_holder_only_so_long(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica frozen while it holds the exclusive write lock (its connection open) makes
    other replicas' writes fail after ``lock_timeout`` instead of hanging, and PostgreSQL ends
    such an idle transaction of a pooled session after ``idle_in_transaction_session_timeout``."""
    import time

    import psycopg

    from chatfmt.errors import StoreError
    from chatfmt.store import postgres
    from chatfmt.store.pg_schema import WRITE_LOCK

    monkeypatch.setattr(
        postgres,
        "SESSION_SETTINGS",
        (("lock_timeout", "1s"), ("idle_in_transaction_session_timeout", "2s")),
    )
    store = PostgresStore(url)
    with store._pool.connection() as conn:
        shown = conn.execute(
            "SELECT current_setting('lock_timeout'), "
            "current_setting('idle_in_transaction_session_timeout')"
        ).fetchone()
    assert shown == ("1s", "2s")
    with psycopg.connect(url) as holder:  # the frozen replica: a transaction left open
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        started = time.monotonic()
        with pytest.raises(StoreError, match="lock timeout"):
            store.put("o", NewResponse(response("r1"), [], SAY))
        assert time.monotonic() - started < 10
    store.put("o", NewResponse(response("r1"), [], SAY))  # the lock gone, writes go on
    # A pooled session that sits in a transaction is ended by the server, its locks freed.
    with store._pool.connection() as conn:
        conn.autocommit = False
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        time.sleep(3)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            conn.execute("SELECT 1")
    store.put("o", NewResponse(response("r2", "r1"), [], SAY))
    store.close()


def test_a_refused_vacuum_after_deleting_a_key_is_reported(postgres_server: Any) -> None:
    """A role that may delete rows but does not own the tables: PostgreSQL skips the vacuum
    with a warning, not an error; delete_owner says so (the rows are gone, their bytes not)."""
    from chatfmt.errors import StoreError

    url = postgres_server.database()
    PostgresStore(url).close()  # created by the tables' owner
    role = "clerk_" + url.rsplit("_", 1)[-1]
    for sql in (
        f"CREATE ROLE {role} LOGIN",
        f"GRANT USAGE ON SCHEMA chatfmt TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA chatfmt TO {role}",
    ):
        postgres_server.execute(url, sql)
    store = PostgresStore(url.replace("postgres@", f"{role}@", 1))
    store.put("k", NewResponse(response("r1"), [], SAY))
    with pytest.raises(StoreError, match=r"rows are deleted, but vacuuming .* skipping"):
        store.delete_owner("k")
    assert store.get("k", "r1") is None
    store.close()


def test_store_info_reads_on_a_read_only_session(url: str) -> None:
    from chatfmt.store import postgres

    PostgresStore(url).close()
    assert postgres._looking(
        url, lambda conn: conn.execute("SHOW transaction_read_only").fetchone()
    ) == ("on",)
