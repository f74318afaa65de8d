"""What the store keeps and gives back, the same for every backend: a stored response, a
conversation's chain with its exact ids, the owner string of an API key, and the digest that
names a rendered prompt."""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The longest chain a store follows back from a response.
MAX_CHAIN = 10_000


def owner_of(api_key: str | None) -> str:
    """The owner string of a key: a hash, so the database never holds the key itself
    (``""``: a server without keys)."""
    if api_key is None:
        return ""
    return hashlib.sha256(b"chatfmt-owner\0" + api_key.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class ExactIds:
    """The ids of one stored exchange, kept so that continuing it re-uses them.

    ``view`` names the prompt as chatfmt renders the conversation before the reply (a digest of
    its ids, :func:`view_of`): a continuation whose render starts with that same view may put
    the exact ids in its place. ``base`` ids come from the previous response's exact ids (0:
    none, this row holds all of them); ``tail`` is the rest: the new prompt ids, then the
    reply's. The last ``reply`` ids are the reply (a forced call's opening included).
    ``stop`` is the stop token the engine ended the reply on, which ``tail`` leaves out (a
    continuation writes the format's own there); ``None`` in rows stored before it was kept.
    """

    view: str
    base: int
    tail: Sequence[int]
    reply: int
    stop: int | None = None


@dataclass(frozen=True, slots=True)
class NewResponse:
    """A Responses API response to keep: the response object, its input items, the chat
    messages it added to the conversation and, when known, the exact ids of its exchange."""

    response: dict[str, Any]
    input_items: Sequence[dict[str, Any]] = ()
    messages: Sequence[dict[str, Any]] = ()
    exact: ExactIds | None = None


@dataclass(frozen=True, slots=True)
class Chain:
    """A stored conversation up to one response: its chat messages, and the exact ids of the
    whole exchange so far with the view of its last prompt (``None``: not kept)."""

    messages: list[dict[str, Any]]
    ids: list[int] | None = None
    view: str | None = None
    reply: int = 0


@dataclass(frozen=True, slots=True)
class StoredExchange:
    """One response of a chain as an export reads it back: its id and time, the chat messages
    it added (a version-1 SQLite row: the whole conversation) and the exact ids of its exchange
    (``None``: not kept)."""

    id: str
    created_at: float
    messages: list[dict[str, Any]]
    exact: ExactIds | None


@dataclass(frozen=True, slots=True)
class StoredRef:
    """A stored response or web conversation to export: its owner, id and time (a response's
    creation, a conversation's last save)."""

    owner: str
    id: str
    at: float


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response: its JSON and the input items its request gave."""

    id: str
    response: dict[str, Any]
    input_items: list[dict[str, Any]]


def view_of(ids: Sequence[int]) -> str:
    """The digest that names a rendered prompt (see :class:`ExactIds`)."""
    return hashlib.sha256(pack_ids(ids)).hexdigest()


def pack_ids(ids: Sequence[int]) -> bytes:
    """Token ids as 32-bit little-endian integers: the same bytes on every machine."""
    packed = array("I", ids)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpack_ids(blob: bytes) -> list[int]:
    """The ids :func:`pack_ids` wrote."""
    ids = array("I")
    ids.frombytes(blob)
    if sys.byteorder == "big":
        ids.byteswap()
    return ids.tolist()
