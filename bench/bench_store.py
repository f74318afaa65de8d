"""The response store at its size limit: how long one write that evicts takes, and how much
disk the store takes against ``--store-max-mb``.

    python bench/bench_store.py [--limits 4 16 64] [--json OUT] [--before FILE] [--write]

- **Eviction**: a store filled by one key with web conversations of about 1 KB, just past the
  limit; the time of that key's next save, which evicts its oldest conversations (what one
  ``PUT /api/conversations/{id}`` waits for, and, before the store had its own threads, every
  request waiting for a thread beside it).
- **Disk**: responses of about 10 KB written through the store, three times the limit in
  all; the most the store's files (database, write-ahead log, its index) took on disk.

Run it from another tree (``PYTHONPATH=<tree>/src``, ``--json before.json``) and here with
``--before before.json`` for the before/after table (``--results FILE``: results measured
before, written without measuring again).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    from chatfmt.store import ResponseStore
except ImportError:  # a tree from before the store package
    from chatfmt.server.store import ResponseStore  # type: ignore[no-redef]


def put(store: Any, response: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    try:
        from chatfmt.store import NewResponse
    except ImportError:  # a tree from before the store took one record
        store.put("owner-a", response, [], messages)
    else:
        store.put("owner-a", NewResponse(response, [], messages))


STATE = {"messages": [{"role": "user", "content": "x" * 900}], "mode": "chat", "system": ""}


def used_bytes(path: Path) -> int:
    with sqlite3.connect(path) as db:
        size, pages, free = (
            db.execute(f"PRAGMA {n}").fetchone()[0]
            for n in ("page_size", "page_count", "freelist_count")
        )
    return int(size * (pages - free))


def fill(path: Path, owner: str, target: int) -> int:
    """``owner``'s conversations of ~1 KB until ``target`` bytes are in use; how many."""
    ResponseStore(path, max_mb=None).close()  # the schema this tree writes
    state = json.dumps(STATE)
    n = 0
    with sqlite3.connect(path) as db:
        while True:
            rows = [
                (f"conv-{n + i:08d}", owner, "t", time.time() - 3600 + (n + i) * 1e-4, state)
                for i in range(250)
            ]
            db.executemany("INSERT INTO conversations VALUES (?, ?, ?, ?, ?)", rows)
            db.commit()
            n += len(rows)
            if used_bytes(path) >= target:
                return n


def eviction(limit_mb: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.sqlite3"
        before = fill(path, "owner-a", int(limit_mb * 1024 * 1024 * 1.02))
        store = ResponseStore(path, max_mb=limit_mb)
        start = time.perf_counter()
        store.save_conversation("owner-a", "conv-new", "t", STATE)
        took = time.perf_counter() - start
        after = store.info()["conversations"]
        store.close()
    evicted = before + 1 - after
    return {"limit_mb": limit_mb, "seconds": took, "conversations": before, "evicted": evicted}


def disk(limit_mb: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.sqlite3"
        store = ResponseStore(path, max_mb=limit_mb)
        message = [{"role": "user", "content": "y" * 10_000}]
        most = 0
        for i in range(int(limit_mb * 1024 * 1024 * 3 / 10_000)):
            put(store, {"id": f"r{i}", "previous_response_id": None}, message)
            on_disk = sum(
                os.path.getsize(f)
                for f in (f"{path}", f"{path}-wal", f"{path}-shm")
                if os.path.exists(f)
            )
            most = max(most, on_disk)
        store.close()
    return {"limit_mb": limit_mb, "most_mb": most / 1024 / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limits", type=float, nargs="+", default=[4, 16, 64])
    ap.add_argument("--disk-limits", type=float, nargs="+", default=[4, 32])
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--before", type=Path, help="results of another tree, for the table")
    ap.add_argument("--results", type=Path, help="this tree's results, measured before")
    ap.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    args = ap.parse_args()
    if args.results:
        results = json.loads(args.results.read_text())
    else:
        results = {
            "eviction": [eviction(mb) for mb in args.limits],
            "disk": [disk(mb) for mb in args.disk_limits],
        }
    print(json.dumps(results, indent=2), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if not args.write:
        return
    before = json.loads(args.before.read_text()) if args.before else None

    def was(kind: str, limit: float, key: str) -> Any:
        rows = [] if before is None else [r for r in before[kind] if r["limit_mb"] == limit]
        return rows[0][key] if rows else None

    lines = [
        "One key's web conversations (~1 KB each) fill the store just past `--store-max-mb`;",
        "its next save evicts its oldest. Before: each evicted conversation sorted all of the",
        "key's conversations (no index on owner and time), under the store's lock, while waiting",
        "store calls filled the thread pool rendering uses. After (schema 5): an `(owner,",
        "updated_at)` index and each key's total kept by triggers; the oldest read in index",
        "order and deleted in a few statements; store calls on the store's own threads.",
        "Before: the store as of the commit before the",
        "store package (3cc3282), from `git archive` of that commit; both on this machine's 2",
        "shared cores, while another build ran. The fill stops at the first batch of 250 past",
        "the limit (schema 5's index takes room too); after evicts more (down to the log's",
        "reserve, below).",
        "",
        "| limit | conversations | save before | evicted | save after | evicted |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results["eviction"]:
        old = was("eviction", r["limit_mb"], "seconds")
        old_n = was("eviction", r["limit_mb"], "evicted")
        lines.append(
            f"| {r['limit_mb']:g} MB | {r['conversations']:,} | "
            f"{'—' if old is None else f'{old:.2f} s'} | "
            f"{'—' if old_n is None else f'{old_n:,}'} | "
            f"{r['seconds']:.3f} s | {r['evicted']:,} |"
        )
    lines += [
        "",
        "Responses of ~10 KB written through the store, three times the limit in all: the most",
        "its files took on disk (database, write-ahead log and its index). The log now counts",
        "against the limit (an eighth of it) and is emptied after evictions and past a twentieth.",
        "",
        "| limit | on disk at most, before | after |",
        "|---|---:|---:|",
    ]
    for r in results["disk"]:
        old = was("disk", r["limit_mb"], "most_mb")
        lines.append(
            f"| {r['limit_mb']:g} MB | {'—' if old is None else f'{old:.1f} MB'} | "
            f"{r['most_mb']:.1f} MB |"
        )
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import write_section

    write_section(
        "The response store at its size limit",
        "\n".join(lines),
        "bench/bench_store.py --before before.json --write",
    )


if __name__ == "__main__":
    main()
