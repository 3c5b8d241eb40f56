"""Which record batches of a shard hold which runs, and reading only those batches.

A packed shard (``pack``) holds many runs; reading one run by decoding the whole shard costs the
shard, and reading k runs that way costs k shards (issue 40: ``facility`` on a packed folder grew
with the square of the runs). :class:`ShardIndex` reads each shard's ``run_id`` column once
(the other columns' buffers are neither decompressed nor decoded) and remembers, per run, the
record batches (Arrow IPC) or row groups (Parquet) that hold its rows; :func:`read_parts` then
decodes only those. Arrow IPC stream files are walked message by message on a memory map: a
batch that is not wanted costs its small metadata, not its body. Both decode on the calling
thread (``use_threads=False``): a packed batch holds one or a few runs, and handing its
columns to Arrow's thread pool cost more CPU time than decompressing them (facility on 1,000
packed runs: 1.06 CPU-s with the pool, 0.88 without).

Build one index per command (``RunReader`` in ``read.py`` does) and ask it for many runs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from ..errors import ShardError


def _fail(path: Path, exc: Exception) -> ShardError:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return ShardError(f"Failed to read '{path}': {type(exc).__name__}: {text}")


def batch_run_ids(path: str | Path) -> list[list[str]]:
    """The distinct run ids of each record batch (IPC) or row group (Parquet), in order.

    Only the ``run_id`` column is read; a Parquet row group whose ``run_id`` statistics have
    ``min == max`` is answered from the footer without reading any page.

    Raises:
        ShardError: the file cannot be read or has no ``run_id`` column.
    """
    path = Path(path)
    try:
        if path.suffix == ".parquet":
            return _parquet_run_ids(path)
        with pa.memory_map(str(path), "r") as source:
            names = ipc.open_stream(source).schema.names
            if "run_id" not in names:
                raise ShardError(f"'{path}' has no run_id column")
            source.seek(0)
            reader = ipc.open_stream(source, options=ipc.IpcReadOptions(
                included_fields=[names.index("run_id")], use_threads=False))
            return [list(dict.fromkeys(b.column(0).to_pylist())) for b in reader]
    except (OSError, pa.ArrowInvalid) as exc:
        raise _fail(path, exc) from None


def _parquet_run_ids(path: Path) -> list[list[str]]:
    import pyarrow.parquet as pq  # Parquet shards only: an import of a log never reads one

    pf = pq.ParquetFile(str(path))
    names = pf.schema_arrow.names
    if "run_id" not in names:
        raise ShardError(f"'{path}' has no run_id column")
    col = names.index("run_id")
    out = []
    for i in range(pf.metadata.num_row_groups):
        stats = pf.metadata.row_group(i).column(col).statistics
        if (stats is not None and stats.has_min_max and stats.min == stats.max
                and stats.null_count == 0):
            out.append([stats.min if isinstance(stats.min, str) else stats.min.decode()])
        else:
            ids = pf.read_row_group(i, columns=["run_id"]).column(0).to_pylist()
            out.append(list(dict.fromkeys(ids)))
    return out


def read_parts(path: str | Path, parts: Collection[int], columns: list[str] | None = None
               ) -> Iterator[pa.RecordBatch]:
    """Decode only the record batches (IPC) or row groups (Parquet) numbered ``parts``.

    With ``columns``, the other columns are not decoded either: Parquet reads only their
    pages; an Arrow IPC stream's wanted batch messages are copied, still compressed, behind its
    schema message into one small stream read with ``included_fields``, so the other columns'
    buffers are neither decompressed nor decoded.

    Args:
        path: one shard.
        parts: 0-based batch or row-group numbers (from :func:`batch_run_ids`).
        columns: keep only these columns, those the file has (``None``: all).

    Raises:
        ShardError: the file cannot be read.
    """
    path = Path(path)
    wanted = set(parts)
    if not wanted:
        return
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(str(path))
            have = None if columns is None else [c for c in columns
                                                 if c in pf.schema_arrow.names]
            for i in sorted(wanted):
                yield from pf.read_row_group(i, columns=have).to_batches()
            return
        with pa.memory_map(str(path), "r") as source:
            messages = ipc.MessageReader.open_stream(source)
            schema_ = ipc.read_schema(messages.read_next_message())
            if columns is not None:
                yield from _read_fields(source, messages, schema_, wanted, columns)
                return
            last = max(wanted)
            for i, message in enumerate(messages):
                if i in wanted:
                    yield ipc.read_record_batch(message, schema_)
                if i >= last:
                    break
    except (OSError, pa.ArrowInvalid) as exc:
        raise _fail(path, exc) from None


def _read_fields(source: pa.NativeFile, messages: ipc.MessageReader, schema_: pa.Schema,
                 wanted: set[int], columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The ``wanted`` batches of a stream positioned after its schema, only ``columns`` decoded.

    IPC messages are 8-byte aligned, so the schema message followed by the wanted batch
    messages (their bytes as stored) is itself a valid stream.
    """
    fields = [schema_.get_field_index(c) for c in dict.fromkeys(columns) if c in schema_.names]
    out = pa.BufferOutputStream()
    out.write(source.read_at(source.tell(), 0))
    last = max(wanted)
    for i in range(last + 1):
        start = source.tell()
        try:
            messages.read_next_message()
        except StopIteration:
            break
        if i in wanted:
            out.write(source.read_at(source.tell() - start, start))
    reader = ipc.open_stream(out.getvalue(), options=ipc.IpcReadOptions(
        included_fields=sorted(fields), use_threads=False))
    for batch in reader:  # no field included reads them all: none kept then
        yield batch if fields else batch.select([])


