"""Shard I/O: encode a ``Run`` to Arrow tables, publish atomically, pack, and read back.

Every shard is an Arrow IPC **stream** file whose schema is the config's
``Features.arrow_schema`` (it carries the ``huggingface`` metadata, so list and struct types
round-trip through ``datasets``). Scalar and event columns go through ``features.encode_batch``;
the per-tick signal lists are built directly from numpy (offsets + values), which is what
``encode_batch`` would produce, without a Python object per sample.

Publishing follows the run lifecycle of DESIGN.md: ``.staging/<run_id>/status.json`` says
``complete`` then ``published``; each file is written under a hidden temporary name in its final
folder and renamed into place; a crash in between is repaired by publishing again (idempotent).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from datasets import Features
from filelock import FileLock, Timeout

from . import audit, checks, layout, schema
from .errors import InputError, LockTimeout, RunNotFound, ShardError
from .run import SIGNAL_KEYS, DeviceSeries, Run, events_from_dicts

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 600.0
PACKED_RE = re.compile(r"-\d{5}-of-\d{5}\.(arrow|parquet)$")
"""Names of ``pack``'s shards (``<platform>-NNNNN-of-MMMMM.arrow``)."""
DEFAULT_MAX_SHARD_BYTES = 500 * 1024 * 1024

_ARROW_TYPES = {
    "float32": pa.float32(), "float64": pa.float64(), "int16": pa.int16(), "int32": pa.int32(),
    "int64": pa.int64(),
}


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------

def _signal_array(devices: list[DeviceSeries], name: str, dtype: str) -> pa.Array:
    """A ``list<dtype>`` column: one list per device, nulls where NaN."""
    lengths = np.array([len(d.t_ms) for d in devices], dtype=np.int64)
    offsets = np.zeros(len(devices) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    if name == "t_ms":
        values = pa.array(np.concatenate([d.t_ms for d in devices]) if devices else
                          np.zeros(0, np.int64), type=pa.int64())
    else:
        parts = [d.signals[name] if name in d.signals else np.full(len(d.t_ms), np.nan)
                 for d in devices]
        raw = np.concatenate(parts) if parts else np.zeros(0)
        mask = np.isnan(raw)
        if dtype.startswith("int"):
            raw = np.where(mask, 0, np.rint(raw))
        arr_np = raw.astype(dtype)
        values = pa.array(arr_np, type=_ARROW_TYPES[dtype], mask=mask if mask.any() else None)
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), values)


def _table(config: str, rows: dict[str, list], extra: dict[str, pa.Array] | None = None) -> pa.Table:
    features = schema.FEATURES[config]
    arrow_schema = features.arrow_schema
    n = len(next(iter(rows.values()))) if rows else 0
    full = {name: rows.get(name, [None] * n) for name in features if name not in (extra or {})}
    # The exact Features object of the config, restricted to the columns not built from numpy.
    encoded = Features({k: features[k] for k in full}).encode_batch(full) if full else {}
    arrays = []
    for fld in arrow_schema:
        if extra and fld.name in extra:
            arrays.append(extra[fld.name].cast(fld.type))
        elif fld.name in encoded:
            arrays.append(pa.array(encoded[fld.name], type=fld.type))
        else:
            arrays.append(pa.nulls(n, type=fld.type))
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


def _scalar_meta(run: Run, config: str) -> dict[str, Any]:
    names = {c.name for c in schema.COLUMNS[config]}
    meta = {k: v for k, v in run.meta.items() if k in names}
    meta.setdefault("schema_version", schema.SCHEMA_VERSION)
    meta.setdefault("num_gpus", len(run.devices))
    meta.setdefault("quality_flags", [])
    return meta


