"""A request CSV onto a run's clock and into its shard, in memory independent of its length.

``import requests-csv`` streams the file in one pass of blocks of rows
(:func:`.requests_csv.iter_csv_blocks`, :data:`.requests_csv.BLOCK_ROWS` rows a block). Each block goes through every per-row check and the
clock conversion (:func:`.requests_common.clock_columns`), the number gate
(:func:`..shards.encode.requests_block`), and is appended to the run's requests shard, written
as an Arrow IPC stream under the folder's ``.staging/<run_id>/`` (the same schema, batches and
compression as a shard written whole; publishing renames it into ``data/``). Nothing is kept
of a block but what the three whole-log results need, each on disk beside the shard:

* **Repeated ids**, exactly (:class:`..repeated_ids.IdPartitions`, which ``validate`` uses
  too): every id goes, with its row and line, to one of ``K`` partition files chosen by a hash
  of its bytes (``K`` grows with the file, about :data:`PARTITION_FILE_BYTES` of CSV a
  partition), so equal ids share a partition; each partition is then sorted alone. The repeat
  reported is the earliest row whose id appeared before, named with both lines (the whole-log
  check's choice).
* **p50/p99 of TTFT and latency**, exactly ``numpy.percentile``'s (``linear``: for ``n`` values
  sorted ``v``, ``i = (n - 1) q``, ``g = i - floor(i)``, ``p = v[⌊i⌋] + (v[⌊i⌋+1] - v[⌊i⌋]) g``,
  computed as numpy computes it, :func:`_lerp`): the values of completed requests are written
  as float64, and the two order statistics each percentile needs are found by a radix
  selection on their bit patterns mapped to order-preserving integers (four passes over the
  file, one 16-bit digit a pass, a 65,536-bucket histogram each; :func:`select_ranks`).
* **Counts and token sums**: integers, added block by block.

The first failing row stops the pass; an id repeated before it is reported first, as the
whole-log check would. On any error the staged files are removed and ``data/`` is untouched.
Memory: one block of rows (≈ 5 MB of parsed values), one partition (≈
:data:`PARTITION_FILE_BYTES` of CSV text's ids), the histograms and :data:`BATCH_ROWS` spilled
values at a time.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from .. import layout
from ..repeated_ids import IdPartitions, Repeat, id_hash
from ..request_rows import BATCH_ROWS, RequestRows, SpilledRequests, number_column, status_is
from ..run import Run
from .requests_common import (
    ClockedColumns,
    RequestColumns,
    RequestLog,
    clock_columns,
    clock_offset_ns,
    duplicate_error,
    first_failing,
    raise_for,
)
from .requests_csv import FORMAT, iter_csv_blocks

PARTITION_FILE_BYTES = 8 * 2**20
"""CSV bytes per id partition (so ≈ 110,000 ids of a typical log are sorted at a time)."""
MAX_PARTITIONS = 512
"""At most this many partition files are open at once (beyond, partitions grow instead)."""
_DIGIT_BITS = 16
_WORK_DIR = "requests-import"
_SHARD_NAME = "requests.arrow"


@dataclass(frozen=True)
class StreamedRequests:
    """A request log written as its run's shard.

    Attributes:
        requests: the shard (``None`` when the log has no rows).
        summary: :func:`.requests_common.summary_columns` of the rows.
    """

    requests: SpilledRequests | None
    summary: dict[str, Any]


def work_dir(root: Path, run_id: str) -> Path:
    """The folder of one import's staged files (``.staging/<run_id>/requests-import/``)."""
    return layout.staging_dir(root, run_id) / _WORK_DIR


def discard(root: Path, run_id: str) -> None:
    """Remove an import's staged files (and the run's staging folder if nothing else is there)."""
    folder = work_dir(root, run_id)
    if folder.exists():
        shutil.rmtree(folder)
    if folder.parent.is_dir() and not any(folder.parent.iterdir()):
        folder.parent.rmdir()


def stream_csv_requests(root: str | Path, run: Run, path: str | Path, *,
                        anchor: dict[str, Any] | None, run_end_ms: int,
                        t0_ns: int = 0) -> StreamedRequests:
    """Check a request CSV, put it on ``run``'s clock and write it as the run's staged shard.

    ``import requests-csv`` (a published run) and ``record --requests csv:FILE`` (the run being
    recorded) both write the shard this way.

    Args:
        root: the dataset folder (the shard is written under its ``.staging/``).
        run: the run the requests belong to (its ``run_id`` and ``platform``).
        path: the CSV (:mod:`.requests_csv`).
        anchor: the ``{"monotonic_ns", "utc_ns"}`` pair relating the sampler's clock to UTC.
        run_end_ms: the run's last tick on the run clock.
        t0_ns: the sampler's first tick on its clock (the run clock's zero).

    Returns:
        The shard and the run-level summary. The caller publishes the shard, or calls
        :func:`discard`.

    Raises:
        InputError: the first problem of the file, as :func:`.requests_common.to_run_clock`
            would name it (an id repeated before it first), or no ``anchor``. Nothing is left
            staged.
    """
    root, path = Path(root), Path(path)
    log = RequestLog(file=path, fmt=FORMAT, clock="unix")
    offset_ns = clock_offset_ns(log, t0_ns=t0_ns, anchor=anchor)
    discard(root, run.run_id)  # what an interrupted import left
    folder = work_dir(root, run.run_id)
    folder.mkdir(parents=True)
    try:
        return _stream(folder, run, log, offset_ns=offset_ns, run_end_ms=run_end_ms)
    except BaseException:
        discard(root, run.run_id)
        raise


