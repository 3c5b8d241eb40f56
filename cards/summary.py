"""What the card says about the data: one pass over a dataset folder's shards.

Only the small tables are read in full (the runs configs, one row per run); of the trace and
request shards only a few scalar columns are read (row counts, the per-device GPU name, node and
power limit; the signal lists are never decompressed), ``data/`` is walked once, and a run's
trace summary is cached beside its runs file (``.<run_id>.summary.json``, also for a run whose
row is in a runs-table segment), keyed on the trace file's identity, so rebuilding the card
after one more run reads one trace file, not the whole folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from llm_powertrace_ds import layout, schema
from llm_powertrace_ds.arrow_numpy import table_rows
from llm_powertrace_ds.errors import ShardError
from llm_powertrace_ds.shards import iter_file_batches, write_text_atomic

from . import runs_cache

log = logging.getLogger(__name__)

DEVICE_COLUMNS = ("run_id", "platform", "node_index", "gpu_index", "gpu_name", "power_limit_w",
                  "default_power_limit_w")


@dataclass
class FolderSummary:
    """The facts the card is built from.

    Attributes:
        root: the dataset folder.
        globs: ``{config: {split: [glob]}}`` as ``layout.config_globs`` returns it.
        rows: ``{config: {split: row count}}``.
        runs: ``{workload: [runs-config rows, sorted by run_id]}``.
        devices: ``{run_id: [per-device dicts of DEVICE_COLUMNS]}`` from the trace configs.
    """

    root: Path
    globs: dict[str, dict[str, list[str]]]
    rows: dict[str, dict[str, int]]
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    devices: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def all_runs(self) -> list[dict[str, Any]]:
        """Every run of every workload, sorted by (workload, run_id)."""
        return [r for wl in schema.WORKLOADS for r in self.runs.get(wl, [])]

    @property
    def platforms(self) -> list[str]:
        """Every platform (split) with at least one run, sorted."""
        return sorted({r["platform"] for r in self.all_runs} | {
            s for splits in self.globs.values() for s in splits})

    @property
    def has_cpu_proxy(self) -> bool:
        return any(schema.is_cpu_proxy(r) for r in self.all_runs) or "cpu_proxy" in self.platforms

    def platform_runs(self, workload: str | None = None) -> Counter:
        """Run counts per platform (of one workload, or all)."""
        runs = self.runs.get(workload, []) if workload else self.all_runs
        return Counter(r["platform"] for r in runs)

    def base_row_total(self) -> int:
        """Rows over the base configs (family configs repeat their workload's rows)."""
        return sum(sum(splits.values()) for config, splits in self.rows.items()
                   if config in schema.ALL_CONFIGS)


def _read_file(path: Path, columns: tuple[str, ...]) -> tuple[int, list[dict[str, Any]]]:
    """Row count and the given columns of one shard.

    Only ``run_id`` and the given columns are read (``shards.iter_file_batches`` with columns:
    the signal lists of a trace shard are never decompressed), so this is cheap per run.
    """
    wanted = list(dict.fromkeys(("run_id", *columns)))
    try:
        n, rows = 0, []
        for batch in iter_file_batches(path, wanted):
            n += batch.num_rows
            names = [c for c in columns if c in batch.schema.names]
            if names:
                rows.extend(batch.select(names).to_pylist())
        return n, rows
    except (OSError, pa.ArrowInvalid) as exc:
        raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: {exc}") from None


def _count_rows(path: Path) -> int:
    """Rows of a shard whose columns the card does not read (the request logs).

    Parquet answers from its footer. An Arrow IPC stream is read a record batch at a time from
    a plain file, not a memory map: a mapped file's touched pages stay in the process's
    resident set until it is unmapped, so counting a 3,000,000-request log through its
    ``run_id`` column kept ≈ 100 MB resident; read this way one batch is held at a time.
    """
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(str(path)).metadata.num_rows)
        with pa.OSFile(str(path), "rb") as source:
            reader = ipc.open_stream(source, options=ipc.IpcReadOptions(included_fields=[0]))
            return sum(batch.num_rows for batch in reader)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: {exc}") from None


CACHE_VERSION = 2


def summary_cache_path(runs_file: Path) -> Path:
    """Where a run's cached trace summary lives: a hidden file beside its runs-config file.

    Hidden (a leading dot), so no glob, ``pack`` or upload ever sees it.
    """
    return runs_file.with_name(f".{runs_file.stem}.summary.json")


def _read_runs_file(path: Path) -> tuple[str | None, pa.Table]:
    """One runs-config shard, read once: its content hash (``None`` for Parquet) and its table.

    The bytes read for the hash are the bytes parsed (``pyarrow.ipc`` on the in-memory buffer),
    so a rebuild reads each runs file exactly once.
    """
    try:
        if path.suffix == ".parquet":
            return None, pa.Table.from_batches(list(iter_file_batches(path)))
        data = path.read_bytes()
        table = ipc.open_stream(pa.py_buffer(data)).read_all()
        return hashlib.sha256(data).hexdigest(), table
    except (OSError, pa.ArrowInvalid) as exc:
        raise ShardError(f"Failed to read '{path}': {type(exc).__name__}: {exc}") from None