def trace_table(run: Run) -> pa.Table:
    """The trace-config rows of a run: one row per device."""
    config = run.workload
    meta = _scalar_meta(run, config)
    n = len(run.devices)
    rows: dict[str, list] = {k: [v] * n for k, v in meta.items()}
    for key in ("node_index", "gpu_index", "gpu_name", "gpu_uuid_hash", "power_limit_w",
                "default_power_limit_w"):
        rows[key] = [getattr(d, key) for d in run.devices]
    rows["events"] = [[e.as_dict() for e in run.device_events(d)] for d in run.devices]
    extra = {}
    for col in schema.SIGNALS:
        dtype = col.feature.feature.dtype
        extra[col.name] = _signal_array(run.devices, col.name, dtype)
    rows.update({k: [None] * n for k in extra})
    return _table(config, rows, extra)


def runs_table(run: Run, metrics: dict[str, Any]) -> pa.Table:
    """The runs-config row of a run: its scalar metadata and its metrics."""
    config = f"{run.workload}_runs"
    meta = _scalar_meta(run, config)
    limits = {d.power_limit_w for d in run.devices}
    defaults = {d.default_power_limit_w for d in run.devices}
    names = {d.gpu_name for d in run.devices}
    meta.setdefault("gpu_name", names.pop() if len(names) == 1 else None)
    meta["power_limit_w"] = limits.pop() if len(limits) == 1 else None
    meta["default_power_limit_w"] = defaults.pop() if len(defaults) == 1 else None
    valid = {c.name for c in schema.COLUMNS[config]}
    meta.update({k: v for k, v in metrics.items() if k in valid})
    return _table(config, {k: [v] for k, v in meta.items()})


def requests_table(run: Run) -> pa.Table:
    """The ``inference_requests`` rows of a run."""
    reqs = run.requests or []
    names = [c.name for c in schema.REQUEST_COLUMNS]
    rows: dict[str, list] = {k: [] for k in names}
    for r in reqs:
        r = {**r, "run_id": run.run_id, "platform": run.platform}
        for k in names:
            rows[k].append(r.get(k))
    return _table(schema.REQUESTS_CONFIG, rows)


# ---------------------------------------------------------------------------------------------
# Atomic file writes
# ---------------------------------------------------------------------------------------------

def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _write_tmp(path: Path, table: pa.Table) -> Path:
    """Write ``table`` to ``path``'s hidden temporary name (fsynced); return that name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(path)
    try:
        with pa.OSFile(str(tmp), "wb") as sink, ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=max(1, min(table.num_rows, 1024)))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_table_atomic(path: Path, table: pa.Table) -> None:
    """Write ``table`` as an Arrow IPC stream to a hidden temporary name, then rename it."""
    tmp = _write_tmp(path, table)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_tables_all_or_nothing(tables: dict[Path, pa.Table]) -> None:
    """Write every table under its hidden temporary name first, then rename them all.

    A failure while writing (a full disk, a file-size limit, a killed writer) leaves none of
    the files visible: the temporary names are removed and no final name is touched. Renames
    take no space, so once every file is written the run appears whole (issue 12, item 11).

    Raises:
        ShardError: a file could not be written (naming it and the reason).
    """
    written: list[tuple[Path, Path]] = []
    try:
        for path, table in tables.items():
            written.append((_write_tmp(path, table), path))
    except OSError as exc:
        for tmp, _ in written:
            tmp.unlink(missing_ok=True)
        raise ShardError(f"cannot write '{path}': {exc.strerror or exc}; nothing of the run was "
                         "published") from None
    except BaseException:
        for tmp, _ in written:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in written:
        os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    """Write text to a temporary name beside ``path`` and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _lock(root: Path, name: str) -> FileLock:
    return FileLock(str(layout.lock_path(root, name)), timeout=LOCK_TIMEOUT_S)


# ---------------------------------------------------------------------------------------------
# Publishing
# ---------------------------------------------------------------------------------------------

@dataclass
class PublishResult:
    """What ``publish_run`` wrote.

    Attributes:
        run_id: the run.
        files: paths written (relative to the dataset root).
        flags: the run's quality flags after validation.
        metrics: the runs-row metrics.
        replaced: stale files of an earlier version of the run that were removed.
    """

    run_id: str
    files: list[str]
    flags: list[str]
    metrics: dict[str, Any]
    replaced: list[str] = field(default_factory=list)


