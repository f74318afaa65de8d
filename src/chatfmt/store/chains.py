"""Response rows as both backends write and read them: a row's values, a chain's messages and
exact ids put back together from its rows, and the errors that say a chain is broken.

SQLite (:mod:`.responses`) and PostgreSQL (:mod:`.pg_rows`) differ in their SQL, not in what a
row holds or how a chain is read back: that part is written once, here, so that both keep and
return the very same ids.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import BrokenChain
from .types import Chain, ExactIds, NewResponse, pack_ids, unpack_ids

#: The columns that keep an exchange's exact ids, in :func:`response_row`'s order.
EXACT_COLUMNS = ("view", "ids_base", "ids", "reply", "stop")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def response_row(owner: str, new: NewResponse, now: float) -> dict[str, Any]:
    """A response's row by column: its JSON values as text, and the exact ids (packed) in
    :data:`EXACT_COLUMNS`, all ``None`` when they were not kept."""
    response, exact = new.response, new.exact
    row = {
        "id": response["id"],
        "owner": owner,
        "previous_id": response.get("previous_response_id"),
        "created_at": now,
        "response": _json(response),
        "input_items": _json(list(new.input_items)),
        "messages": _json(list(new.messages)),
    }
    kept = (None,) * len(EXACT_COLUMNS) if exact is None else exact_values(exact)
    return {**row, **dict(zip(EXACT_COLUMNS, kept, strict=True))}


def insert_sql(table: str, row: dict[str, Any], param: str) -> str:
    """The statement that inserts ``row`` (:func:`response_row`) into ``table``, ``param``
    being the driver's placeholder."""
    return f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join([param] * len(row))})"


def exact_values(exact: ExactIds) -> tuple[str, int, bytes, int, int | None]:
    """``exact`` as the values of :data:`EXACT_COLUMNS`."""
    return exact.view, exact.base, pack_ids(exact.tail), exact.reply, exact.stop


def exact_of(
    view: str | None, base: int | None, tail: bytes | None, reply: int | None, stop: int | None
) -> ExactIds | None:
    """The :class:`~.types.ExactIds` a row's :data:`EXACT_COLUMNS` hold (``None``: not kept)."""
    if view is None or base is None or tail is None or reply is None:
        return None
    return ExactIds(view, base, unpack_ids(bytes(tail)), reply, stop)


def join_ids(pieces: list[tuple[int, bytes]]) -> list[int] | None:
    """A chain's exact ids from its rows' pieces, ``(base, packed tail)`` from the newest row
    back to an anchor (a row of base 0); ``None`` when they do not join up (the chain is then
    rendered)."""
    if not pieces or pieces[-1][0] != 0:
        return None
    ids: list[int] = []
    for base, tail in reversed(pieces):
        if base != len(ids):
            return None  # each row continues its predecessor's whole exchange
        ids += unpack_ids(tail)
    return ids


class ChainReader:
    """A conversation read back from its rows, the newest first: each row's messages, and its
    ids while every row so far kept them, back to an anchor (a row holding all of its
    prompt's ids, base 0)."""

    def __init__(self) -> None:
        self.parts: list[list[dict[str, Any]]] = []  # each row's messages, newest first
        self._pieces: list[tuple[int, bytes]] = []  # (base, tail) back to an anchor
        self._following = True  # the ids are still being followed back

    def add(self, messages: list[dict[str, Any]], base: int | None, tail: bytes | None) -> None:
        """The next row back: the messages it added, and its ids' base and packed tail."""
        if self._following:
            if tail is None or base is None:
                self._pieces, self._following = [], False  # not kept: the chain is rendered
            else:
                self._pieces.append((base, bytes(tail)))
                self._following = base > 0
        self.parts.append(messages)

    def chain(self, view: str | None, reply: int) -> Chain:
        """The conversation, oldest message first, with its exact ids when they join up and
        the newest row's ``view`` and ``reply`` fit them."""
        messages = [m for part in reversed(self.parts) for m in part]
        ids = join_ids(self._pieces)
        if ids is None or view is None or not 0 <= reply <= len(ids):
            return Chain(messages)
        return Chain(messages, ids, view, reply)


def broken_while_written(gone: str, previous: str) -> BrokenChain:
    """A response not kept because ``gone``, the response it continues (``previous``) or
    one before that, went while it was generated."""
    where = "the response it continues" if gone == previous else "an earlier response"
    return BrokenChain(
        f"response {gone!r}, {where}, is gone (deleted, evicted or past its age while this "
        "one was generated): this response was not stored; start a new conversation"
    )


def broken_on_read(missing: str) -> BrokenChain:
    """A chain read back whose earlier response ``missing`` is gone."""
    return BrokenChain(
        f"response {missing!r}, an earlier part of this conversation, is gone "
        "(deleted or past its age); start a new conversation"
    )
