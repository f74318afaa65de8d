"""Response and web conversation rows in PostgreSQL: the statements of :mod:`.responses` and
:mod:`.conversations`, in PostgreSQL's dialect, with the same meaning.

A response is kept only as the continuation of a whole chain (:func:`check_continues`, else
:class:`~chatfmt.errors.BrokenChain` and nothing kept); a chain is read back in one recursive
statement (one snapshot, one round trip, however long it is), and its exact ids joined as
SQLite's are (:mod:`.chains`).

The functions take a connection in the state they need (a transaction holding the key's lock
for the writes); :class:`~.postgres.PostgresStore` opens it and takes the locks.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .chains import (
    ChainReader,
    broken_on_read,
    broken_while_written,
    exact_of,
    insert_sql,
)
from .pg_schema import CONVERSATION_BYTES, RESPONSE_BYTES, SCHEMA
from .types import MAX_CHAIN, Chain, StoredExchange, StoredResponse

if TYPE_CHECKING:
    from .pg_schema import Conn

#: What a response row holds, in bytes (SQL over the row's columns).
ROW_BYTES = RESPONSE_BYTES.format(row="")
#: What a web conversation row holds, in bytes (SQL).
CONVERSATION_ROW_BYTES = CONVERSATION_BYTES.format(row="")

#: The row ``id`` and the rows that continue it, found along the ``previous_id`` index.
DESCENDANTS = (
    f"WITH RECURSIVE doomed(id) AS (SELECT %s::text UNION SELECT r.id FROM {SCHEMA}.responses r "
    "JOIN doomed d ON r.previous_id = d.id) "
)


def insert(conn: Conn, row: dict[str, Any]) -> None:
    """Write a response's row (:func:`~.chains.response_row`), in the caller's transaction,
    after :func:`check_continues`."""
    conn.execute(insert_sql(f"{SCHEMA}.responses", row, "%s"), tuple(row.values()))


def check_continues(conn: Conn, owner: str, previous: str) -> None:
    """:class:`~chatfmt.errors.BrokenChain` unless the owner's response ``previous`` and every
    response before it are still kept, back to the chain's start."""
    row = conn.execute(
        f"WITH RECURSIVE up(id, previous, depth) AS ("
        f" SELECT id, previous_id, 1 FROM {SCHEMA}.responses WHERE id = %s AND owner = %s"
        f" UNION ALL SELECT r.id, r.previous_id, up.depth + 1"
        f" FROM {SCHEMA}.responses r JOIN up ON r.id = up.previous"
        " WHERE r.owner = %s AND up.depth < %s) "
        "SELECT previous, depth FROM up ORDER BY depth DESC LIMIT 1",
        (previous, owner, owner, MAX_CHAIN),
    ).fetchone()
    if row is None:
        raise broken_while_written(previous, previous)
    before, depth = row
    if before is not None and depth < MAX_CHAIN:
        raise broken_while_written(before, previous)


def ancestry(conn: Conn, response_id: str) -> list[str]:
    """``response_id`` and the responses it continues."""
    rows = conn.execute(
        f"WITH RECURSIVE up(id, previous, depth) AS ("
        f" SELECT id, previous_id, 1 FROM {SCHEMA}.responses WHERE id = %s"
        f" UNION ALL SELECT r.id, r.previous_id, up.depth + 1"
        f" FROM {SCHEMA}.responses r JOIN up ON r.id = up.previous WHERE up.depth < %s) "
        "SELECT id FROM up",
        (response_id, MAX_CHAIN),
    ).fetchall()
    return [rid for (rid,) in rows]


def get(conn: Conn, owner: str, response_id: str) -> StoredResponse | None:
    row = conn.execute(
        f"SELECT response, input_items FROM {SCHEMA}.responses WHERE id = %s AND owner = %s",
        (response_id, owner),
    ).fetchone()
    if row is None:
        return None
    return StoredResponse(response_id, json.loads(row[0]), json.loads(row[1]))


def delete(conn: Conn, owner: str, response_id: str) -> bool:
    cursor = conn.execute(
        f"DELETE FROM {SCHEMA}.responses WHERE id = %s AND owner = %s", (response_id, owner)
    )
    return cursor.rowcount > 0


