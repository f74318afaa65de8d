"""Every owner's stored rows, a page at a time, for ``chatfmt dataset export``.

An export reads the whole store (or one key's part, or a span of dates) in pages ordered by
(time, owner, id), each page starting after the last row of the one before (keyset paging):
memory holds one page, and rows written meanwhile neither shift a page nor repeat a row. The
query is built here once for both backends, which differ only in how a parameter is written
and where the tables live.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .types import StoredRef

#: What an export lists: Responses API responses, or the web chat's conversations.
ExportKind = Literal["responses", "conversations"]


@dataclass(frozen=True, slots=True)
class ExportQuery:
    """Which rows an export lists: those of ``kind``, of ``owner`` (``None``: every owner),
    with ``since <= time < until`` (seconds since the epoch; ``None``: no bound);
    ``last_only``: only the responses no other response continues (each chain's last)."""

    kind: ExportKind
    owner: str | None = None
    since: float | None = None
    until: float | None = None
    last_only: bool = False


def refs_query(
    query: ExportQuery,
    *,
    after: StoredRef | None,
    limit: int,
    param: str = "?",
    schema: str = "",
) -> tuple[str, list[Any]]:
    """The SQL (``param``: the driver's placeholder, ``schema``: the tables' prefix) and its
    parameters listing a page of ``query``'s rows: up to ``limit`` after ``after`` in (time,
    owner, id) order."""
    kind, owner, since, until = query.kind, query.owner, query.since, query.until
    if kind == "responses":
        table, at = f"{schema}responses", "created_at"
    elif kind == "conversations":
        table, at = f"{schema}conversations", "updated_at"
    else:
        raise ValueError(f"no rows of kind {kind!r} to export")
    where: list[str] = []
    args: list[Any] = []
    if after is not None:
        where.append(f"({at}, owner, id) > ({param}, {param}, {param})")
        args += [after.at, after.owner, after.id]
    if owner is not None:
        where.append(f"owner = {param}")
        args.append(owner)
    if since is not None:
        where.append(f"{at} >= {param}")
        args.append(since)
    if until is not None:
        where.append(f"{at} < {param}")
        args.append(until)
    if query.last_only and kind == "responses":
        # Along the previous_id index: one probe per row.
        where.append(f"NOT EXISTS (SELECT 1 FROM {table} c WHERE c.previous_id = r.id)")
    sql = f"SELECT owner, id, {at} FROM {table} r"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY {at}, owner, id LIMIT {param}"
    return sql, [*args, limit]


def refs(rows: list[tuple[Any, ...]]) -> list[StoredRef]:
    """The rows :func:`refs_query` selected."""
    return [StoredRef(str(owner), str(rid), float(at)) for owner, rid, at in rows]
