"""``validate``'s checks of the request logs a folder already holds, streamed.

Every ``inference_requests`` shard (per-run files and packed shards alike) is read a record
batch at a time and checked as the writer would have checked it (a folder written by an older
version, by hand or by someone else):

* the number gate (:func:`..numbers.row_problems`): one line per bad value;
* the text gate on request ids (:func:`..privacy.text_problem`): one line per refused id;
* times in order, ``arrival_ms ≤ start_ms ≤ first_token_ms ≤ finish_ms`` where present (the
  import's rule): the first row of each run that breaks it;
* repeated request ids of a run, exactly (:class:`..repeated_ids.IdPartitions`, the check of
  ``import requests-csv``, a group per run): the earliest repeat of each run, with both rows.

Memory does not grow with the rows: a record batch at a time is read (from the file, not
memory-mapped: the pages of a map count as resident memory), :data:`BLOCK_ROWS` rows are
checked and partitioned at a time, then one id partition (about :data:`PARTITION_SHARD_BYTES`
of shard) is sorted at a time. The partitions live in a temporary folder outside the dataset
(``validate`` writes nothing into the folder it checks), removed on return.
"""

from __future__ import annotations

import bisect
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from . import layout, numbers, privacy, schema
from .arrow_numpy import to_numpy
from .errors import ShardError
from .repeated_ids import IdPartitions
from .request_rows import BATCH_ROWS

BLOCK_ROWS = BATCH_ROWS
"""Rows checked and partitioned together (record batches are gathered up to this many)."""
PARTITION_SHARD_BYTES = 2 * 2**20
"""Shard bytes per id partition (≈ 110,000 ids of a compressed shard are sorted at a time)."""
MAX_PARTITIONS = 512
"""At most this many partition files are open at once (beyond, partitions grow instead)."""
_GATE_ROWS = 1024
"""Rows made into Python objects at a time for the number and text gates."""
_ORDER = ("arrival_ms", "start_ms", "first_token_ms", "finish_ms")


@dataclass(frozen=True)
class _Span:
    """The rows ``[start_row, start_row + num_rows)`` of the scan that one shard file holds."""

    start_row: int
    name: str


