"""Where training rows go: Parquet (row groups, streamed) or JSON Lines.

Both write to ``OUT.partial`` beside the output and move it into place only when the build
finishes, so a failed build never leaves a file that looks complete. Parquet is written a row
group at a time: memory holds one group, never the data set.

The columns (``docs/training.md``): ``id`` (the source row's id; ``ids`` when packed),
``line`` (``lines``), ``input_ids``, ``labels`` (``-100`` where no loss), ``attention_mask``,
``num_tokens``, ``num_trained``, and when packed ``position_ids`` (restarting at each
conversation) and ``seq_lengths``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from .._imports import require


@dataclass(slots=True)
class OutRow:
    """One row of output: one conversation, or several packed together."""

    ids: list[str]
    lines: list[int]
    input_ids: list[int]
    labels: list[int]
    seq_lengths: list[int] = field(default_factory=list)
    num_trained: int = 0
    #: The columns that say where the row came from, in place of ``id`` and ``line`` (an
    #: export's: response id, owner, time, source); the sink's ``meta_fields`` name them.
    meta: dict[str, Any] | None = None

    def as_dict(self, *, packed: bool) -> dict[str, Any]:
        row: dict[str, Any]
        if self.meta is not None:
            row = dict(self.meta)
        elif packed:
            row = {"ids": self.ids, "lines": self.lines}
        else:
            row = {"id": self.ids[0], "line": self.lines[0]}
        row["input_ids"] = self.input_ids
        row["labels"] = self.labels
        row["attention_mask"] = [1] * len(self.input_ids)
        if packed:
            row["position_ids"] = [k for n in self.seq_lengths for k in range(n)]
            row["seq_lengths"] = self.seq_lengths
        row["num_tokens"] = len(self.input_ids)
        row["num_trained"] = self.num_trained
        return row


class Sink:
    """Rows out to a file; a context manager that keeps the file only on success."""

    def __init__(self, path: Path, *, packed: bool) -> None:
        self.path = path
        self.packed = packed
        self.partial = path.with_name(path.name + ".partial")
        self.rows = 0

    def write(self, row: OutRow) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Sink:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close()
        if kind is None:
            os.replace(self.partial, self.path)
        else:
            self.partial.unlink(missing_ok=True)


class JsonlSink(Sink):
    """One JSON object per line."""

    def __init__(self, path: Path, *, packed: bool) -> None:
        super().__init__(path, packed=packed)
        # Closed by _close, when the with block ends.
        self._file: IO[str] = open(self.partial, "w", encoding="utf-8")

    def write(self, row: OutRow) -> None:
        self._file.write(json.dumps(row.as_dict(packed=self.packed), ensure_ascii=False))
        self._file.write("\n")
        self.rows += 1

    def _close(self) -> None:
        self._file.close()


class ParquetSink(Sink):
    """Parquet through pyarrow (``chatfmt[dataset]``), ``row_group_size`` rows at a time."""

    def __init__(
        self,
        path: Path,
        *,
        packed: bool,
        row_group_size: int = 1000,
        meta_fields: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        pa = require("pyarrow", extra="dataset")
        pq = require("pyarrow.parquet", extra="dataset")
        super().__init__(path, packed=packed)
        ints = pa.list_(pa.int32())
        if meta_fields is not None:  # (name, pyarrow type's name: "string", "float64", …)
            fields = [(name, getattr(pa, kind)()) for name, kind in meta_fields]
        elif packed:
            fields = [("ids", pa.list_(pa.string())), ("lines", pa.list_(pa.int64()))]
        else:
            fields = [("id", pa.string()), ("line", pa.int64())]
        fields += [("input_ids", ints), ("labels", ints), ("attention_mask", pa.list_(pa.int8()))]
        if packed:
            fields += [("position_ids", ints), ("seq_lengths", ints)]
        fields += [("num_tokens", pa.int32()), ("num_trained", pa.int32())]
        self._pa = pa
        self._schema = pa.schema(fields)
        self._writer = pq.ParquetWriter(str(self.partial), self._schema)
        self._group: list[dict[str, Any]] = []
        self._size = max(1, row_group_size)

    def write(self, row: OutRow) -> None:
        self._group.append(row.as_dict(packed=self.packed))
        self.rows += 1
        if len(self._group) >= self._size:
            self._flush()

    def _flush(self) -> None:
        if self._group:
            table = self._pa.Table.from_pylist(self._group, schema=self._schema)
            self._writer.write_table(table)
            self._group = []

    def _close(self) -> None:
        try:
            self._flush()
        finally:
            self._writer.close()


def open_sink(
    path: Path,
    *,
    packed: bool,
    row_group_size: int = 1000,
    meta_fields: Sequence[tuple[str, str]] | None = None,
) -> Sink:
    """A sink for ``path`` by its suffix: ``.parquet`` or ``.jsonl``; ``ValueError`` else.
    ``meta_fields``: the leading columns, ``(name, pyarrow type)``, of rows with ``meta``."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return ParquetSink(
            path, packed=packed, row_group_size=row_group_size, meta_fields=meta_fields
        )
    if suffix in (".jsonl", ".json"):
        return JsonlSink(path, packed=packed)
    raise ValueError(f"cannot tell the output format of {path.name}: name it *.parquet or *.jsonl")
