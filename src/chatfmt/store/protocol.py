"""The storage protocol: what the API code asks of a store, whatever keeps the data.

The Responses API (``server/responses/``, ``server/chat/continuation.py``), the web chat's
conversation routes and ``chatfmt store`` are written against these protocols, never against
SQLite: a second backend (PostgreSQL, say) implements :class:`Storage` and is passed where
:class:`~chatfmt.store.sqlite.ResponseStore` is today, with no change to the API code.

The methods block (they are called on the store's own threads, through
:class:`~chatfmt.store.aio.AsyncStore`, never on the event loop). Every row belongs to an owner
(:func:`~chatfmt.store.types.owner_of` of the API key): one owner never reads, lists or deletes
another's. A backend raises the store errors of :mod:`chatfmt.errors`:
:class:`~chatfmt.errors.StoreFull` when a write would pass its size limit and the writer
stores the most, :class:`~chatfmt.errors.BrokenChain` when a conversation's earlier response
is gone (on reading its chain, and on keeping a response that continues it).
"""

from __future__ import annotations

from typing import Any, Protocol

from .listing import ExportQuery
from .types import Chain, NewResponse, StoredExchange, StoredRef, StoredResponse


class ResponseStorage(Protocol):
    """Stored Responses API responses, each the continuation of its ``previous_response_id``."""

    def put(self, owner: str, new: NewResponse) -> None:
        """Keep a response with its input items, the chat messages it added and, when known,
        the exact ids of its exchange; :class:`~chatfmt.errors.BrokenChain` (nothing kept) when
        the response it continues, or one before that, is gone."""
        ...

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        """The owner's response (``None``: none, or another owner's)."""
        ...

    def chain(self, owner: str, response_id: str) -> Chain | None:
        """The conversation up to and including ``response_id`` (``None``: no such response
        of this owner); :class:`~chatfmt.errors.BrokenChain` when an earlier part is gone."""
        ...

    def delete(self, owner: str, response_id: str) -> bool:
        """Delete the owner's response; whether there was one."""
        ...


class ConversationStorage(Protocol):
    """The web chat's conversations, as its page keeps them."""

    def save_conversation(self, owner: str, cid: str, title: str, state: dict[str, Any]) -> None:
        """Keep (or replace) a conversation; :class:`~chatfmt.errors.StoreFull` when it would
        pass the size limit and this owner stores the most."""
        ...

    def conversations(self, owner: str, limit: int = 100) -> list[dict[str, Any]]:
        """The owner's conversations, newest first: ``id``, ``title``, ``updated_at``."""
        ...

    def load_conversation(self, owner: str, cid: str) -> dict[str, Any] | None:
        """A conversation's state as it was saved (``None``: none of this owner's)."""
        ...

    def delete_conversation(self, owner: str, cid: str) -> bool:
        """Delete the owner's conversation; whether there was one."""
        ...


class ExportStorage(Protocol):
    """What ``chatfmt dataset export`` reads: every owner's rows a page at a time, and each
    chain's exchanges with the exact ids each one kept (:meth:`ResponseStorage.chain` gives
    only the joined ids of the whole chain, not where each reply lies in them)."""

    def export_refs(
        self, query: ExportQuery, *, after: StoredRef | None = None, limit: int = 500
    ) -> list[StoredRef]:
        """Up to ``limit`` of the responses or web conversations ``query`` selects, after
        ``after``, in (time, owner, id) order."""
        ...

    def exchanges(self, owner: str, response_id: str) -> list[StoredExchange] | None:
        """The responses of the conversation up to and including ``response_id``, oldest
        first (``None``: no such response of this owner);
        :class:`~chatfmt.errors.BrokenChain` when an earlier part is gone."""
        ...


class AdminStorage(Protocol):
    """What an operator does with a store (``chatfmt store``)."""

    def info(self) -> dict[str, Any]:
        """What the store holds (rows, owners, bytes) and its limits."""
        ...

    def delete_owner(self, owner: str) -> tuple[int, int]:
        """Delete everything one key stored, with no copy left behind: how many responses
        and web conversations went."""
        ...

    def prune(self) -> int:
        """Apply the age and size limits now; how many rows went."""
        ...

    def close(self) -> None: ...


class Storage(ResponseStorage, ConversationStorage, ExportStorage, AdminStorage, Protocol):
    """A whole store: responses, web conversations, their export, and its administration."""