def request_problems(root: str | Path) -> list[str]:
    """Every problem of a folder's published request logs, one line each.

    Args:
        root: the dataset folder.

    Returns:
        The number gate's lines, then the text gate's, then times out of order, then repeated
        ids (empty when the folder has no request log or nothing is wrong).

    Raises:
        ShardError: a shard that cannot be read (``Failed to read '<file>': …``).
    """
    root = Path(root)
    files = layout.shard_files(root, schema.REQUESTS_CONFIG)
    if not files:
        return []
    size = sum(p.stat().st_size for p in files if p.exists())
    count = max(1, min(MAX_PARTITIONS, -(-size // PARTITION_SHARD_BYTES)))
    number_problems: list[str] = []
    text_problems: list[str] = []
    order_problems: dict[str, str] = {}  # the first per run
    groups: dict[str, int] = {}
    spans: list[_Span] = []
    with tempfile.TemporaryDirectory(prefix="llm-powertrace-validate-") as work:
        ids = IdPartitions(Path(work), count)
        try:
            row = 0
            for path in files:
                spans.append(_Span(row, path.relative_to(root).as_posix()))
                for block in _blocks(path):
                    for batch in block.to_batches(max_chunksize=_GATE_ROWS):
                        rows = batch.to_pylist()  # a Python object per value: a few at a time
                        number_problems.extend(numbers.row_problems(schema.REQUESTS_CONFIG,
                                                                    rows))
                        text_problems.extend(_text_problems(rows))
                    for run_id, start, stop in _run_segments(block):
                        part = block.slice(start, stop - start)
                        if run_id not in order_problems:
                            message = _order_problem(part, run_id, row + start, spans)
                            if message is not None:
                                order_problems[run_id] = message
                        group = groups.setdefault(run_id, len(groups))
                        where = np.arange(row + start, row + stop, dtype=np.int64)
                        ids.add(part.column("request_id"), row + start, where, group=group)
                    row += block.num_rows
            ids.close()
            repeats = ids.first_repeats()
        finally:
            ids.close()
    run_of = {group: run_id for run_id, group in groups.items()}
    repeat_problems = [
        f"run {run_of[r.group]}: {schema.REQUESTS_CONFIG} field 'request_id' value "
        f"{privacy.strip_control(r.request_id)[:40]!r} appears twice "
        f"({_both_rows(spans, r.first_line, r.line)})"
        for r in sorted(repeats.values(), key=lambda r: r.row)]
    return [*number_problems, *text_problems, *order_problems.values(), *repeat_problems]


def _blocks(path: Path) -> Iterator[pa.Table]:
    """A shard's rows, record batches gathered up to :data:`BLOCK_ROWS` rows a table."""
    gathered: list[pa.RecordBatch] = []
    held = 0
    try:
        for batch in _file_batches(path):
            gathered.append(batch)
            held += batch.num_rows
            if held >= BLOCK_ROWS:
                yield pa.Table.from_batches(gathered)
                gathered, held = [], 0
        if held:
            yield pa.Table.from_batches(gathered)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: {exc}") from None


def _file_batches(path: Path) -> Iterator[pa.RecordBatch]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # imported for Parquet shards only (≈ 20 ms)

        yield from pq.ParquetFile(str(path)).iter_batches()
        return
    with pa.OSFile(str(path)) as fh:  # read, not mapped
        yield from ipc.open_stream(fh)


def _text_problems(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for row in rows:
        rid = row.get("request_id")
        if not isinstance(rid, str):
            continue
        why = privacy.text_problem("request_id", rid)
        if why is not None:
            out.append(f"run {row.get('run_id')!s}: {schema.REQUESTS_CONFIG} field "
                       f"'request_id' value {privacy.strip_control(rid)[:40]!r} {why}")
    return out


def _run_segments(block: pa.Table) -> Iterator[tuple[str, int, int]]:
    """``(run_id, start, stop)`` of each stretch of consecutive rows of one run."""
    runs = block.column("run_id")
    if pa.types.is_dictionary(runs.type):
        runs = runs.cast(runs.type.value_type)
    n = block.num_rows
    if n == 0:
        return
    change = np.asarray(to_numpy(pc.not_equal(runs.slice(1), runs.slice(0, n - 1)),
                                 null_value=True), dtype=bool)
    starts = [0, *(np.flatnonzero(change) + 1).tolist()]
    for start, stop in zip(starts, [*starts[1:], n], strict=True):
        yield str(runs[start].as_py()), start, stop


def _order_problem(part: pa.Table, run_id: str, first_row: int,
                   spans: list[_Span]) -> str | None:
    """The first row of ``part`` (one run's rows) whose present times are out of order."""
    names = [c for c in _ORDER if c in part.column_names]
    values = {c: np.asarray(to_numpy(part.column(c).cast(pa.float64())), dtype=np.float64)
              for c in names}
    bad = np.zeros(part.num_rows, dtype=bool)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            with np.errstate(invalid="ignore"):
                bad |= values[a] > values[b]  # False where either is null (NaN)
    if not bad.any():
        return None
    k = int(np.flatnonzero(bad)[0])
    times = {c: part.column(c)[k].as_py() for c in names}
    rid = part.column("request_id")[k].as_py()
    shown = privacy.strip_control(rid)[:40] if isinstance(rid, str) else rid
    return (f"run {run_id}: {schema.REQUESTS_CONFIG} request {shown!r}: times out of order "
            f"(arrival_ms <= start_ms <= first_token_ms <= finish_ms): {times} "
            f"({_row_name(spans, first_row + k)})")


def _row_name(spans: list[_Span], row: int) -> str:
    """``row i of <file>`` for a row of the scan (``i`` counted from 0 in its file)."""
    span = spans[bisect.bisect_right([s.start_row for s in spans], row) - 1]
    return f"row {row - span.start_row} of {span.name}"


def _both_rows(spans: list[_Span], first: int, second: int) -> str:
    """Two rows of the scan, named once by their file when they share it."""
    starts = [s.start_row for s in spans]
    a = spans[bisect.bisect_right(starts, first) - 1]
    b = spans[bisect.bisect_right(starts, second) - 1]
    if a == b:
        return f"rows {first - a.start_row} and {second - a.start_row} of {a.name}"
    return f"{_row_name(spans, first)} and {_row_name(spans, second)}"


__all__ = ["BLOCK_ROWS", "MAX_PARTITIONS", "PARTITION_SHARD_BYTES", "request_problems"]
