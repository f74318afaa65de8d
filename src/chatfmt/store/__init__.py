"""The response store: Responses API responses (for ``previous_response_id`` and ``GET
/v1/responses/{id}``, with each exchange's exact ids) and the web chat's conversations, kept
per API key across requests and restarts.

- :mod:`.protocol`: :class:`Storage`, what the API code asks of a store (any backend);
- :mod:`.types`: what it keeps and gives back (:class:`ExactIds`, :class:`Chain`,
  :class:`StoredResponse`, :func:`owner_of`, :func:`view_of`);
- :mod:`.aio`: :class:`AsyncStore`, a store's calls awaited on its own threads;
- the SQLite backend, :class:`ResponseStore` (:mod:`.sqlite`), made of :mod:`.connection`
  (file, schema, migrations, the transaction helper), :mod:`.responses` (response chains and
  exact ids), :mod:`.conversations` (web conversations), :mod:`.policy` (age and size limits,
  eviction) and :mod:`.admin` (``chatfmt store``: info, a key's data deleted, prune).

The store's errors are in :mod:`chatfmt.errors` (:class:`~chatfmt.errors.StoreError` and
below) and are re-exported here.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BrokenChain, StoreError, StoreFull, StoreUnavailable
from .admin import read_info, store_version
from .aio import AsyncStore
from .connection import SCHEMA_VERSION
from .protocol import AdminStorage, ConversationStorage, ResponseStorage, Storage
from .sqlite import ResponseStore
from .types import MAX_CHAIN, Chain, ExactIds, StoredResponse, owner_of, view_of

__all__ = [
    "MAX_CHAIN",
    "SCHEMA_VERSION",
    "AdminStorage",
    "AsyncStore",
    "BrokenChain",
    "Chain",
    "ConversationStorage",
    "ExactIds",
    "ResponseStorage",
    "ResponseStore",
    "Storage",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "StoredResponse",
    "open_store",
    "owner_of",
    "read_info",
    "store_version",
    "view_of",
]


def open_store(
    location: str | Path, *, max_age_days: float | None = 30.0, max_mb: float | None = None
) -> Storage:
    """The store at ``location`` with these limits: today a SQLite file's path (a later
    backend adds its own URLs here, so its callers need not change)."""
    return ResponseStore(location, max_age_days=max_age_days, max_mb=max_mb)