def set_status(root: Path, run_id: str, status: str, **extra: Any) -> None:
    """Write ``.staging/<run_id>/status.json`` atomically."""
    sdir = layout.staging_dir(root, run_id)
    sdir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(sdir / "status.json", json.dumps({"status": status, **extra}))


def read_status(root: Path, run_id: str) -> dict[str, Any] | None:
    """The run's staging status, or ``None`` when it has no staging folder."""
    path = layout.staging_dir(root, run_id) / "status.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def existing_run_files(root: Path, run_id: str) -> list[Path]:
    """Every per-run file of ``run_id`` under ``data/`` (any config, platform, family)."""
    name = f"{run_id}{layout.SHARD_SUFFIX}"
    data = layout.data_root(root)
    if not data.is_dir():
        return []
    return sorted(p for p in data.rglob(name) if p.is_file())


def publish_run(root: str | Path, run: Run, *, refresh_card: bool = True) -> PublishResult:
    """Validate a complete run, compute its metrics and publish its files atomically.

    Writes ``data/<workload>/<platform>/<family>/<run_id>.arrow``,
    ``data/<workload>_runs/<platform>/<run_id>.arrow`` and, for inference runs with a request
    log, ``data/inference_requests/<platform>/<run_id>.arrow``. Publishing the same run again
    replaces it (no duplicate rows, even when its platform or family changed). Finally the card
    builder rewrites ``README.md`` under the folder lock so the folder always loads.

    Args:
        root: the dataset folder.
        run: a complete run.
        refresh_card: rewrite ``README.md`` afterwards.

    Returns:
        A ``PublishResult``.

    Raises:
        InputError: the run has error-level quality problems or bad metadata.
    """
    from . import metrics as metrics_mod
    from .validate import validate_run

    root = Path(root)
    schema.check_split_name(run.platform)
    checks.check_publishable(run)
    if run.workload not in schema.WORKLOADS:
        raise InputError(f"workload {run.workload!r} is not one of {schema.WORKLOADS}",
                         field="workload")
    report = validate_run(run)
    run.add_flags(*report.flags)
    if report.errors:
        raise InputError(f"run {run.run_id} failed validation: {'; '.join(report.messages)}",
                         field="quality_flags")
    run_metrics = metrics_mod.compute_run_metrics(run)
    # Written in this order: the trace file last, so that "its trace file exists" (DESIGN.md's
    # definition of a done run) implies that its runs row and requests exist too.
    tables = {layout.runs_path(root, run.workload, run.platform, run.run_id):
              runs_table(run, run_metrics)}
    if run.workload == "inference" and run.requests:
        tables[layout.requests_path(root, run.platform, run.run_id)] = requests_table(run)
    tables[layout.trace_path(root, run.workload, run.platform, run.model_family, run.run_id)] = \
        trace_table(run)

    for path in tables:
        if path.parent.is_dir() and any(PACKED_RE.search(p.name) for p in path.parent.iterdir()):
            raise ShardError(f"'{path.parent.relative_to(root)}' holds packed shards: a packed "
                             "folder is for reading and publishing; add runs to the unpacked "
                             "folder and pack again")
    try:
        with _lock(root, run.run_id):
            set_status(root, run.run_id, "complete")
            write_tables_all_or_nothing(tables)
            stale = [p for p in existing_run_files(root, run.run_id) if p not in tables]
            for p in stale:
                p.unlink()
            set_status(root, run.run_id, "published")
            _remove_staging(root, run.run_id)
    except Timeout as exc:
        raise LockTimeout(f"run {run.run_id} is locked by another process") from exc
    if refresh_card:
        refresh_readme(root)
    return PublishResult(
        run_id=run.run_id,
        files=[p.relative_to(root).as_posix() for p in tables],
        flags=run.flags,
        metrics=run_metrics,
        replaced=[p.relative_to(root).as_posix() for p in stale],
    )


