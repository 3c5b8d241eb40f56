"""Repeated ids of a log of any length, found exactly in memory independent of its length.

Every id goes, with its group (a run: ids are unique per run), its row (its place in the log,
increasing as ids are added) and a position to name it by (a file line, a shard row), to one of
``K`` partition files chosen by a hash of its bytes and group (:func:`id_hash`), so equal
``(group, id)`` pairs share a partition. Each partition is then read and sorted alone: a stable
sort keeps equal pairs in row order, and a pair equal to its sorted predecessor is a repeat.
The repeat reported for a group is its earliest row whose id appeared before, named with both
positions.

Used by ``import requests-csv`` (:mod:`.importers.requests_stream`, one group) and by
``validate`` on a folder's published request shards (:mod:`.request_checks`, a group a run).
Memory: the ids being added, then one partition.

Example:
    >>> import numpy as np, pyarrow as pa, tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     parts = IdPartitions(Path(folder), 2)
    ...     parts.add(pa.chunked_array([["a", "b", "a"]]), 0, np.array([2, 3, 4]))
    ...     parts.close()
    ...     parts.first_repeat()
    Repeat(request_id='a', row=2, line=4, first_line=2, group=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from .arrow_numpy import to_arrow, to_numpy

_ID_SCHEMA = pa.schema([("group", pa.int32()), ("id", pa.string()), ("row", pa.int64()),
                        ("line", pa.int64())])
_HASH_WEIGHTS = np.random.default_rng(0x5EED).integers(1, 2**63, size=64, dtype=np.uint64) | 1
"""Odd 64-bit weights of a byte by its position (mod 64) in an id: a fixed hash, every run."""
_HASH_IDS = 4096
"""Ids hashed at a time."""


def id_hash(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each id's UTF-8 bytes (equal ids, equal hashes), column-wise.

    ``h = mix(Σ_j (byte_j + 1) · W[j mod 64] + 0x9E37… · len)`` with wrapping uint64 arithmetic
    and a final avalanche (``mix``: xor-shift-multiply), so ids differing in any byte spread
    over the partitions. Computed :data:`_HASH_IDS` ids at a time: the per-byte temporaries
    (eight of 8 bytes a byte) stay small whatever the number of ids.
    """
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks != 1 else ids.chunk(0)
    if len(ids) > _HASH_IDS:
        return np.concatenate([_hash_slice(ids.slice(start, _HASH_IDS))
                               for start in range(0, len(ids), _HASH_IDS)])
    return _hash_slice(ids)


def _hash_slice(ids: pa.Array) -> np.ndarray:
    ids = ids.cast(pa.large_string())
    n = len(ids)
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int64)[ids.offset:ids.offset + n + 1]
    data_buf = ids.buffers()[2]
    data = (np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None
            else np.zeros(0, dtype=np.uint8))[offsets[0]:offsets[-1]]
    starts = offsets[:-1] - offsets[0]
    lengths = np.diff(offsets)
    position = np.arange(len(data), dtype=np.int64) - np.repeat(starts, lengths)
    with np.errstate(over="ignore"):
        terms = (data.astype(np.uint64) + np.uint64(1)) * _HASH_WEIGHTS[position & 63]
        sums = np.concatenate((np.zeros(1, dtype=np.uint64), np.cumsum(terms, dtype=np.uint64)))
        h = sums[starts + lengths] - sums[starts]
        h += lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
    return h


def _group_hash(group: int) -> np.uint64:
    """What a group adds (xor) to its ids' hashes: 0 for group 0, spread for the others."""
    with np.errstate(over="ignore"):
        h = np.uint64(group) * np.uint64(0x9E3779B97F4A7C15)
        return np.uint64(h ^ (h >> np.uint64(29)))


@dataclass(frozen=True)
class Repeat:
    """An id seen before in its group: at ``row`` (named ``line``), first at ``first_line``."""

    request_id: str
    row: int
    line: int
    first_line: int
    group: int = 0


