"""The store as the server awaits it: each call runs on the store's own small thread pool.

Why not ``asyncio.to_thread``: that is the event loop's default pool, which rendering and body
parsing use too. Store calls waiting for the store's lock (behind a long write) would fill it,
and requests that never touch the store (a plain chat completion) would wait behind them.
On its own pool, a slow store makes only store calls wait.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .protocol import Storage
from .types import Chain, ExactIds, StoredResponse

_T = TypeVar("_T")

#: Threads of one store's pool: its calls are short, and a backend that serialises writers
#: (SQLite) would only have more of them wait.
WORKERS = 4


class AsyncStore:
    """``backend``'s calls as coroutines, run on a thread pool of the facade's own.

    The backend's methods are looked up at each call, so the object behind the facade is the
    one that answers (a test may replace one). The pool's threads end when the facade is
    closed or collected.
    """

    def __init__(self, backend: Storage, *, workers: int = WORKERS) -> None:
        self.backend = backend
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="chatfmt-store")
        self._finalizer = weakref.finalize(self, self._pool.shutdown, wait=False)

    async def _run(self, call: Callable[..., _T], *args: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(call, *args))

    # ==== Responses ====

    async def put(
        self,
        owner: str,
        response: dict[str, Any],
        input_items: Sequence[dict[str, Any]],
        messages: Sequence[dict[str, Any]],
        exact: ExactIds | None = None,
    ) -> None:
        await self._run(self.backend.put, owner, response, input_items, messages, exact)

    async def get(self, owner: str, response_id: str) -> StoredResponse | None:
        return await self._run(self.backend.get, owner, response_id)

    async def chain(self, owner: str, response_id: str) -> Chain | None:
        return await self._run(self.backend.chain, owner, response_id)

    async def delete(self, owner: str, response_id: str) -> bool:
        return await self._run(self.backend.delete, owner, response_id)

    # ==== The web chat's conversations ====

    async def save_conversation(
        self, owner: str, cid: str, title: str, state: dict[str, Any]
    ) -> None:
        await self._run(self.backend.save_conversation, owner, cid, title, state)

    async def conversations(self, owner: str, limit: int = 100) -> list[dict[str, Any]]:
        return await self._run(self.backend.conversations, owner, limit)

    async def load_conversation(self, owner: str, cid: str) -> dict[str, Any] | None:
        return await self._run(self.backend.load_conversation, owner, cid)

    async def delete_conversation(self, owner: str, cid: str) -> bool:
        return await self._run(self.backend.delete_conversation, owner, cid)

    def close(self) -> None:
        """Stop the pool's threads (the backend stays open: its owner closes it)."""
        self._finalizer()
