"""Read shards back: tables, record batches, rows and ``Run`` objects."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from .. import layout, schema
from ..errors import RunNotFound, ShardError
from ..request_rows import RequestRows
from ..run import SIGNAL_KEYS, DeviceSeries, Run, events_from_dicts
from .encode import PACKED_RE
from .index import ShardIndex

# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

def read_table(path: str | Path, columns: Collection[str] | None = None) -> pa.Table:
    """Read one shard, or raise ``ShardError`` naming the file.

    With ``columns``, only those of them the file has, in the file's order: the others are
    neither decompressed nor decoded (IPC ``included_fields``, Parquet column chunks).
    """
    try:
        if Path(path).suffix == ".parquet":
            import pyarrow.parquet as pq  # imported for Parquet shards only (≈ 20 ms)

            if columns is not None:
                columns = [n for n in pq.read_schema(str(path)).names if n in set(columns)]
            return pq.read_table(str(path), columns=columns)
        if columns is not None:
            keep = set(columns)
            with pa.memory_map(str(path), "r") as mapped:
                names = ipc.open_stream(mapped).schema.names
                mapped.seek(0)
                fields = [i for i, name in enumerate(names) if name in keep]
                table = ipc.open_stream(mapped, options=ipc.IpcReadOptions(
                    included_fields=fields)).read_all()
                return table if fields else table.select([])  # none included reads them all
        with pa.OSFile(str(path), "rb") as source:
            return ipc.open_stream(source).read_all()
    except (OSError, pa.ArrowInvalid) as exc:
        raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def iter_file_batches(path: str | Path, columns: list[str] | None = None
                      ) -> Iterator[pa.RecordBatch]:
    """Record batches of one shard: an Arrow IPC stream (memory-mapped) or a Parquet file.

    With ``columns``, only those columns are read: the other columns' buffers are neither
    decompressed nor decoded (IPC ``included_fields``), so reading a few scalar columns of a
    trace shard costs a fraction of reading its signals.
    """
    if Path(path).suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.ParquetFile(str(path)).iter_batches(columns=columns)
        return
    with pa.memory_map(str(path), "r") as source:
        if columns is None:
            yield from _stream_batches(source)
            return
        schema_ = ipc.open_stream(source).schema
        wanted = [schema_.get_field_index(c) for c in columns if c in schema_.names]
        source.seek(0)
        yield from ipc.open_stream(source, options=ipc.IpcReadOptions(included_fields=wanted))


_STREAM_SCHEMAS: dict[bytes, tuple[pa.Schema, bool]] = {}
"""A stream's schema message (its bytes) -> (the schema, whether it has no dictionary field)."""
_STREAM_SCHEMAS_MAX = 64


def _stream_batches(source: pa.NativeFile) -> Iterator[pa.RecordBatch]:
    """The record batches of an Arrow IPC stream, its schema parsed once per process.

    Files of one config carry the same schema message, so it is looked up by its bytes
    instead of being parsed again (a runs file's 254 fields cost about as much to parse as its
    one row), and every batch shares one ``pa.Schema`` object: an unpacked folder's runs files
    then read in time linear in their number (each file's own schema, kept alive by its batch,
    made reading 1,000 files cost 4x reading 300). A schema with a dictionary field (never
    written here) is read by ``ipc.open_stream``.
    """
    reader = ipc.MessageReader.open_stream(source)
    first = reader.read_next_message()
    key = first.metadata.to_pybytes()
    known = _STREAM_SCHEMAS.get(key)
    if known is None:
        schema_ = ipc.read_schema(first)
        known = (schema_, "dictionary<" not in str(schema_))
        if len(_STREAM_SCHEMAS) < _STREAM_SCHEMAS_MAX:
            _STREAM_SCHEMAS[key] = known
    schema_, plain = known
    if not plain:
        source.seek(0)
        yield from ipc.open_stream(source)
        return
    for message in reader:
        yield ipc.read_record_batch(message, schema_)


