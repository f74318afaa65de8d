"""AsyncStore: a store's calls awaited on threads of its own, never the event loop's default
pool (tests/server/test_store.py checks what that buys through the server)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from chatfmt.errors import StoreFull
from chatfmt.store import AsyncStore, NewResponse, StoredResponse

from .helpers import MakeStore, response

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_calls_run_on_the_stores_own_threads(make_store: MakeStore) -> None:
    store = make_store()
    facade = AsyncStore(store)
    await facade.put("o", NewResponse(response("r1"), [], [{"role": "user", "content": "hi"}]))
    await facade.save_conversation("o", "c1", "t", {"messages": []})
    found = await facade.get("o", "r1")
    assert found is not None and found.response["id"] == "r1"
    chain = await facade.chain("o", "r1")
    assert chain is not None and chain.messages == [{"role": "user", "content": "hi"}]
    assert [c["id"] for c in await facade.conversations("o")] == ["c1"]
    assert await facade.load_conversation("o", "c1") == {"messages": []}
    assert await facade.delete_conversation("o", "c1") and await facade.delete("o", "r1")

    seen: list[str] = []

    def get(owner: str, rid: str) -> StoredResponse | None:
        seen.append(threading.current_thread().name)
        return None

    store.get = get  # type: ignore[method-assign]  # looked up at each call
    await asyncio.gather(*(facade.get("o", "x") for _ in range(8)))
    assert seen and all(name.startswith("chatfmt-store") for name in seen)
    facade.close()
    store.close()


async def test_the_stores_errors_come_through(make_store: MakeStore) -> None:
    store = make_store(max_mb=0.25)
    facade = AsyncStore(store)
    previous = None
    with pytest.raises(StoreFull):
        for i in range(60):  # one conversation, longer than the whole store
            body = response(f"r{i}", previous)
            await facade.put(
                "o", NewResponse(body, [], [{"role": "user", "content": "y" * 10_000}])
            )
            previous = f"r{i}"
    facade.close()


async def test_reads_never_queue_behind_writes(make_store: MakeStore) -> None:
    """Writes wait for the backend's write lock on a pool of their own: however many wait,
    a read gets a thread (and either backend reads on a connection of its own)."""
    store = make_store()
    await AsyncStore(store).put("o", NewResponse(response("r1")))
    released = threading.Event()
    save = store.save_conversation

    def slow_save(*args: object) -> None:
        released.wait(timeout=10)
        save(*args)  # type: ignore[arg-type]

    store.save_conversation = slow_save  # type: ignore[method-assign]
    facade = AsyncStore(store)
    saves = [
        asyncio.ensure_future(facade.save_conversation("o", f"c{i}", "t", {})) for i in range(8)
    ]
    await asyncio.sleep(0.05)
    found = await asyncio.wait_for(facade.get("o", "r1"), timeout=2)
    assert found is not None and not any(s.done() for s in saves)
    released.set()
    await asyncio.gather(*saves)
    assert len(await facade.conversations("o")) == 8
    facade.close()