def _stream(folder: Path, run: Run, log: RequestLog, *, offset_ns: int,
            run_end_ms: int) -> StreamedRequests:
    from ..shards.encode import ipc_options, requests_block

    size = log.file.stat().st_size
    ids = IdPartitions(folder, max(1, min(MAX_PARTITIONS, -(-size // PARTITION_FILE_BYTES))))
    totals = _Totals(folder)
    shard = folder / _SHARD_NAME
    writer: ipc.RecordBatchStreamWriter | None = None
    sink: pa.OSFile | None = None
    rows = 0
    failing: tuple[int, Any, int] | None = None  # (row, request, line)
    try:
        for block, more in _with_lookahead(iter_csv_blocks(log.file)):
            clocked = clock_columns(block.table, offset_ns=offset_ns, run_end_ms=run_end_ms,
                                    run_id=run.run_id, platform=run.platform)
            first = first_failing(clocked)
            if first is not None:
                ids.add(clocked.rows.column("request_id").slice(0, first + 1), rows,
                        block.lines[:first + 1])
                failing = (rows + first, RequestColumns(block.table)[first],
                           int(block.lines[first]))
                break
            ids.add(clocked.rows.column("request_id"), rows, block.lines)
            table = requests_block(run, RequestRows(clocked.rows))
            if writer is None:
                # one block and no more: the whole table's own choice; else large, compressed
                options = ipc_options(table.get_total_buffer_size() if not more else None)
                options.use_threads = False
                sink = pa.OSFile(str(shard), "wb")
                writer = ipc.new_stream(sink, table.schema, options=options)
            # a shard written whole has batches of 1,024 rows (fewer when it has fewer)
            writer.write_table(table, max_chunksize=1024 if rows or more
                               else max(1, min(table.num_rows, 1024)))
            totals.add(clocked)
            rows += table.num_rows
        ids.close()
        repeat = ids.first_repeat(before=None if failing is None else failing[0] + 1)
        if repeat is not None and (failing is None or repeat.row < failing[0]):
            raise duplicate_error(repeat.request_id, file=log.file,
                                  lines=(repeat.first_line, repeat.line))
        if failing is not None:
            raise_for(failing[1], log=log, offset_ns=offset_ns, run_end_ms=run_end_ms,
                      seen=repeat is not None and repeat.row == failing[0],
                      lines=None if repeat is None else (repeat.first_line, repeat.line))
        if writer is not None:
            writer.close()
            writer = None
            assert sink is not None
            sink.close()
            _fsync(shard)
    finally:
        ids.close()
        totals.close()
        if writer is not None:
            writer.close()
        if sink is not None and not sink.closed:
            sink.close()
    summary = totals.summary(rows)
    return StreamedRequests(requests=SpilledRequests(shard, rows) if rows else None,
                            summary=summary)


def _with_lookahead(blocks: Iterator[Any]) -> Iterator[tuple[Any, bool]]:
    """Each item and whether another follows it."""
    current = next(blocks, None)
    while current is not None:
        following = next(blocks, None)
        yield current, following is not None
        current = following


def _fsync(path: Path) -> None:
    import os

    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


# ---------------------------------------------------------------------------------------------
# Counts, sums and exact percentiles
# ---------------------------------------------------------------------------------------------

class _Totals:
    """What :func:`.requests_common.summary_columns` computes, gathered block by block."""

    def __init__(self, folder: Path) -> None:
        self.completed = 0
        self.tokens: dict[str, int | None] = {"tokens_in": None, "tokens_out": None}
        self.paths = {name: folder / f"{name}.f64" for name in ("ttft", "latency")}
        self._files = {name: p.open("wb") for name, p in self.paths.items()}
        self.counts = {name: 0 for name in self.paths}

    def add(self, clocked: ClockedColumns) -> None:
        rows = RequestRows(clocked.rows)
        ok = status_is(rows, "ok")
        self.completed += int(ok.sum())
        for name, key in (("tokens_in", "prompt_tokens"), ("tokens_out", "output_tokens")):
            values = number_column(rows, key)[ok]
            values = values[~np.isnan(values)]
            if values.size:
                self.tokens[name] = (self.tokens[name] or 0) + int(values.astype(np.int64).sum())
        arrival = number_column(rows, "arrival_ms")[ok]
        for name, key in (("ttft", "first_token_ms"), ("latency", "finish_ms")):
            values = number_column(rows, key)[ok] - arrival
            values = values[~np.isnan(values)]
            self._files[name].write(values.astype("<f8").tobytes())
            self.counts[name] += int(values.size)

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()

    def summary(self, rows: int) -> dict[str, Any]:
        out: dict[str, Any] = {"requests_completed": self.completed, "num_requests": rows,
                               **self.tokens}
        for name, path in self.paths.items():
            n = self.counts[name]
            found = percentiles_of_file(path, n, (50, 99)) if n else {50: None, 99: None}
            for q, value in found.items():
                out[f"{name}_p{q}_ms"] = value
        return out


def _float_keys(values: np.ndarray) -> np.ndarray:
    """float64 -> uint64 whose unsigned order is the numbers' order (NaN excluded)."""
    bits = values.view(np.uint64)
    negative = (bits >> np.uint64(63)).astype(bool)
    return np.where(negative, ~bits, bits | np.uint64(1 << 63))


def _key_values(keys: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_float_keys`."""
    top = (keys >> np.uint64(63)).astype(bool)
    return np.where(top, keys & np.uint64((1 << 63) - 1), ~keys).view(np.float64)


def _file_blocks(path: Path) -> Iterator[np.ndarray]:
    with path.open("rb") as fh:
        while True:
            block = np.fromfile(fh, dtype="<f8", count=BATCH_ROWS)
            if not block.size:
                return
            yield block.astype(np.float64, copy=False)


def select_ranks(path: Path, ranks: list[int]) -> dict[int, float]:
    """The values at 0-based ``ranks`` of a float64 file's values in ascending order, exactly.

    Radix selection: the values' order-preserving 64-bit keys are found one 16-bit digit a pass
    (four passes); a pass counts, for each rank, the next digit of the keys that share the
    digits found so far, and keeps the digit whose cumulative count holds the rank.
    """
    wanted = sorted(set(ranks))
    prefix = {r: 0 for r in wanted}
    remaining = {r: r for r in wanted}
    for step in range(64 // _DIGIT_BITS):
        shift = np.uint64(64 - _DIGIT_BITS * (step + 1))
        counts = {r: np.zeros(1 << _DIGIT_BITS, dtype=np.int64) for r in wanted}
        for block in _file_blocks(path):
            keys = _float_keys(block)
            digits = ((keys >> shift) & np.uint64((1 << _DIGIT_BITS) - 1)).astype(np.int64)
            above = keys >> np.uint64(int(shift) + _DIGIT_BITS) if step else None
            for r in wanted:
                chosen = digits if above is None else digits[above == np.uint64(prefix[r])]
                counts[r] += np.bincount(chosen, minlength=1 << _DIGIT_BITS)
        for r in wanted:
            cumulative = np.cumsum(counts[r])
            digit = int(np.searchsorted(cumulative, remaining[r], side="right"))
            remaining[r] -= int(cumulative[digit - 1]) if digit else 0
            prefix[r] = (prefix[r] << _DIGIT_BITS) | digit
    keys = np.array([prefix[r] for r in wanted], dtype=np.uint64)
    return {r: float(v) for r, v in zip(wanted, _key_values(keys), strict=True)}


def _lerp(a: np.float64, b: np.float64, t: float) -> float:
    """The linear interpolation of two neighbours as ``numpy.percentile`` computes it."""
    diff = b - a
    if t >= 0.5:
        return float(b - diff * (1 - t))
    return float(a + diff * t)


def percentiles_of_file(path: Path, n: int, qs: tuple[float, ...]) -> dict[float, float]:
    """``numpy.percentile(values, q)`` (method ``linear``) of the ``n`` float64 values of a file.

    For each ``q``, ``i = (n - 1) · q / 100`` in float64 as numpy computes it; the values of
    rank ``⌊i⌋`` and ``⌊i⌋ + 1`` (the largest when ``i ≥ n - 1``) come from one
    :func:`select_ranks` for every ``q``.
    """
    plan: dict[float, tuple[int, int, float]] = {}
    for q in qs:
        virtual = (n - 1) * np.asarray(np.true_divide(q, 100), dtype=np.float64)
        if virtual >= n - 1:
            plan[q] = (n - 1, n - 1, 0.0)
        else:
            below = int(np.floor(virtual))
            plan[q] = (below, below + 1, float(virtual - np.floor(virtual)))
    values = select_ranks(path, [r for below, above, _ in plan.values() for r in (below, above)])
    return {q: _lerp(np.float64(values[below]), np.float64(values[above]), gamma)
            for q, (below, above, gamma) in plan.items()}


__all__ = ["MAX_PARTITIONS", "PARTITION_FILE_BYTES", "Repeat", "StreamedRequests", "discard",
           "id_hash", "percentiles_of_file", "select_ranks", "stream_csv_requests", "work_dir"]
