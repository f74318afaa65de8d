"""The store as the server awaits it: each call runs on the store's own small thread pool.

Why not ``asyncio.to_thread``: that is the event loop's default pool, which rendering and body
parsing use too. Store calls waiting for the store's lock (behind a long write) would fill it,
and requests that never touch the store (a plain chat completion) would wait behind them.
On its own pools, a slow store makes only store calls wait; and writes (which queue for the
backend's write lock) have a pool apart from reads, so that reads (which the SQLite backend
serves on a connection of their own) never queue behind them.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .protocol import Storage
from .types import Chain, NewResponse, StoredResponse

_T = TypeVar("_T")

#: Threads for reads and for writes: calls are short, and a backend that serialises writers
#: (SQLite) would only have more of them wait.
READERS, WRITERS = 4, 2


class AsyncStore:
    """``backend``'s calls as coroutines, run on thread pools of the facade's own (one for
    reads, one for writes).

    The backend's methods are looked up at each call, so the object behind the facade is the
    one that answers (a test may replace one). The pools' threads end when the facade is
    closed or collected.
    """

    def __init__(self, backend: Storage) -> None:
        self.backend = backend
        self._reads = ThreadPoolExecutor(READERS, thread_name_prefix="chatfmt-store-read")
        self._writes = ThreadPoolExecutor(WRITERS, thread_name_prefix="chatfmt-store-write")
        self._finalizer = weakref.finalize(self, _shutdown, self._reads, self._writes)

    async def _run(self, call: Callable[..., _T], *args: Any, write: bool = False) -> _T:
        pool = self._writes if write else self._reads
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, functools.partial(call, *args))

    # ==== Responses ====

    async def put(self, owner: str, new: NewResponse) -> None:
        await self._run(self.backend.put, owner, new, write=True)

    async def get(self, owner: str, response_id: str) -> StoredResponse | None:
        return await self._run(self.backend.get, owner, response_id)

    async def chain(self, owner: str, response_id: str) -> Chain | None:
        return await self._run(self.backend.chain, owner, response_id)

    async def delete(self, owner: str, response_id: str) -> bool:
        return await self._run(self.backend.delete, owner, response_id, write=True)

    # ==== The web chat's conversations ====

    async def save_conversation(
        self, owner: str, cid: str, title: str, state: dict[str, Any]
    ) -> None:
        await self._run(self.backend.save_conversation, owner, cid, title, state, write=True)

    async def conversations(self, owner: str, limit: int = 100) -> list[dict[str, Any]]:
        return await self._run(self.backend.conversations, owner, limit)

    async def load_conversation(self, owner: str, cid: str) -> dict[str, Any] | None:
        return await self._run(self.backend.load_conversation, owner, cid)

    async def delete_conversation(self, owner: str, cid: str) -> bool:
        return await self._run(self.backend.delete_conversation, owner, cid, write=True)

    def close(self) -> None:
        """Stop the pools' threads (the backend stays open: its owner closes it)."""
        self._finalizer()


def _shutdown(*pools: ThreadPoolExecutor) -> None:
    for pool in pools:
        pool.shutdown(wait=False)
