"""The response store: Responses API responses (for ``previous_response_id`` and ``GET
/v1/responses/{id}``, with each exchange's exact ids) and the web chat's conversations, kept
per API key across requests and restarts.

- :mod:`.protocol`: :class:`Storage`, what the API code asks of a store (any backend);
- :mod:`.types`: what it keeps and gives back (:class:`ExactIds`, :class:`Chain`,
  :class:`StoredResponse`, :func:`owner_of`, :func:`view_of`);
- :mod:`.aio`: :class:`AsyncStore`, a store's calls awaited on its own threads;
- :mod:`.chains`: what a response row holds and how a chain is read back from its rows, the
  same for both backends;
- the SQLite backend, :class:`ResponseStore` (:mod:`.sqlite`), made of :mod:`.connection`
  (file, schema, migrations, the transaction helper), :mod:`.responses` (response chains and
  exact ids), :mod:`.conversations` (web conversations), :mod:`.policy` (age and size limits,
  eviction) and :mod:`.admin` (``chatfmt store``: info, a key's data deleted, prune);
- the PostgreSQL backend, :class:`PostgresStore` (:mod:`.postgres`, the ``postgres`` extra),
  which replicas share, made of :mod:`.pg_schema` (tables, version, migrations),
  :mod:`.pg_rows` (responses and web conversations) and :mod:`.pg_policy` (the limits);
- :mod:`.listing`: every owner's rows a page at a time (:class:`ExportQuery` says which), for
  ``chatfmt dataset export`` (with each backend's ``exchanges``: a chain's responses and the
  exact ids of each);
- :mod:`.location`: which backend a ``--store`` names (a path, or a ``postgresql://`` URL),
  and the URL shown without its password.

The store's errors are in :mod:`chatfmt.errors` (:class:`~chatfmt.errors.StoreError` and
below) and are re-exported here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BrokenChain, StoreError, StoreFull, StoreUnavailable
from . import admin, postgres
from .aio import AsyncStore
from .connection import SCHEMA_VERSION
from .listing import ExportKind, ExportQuery
from .location import is_postgres, redact
from .pg_schema import PG_SCHEMA_VERSION
from .postgres import PostgresStore
from .protocol import AdminStorage, ConversationStorage, ExportStorage, ResponseStorage, Storage
from .sqlite import ResponseStore
from .types import (
    MAX_CHAIN,
    Chain,
    ExactIds,
    NewResponse,
    StoredExchange,
    StoredRef,
    StoredResponse,
    owner_of,
    view_of,
)

__all__ = [
    "MAX_CHAIN",
    "PG_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "AdminStorage",
    "AsyncStore",
    "BrokenChain",
    "Chain",
    "ConversationStorage",
    "ExactIds",
    "ExportKind",
    "ExportQuery",
    "ExportStorage",
    "NewResponse",
    "PostgresStore",
    "ResponseStorage",
    "ResponseStore",
    "Storage",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "StoredExchange",
    "StoredRef",
    "StoredResponse",
    "is_postgres",
    "open_store",
    "owner_of",
    "read_info",
    "redact",
    "store_version",
    "view_of",
]


def open_store(
    location: str | Path, *, max_age_days: float | None = 30.0, max_mb: float | None = None
) -> Storage:
    """The store at ``location`` with these limits: a ``postgresql://`` (or ``postgres://``)
    URL opens :class:`PostgresStore`, a path the SQLite file there;
    :class:`~chatfmt.errors.StoreError` for a URL of another scheme."""
    if is_postgres(location):
        return PostgresStore(str(location), max_age_days=max_age_days, max_mb=max_mb)
    return ResponseStore(location, max_age_days=max_age_days, max_mb=max_mb)


def store_version(location: str | Path) -> int:
    """The schema version of the store at ``location`` (path or URL), read without changing
    it; :class:`~chatfmt.errors.StoreError` when there is none."""
    if is_postgres(location):
        return postgres.store_version(str(location))
    return admin.store_version(location)


def read_info(location: str | Path) -> dict[str, Any]:
    """What the store at ``location`` (path or URL) holds, read without changing it (see
    :meth:`Storage.info`)."""
    if is_postgres(location):
        return postgres.read_info(str(location))
    return admin.read_info(location)
