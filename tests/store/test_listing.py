"""The export's reads, on both backends: every owner's rows a page at a time (keyset paging,
filters by key and time, each chain's last response), and a chain's exchanges with the exact
ids each row kept."""

from __future__ import annotations

from typing import Any

import pytest

from chatfmt.errors import BrokenChain
from chatfmt.store import ExactIds, ExportQuery, NewResponse, StoredRef

from .helpers import MakeStore, response, rows


def _at(store: object, rid: str, t: float) -> None:
    rows(store, "UPDATE responses SET created_at = ? WHERE id = ?", t, rid)


def _pages(store: object, limit: int, **filters: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    after: StoredRef | None = None
    while True:
        query = ExportQuery("responses", **filters)
        page = store.export_refs(query, after=after, limit=limit)  # type: ignore[attr-defined]
        if not page:
            return pages
        pages.append([r.id for r in page])
        after = page[-1]


def test_responses_page_by_time_owner_and_id(make_store: MakeStore) -> None:
    store = make_store(max_age_days=None)
    say = [{"role": "user", "content": "x"}]
    for owner, rid, previous, t in (
        ("a", "a1", None, 100.0),
        ("a", "a2", "a1", 200.0),
        ("b", "b1", None, 200.0),  # the same time as a2: owner breaks the tie
        ("b", "b2", None, 300.0),
        ("a", "a3", "a2", 400.0),
    ):
        store.put(owner, NewResponse(response(rid, previous), [], say))
        _at(store, rid, t)
    assert _pages(store, 2) == [["a1", "a2"], ["b1", "b2"], ["a3"]]
    # Each chain's last response: a1 and a2 are continued.
    assert _pages(store, 10, last_only=True) == [["b1", "b2", "a3"]]
    assert _pages(store, 10, owner="a") == [["a1", "a2", "a3"]]
    assert _pages(store, 10, since=200.0, until=400.0) == [["a2", "b1", "b2"]]
    [first] = store.export_refs(ExportQuery("responses"), limit=1)
    assert first == StoredRef("a", "a1", 100.0)


def test_web_conversations_page_too(make_store: MakeStore) -> None:
    store = make_store(max_age_days=None)
    for owner, cid in (("a", "c-one"), ("b", "c-two"), ("a", "c-three")):
        store.save_conversation(owner, cid, "t", {"messages": []})
    every = ExportQuery("conversations")
    found = store.export_refs(every, limit=2)
    found += store.export_refs(every, after=found[-1], limit=2)
    assert sorted((r.owner, r.id) for r in found) == [
        ("a", "c-one"),
        ("a", "c-three"),
        ("b", "c-two"),
    ]
    assert [r.id for r in store.export_refs(ExportQuery("conversations", owner="b"))] == ["c-two"]


def test_exchanges_give_each_rows_exact_ids(make_store: MakeStore) -> None:
    store = make_store()
    first = ExactIds("v1", 0, [1, 2, 3, 4], 2)
    second = ExactIds("v2", 4, [9, 5, 6, 7], 2)
    store.put("o", NewResponse(response("r1"), [], [{"role": "user", "content": "a"}], first))
    store.put(
        "o", NewResponse(response("r2", "r1"), [], [{"role": "user", "content": "b"}])
    )  # not kept
    store.put(
        "o", NewResponse(response("r3", "r2"), [], [{"role": "user", "content": "c"}], second)
    )
    found = store.exchanges("o", "r3")
    assert [e.id for e in found] == ["r1", "r2", "r3"]
    assert [e.exact for e in found] == [first, None, second]
    assert [e.messages for e in found] == [[{"role": "user", "content": c}] for c in "abc"]
    assert found[0].created_at <= found[2].created_at
    assert [e.id for e in store.exchanges("o", "r2")] == ["r1", "r2"]
    # Owners apart, and a chain that lost a link says so.
    assert store.exchanges("p", "r3") is None and store.exchanges("o", "nope") is None
    store.delete("o", "r1")
    with pytest.raises(BrokenChain, match=r"'r1'.*is gone"):
        store.exchanges("o", "r3")