def _remove_staging(root: Path, run_id: str) -> None:
    """Remove a published run's staging folder, except its archived attempts and status.

    Killed attempts (``attempt-N/``) are measurements: they stay until the user prunes them,
    with ``status.json`` saying what was published (issue 12, items 12 and 14).
    """
    sdir = layout.staging_dir(root, run_id)
    if not sdir.exists():
        return
    attempts = [p for p in sdir.glob("attempt-*") if p.is_dir()]
    if not attempts:
        shutil.rmtree(sdir)
        return
    for entry in sdir.iterdir():
        if entry in attempts or entry.name == "status.json":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def refresh_readme(root: str | Path) -> None:
    """Rewrite the folder's ``README.md`` through the card builder, under the folder lock.

    The card builder lives in the ``cards`` package of the same distribution (base dependencies
    only); it is imported here, lazily, because every publish must leave a loadable folder.
    """
    from cards.builder import write_card

    root = Path(root)
    try:
        with _lock(root, "folder"):
            write_card(root)
    except Timeout as exc:
        raise LockTimeout(f"the card of {root} is locked by another process") from exc


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

def read_table(path: str | Path) -> pa.Table:
    """Read one shard, or raise ``ShardError`` naming the file."""
    try:
        if Path(path).suffix == ".parquet":
            return pq.read_table(str(path))
        with pa.OSFile(str(path), "rb") as source:
            return ipc.open_stream(source).read_all()
    except (OSError, pa.ArrowInvalid) as exc:
        raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def iter_file_batches(path: str | Path) -> Iterator[pa.RecordBatch]:
    """Record batches of one shard: an Arrow IPC stream (memory-mapped) or a Parquet file."""
    if Path(path).suffix == ".parquet":
        yield from pq.ParquetFile(str(path)).iter_batches()
        return
    with pa.memory_map(str(path), "r") as source:
        yield from ipc.open_stream(source)