class IdPartitions:
    """Every id of a log with its group, row and line, split over files by :func:`id_hash`.

    Args:
        folder: where the partition files are written (the caller removes them).
        count: the number of partitions (each is read whole by :meth:`first_repeats`).
    """

    def __init__(self, folder: Path, count: int) -> None:
        self.paths = [folder / f"ids-{i}.arrow" for i in range(count)]
        self._sinks = [pa.OSFile(str(p), "wb") for p in self.paths]
        self._writers = [ipc.new_stream(s, _ID_SCHEMA) for s in self._sinks]

    def add(self, ids: pa.ChunkedArray | pa.Array, first_row: int, lines: np.ndarray,
            group: int = 0) -> None:
        """Add ids of one group at rows ``first_row, first_row + 1, …``, named by ``lines``."""
        n = len(ids)
        rows = np.arange(first_row, first_row + n, dtype=np.int64)
        h = id_hash(ids)
        if group:
            h ^= _group_hash(group)
        part = (h % np.uint64(len(self.paths))).astype(np.int64)
        order = np.argsort(part, kind="stable")
        bounds = np.searchsorted(part[order], np.arange(len(self.paths) + 1))
        # from numpy through to_arrow: pa.array/pa.table on numpy would import pandas (≈ 50 MB)
        table = pa.Table.from_arrays(
            [pa.chunked_array([to_arrow(np.full(n, group, dtype=np.int32))]),
             ids if isinstance(ids, pa.ChunkedArray) else pa.chunked_array([ids]),
             pa.chunked_array([to_arrow(rows)]),
             pa.chunked_array([to_arrow(np.asarray(lines, dtype=np.int64))])],
            schema=_ID_SCHEMA)
        for i, writer in enumerate(self._writers):
            if bounds[i + 1] > bounds[i]:
                writer.write_table(table.take(to_arrow(order[bounds[i]:bounds[i + 1]])))

    def close(self) -> None:
        """Finish the partition files (before :meth:`first_repeats`; again is harmless)."""
        for writer in self._writers:
            writer.close()
        for sink in self._sinks:
            if not sink.closed:
                sink.close()
        self._writers = []
        self._sinks = []

    def first_repeats(self, before: int | None = None) -> dict[int, Repeat]:
        """Each group's earliest row (below ``before``) whose id appeared at an earlier row."""
        best: dict[int, Repeat] = {}
        for path in self.paths:
            with pa.OSFile(str(path)) as fh:
                table = ipc.open_stream(fh).read_all()
            if before is not None:
                table = table.filter(pc.less(table.column("row"), before))
            if table.num_rows < 2:
                continue
            # rows were appended in order: a stable sort keeps equal pairs in row order
            ranked = table.take(pc.sort_indices(table, sort_keys=[("group", "ascending"),
                                                                  ("id", "ascending")]))
            ids, groups = ranked.column("id"), ranked.column("group")
            n = len(ids)
            same = np.asarray(to_numpy(pc.and_(
                pc.equal(ids.slice(1), ids.slice(0, n - 1)),
                pc.equal(groups.slice(1), groups.slice(0, n - 1))), null_value=False), dtype=bool)
            if not same.any():
                continue
            rows = np.asarray(to_numpy(ranked.column("row")), dtype=np.int64)[1:]
            group_of = np.asarray(to_numpy(groups), dtype=np.int64)[1:]
            line = np.asarray(to_numpy(ranked.column("line")), dtype=np.int64)
            hits = np.flatnonzero(same)
            for group in np.unique(group_of[hits]):
                in_group = hits[group_of[hits] == group]
                k = int(in_group[np.argmin(rows[in_group])])
                known = best.get(int(group))
                if known is None or int(rows[k]) < known.row:
                    best[int(group)] = Repeat(request_id=str(ids[k + 1].as_py()),
                                              row=int(rows[k]), line=int(line[k + 1]),
                                              first_line=int(line[k]), group=int(group))
        return best

    def first_repeat(self, before: int | None = None) -> Repeat | None:
        """The earliest row (below ``before``) whose id appeared at an earlier row of its group."""
        found = self.first_repeats(before)
        return min(found.values(), key=lambda r: r.row) if found else None


__all__ = ["IdPartitions", "Repeat", "id_hash"]