class ShardIndex:
    """Run id -> the (shard, batch numbers) holding its rows, over a set of shard files.

    Built once (one ``run_id`` column read per shard); :meth:`batches` then decodes only the
    batches of the runs asked for, one pass per shard.

    Example:
        >>> idx = ShardIndex(layout.shard_files("llm-powertrace", "finetune"))  # doctest: +SKIP
        >>> table = pa.Table.from_batches(list(idx.batches({"ft-a"})))  # doctest: +SKIP
    """

    def __init__(self, files: Iterable[str | Path]) -> None:
        self.files = [Path(f) for f in files]
        self._where: dict[str, dict[Path, list[int]]] = {}
        for path in self.files:
            for i, ids in enumerate(batch_run_ids(path)):
                for run_id in ids:
                    self._where.setdefault(run_id, {}).setdefault(path, []).append(i)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._where

    def run_ids(self) -> list[str]:
        """Every run id the shards hold, sorted."""
        return sorted(self._where)

    def locate(self, run_id: str) -> dict[Path, list[int]]:
        """The shards and batch numbers holding ``run_id`` (empty when none)."""
        return self._where.get(run_id, {})

    def batches(self, run_ids: Collection[str], columns: list[str] | None = None
                ) -> Iterator[pa.RecordBatch]:
        """Record batches holding the rows of ``run_ids``, other runs' rows filtered out.

        Shards are read in the index's file order, each once; within a shard, batches in order.
        ``columns``: keep only these, those a shard has (``run_id`` is read for the filter in
        any case).
        """
        read_cols = None if columns is None else list(dict.fromkeys(["run_id", *columns]))
        per_file: dict[Path, set[int]] = {}
        for run_id in run_ids:
            for path, found in self.locate(run_id).items():
                per_file.setdefault(path, set()).update(found)
        wanted = pa.array(sorted(set(run_ids)), pa.string())
        for path in self.files:
            numbers = per_file.get(path)
            if not numbers:
                continue
            for batch in read_parts(path, numbers, read_cols):
                keep = pc.is_in(batch.column(batch.schema.get_field_index("run_id")),
                                value_set=wanted)
                if not pc.all(keep).as_py():
                    batch = batch.filter(keep)
                if columns is not None:
                    have = set(batch.schema.names)
                    batch = batch.select([c for c in columns if c in have])
                yield batch

    def tables(self, run_ids: Collection[str], columns: list[str] | None = None
               ) -> Iterator[tuple[str, pa.Table]]:
        """``(run_id, its rows)`` for each of ``run_ids`` the shards hold, in storage order.

        A run's rows are consecutive in a packed shard (``pack`` appends whole per-run files);
        a run split across shards comes once per shard.
        """
        current: str | None = None
        parts: list[pa.RecordBatch] = []
        for batch in self.batches(run_ids, columns):
            ids = batch.column(batch.schema.get_field_index("run_id")).to_pylist() \
                if columns is None or "run_id" in columns else None
            if ids is None:
                raise ShardError("ShardIndex.tables needs the run_id column")
            start = 0
            for end in range(1, len(ids) + 1):
                if end < len(ids) and ids[end] == ids[start]:
                    continue
                if ids[start] != current:
                    if current is not None and parts:
                        yield current, pa.Table.from_batches(parts)
                    current, parts = ids[start], []
                parts.append(batch.slice(start, end - start))
                start = end
        if current is not None and parts:
            yield current, pa.Table.from_batches(parts)