def iter_batches(root: str | Path, config: str, split: str | None = None,
                 columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """Stream record batches of a config without loading everything."""
    for path in layout.shard_files(root, config, split):
        try:
            for batch in iter_file_batches(path):
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

    Raises:
        RunNotFound: no trace file of that run id.
    """
    root = Path(root)
    for workload in schema.TRACE_CONFIGS:
        for path in layout.shard_files(root, workload):
            if path.stem != run_id and "-of-" not in path.stem:
                continue
            table = read_table(path)
            rows = [r for r in table.to_pylist() if r["run_id"] == run_id]
            if rows:
                return run_from_rows(rows, root=root)
    raise RunNotFound(f"run {run_id!r} is not in {root}")


def run_from_rows(rows: list[dict[str, Any]], root: str | Path | None = None) -> Run:
    """Rebuild a ``Run`` from its trace-config rows (one per device)."""
    first = rows[0]
    per_device = {"node_index", "gpu_index", "gpu_name", "gpu_uuid_hash", "power_limit_w",
                  "default_power_limit_w", "events", *schema.SIGNAL_NAMES}
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
            default_power_limit_w=r["default_power_limit_w"]))
        for e in events_from_dicts(r["events"] or []):
            events.setdefault((e.t_ms, e.kind, e.step, e.rank, e.request_id, e.label), e)
    run = Run(meta=meta, devices=devices, events=sorted(events.values(), key=lambda e: e.t_ms))
    if root is not None and run.workload == "inference":
        path = layout.requests_path(root, run.platform, run.run_id)
        if path.exists():
            run.requests = [
                {k: v for k, v in r.items() if k not in ("run_id", "platform")}
                for r in read_table(path).to_pylist()
            ]
    return run


# ---------------------------------------------------------------------------------------------
# Packing
# ---------------------------------------------------------------------------------------------

@dataclass
class PackResult:
    """What ``pack`` wrote: rows and shards per folder (relative path)."""

    rows: dict[str, int]
    shards: dict[str, int]


def pack(src: str | Path, dst: str | Path, *,
         max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, refresh_card: bool = True) -> PackResult:
    """Merge a folder's per-run files into ``<platform>-NNNNN-of-MMMMM.arrow`` shards in a new folder.

    Rows are never lost or duplicated: the row count of every output folder is checked against
    its input. ``dst`` must not exist (or be empty); ``src`` is never modified.

    Args:
        src: dataset folder to read.
        dst: new folder to write.
        max_shard_bytes: upper bound of a shard's in-memory Arrow size.
        refresh_card: write the new folder's ``README.md`` (the caller may write it itself).

    Raises:
        ShardError: ``dst`` is not empty, or a count does not match.
    """
    src, dst = Path(src), Path(dst)
    if dst.exists() and any(dst.iterdir()):
        raise ShardError(f"'{dst}' exists and is not empty; pack writes a new folder")
    if dst.resolve() == src.resolve():
        raise ShardError("pack never works in place: choose another --out")
    dst.parent.mkdir(parents=True, exist_ok=True)
    # Everything is written into a hidden sibling folder and renamed into place at the end, so
    # a failed pack leaves nothing behind and can simply be run again.
    work = Path(tempfile.mkdtemp(prefix=f".{dst.name}.packing-", dir=dst.parent))
    try:
        result = _pack_into(src, work, max_shard_bytes=max_shard_bytes, refresh_card=refresh_card)
        if dst.exists():
            dst.rmdir()  # empty (checked above)
        os.replace(work, dst)
    finally:
        if work.exists():
            shutil.rmtree(work)
    return result


def _pack_into(src: Path, dst: Path, *, max_shard_bytes: int, refresh_card: bool) -> PackResult:
    audit.check_tree(src)  # no symlink, no stray file: name it instead of failing inside
    rows: dict[str, int] = {}
    shards: dict[str, int] = {}
    data = layout.data_root(src)
    folders = sorted({p.parent for p in data.rglob(f"*{layout.SHARD_SUFFIX}")
                      if not p.name.startswith(".")}) if data.is_dir() else []
    for folder in folders:
        rel = folder.relative_to(src)
        parts = rel.parts  # data/<config>/<platform>[/<family>]
        platform = parts[2]
        files = sorted(p for p in folder.glob(f"*{layout.SHARD_SUFFIX}")
                       if not p.name.startswith("."))
        in_rows = 0
        groups: list[list[pa.Table]] = [[]]
        size = 0
        for f in files:
            table = read_table(f)
            in_rows += table.num_rows
            if groups[-1] and size + table.nbytes > max_shard_bytes:
                groups.append([])
                size = 0
            groups[-1].append(table)
            size += table.nbytes
        total = len(groups)
        out_rows = 0
        for i, group in enumerate(groups):
            table = pa.concat_tables(group)
            out = dst / rel / f"{platform}-{i:05d}-of-{total:05d}{layout.SHARD_SUFFIX}"
            write_table_atomic(out, table)
            out_rows += read_table(out).num_rows
        if out_rows != in_rows:
            raise ShardError(f"pack lost rows in '{rel}': {in_rows} in, {out_rows} out")
        rows[rel.as_posix()] = out_rows
        shards[rel.as_posix()] = total
    if folders and refresh_card:
        refresh_readme(dst)
    return PackResult(rows=rows, shards=shards)


# ---------------------------------------------------------------------------------------------
# Repair
# ---------------------------------------------------------------------------------------------

def repair_folder(root: str | Path) -> list[str]:
    """Remove what an interrupted publish left behind; return what was removed (relative paths).

    Removed: hidden temporary files of writers that are gone, and the runs row and requests of
    a run whose trace file is missing (a publish from before all-or-nothing writes, or one
    stopped between two renames) unless that run is being published now (its lock is held).
    Traces without a runs row are reported by ``validate`` and left alone: they hold the
    measurement.
    """
    root = Path(root)
    removed = audit.remove_leftovers(root)
    found = audit.audit_folder(root)
    for run_id in found.orphan_rows:
        try:
            with FileLock(str(layout.lock_path(root, run_id)), timeout=0):
                data = layout.data_root(root)
                if any(p.relative_to(data).parts[0] in schema.TRACE_CONFIGS
                       for p in existing_run_files(root, run_id)):
                    continue
                for p in existing_run_files(root, run_id):
                    p.unlink()
                    removed.append(p.relative_to(root).as_posix())
        except Timeout:
            continue
    return removed
