"""The web chat's conversations: saved and replaced, listed newest first, per owner."""

from __future__ import annotations

import time

import pytest

from .helpers import MakeStore, rows


def test_save_replace_list_load_delete(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    now = time.time()
    for i, cid in enumerate(("c1", "c2", "c3")):
        monkeypatch.setattr(time, "time", lambda i=i: now + i)
        store.save_conversation("alice", cid, f"title {cid}", {"messages": [{"content": cid}]})
    monkeypatch.setattr(time, "time", lambda: now + 10)
    store.save_conversation("alice", "c1", "renamed", {"messages": []})  # replaced, newest now
    store.save_conversation("bob", "c1", "Bob's", {"messages": ["bob"]})
    listed = store.conversations("alice")
    assert [(c["id"], c["title"]) for c in listed] == [
        ("c1", "renamed"),
        ("c3", "title c3"),
        ("c2", "title c2"),
    ]
    assert [c["id"] for c in store.conversations("alice", limit=1)] == ["c1"]
    assert store.load_conversation("alice", "c1") == {"messages": []}
    assert store.load_conversation("bob", "c1") == {"messages": ["bob"]}
    assert store.load_conversation("carol", "c1") is None
    assert not store.delete_conversation("carol", "c1")
    assert store.delete_conversation("alice", "c1") and not store.delete_conversation("alice", "c1")
    assert rows(store, "SELECT owner, id FROM conversations ORDER BY owner, id") == [
        ("alice", "c2"),
        ("alice", "c3"),
        ("bob", "c1"),
    ]
