"""Shard I/O: encode a ``Run`` to Arrow tables, publish atomically, pack, and read back.

Every shard is an Arrow IPC **stream** file whose schema is the config's
``Features.arrow_schema`` (it carries the ``huggingface`` metadata, so list and struct types
round-trip through ``datasets``). Scalar and event columns go through ``features.encode_batch``;
the per-tick signal lists are built directly from numpy (offsets + values), which is what
``encode_batch`` would produce, without a Python object per sample.

Publishing follows the run lifecycle of docs/design.md: ``.staging/<run_id>/status.json`` says
``complete`` then ``published``; each file is written under a hidden temporary name in its final
folder and renamed into place; a crash in between is repaired by publishing again (idempotent).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import yaml
from datasets import Features
from filelock import FileLock, Timeout

from . import audit, checks, layout, schema
from .atomic import atomic_path, write_text_atomic
from .errors import InputError, LockTimeout, RunNotFound, ShardError
from .run import SIGNAL_KEYS, DeviceSeries, Run, events_from_dicts
from .staging import Staging

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 600.0
PACKED_RE = re.compile(r"-\d{5}-of-\d{5}\.(arrow|parquet)$")
"""Names of ``pack``'s shards (``<platform>-NNNNN-of-MMMMM.arrow``)."""
DEFAULT_MAX_SHARD_BYTES = 500 * 1024 * 1024
SHARD_COMPRESSION = "zstd" if pa.Codec.is_available("zstd") else None
"""Buffer compression of every shard written (Arrow IPC's own, read transparently by pyarrow and
``datasets``): per-tick lists of regularly spaced ``t_ms`` and slowly varying signals shrink
2-3x, which is what brings an import below 12 bytes per sample (issue 13)."""


COMPRESS_MIN_BYTES = 256 * 1024
"""Tables smaller than this (a runs row, a request log) are written uncompressed: their hundred
small column buffers cost more to decompress on every read than they save on disk."""


def ipc_options(nbytes: int | None = None) -> ipc.IpcWriteOptions:
    """The IPC write options of a shard of ``nbytes`` (``SHARD_COMPRESSION`` unless small)."""
    small = nbytes is not None and nbytes < COMPRESS_MIN_BYTES
    return ipc.IpcWriteOptions(compression=None if small else SHARD_COMPRESSION)

_ARROW_TYPES = {
    "float32": pa.float32(), "float64": pa.float64(), "int16": pa.int16(), "int32": pa.int32(),
    "int64": pa.int64(),
}


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------

def _signal_array(devices: list[DeviceSeries], name: str, dtype: str) -> pa.Array:
    """A ``list<dtype>`` column: one list per device, nulls where NaN.

    A device whose source never reported the signal (absent, or NaN at every tick) gets a
    **null cell**, not a list of nulls: the cell costs its validity bit and no value buffer, so
    an all-null signal column costs nothing on disk (issue 13). Readers treat a null cell as
    "every tick null" (``run_from_rows``; ``traces.align_signal`` for Arrow consumers).
    """
    lengths = np.array([len(d.t_ms) for d in devices], dtype=np.int64)
    parts: list[np.ndarray] = []
    if name == "t_ms":
        valid = np.ones(len(devices), dtype=bool)
        parts = [np.asarray(d.t_ms, dtype=np.int64) for d in devices]
    else:
        found = [d.signals.get(name) for d in devices]
        valid = np.array([p is not None and len(p) > 0 and not np.isnan(p).all() for p in found],
                         dtype=bool)
        lengths = np.where(valid, lengths, 0)
        parts = [p for p, ok in zip(found, valid, strict=True) if ok and p is not None]
    offsets = np.zeros(len(devices) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    if name == "t_ms":
        values = pa.array(np.concatenate(parts) if parts else np.zeros(0, np.int64),
                          type=pa.int64())
    else:
        raw = np.concatenate(parts) if parts else np.zeros(0)
        mask = np.isnan(raw)
        if dtype.startswith("int"):
            raw = np.where(mask, 0, np.rint(raw))
        arr_np = raw.astype(dtype)
        values = pa.array(arr_np, type=_ARROW_TYPES[dtype], mask=mask if mask.any() else None)
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), values,
                                    mask=None if valid.all() else pa.array(~valid))


@functools.lru_cache(maxsize=64)
def _restricted_features(config: str, names: tuple[str, ...]) -> Features:
    """The config's ``Features`` restricted to ``names`` (built once: construction deep-copies)."""
    features = schema.FEATURES[config]
    return Features({k: features[k] for k in names})


