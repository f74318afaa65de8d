"""Moved to :mod:`chatfmt.store` (a package: protocol, SQLite backend, limits, admin).

Kept only so that importers not yet moved over (``server/service.py``, ``web/routes.py``,
``cli/serve.py`` and some tests) keep working; import from :mod:`chatfmt.store` instead.
"""

from __future__ import annotations

from ..store import (
    MAX_CHAIN,
    SCHEMA_VERSION,
    BrokenChain,
    Chain,
    ExactIds,
    ResponseStore,
    StoredResponse,
    StoreFull,
    StoreUnavailable,
    owner_of,
    read_info,
    store_version,
    view_of,
)

__all__ = [
    "MAX_CHAIN",
    "SCHEMA_VERSION",
    "BrokenChain",
    "Chain",
    "ExactIds",
    "ResponseStore",
    "StoreFull",
    "StoreUnavailable",
    "StoredResponse",
    "owner_of",
    "read_info",
    "store_version",
    "view_of",
]
