"""A request log held as columns: one Arrow table, read as a sequence of rows when asked.

A serving benchmark's log has one row per request, and a million requests is an ordinary
afternoon. Held as one Python ``dict`` (or dataclass) per request such a log takes ≈ 1.5 kB
a request, 25× its CSV text; held here as typed Arrow columns it takes ≈ 60 bytes (float64 or
int64 numbers, UTF-8 ids). :class:`ColumnRows` keeps the columns and still reads as a sequence
of rows (``rows[i]``, ``for row in rows``, a batch of :data:`BATCH_ROWS` rows made into Python
objects at a time), so code that wants one row at a time keeps working;
:func:`number_column` gives any request sequence's column as numpy, which the metrics and the
run-level summaries use. A log too long to hold is :class:`SpilledRequests` (its shard file,
read :data:`BATCH_ROWS` rows at a time); :func:`request_blocks` gives either kind in the same
blocks, so what is summed block by block is the same number for both.

Example:
    >>> import pyarrow as pa
    >>> rows = RequestRows(pa.table({"request_id": ["a", "b"], "arrival_ms": [0, 5]}))
    >>> len(rows), rows[1]
    (2, {'request_id': 'b', 'arrival_ms': 5})
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np

if TYPE_CHECKING:  # imported where columns are read: the metrics import this module
    from pathlib import Path

    import pyarrow as pa

BATCH_ROWS = 65_536
"""Rows made into Python objects at a time when a column table is read row by row."""

T = TypeVar("T")


class ColumnRows(Sequence[T], Generic[T]):
    """Rows of one Arrow table, each made into a Python object only when read.

    Subclasses say what a row becomes (:meth:`_row`). Two of them are equal when their rows are;
    one also equals a list (or other sequence) of the same rows.

    Args:
        table: the columns, one row per item.
    """

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def _row(self, values: dict[str, Any]) -> T:
        raise NotImplementedError

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return list(type(self)(self.table.slice(start, max(stop - start, 0))))
            return [self[i] for i in range(start, stop, step)]
        i = operator.index(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"row {index} of {len(self)}")
        return self._row(self.table.slice(i, 1).to_pylist()[0])

    def __iter__(self) -> Iterator[T]:
        for batch in self.table.to_batches(max_chunksize=BATCH_ROWS):
            for values in batch.to_pylist():
                yield self._row(values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable rows compare by value, as a list does

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} rows: {', '.join(self.table.column_names)})"


class RequestRows(ColumnRows[dict[str, Any]]):
    """``inference_requests`` rows of one run (column name -> value dicts when read by row)."""

    def _row(self, values: dict[str, Any]) -> dict[str, Any]:
        return values

    @classmethod
    def from_shard(cls, table: pa.Table) -> RequestRows:
        """A run's rows of an ``inference_requests`` table, without its ``run_id``/``platform``."""
        return cls(table.drop_columns([c for c in ("run_id", "platform")
                                       if c in table.column_names]))


class SpilledRequests(RequestRows):
    """``inference_requests`` rows of one run in an Arrow IPC stream file, read a block at a time.

    What ``import requests-csv`` publishes: the shard written block by block, never held
    whole. Iterating it (rows, or :func:`request_blocks`) holds one block of :data:`BATCH_ROWS`
    rows; :attr:`table` (the whole file, for code that wants columns at once) reads it all.

    Args:
        path: the stream file (its ``run_id``/``platform`` columns are dropped when read).
        num_rows: its row count.
    """

    def __init__(self, path: Path, num_rows: int) -> None:  # no table held: see `table`
        self.path = path
        self.num_rows = num_rows

    @property  # type: ignore[override]  # read on demand: a spilled log is not held
    def table(self) -> pa.Table:
        """Every row as one table (memory grows with the rows: prefer :meth:`blocks`)."""
        import pyarrow as pa

        blocks = list(self.blocks())
        if not blocks:
            return self._empty()
        return pa.concat_tables(blocks) if len(blocks) > 1 else blocks[0]

    def _empty(self) -> pa.Table:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        with pa.OSFile(str(self.path)) as fh:
            return RequestRows.from_shard(ipc.open_stream(fh).schema.empty_table()).table

    def blocks(self) -> Iterator[pa.Table]:
        """The rows, :data:`BATCH_ROWS` at a time (the last block may be shorter)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        with pa.OSFile(str(self.path)) as fh:  # read, not mapped: pages of a map count as RSS
            batches: list[pa.RecordBatch] = []
            held = 0
            for batch in ipc.open_stream(fh):
                while len(batch):
                    take = min(len(batch), BATCH_ROWS - held)
                    batches.append(batch.slice(0, take))
                    held += take
                    batch = batch.slice(take)
                    if held == BATCH_ROWS:
                        yield RequestRows.from_shard(pa.Table.from_batches(batches)).table
                        batches, held = [], 0
            if held:
                yield RequestRows.from_shard(pa.Table.from_batches(batches)).table

    def __len__(self) -> int:
        return self.num_rows

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for table in self.blocks():
            yield from RequestRows(table)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.num_rows} rows in {self.path.name})"


def request_blocks(requests: Sequence[dict[str, Any]]) -> Iterator[Sequence[dict[str, Any]]]:
    """A run's requests, :data:`BATCH_ROWS` at a time from the first.

    The same blocks whether the rows are held (:class:`RequestRows`, a list) or spilled
    (:class:`SpilledRequests`), so sums taken block by block are the same numbers either way.
    """
    if isinstance(requests, SpilledRequests):
        for table in requests.blocks():
            yield RequestRows(table)
        return
    for start in range(0, len(requests), BATCH_ROWS):
        if isinstance(requests, RequestRows):
            yield RequestRows(requests.table.slice(start, BATCH_ROWS))
        else:
            yield requests[start:start + BATCH_ROWS]


def number_column(requests: Sequence[dict[str, Any]], name: str) -> np.ndarray:
    """One numeric column of a run's requests as float64, NaN where null or absent.

    Reads :class:`RequestRows` column-wise (no Python object per request) and any other
    sequence of row dicts row by row.
    """
    if isinstance(requests, RequestRows):
        import pyarrow as pa

        from .arrow_numpy import to_numpy

        if name not in requests.table.column_names:
            return np.full(len(requests), np.nan)
        return np.asarray(to_numpy(requests.table.column(name).cast(pa.float64())),
                          dtype=np.float64)
    return np.array([np.nan if r.get(name) is None else float(r[name]) for r in requests],
                    dtype=np.float64)


def status_is(requests: Sequence[dict[str, Any]], status: str) -> np.ndarray:
    """Whether each request's ``status`` is ``status`` (a bool array)."""
    if isinstance(requests, RequestRows):
        import pyarrow.compute as pc

        from .arrow_numpy import to_numpy

        if "status" not in requests.table.column_names:
            return np.zeros(len(requests), dtype=bool)
        return np.asarray(to_numpy(pc.equal(requests.table.column("status"), status),
                                   null_value=False), dtype=bool)
    return np.array([r.get("status") == status for r in requests], dtype=bool)


__all__ = ["BATCH_ROWS", "ColumnRows", "RequestRows", "SpilledRequests", "number_column",
           "request_blocks", "status_is"]