class _Rows:
    """Rows of many small tables as dicts, in order, converted a group of tables at a time.

    Consecutive tables with one schema are concatenated before ``to_pylist`` (which has a fixed
    cost per column and batch: most of the time on 1,000 one-row runs files), in groups of
    ``GROUP`` so that only a bounded number of decoded tables is alive at once.
    """

    GROUP = 64

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._pending: list[pa.Table] = []

    def add(self, table: pa.Table) -> None:
        if self._pending and not table.schema.equals(self._pending[0].schema):
            self.flush()
        self._pending.append(table)
        if len(self._pending) >= self.GROUP:
            self.flush()

    def flush(self) -> list[dict[str, Any]]:
        if self._pending:
            self.rows.extend(table_rows(pa.concat_tables(self._pending).combine_chunks()))
            self._pending = []
        return self.rows


def _read_trace_cached(root: Path, workload: str, split: str, path: Path,
                       segment_of: dict[Path, Path] | None = None
                       ) -> tuple[int, list[dict[str, Any]]]:
    """A per-run trace file's row count and device rows, cached by the trace file's identity.

    The key is the run id and the trace file's size, mtime and inode: a trace is only ever
    replaced by a rename (publishing the run again writes a new file, a new inode), and the
    rows cached come from the trace alone. So the key holds whether the run's runs row is its
    own file or a row of a runs-table segment (``segment_of``: its would-be runs file -> the
    segment), and a merge into a segment re-reads no trace. A packed shard (no per-run runs
    row) is read directly. The cache is written when the folder is writable.
    """
    runs_file = layout.runs_path(root, workload, split, path.stem)
    if runs_file not in (segment_of or {}) and not runs_file.is_file():
        return _read_file(path, DEVICE_COLUMNS)
    stat = path.stat()
    key = {"version": CACHE_VERSION, "run_id": path.stem, "trace_bytes": stat.st_size,
           "trace_mtime_ns": stat.st_mtime_ns, "trace_ino": stat.st_ino}
    cache = summary_cache_path(runs_file)
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return int(cached["rows"]), list(cached["devices"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    n, devices = _read_file(path, DEVICE_COLUMNS)
    try:
        write_text_atomic(cache, json.dumps({"key": key, "rows": n, "devices": devices}),
                          fsync=False)  # a cache: lost in a crash, it is rebuilt
    except OSError:
        log.debug("%s: summary cache not written (read-only folder?)", cache)
    return n, devices


def summarize(root: str | Path) -> FolderSummary:
    """Read a dataset folder once and return the facts the card needs.

    Args:
        root: the dataset folder.

    Returns:
        A ``FolderSummary``.

    Raises:
        ShardError: a shard cannot be read (the message names the file).
    """
    root = Path(root)
    folders = layout.shard_folders(root)  # one walk of data/ for the whole summary
    globs = layout.config_globs(root)
    cache: dict[Path, tuple[int, list[dict[str, Any]]]] = {}
    runs_rows: dict[str, _Rows] = {}
    segment_of: dict[Path, Path] = {}  # a run's would-be runs file -> the segment holding it
    for workload in schema.WORKLOADS:  # each changed runs file read once: hash, count, rows
        config = f"{workload}_runs"
        if config not in globs:
            continue
        by_folder: dict[Path, list[Path]] = {}
        for path in layout.shard_files(root, config, None, folders):
            by_folder.setdefault(path.parent, []).append(path)
        for folder, paths in by_folder.items():
            for got in runs_cache.read_folder(folder, paths, _read_runs_file):
                if layout.is_segment(got.path.name):
                    for run_id in got.table.column("run_id").to_pylist():
                        segment_of[got.path.with_name(f"{run_id}{layout.SHARD_SUFFIX}")] = \
                            got.path
                runs_rows.setdefault(workload, _Rows()).add(got.table)
                cache[got.path] = (got.table.num_rows, [])
    rows: dict[str, dict[str, int]] = {}
    for config, splits in globs.items():
        trace = schema.base_config(config) in schema.TRACE_CONFIGS
        for split in splits:
            total = 0
            for path in layout.shard_files(root, config, split, folders):
                if path not in cache:
                    cache[path] = (_read_trace_cached(root, schema.base_config(config), split,
                                                      path, segment_of)
                                   if trace else (_count_rows(path), []))
                total += cache[path][0]
            rows.setdefault(config, {})[split] = total
    devices: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(cache):
        for dev in cache[path][1]:
            devices.setdefault(dev["run_id"], []).append(dev)
    for devs in devices.values():
        devs.sort(key=lambda d: (d.get("node_index") or 0, d.get("gpu_index") or 0))
    runs = {wl: sorted(rows.flush(), key=lambda r: r["run_id"]) for wl, rows in runs_rows.items()}
    return FolderSummary(root=root, globs=globs, rows=rows, runs=runs, devices=devices)