def iter_batches(root: str | Path, config: str, split: str | None = None,
                 columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """Stream record batches of a config without loading everything."""
    for path in layout.shard_files(root, config, split):
        try:
            for batch in iter_file_batches(path, columns):
                yield batch.select(columns) if columns else batch
        except (OSError, pa.ArrowInvalid) as exc:
            raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: {exc}") from None


def iter_rows(root: str | Path, config: str, split: str | None = None,
              columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Iterate rows (as dicts) of a config, one record batch in memory at a time."""
    for batch in iter_batches(root, config, split, columns):
        yield from batch.to_pylist()


def list_runs(root: str | Path) -> list[dict[str, Any]]:
    """One dict per published run (from the runs configs), sorted by run id."""
    out = []
    for config in schema.RUNS_CONFIGS:
        for row in iter_rows(root, config):
            out.append(row)
    return sorted(out, key=lambda r: r["run_id"])


def read_run(root: str | Path, run_id: str) -> Run:
    """Load one published run back into a ``Run``.

    A per-run file is found by its name (``<run_id>.arrow``), so this reads one file; in packed
    shards only the record batches holding the run are decoded (:class:`RunReader`). To read
    many runs, build one :class:`RunReader` and ask it for each.

    Raises:
        RunNotFound: no trace file of that run id.
    """
    return RunReader(root).read(run_id)


RUN_KEY_COLUMNS = ("run_id", "workload", "platform", "gpu_index", "t_ms")
"""Trace columns every ``Run`` rebuilt from rows needs (``run.workload`` and ``run.platform``
have no default): read whatever ``columns`` asks for."""


class RunReader:
    """Reads runs of one dataset folder by id: one walk of ``data/``, one index of its shards.

    Per-run files are found by their names; packed shards (``pack``) through a
    :class:`~llm_powertrace_ds.shards.index.ShardIndex` built on first need, so reading k runs
    of a packed folder decodes the k runs' record batches, not k shards. An inference run's
    request log comes from its per-run file or, packed, from the indexed requests shards.

    Example:
        >>> reader = RunReader("llm-powertrace")  # doctest: +SKIP
        >>> runs = {run.run_id: run for run in reader.read_many(["ft-a", "ft-b"])}  # doctest: +SKIP
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._direct: dict[str, list[Path]] = {}
        self._packed: list[Path] = []
        folders = layout.shard_folders(self.root)
        for workload in schema.TRACE_CONFIGS:
            for path in layout.shard_files(self.root, workload, folders_by_config=folders):
                if PACKED_RE.search(path.name):
                    self._packed.append(path)
                else:
                    self._direct.setdefault(path.stem, []).append(path)
        self._requests_packed = [p for p in layout.shard_files(
            self.root, schema.REQUESTS_CONFIG, folders_by_config=folders)
            if PACKED_RE.search(p.name)]
        self._index: ShardIndex | None = None
        self._requests_index: ShardIndex | None = None

    def _trace_index(self) -> ShardIndex:
        if self._index is None:
            self._index = ShardIndex(self._packed)
        return self._index

    def read(self, run_id: str) -> Run:
        """One run.

        Raises:
            RunNotFound: no trace rows of that run id.
        """
        for run in self.read_many([run_id]):
            return run
        raise RunNotFound(f"run {run_id!r} is not in {self.root}")

    def read_many(self, run_ids: Iterable[str], *, columns: Collection[str] | None = None,
                  requests: bool = True) -> Iterator[Run]:
        """The runs of ``run_ids`` the folder holds, in storage order (unknown ids skipped).

        Per-run files first (one each), then the packed shards, each read once for all the
        runs it holds.

        Args:
            run_ids: the runs to read.
            columns: read only these trace columns (those a file has; :data:`RUN_KEY_COLUMNS`
                always): the others are neither decompressed nor decoded, and the runs lack
                them (a signal not read is absent, a scalar not read is not in ``run.meta``).
                A packed shard compresses each column of each batch on its own, so a few
                hundred scalar columns cost more to decode than the power series. ``None``:
                every column.
            requests: attach an inference run's request log (``False``: ``run.requests`` stays
                empty).
        """
        wanted = list(dict.fromkeys(run_ids))
        keep = None if columns is None else {*RUN_KEY_COLUMNS, *columns}
        rest = []
        for run_id in wanted:
            found = None
            for path in self._direct.get(run_id, []):
                table = read_table(path, keep)
                found = next(runs_from_table(table, only=run_id), None)
                if found is not None:
                    break
            if found is None:
                rest.append(run_id)
            else:
                if requests:
                    self._attach(found)
                yield found
        if rest and self._packed:
            index = self._trace_index()
            names = None if keep is None else list(dict.fromkeys(
                name for path in self._packed for name in file_schema(path).names
                if name in keep))
            done: set[str] = set()
            for run_id, table in index.tables(rest, names):
                if run_id in done:  # rows of one run in two shards: rebuild it whole
                    continue
                if len(index.locate(run_id)) > 1:
                    table = pa.Table.from_batches(list(index.batches([run_id], names)))
                done.add(run_id)
                run = next(runs_from_table(table, only=run_id))
                if requests:
                    self._attach(run)
                yield run

    def _attach(self, run: Run) -> None:
        if run.workload != "inference":
            return
        path = layout.requests_path(self.root, run.platform, run.run_id)
        if path.exists():
            table: pa.Table | None = read_table(path)
        elif self._requests_packed:
            if self._requests_index is None:
                self._requests_index = ShardIndex(self._requests_packed)
            batches = list(self._requests_index.batches([run.run_id]))
            table = pa.Table.from_batches(batches) if batches else None
        else:
            table = None
        if table is not None:
            run.requests = RequestRows.from_shard(table)


def iter_runs(root: str | Path, *, requests: bool = True) -> Iterator[Run]:
    """Every published run of a folder, one trace file in memory at a time.

    One walk of ``data/`` (``layout.shard_files`` per trace config); rows are decoded from
    Arrow with numpy (no Python object per sample). In packed shards the rows of a run are
    consecutive (``pack`` appends whole per-run files). With ``requests=False`` an inference
    run's request log is not read (``run.requests`` stays empty): a caller that checks the
    request shards itself reads them a batch at a time instead of holding a run's log whole.
    """
    root = Path(root)
    for workload in schema.TRACE_CONFIGS:
        for path in layout.shard_files(root, workload):
            yield from runs_from_table(read_table(path), root=root if requests else None)


_PER_DEVICE = ("node_index", "gpu_index", "gpu_name", "gpu_uuid_hash", "power_limit_w",
               "default_power_limit_w", "events", "device_kind", *schema.DRIVER_SERIES_NAMES)


def _signal_values(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A list column as (flat float64 values with NaN for null, offsets, row validity)."""
    arr = pa.concat_arrays(col.chunks) if isinstance(col, pa.ChunkedArray) else col
    offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    values = arr.values
    if pa.types.is_floating(values.type):
        flat = values.to_numpy(zero_copy_only=False).astype(np.float64)
    else:
        flat = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return flat, offsets, valid


def runs_from_table(table: pa.Table, root: str | Path | None = None,
                    only: str | None = None) -> Iterator[Run]:
    """Rebuild the ``Run`` of each run id in a trace-config table (rows of a run consecutive).

    Signals are sliced from the Arrow buffers with numpy; only scalar and event columns become
    Python objects.

    Args:
        table: trace-config rows.
        root: the dataset folder (for an inference run's request log).
        only: rebuild just this run id.
    """
    if table.num_rows == 0:
        return
    ids = table.column("run_id").to_pylist()
    signal_cols = {k: _signal_values(table.column(k)) for k in SIGNAL_KEYS
                   if k in table.column_names}
    t_flat, t_off, _ = _signal_values(table.column("t_ms"))
    scalar_names = [n for n in table.column_names
                    if n not in _PER_DEVICE and n not in schema.SIGNAL_NAMES]
    start = 0
    for end in range(1, len(ids) + 1):
        if end < len(ids) and ids[end] == ids[start]:
            continue
        if only is None or ids[start] == only:
            part = table.slice(start, end - start)
            yield _run_from_slice(part, start, scalar_names, t_flat, t_off, signal_cols, root)
        start = end


def _run_from_slice(part: pa.Table, start: int, scalar_names: list[str], t_flat: np.ndarray,
                    t_off: np.ndarray,
                    signal_cols: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                    root: str | Path | None) -> Run:
    meta = {k: v for k, v in part.select(scalar_names).slice(0, 1).to_pylist()[0].items()}
    per_dev = part.select([c for c in _PER_DEVICE if c in part.column_names]).to_pylist()
    devices: list[DeviceSeries] = []
    events: dict[tuple, Any] = {}
    for i, r in enumerate(per_dev):
        row = start + i
        t_ms = t_flat[t_off[row]:t_off[row + 1]].astype(np.int64)
        signals = {}
        for key, (flat, off, valid) in signal_cols.items():
            if not valid[row]:
                continue
            values = flat[off[row]:off[row + 1]]
            if len(values) and not np.isnan(values).all():
                signals[key] = values
        devices.append(DeviceSeries(
            gpu_index=r["gpu_index"], t_ms=t_ms, signals=signals,
            node_index=r.get("node_index") or 0, gpu_name=r.get("gpu_name"),
            gpu_uuid_hash=r.get("gpu_uuid_hash"), power_limit_w=r.get("power_limit_w"),
            default_power_limit_w=r.get("default_power_limit_w"), **_device_extras(r)))
        for e in events_from_dicts(r.get("events") or []):
            events.setdefault((e.t_ms, e.kind, e.step, e.rank, e.request_id, e.label), e)
    return _assemble(meta, devices, events, root)


def _device_extras(r: dict[str, Any]) -> dict[str, Any]:
    """A row's ``device_kind`` (null = ``gpu``, rows before schema 1.3.0) and driver series."""
    out: dict[str, Any] = {"kind": r.get("device_kind") or "gpu"}
    t_us, w = r.get("driver_power_t_us"), r.get("driver_power_w")
    if t_us is not None and w is not None:
        out["driver_t_us"] = np.asarray(t_us, dtype=np.int64)
        out["driver_power_w"] = np.array([np.nan if v is None else v for v in w], dtype=float)
    return out


def _assemble(meta: dict[str, Any], devices: list[DeviceSeries], events: dict[tuple, Any],
              root: str | Path | None) -> Run:
    """A ``Run`` of its rows' devices: GPUs in ``devices``, host (RAPL) rows in ``host_devices``."""
    run = Run(meta=meta, devices=[d for d in devices if d.kind == "gpu"],
              events=sorted(events.values(), key=lambda e: e.t_ms),
              host_devices=[d for d in devices if d.kind != "gpu"])
    _attach_requests(run, root)
    return run


def _attach_requests(run: Run, root: str | Path | None) -> None:
    if root is not None and run.workload == "inference":
        path = layout.requests_path(root, run.platform, run.run_id)
        if path.exists():
            run.requests = RequestRows.from_shard(read_table(path))


def run_from_rows(rows: list[dict[str, Any]], root: str | Path | None = None) -> Run:
    """Rebuild a ``Run`` from its trace-config rows (one per device, as Python dicts)."""
    first = rows[0]
    per_device = {*_PER_DEVICE, *schema.SIGNAL_NAMES}  # device_kind, driver series included
    meta = {k: v for k, v in first.items() if k not in per_device}
    devices = []
    events: dict[tuple, Any] = {}
    for r in rows:
        signals = {}
        for key in SIGNAL_KEYS:
            values = r.get(key)
            if values is not None and any(v is not None for v in values):
                signals[key] = np.array([np.nan if v is None else v for v in values], dtype=float)
        devices.append(DeviceSeries(
            gpu_index=r["gpu_index"], t_ms=np.asarray(r["t_ms"], dtype=np.int64),
            signals=signals, node_index=r["node_index"] or 0, gpu_name=r["gpu_name"],
            gpu_uuid_hash=r["gpu_uuid_hash"], power_limit_w=r["power_limit_w"],
            default_power_limit_w=r["default_power_limit_w"], **_device_extras(r)))
        for e in events_from_dicts(r["events"] or []):
            events.setdefault((e.t_ms, e.kind, e.step, e.rank, e.request_id, e.label), e)
    return _assemble(meta, devices, events, root)


def file_schema(path: str | Path) -> pa.Schema:
    """The schema of one shard (Arrow IPC stream or Parquet), or ``ShardError`` naming the file."""
    try:
        if Path(path).suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_schema(str(path))
        with pa.memory_map(str(path), "r") as source:
            return ipc.open_stream(source).schema
    except (OSError, pa.ArrowInvalid) as exc:
        raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def count_rows(path: str | Path) -> int:
    """Rows of one shard, counted from its record batches (one small column decoded)."""
    return sum(b.num_rows for b in iter_file_batches(path, ["run_id"]))