@functools.lru_cache(maxsize=64)
def _arrow_schema(config: str) -> pa.Schema:
    """The config's ``Features.arrow_schema`` (built once: the property deep-copies each time)."""
    return schema.FEATURES[config].arrow_schema


def _table(config: str, rows: dict[str, list], extra: dict[str, pa.Array] | None = None) -> pa.Table:
    features = schema.FEATURES[config]
    arrow_schema = _arrow_schema(config)
    n = len(next(iter(rows.values()))) if rows else 0
    full = {name: rows.get(name, [None] * n) for name in features if name not in (extra or {})}
    # The exact Features object of the config, restricted to the columns not built from numpy.
    encoded = _restricted_features(config, tuple(full)).encode_batch(full) if full else {}
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


def _write_stream(dest: Path, table: pa.Table) -> None:
    """Write ``table`` as one Arrow IPC stream file at ``dest`` (no rename, no fsync)."""
    with pa.OSFile(str(dest), "wb") as sink, \
            ipc.new_stream(sink, table.schema, options=ipc_options(table.nbytes)) as writer:
        writer.write_table(table, max_chunksize=max(1, min(table.num_rows, 1024)))


def _write_tmp(path: Path, table: pa.Table) -> Path:
    """Write ``table`` to ``path``'s hidden temporary name (fsynced); return that name.

    The first half of :func:`write_tables_all_or_nothing`'s two phases (every file written
    before any is renamed), which :func:`~llm_powertrace_ds.atomic.atomic_path` (one file,
    renamed as its block ends) does not cover.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(path)
    try:
        _write_stream(tmp, table)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_table_atomic(path: Path, table: pa.Table) -> None:
    """Write ``table`` as an Arrow IPC stream to a hidden temporary name, then rename it."""
    with atomic_path(path, fsync=True) as tmp:
        _write_stream(tmp, table)


def write_tables_all_or_nothing(tables: dict[Path, pa.Table | Path]) -> None:
    """Write every table under its hidden temporary name first, then rename them all.

    A value that is a ``Path`` is a file already written (staged by :func:`stage_run`); it is
    only renamed. A failure while writing (a full disk, a file-size limit, a killed writer)
    leaves none of the files visible: the temporary names are removed and no final name is
    touched. Renames take no space, so once every file is written the run appears whole (issue
    12, item 11); they happen in the dict's order (the trace file last).

    Raises:
        ShardError: a file could not be written (naming it and the reason).
    """
    written: list[tuple[Path, Path, bool]] = []  # (temporary or staged file, final name, ours)
    try:
        for path, table in tables.items():
            if isinstance(table, Path):
                path.parent.mkdir(parents=True, exist_ok=True)
                written.append((table, path, False))
            else:
                written.append((_write_tmp(path, table), path, True))
    except OSError as exc:
        for tmp, _, ours in written:
            if ours:
                tmp.unlink(missing_ok=True)
        raise ShardError(f"cannot write '{path}': {exc.strerror or exc}; nothing of the run was "
                         "published") from None
    except BaseException:
        for tmp, _, ours in written:
            if ours:
                tmp.unlink(missing_ok=True)
        raise
    for i, (tmp, path, _) in enumerate(written):
        try:
            os.replace(tmp, path)
        except BaseException:
            # a rename failed (the trace comes last, so the run is not done): no litter left;
            # `validate --repair` removes a runs row whose trace never arrived
            for rest, _, ours in written[i:]:
                if ours:
                    rest.unlink(missing_ok=True)
            raise


def _lock(root: Path, name: str) -> FileLock:
    return FileLock(str(layout.lock_path(root, name)), timeout=LOCK_TIMEOUT_S)


@contextmanager
def folder_lock(root: str | Path) -> Iterator[None]:
    """Hold the folder-level lock (the card's) of a dataset folder.

    Raises:
        LockTimeout: another process held it for ``LOCK_TIMEOUT_S``.
    """
    lock = _lock(Path(root), "folder")
    try:
        lock.acquire()
    except Timeout as exc:
        raise LockTimeout(f"the card of {root} is locked by another process") from exc
    try:
        yield
    finally:
        lock.release()


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
    """Write ``.staging/<run_id>/status.json`` atomically (:meth:`staging.Staging.set_status`)."""
    Staging(root, run_id).set_status(status, **extra)


def read_status(root: Path, run_id: str) -> dict[str, Any] | None:
    """The run's staging status, or ``None`` (:meth:`staging.Staging.status_record`)."""
    return Staging(root, run_id).status_record()


def existing_run_files(root: Path, run_id: str) -> list[Path]:
    """Every per-run file of ``run_id`` under ``data/`` (any config, platform, family)."""
    name = f"{run_id}{layout.SHARD_SUFFIX}"
    data = layout.data_root(root)
    if not data.is_dir():
        return []
    # data/<config>/<platform>/[<family>/]<run_id>.arrow: O(folders), never a walk of every file
    found = [*data.glob(f"*/*/{name}"), *data.glob(f"*/*/*/{name}")]
    return sorted(p for p in found if p.is_file())


@dataclass
class PreparedRun:
    """A validated run's files, ready to be committed into ``data/``.

    Attributes:
        run_id: the run.
        flags: its quality flags after validation.
        metrics: its runs-row metrics.
        files: destination -> the table, or a staged file holding it (:func:`stage_run`), in
            writing order (the trace file last).
    """

    run_id: str
    flags: list[str]
    metrics: dict[str, Any]
    files: dict[Path, pa.Table | Path]


def publish_run(root: str | Path, run: Run, *, refresh_card: bool = True) -> PublishResult:
    """Validate a complete run, compute its metrics and publish its files atomically.

    Writes ``data/<workload>/<platform>/<family>/<run_id>.arrow``,
    ``data/<workload>_runs/<platform>/<run_id>.arrow`` and, for inference runs with a request
    log, ``data/inference_requests/<platform>/<run_id>.arrow``. Publishing the same run again
    replaces it (no duplicate rows, even when its platform or family changed). Finally the YAML
    ``configs:`` block of ``README.md`` is brought up to date (:func:`write_configs_block`), so
    the folder always loads; the full card is the caller's, once per command (``cards``).

    Args:
        root: the dataset folder.
        run: a complete run.
        refresh_card: update the card's YAML ``configs:`` block afterwards (cheap).

    Returns:
        A ``PublishResult``.

    Raises:
        InputError: the run has error-level quality problems or bad metadata.
    """
    return commit_run(root, prepare_run(root, run), refresh_card=refresh_card)


def prepare_run(root: str | Path, run: Run) -> PreparedRun:
    """Validate a run, compute its metrics and build its tables (nothing is written).

    Raises:
        InputError: the run has error-level quality problems or bad metadata.
        ShardError: a destination folder holds packed shards.
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
    # Written in this order: the trace file last, so that "its trace file exists" (the
    # definition of a done run, staging.is_done) implies that its runs row and requests exist too.
    tables: dict[Path, pa.Table | Path] = {
        layout.runs_path(root, run.workload, run.platform, run.run_id):
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
    return PreparedRun(run_id=run.run_id, flags=run.flags, metrics=run_metrics, files=tables)


def stage_run(root: str | Path, prepared: PreparedRun) -> PreparedRun:
    """Write a prepared run's tables into ``.staging/<run_id>/publish/`` (hidden from globs).

    Returns the same run with files instead of tables, so a batch of runs can be written one at
    a time in bounded memory and committed together later (:func:`commit_run` renames them).
    """
    sdir = layout.staging_dir(root, prepared.run_id) / "publish"
    staged: dict[Path, pa.Table | Path] = {}
    for i, (dest, table) in enumerate(prepared.files.items()):
        if isinstance(table, Path):
            staged[dest] = table
            continue
        path = sdir / f"{i}{layout.SHARD_SUFFIX}"
        write_table_atomic(path, table)
        staged[dest] = path
    return PreparedRun(run_id=prepared.run_id, flags=prepared.flags, metrics=prepared.metrics,
                       files=staged)


def discard_staged(root: str | Path, prepared: PreparedRun) -> None:
    """Remove what :func:`stage_run` wrote for a run that will not be committed."""
    sdir = layout.staging_dir(root, prepared.run_id) / "publish"
    if sdir.exists():
        shutil.rmtree(sdir)
    if sdir.parent.is_dir() and not any(sdir.parent.iterdir()):
        sdir.parent.rmdir()  # the run's staging folder existed only for this


def commit_run(root: str | Path, prepared: PreparedRun, *,
               refresh_card: bool = True) -> PublishResult:
    """Put a prepared (or staged) run's files into ``data/`` under its lock, atomically per file.

    Tables are written to a temporary name and renamed; staged files are renamed. Stale files of
    an earlier version of the run are removed, then the staging folder.
    """
    root = Path(root)
    run_id = prepared.run_id
    tables = prepared.files
    try:
        with _lock(root, run_id):
            set_status(root, run_id, "complete")
            write_tables_all_or_nothing(tables)
            stale = [p for p in existing_run_files(root, run_id) if p not in tables]
            for p in stale:
                p.unlink()
            set_status(root, run_id, "published")
            Staging(root, run_id).remove_after_publish()
    except Timeout as exc:
        raise LockTimeout(f"run {run_id} is locked by another process") from exc
    if refresh_card:
        # The block carries a fingerprint of the files (datasets' cache key, issue 12), so it
        # changes with every publish; writing it stats the shards (no shard is read). Batch
        # publishers (import) pass refresh_card=False and rebuild once per command.
        write_configs_block(root)
    return PublishResult(
        run_id=run_id,
        files=[p.relative_to(root).as_posix() for p in tables],
        flags=prepared.flags,
        metrics=prepared.metrics,
        replaced=[p.relative_to(root).as_posix() for p in stale],
    )


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's safe loader and dumper where PyYAML has them (the same documents, ~10x faster)."""

CARD_PENDING = ("This folder's full dataset card (summaries, figures) has not been built yet: "
                "run `llm-powertrace card DIR`. The YAML `configs:` block above is current, so "
                "the folder loads with `datasets.load_dataset`.")


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """A card's YAML front matter (a mapping) and its Markdown body."""
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end != -1:
            meta = yaml.load(text[4:end], Loader=_YAML_LOADER) or {}
            if isinstance(meta, dict):
                return meta, text[end + 5:]
    return {}, text


def write_configs_block(root: str | Path) -> Path:
    """Keep ``README.md``'s YAML ``configs:`` list current; leave the rest of the card as it is.

    This is what publishing a run does to the card: O(folders), no shard is read. The full card
    (summaries, figures) is rebuilt by the layer above, once per command (``cards``). Written
    under the folder lock, atomically.

    Returns:
        The path of ``README.md``.
    """
    root = Path(root)
    path = root / "README.md"
    with folder_lock(root):
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        meta, body = split_front_matter(old)
        meta["configs"] = layout.configs_metadata(root)
        if not body.strip():
            body = "\n" + CARD_PENDING + "\n"
        text = "---\n" + yaml.dump(meta, Dumper=_YAML_DUMPER, sort_keys=False,
                                    allow_unicode=True, width=1000).rstrip() + "\n---\n" + body
        if text != old:
            write_text_atomic(path, text)
    return path


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


def iter_file_batches(path: str | Path, columns: list[str] | None = None
                      ) -> Iterator[pa.RecordBatch]:
    """Record batches of one shard: an Arrow IPC stream (memory-mapped) or a Parquet file.

    With ``columns``, only those columns are read: the other columns' buffers are neither
    decompressed nor decoded (IPC ``included_fields``), so reading a few scalar columns of a
    trace shard costs a fraction of reading its signals.
    """
    if Path(path).suffix == ".parquet":
        yield from pq.ParquetFile(str(path)).iter_batches(columns=columns)
        return
    with pa.memory_map(str(path), "r") as source:
        if columns is None:
            yield from ipc.open_stream(source)
            return
        schema_ = ipc.open_stream(source).schema
        wanted = [schema_.get_field_index(c) for c in columns if c in schema_.names]
        source.seek(0)
        yield from ipc.open_stream(source, options=ipc.IpcReadOptions(included_fields=wanted))


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

    A per-run file is found by its path (``<run_id>.arrow`` in one family folder), so this
    reads one file; packed shards are scanned by their ``run_id`` column only.

    Raises:
        RunNotFound: no trace file of that run id.
    """
    root = Path(root)
    name = f"{run_id}{layout.SHARD_SUFFIX}"
    for workload in schema.TRACE_CONFIGS:
        wdir = layout.data_root(root) / workload
        if not wdir.is_dir():
            continue
        direct = sorted(wdir.glob(f"*/*/{name}"))
        packed = sorted(p for p in wdir.glob("*/*/*") if PACKED_RE.search(p.name))
        for path in direct + packed:
            for found in runs_from_table(read_table(path), root=root, only=run_id):
                return found
    raise RunNotFound(f"run {run_id!r} is not in {root}")


def iter_runs(root: str | Path) -> Iterator[Run]:
    """Every published run of a folder, one trace file in memory at a time.

    One walk of ``data/`` (``layout.shard_files`` per trace config); rows are decoded from
    Arrow with numpy (no Python object per sample). In packed shards the rows of a run are
    consecutive (``pack`` appends whole per-run files).
    """
    root = Path(root)
    for workload in schema.TRACE_CONFIGS:
        for path in layout.shard_files(root, workload):
            yield from runs_from_table(read_table(path), root=root)


_PER_DEVICE = ("node_index", "gpu_index", "gpu_name", "gpu_uuid_hash", "power_limit_w",
               "default_power_limit_w", "events")


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
    devices = []
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
            default_power_limit_w=r.get("default_power_limit_w")))
        for e in events_from_dicts(r.get("events") or []):
            events.setdefault((e.t_ms, e.kind, e.step, e.rank, e.request_id, e.label), e)
    run = Run(meta=meta, devices=devices, events=sorted(events.values(), key=lambda e: e.t_ms))
    _attach_requests(run, root)
    return run


def _attach_requests(run: Run, root: str | Path | None) -> None:
    if root is not None and run.workload == "inference":
        path = layout.requests_path(root, run.platform, run.run_id)
        if path.exists():
            run.requests = [
                {k: v for k, v in r.items() if k not in ("run_id", "platform")}
                for r in read_table(path).to_pylist()
            ]


def run_from_rows(rows: list[dict[str, Any]], root: str | Path | None = None) -> Run:
    """Rebuild a ``Run`` from its trace-config rows (one per device, as Python dicts)."""
    first = rows[0]
    per_device = {*_PER_DEVICE, *schema.SIGNAL_NAMES}
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
    _attach_requests(run, root)
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
        groups = _group_by_size(files, max_shard_bytes)
        total = len(groups)
        in_rows = out_rows = 0
        for i, group in enumerate(groups):
            out = dst / rel / f"{platform}-{i:05d}-of-{total:05d}{layout.SHARD_SUFFIX}"
            in_rows += write_batches_atomic(out, file_schema(group[0]), _stream_files(group))
            out_rows += count_rows(out)
        if out_rows != in_rows:
            raise ShardError(f"pack lost rows in '{rel}': {in_rows} in, {out_rows} out")
        rows[rel.as_posix()] = out_rows
        shards[rel.as_posix()] = total
    if folders and refresh_card:
        write_configs_block(dst)
    return PackResult(rows=rows, shards=shards)


def _group_by_size(files: list[Path], max_shard_bytes: int) -> list[list[Path]]:
    """Consecutive files grouped so that each group's bytes on disk stay under the bound.

    An Arrow IPC stream file's size is its in-memory Arrow size plus a small framing, so file
    sizes bound the shards without reading any file.
    """
    groups: list[list[Path]] = [[]]
    size = 0
    for f in files:
        nbytes = f.stat().st_size
        if groups[-1] and size + nbytes > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(f)
        size += nbytes
    return groups


def _stream_files(files: list[Path]) -> Iterator[pa.RecordBatch]:
    for f in files:
        try:
            yield from iter_file_batches(f)
        except (OSError, pa.ArrowInvalid) as exc:
            raise ShardError(f"Failed to read '{f}': {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def write_batches_atomic(path: Path, schema_: pa.Schema, batches: Iterable[pa.RecordBatch]) -> int:
    """Stream record batches into one Arrow IPC stream file (temporary name, then rename).

    Memory is bounded by one batch (the inputs are memory-mapped), not by the shard.

    Args:
        path: the shard to write.
        schema_: its schema (a config's ``Features.arrow_schema``); every batch must have it.
        batches: the record batches.

    Returns:
        The rows written.

    Raises:
        ShardError: a batch's schema differs.
    """
    n = 0
    with atomic_path(path, fsync=True) as tmp, pa.OSFile(str(tmp), "wb") as sink, \
            ipc.new_stream(sink, schema_, options=ipc_options()) as writer:
        for batch in batches:
            if not batch.schema.equals(schema_):
                raise ShardError(f"cannot pack into '{path.name}': a batch's schema differs "
                                 "from the first file's")
            writer.write_batch(batch)
            n += batch.num_rows
    return n


def file_schema(path: str | Path) -> pa.Schema:
    """The schema of one Arrow IPC stream shard, or ``ShardError`` naming the file."""
    try:
        with pa.memory_map(str(path), "r") as source:
            return ipc.open_stream(source).schema
    except (OSError, pa.ArrowInvalid) as exc:
        raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def count_rows(path: str | Path) -> int:
    """Rows of one shard, counted from its record batches (one small column decoded)."""
    return sum(b.num_rows for b in iter_file_batches(path, ["run_id"]))


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