def chain(conn: Conn, owner: str, response_id: str) -> Chain | None:
    """The conversation up to and including ``response_id`` (``None``: no such response of
    this owner), with its exact ids where every row they come from kept them;
    :class:`~chatfmt.errors.BrokenChain` when an earlier response of it is gone."""
    rows = conn.execute(
        f"WITH RECURSIVE up AS ("
        f" SELECT id, previous_id, messages, view, ids_base, ids, reply, 1 AS depth"
        f" FROM {SCHEMA}.responses WHERE id = %s AND owner = %s"
        f" UNION ALL SELECT r.id, r.previous_id, r.messages, r.view, r.ids_base, r.ids,"
        f" r.reply, up.depth + 1 FROM {SCHEMA}.responses r JOIN up ON r.id = up.previous_id"
        " WHERE r.owner = %s AND up.depth < %s) "
        "SELECT previous_id, messages, view, ids_base, ids, reply FROM up ORDER BY depth",
        (response_id, owner, owner, MAX_CHAIN),
    ).fetchall()
    if not rows:
        return None
    missing = rows[-1][0]
    if missing is not None and len(rows) < MAX_CHAIN:
        raise broken_on_read(missing)
    reader = ChainReader()
    for _previous, added, _view, base, tail, _reply in rows:
        reader.add(json.loads(added), base, tail)
    return reader.chain(rows[0][2], rows[0][5] or 0)


def exchanges(conn: Conn, owner: str, response_id: str) -> list[StoredExchange] | None:
    """The responses of the conversation up to and including ``response_id``, oldest first,
    each with its exact ids as stored (``None``: no such response of this owner), read in one
    recursive statement as :func:`chain` is; :class:`~chatfmt.errors.BrokenChain` when an
    earlier response of it is gone."""
    rows = conn.execute(
        f"WITH RECURSIVE up AS ("
        f" SELECT id, previous_id, created_at, messages, view, ids_base, ids, reply, stop,"
        f" 1 AS depth FROM {SCHEMA}.responses WHERE id = %s AND owner = %s"
        f" UNION ALL SELECT r.id, r.previous_id, r.created_at, r.messages, r.view, r.ids_base,"
        f" r.ids, r.reply, r.stop, up.depth + 1 FROM {SCHEMA}.responses r"
        " JOIN up ON r.id = up.previous_id WHERE r.owner = %s AND up.depth < %s) "
        "SELECT id, previous_id, created_at, messages, view, ids_base, ids, reply, stop FROM up "
        "ORDER BY depth DESC",
        (response_id, owner, owner, MAX_CHAIN),
    ).fetchall()
    if not rows:
        return None
    missing = rows[0][1]
    if missing is not None and len(rows) < MAX_CHAIN:
        raise broken_on_read(missing)
    return [
        StoredExchange(rid, float(created), json.loads(added), exact_of(*kept))
        for rid, _previous, created, added, *kept in rows
    ]


# ==== The web chat's conversations ====


def save_conversation(
    conn: Conn, owner: str, cid: str, title: str, state: dict[str, Any], now: float
) -> None:
    conn.execute(
        f"INSERT INTO {SCHEMA}.conversations (id, owner, title, updated_at, state) "
        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (owner, id) "
        "DO UPDATE SET title = excluded.title, updated_at = excluded.updated_at, "
        "state = excluded.state",
        (cid, owner, title, now, json.dumps(state, ensure_ascii=False)),
    )


def conversations(conn: Conn, owner: str, limit: int) -> list[dict[str, Any]]:
    """Newest first, along the (owner, updated_at) index."""
    rows = conn.execute(
        f"SELECT id, title, updated_at FROM {SCHEMA}.conversations WHERE owner = %s "
        "ORDER BY updated_at DESC LIMIT %s",
        (owner, limit),
    ).fetchall()
    return [{"id": i, "title": t, "updated_at": u} for i, t, u in rows]


def load_conversation(conn: Conn, owner: str, cid: str) -> dict[str, Any] | None:
    row = conn.execute(
        f"SELECT state FROM {SCHEMA}.conversations WHERE owner = %s AND id = %s", (owner, cid)
    ).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def delete_conversation(conn: Conn, owner: str, cid: str) -> bool:
    cursor = conn.execute(
        f"DELETE FROM {SCHEMA}.conversations WHERE owner = %s AND id = %s", (owner, cid)
    )
    return cursor.rowcount > 0
