"""Response rows: owners apart, chains followed back, exact ids kept as each row's addition,
and a response whose conversation lost a link while it was generated is not kept."""

from __future__ import annotations

import pytest

from chatfmt.errors import BrokenChain
from chatfmt.store import ExactIds, NewResponse, owner_of

from .helpers import MakeStore, response


def test_owners_never_see_each_other(make_store: MakeStore) -> None:
    store = make_store()
    alice, bob = owner_of("key-a"), owner_of("key-b")
    assert alice != bob and "key-a" not in alice and owner_of(None) == ""
    store.put(alice, NewResponse(response("resp_a"), [], []))
    assert store.get(bob, "resp_a") is None and not store.delete(bob, "resp_a")
    assert store.chain(bob, "resp_a") is None
    # Nor can one key continue another's response.
    with pytest.raises(BrokenChain, match="resp_a"):
        store.put(bob, NewResponse(response("resp_b", "resp_a"), [], []))
    found = store.get(alice, "resp_a")
    assert found is not None and found.response["id"] == "resp_a"
    assert store.delete(alice, "resp_a") and store.count() == 0


def test_a_chain_with_a_deleted_link_says_so(make_store: MakeStore) -> None:
    store = make_store()
    store.put("o", NewResponse(response("resp_1"), [], [{"role": "user", "content": "a"}]))
    store.put(
        "o", NewResponse(response("resp_2", "resp_1"), [], [{"role": "user", "content": "b"}])
    )
    assert [m["content"] for m in store.conversation("o", "resp_2") or ()] == ["a", "b"]
    store.delete("o", "resp_1")
    with pytest.raises(BrokenChain, match=r"resp_1.*is gone"):
        store.conversation("o", "resp_2")


def test_a_response_whose_conversation_lost_a_link_is_not_kept(make_store: MakeStore) -> None:
    """The parent (or one before it) went while the response was generated: keeping it would
    give a response that answers store: true and cannot be continued."""
    store = make_store()
    say = [{"role": "user", "content": "x"}]
    for rid, previous in (("r1", None), ("r2", "r1"), ("r3", "r2")):
        store.put("o", NewResponse(response(rid, previous), [], say))
    store.delete("o", "r3")
    with pytest.raises(BrokenChain, match=r"'r3', the response it continues, is gone"):
        store.put("o", NewResponse(response("r4", "r3"), [], say))
    store.delete("o", "r1")
    with pytest.raises(BrokenChain, match=r"'r1', an earlier response, is gone"):
        store.put("o", NewResponse(response("r4", "r2"), [], say))
    assert store.get("o", "r4") is None and store.count() == 1
    # A whole chain is still continued.
    store.put("o", NewResponse(response("s1"), [], say))
    store.put("o", NewResponse(response("s2", "s1"), [], say))
    assert len(store.conversation("o", "s2") or ()) == 2


def test_exact_ids_are_kept_as_each_rows_addition(make_store: MakeStore) -> None:
    store = make_store()
    say = [{"role": "user", "content": "x"}]
    store.put("o", NewResponse(response("r1"), [], say, ExactIds("v1", 0, [1, 2, 3, 70000], 2)))
    store.put("o", NewResponse(response("r2", "r1"), [], say, ExactIds("v2", 4, [5, 6], 1)))
    store.put("o", NewResponse(response("r3", "r2"), [], say, ExactIds("v3", 6, [7], 1)))
    chain = store.chain("o", "r3")
    assert chain is not None and chain.ids == [1, 2, 3, 70000, 5, 6, 7] and chain.view == "v3"
    assert chain.reply == 1
    assert len(chain.messages) == 3
    # A row that starts over (base 0) is an anchor: what came before is not needed.
    store.put("o", NewResponse(response("r4", "r3"), [], say, ExactIds("v4", 0, [9, 9], 1)))
    assert store.chain("o", "r4").ids == [9, 9]  # type: ignore[union-attr]
    # A row without ids (a reply its ids did not match) breaks the exact chain, not the
    # conversation; so does a row claiming more ids than its predecessor kept.
    store.put("o", NewResponse(response("r5", "r4"), [], say))
    store.put("o", NewResponse(response("r6", "r5"), [], say, ExactIds("v6", 3, [1], 1)))
    store.put("o", NewResponse(response("r7", "r4"), [], say, ExactIds("v7", 5, [1], 1)))
    store.put("o", NewResponse(response("r8", "r4"), [], say, ExactIds("v8", 1, [1], 1)))  # too few
    for rid in ("r5", "r6", "r7", "r8"):
        chain = store.chain("o", rid)
        assert chain is not None and chain.ids is None and len(chain.messages) >= 5


def test_an_id_with_a_nul_names_nothing(make_store: MakeStore) -> None:
    """A client's id with a NUL in it (``GET /v1/responses/resp_%00x``): not found on both
    backends (PostgreSQL's text cannot hold one: this was a 500 there)."""
    store = make_store()
    store.put("o", NewResponse(response("resp_1"), [], []))
    bad = "resp_\x00x"
    assert store.get("o", bad) is None and store.chain("o", bad) is None
    assert store.exchanges("o", bad) is None and not store.delete("o", bad)
    assert store.load_conversation("o", "c\x00") is None
    assert not store.delete_conversation("o", "c\x00")
    assert store.count() == 1
