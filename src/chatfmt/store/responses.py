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
from collections.abc import Sequence
from typing import Any

from ..errors import BrokenChain
from .connection import RESPONSE_BYTES
from .types import (
    MAX_CHAIN,
    Chain,
    ExactIds,
    StoredExchange,
    StoredResponse,
    join_ids,
    pack_ids,
    unpack_ids,
)

#: What a response row holds, in bytes (SQL over the row's columns).
ROW_BYTES = RESPONSE_BYTES.format(row="")

#: The row ``id`` and the rows that continue it, found along the ``previous_id`` index.
DESCENDANTS = (
    "WITH RECURSIVE doomed(id) AS (SELECT ? UNION SELECT r.id FROM responses r "
    "JOIN doomed d ON r.previous_id = d.id) "
)


def insert(
    db: sqlite3.Connection,
    owner: str,
    response: dict[str, Any],
    input_items: Sequence[dict[str, Any]],
    messages: Sequence[dict[str, Any]],
    exact: ExactIds | None,
    now: float,
) -> None:
    """Write a response row (in the caller's transaction, after :func:`check_continues`)."""
    db.execute(
        "INSERT INTO responses (id, owner, previous_id, created_at, response, input_items, "
        "conversation, messages, view, ids_base, ids, reply, stop) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            response["id"],
            owner,
            response.get("previous_response_id"),
            now,
            json.dumps(response, ensure_ascii=False),
            json.dumps(list(input_items), ensure_ascii=False),
            "null",
            json.dumps(list(messages), ensure_ascii=False),
            None if exact is None else exact.view,
            None if exact is None else exact.base,
            None if exact is None else pack_ids(exact.tail),
            None if exact is None else exact.reply,
            None if exact is None else exact.stop,
        ),
    )


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
        gone = previous
    else:
        before, whole, depth = row
        if before is None or whole or depth >= MAX_CHAIN:
            return
        gone = before
    where = "the response it continues" if gone == previous else "an earlier response"
    raise BrokenChain(
        f"response {gone!r}, {where}, is gone (deleted, evicted or past its age while this "
        "one was generated): this response was not stored; start a new conversation"
    )


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


def chain(db: sqlite3.Connection, owner: str, response_id: str) -> Chain | None:
    """The conversation up to and including ``response_id`` (``None``: no such response of
    this owner), with its exact ids where every row they come from kept them;
    :class:`~chatfmt.errors.BrokenChain` when an earlier response of it is gone."""
    parts: list[list[dict[str, Any]]] = []
    pieces: list[tuple[int, bytes]] = []  # (base, tail) from the newest back to an anchor
    view: str | None = None
    reply = 0
    exact = True  # the ids are still being followed back
    current: str | None = response_id
    while current is not None and len(parts) < MAX_CHAIN:
        row = db.execute(
            "SELECT previous_id, conversation, messages, view, ids_base, ids, reply "
            "FROM responses WHERE id = ? AND owner = ?",
            (current, owner),
        ).fetchone()
        if row is None:
            if not parts:
                return None
            raise BrokenChain(
                f"response {current!r}, an earlier part of this conversation, is gone "
                "(deleted or past its age); start a new conversation"
            )
        previous, whole, added, row_view, base, tail, row_reply = row
        if not parts:
            view, reply = row_view, row_reply or 0
        if exact:
            if tail is None or base is None:
                pieces, exact = [], False  # not kept: the conversation is rendered
            else:
                pieces.append((base, tail))
                exact = base > 0
        if added is None:  # a version-1 row: it holds the whole conversation
            parts.append(json.loads(whole))
            break
        parts.append(json.loads(added))
        current = previous
    messages = [m for part in reversed(parts) for m in part]
    ids = join_ids(pieces)
    if ids is None or view is None or not 0 <= reply <= len(ids):
        return Chain(messages)
    return Chain(messages, ids, view, reply)


def exchanges(db: sqlite3.Connection, owner: str, response_id: str) -> list[StoredExchange] | None:
    """The responses of the conversation up to and including ``response_id``, oldest first,
    each with its exact ids as stored (``None``: no such response of this owner);
    :class:`~chatfmt.errors.BrokenChain` when an earlier response of it is gone."""
    found: list[StoredExchange] = []
    current: str | None = response_id
    while current is not None and len(found) < MAX_CHAIN:
        row = db.execute(
            "SELECT previous_id, created_at, conversation, messages, view, ids_base, ids, reply, "
            "stop FROM responses WHERE id = ? AND owner = ?",
            (current, owner),
        ).fetchone()
        if row is None:
            if not found:
                return None
            raise BrokenChain(
                f"response {current!r}, an earlier part of this conversation, is gone "
                "(deleted or past its age); start a new conversation"
            )
        previous, created, whole, added, view, base, tail, reply, stop = row
        exact = None
        if view is not None and base is not None and tail is not None and reply is not None:
            exact = ExactIds(view, base, unpack_ids(tail), reply, stop)
        # A version-1 row holds its whole conversation (and no ids): it starts the chain.
        messages = json.loads(whole if added is None else added)
        found.append(StoredExchange(current, created, messages, exact))
        current = None if added is None else previous
    found.reverse()
    return found
