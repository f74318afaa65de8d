"""Response rows in SQLite: one per stored response, chained by ``previous_id``.

Each row is one response: its JSON, the input items the request gave, and the chat messages it
added (its input and its reply; system instructions aside, as OpenAI does not carry them over)
with a link to the response before it, so that a conversation is its chain of rows. A row also
keeps the exact token ids of its exchange (:class:`~.types.ExactIds`) as the part added to the
previous row's ids, so that a continued conversation is sent to the engine as the very ids it
has cached.

A response is kept only as the continuation of a whole chain: when the response it continues,
or one before that, went while it was generated (deleted, evicted, past its age), writing it
raises :class:`~chatfmt.errors.BrokenChain` and nothing is kept. Keeping it as the start of a
new chain would not be honest: continuing it would show the model a conversation without its
beginning, as if it were whole.

The functions take the connection in the state they need (a transaction for :func:`insert`);
:class:`~.sqlite.ResponseStore` takes the lock and opens the transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

from .chains import (
    ChainReader,
    broken_on_read,
    broken_while_written,
    exact_of,
    insert_sql,
)
from .connection import RESPONSE_BYTES
from .types import MAX_CHAIN, Chain, StoredExchange, StoredResponse

#: What a response row holds, in bytes (SQL over the row's columns).
ROW_BYTES = RESPONSE_BYTES.format(row="")

#: The row ``id`` and the rows that continue it, found along the ``previous_id`` index.
DESCENDANTS = (
    "WITH RECURSIVE doomed(id) AS (SELECT ? UNION SELECT r.id FROM responses r "
    "JOIN doomed d ON r.previous_id = d.id) "
)


def insert(db: sqlite3.Connection, row: dict[str, Any]) -> None:
    """Write a response's row (:func:`~.chains.response_row`), in the caller's transaction,
    after :func:`check_continues`."""
    row = dict(row, conversation="null")  # the version-1 column that held a whole conversation
    db.execute(insert_sql("responses", row, "?"), tuple(row.values()))


def check_continues(db: sqlite3.Connection, owner: str, previous: str) -> None:
    """:class:`~chatfmt.errors.BrokenChain` unless the owner's response ``previous`` and every
    response before it are still kept, back to the chain's start."""
    # One recursive query along the primary key; it stops at a row without a predecessor or
    # at a version-1 row (which holds its whole conversation).
    row = db.execute(
        "WITH RECURSIVE up(id, previous, whole, depth) AS ("
        " SELECT id, previous_id, messages IS NULL, 1 FROM responses WHERE id = ? AND owner = ?"
        " UNION ALL SELECT r.id, r.previous_id, r.messages IS NULL, up.depth + 1"
        " FROM responses r JOIN up ON r.id = up.previous"
        " WHERE r.owner = ? AND NOT up.whole AND up.depth < ?) "
        "SELECT previous, whole, depth FROM up ORDER BY depth DESC LIMIT 1",
        (previous, owner, owner, MAX_CHAIN),
    ).fetchone()
    if row is None:
        raise broken_while_written(previous, previous)
    before, whole, depth = row
    if before is not None and not whole and depth < MAX_CHAIN:
        raise broken_while_written(before, previous)


def ancestry(db: sqlite3.Connection, response_id: str) -> list[str]:
    """``response_id`` and the responses it continues."""
    rows = db.execute(
        "WITH RECURSIVE up(id, previous, depth) AS ("
        " SELECT id, previous_id, 1 FROM responses WHERE id = ?"
        " UNION ALL SELECT r.id, r.previous_id, up.depth + 1"
        " FROM responses r JOIN up ON r.id = up.previous WHERE up.depth < ?) "
        "SELECT id FROM up",
        (response_id, MAX_CHAIN),
    ).fetchall()
    return [rid for (rid,) in rows]


def get(db: sqlite3.Connection, owner: str, response_id: str) -> StoredResponse | None:
    row = db.execute(
        "SELECT response, input_items FROM responses WHERE id = ? AND owner = ?",
        (response_id, owner),
    ).fetchone()
    if row is None:
        return None
    return StoredResponse(response_id, json.loads(row[0]), json.loads(row[1]))


def delete(db: sqlite3.Connection, owner: str, response_id: str) -> bool:
    cursor = db.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner))
    return cursor.rowcount > 0


def _back(db: sqlite3.Connection, owner: str, response_id: str, columns: str) -> Iterator[Any]:
    """The owner's rows of the conversation up to ``response_id``, newest first, each as its
    id, its messages (a version-1 row's: the whole conversation, which starts the chain) and
    then ``columns``; none when ``response_id`` is not the owner's;
    :class:`~chatfmt.errors.BrokenChain` when an earlier row is gone. One query per row,
    along the primary key."""
    current: str | None = response_id
    for depth in range(MAX_CHAIN):
        if current is None:
            return
        row = db.execute(
            f"SELECT previous_id, conversation, messages, {columns} "
            "FROM responses WHERE id = ? AND owner = ?",
            (current, owner),
        ).fetchone()
        if row is None:
            if depth == 0:
                return
            raise broken_on_read(current)
        previous, whole, added, *rest = row
        yield current, json.loads(whole if added is None else added), *rest
        current = None if added is None else previous


def chain(db: sqlite3.Connection, owner: str, response_id: str) -> Chain | None:
    """The conversation up to and including ``response_id`` (``None``: no such response of
    this owner), with its exact ids where every row they come from kept them;
    :class:`~chatfmt.errors.BrokenChain` when an earlier response of it is gone."""
    reader = ChainReader()
    view: str | None = None
    reply = 0
    for _rid, messages, row_view, base, tail, row_reply in _back(
        db, owner, response_id, "view, ids_base, ids, reply"
    ):
        if not reader.parts:
            view, reply = row_view, row_reply or 0
        reader.add(messages, base, tail)
    return reader.chain(view, reply) if reader.parts else None


def exchanges(db: sqlite3.Connection, owner: str, response_id: str) -> list[StoredExchange] | None:
    """The responses of the conversation up to and including ``response_id``, oldest first,
    each with its exact ids as stored (``None``: no such response of this owner);
    :class:`~chatfmt.errors.BrokenChain` when an earlier response of it is gone."""
    found = [
        StoredExchange(rid, created, messages, exact_of(*kept))
        for rid, messages, created, *kept in _back(
            db, owner, response_id, "created_at, view, ids_base, ids, reply, stop"
        )
    ]
    found.reverse()
    return found or None
