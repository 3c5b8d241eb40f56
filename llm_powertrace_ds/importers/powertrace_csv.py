"""Importer of the LLM-PowerTrace authors' canonical long CSV and its metadata JSON.

The CSV has one row per (tick, GPU)::

    run_id,timestamp,time_relative_s,gpu_id,power_w,sm_clock_mhz,gpu_util_pct,memory_util_pct,
    memory_used_mb,memory_total_mb,temperature_c,stage

with ISO-8601 UTC timestamps. Its metadata JSON (``--meta``, or the ``.json`` with the same stem
beside the CSV) — their configuration file or their full catalog entry, as published — is
mapped by :mod:`.seed_meta`: configuration and inference taxonomy onto our columns, their
aggregates and flags onto ``source_*`` columns, everything verbatim into ``source_metadata``.
Non-empty ``stage`` labels become ``stage`` events. Their run id is kept.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..run import Event, Run
from . import accounting, common, request_timeline
from .arrow_csv import ArrowCsvReader
from .common import Converter, DeviceData
from .seed_meta import MODEL_LABELS, is_unknown, map_meta, parse_parallelism

__all__ = ["FORMAT", "MODEL_LABELS", "import_powertrace_csv", "map_meta", "parse_parallelism"]

log = logging.getLogger("llm_powertrace_ds.importers.powertrace_csv")

FORMAT = "powertrace-csv"
REQUIRED = ("timestamp", "gpu_id", "power_w")
SIGNALS: dict[str, str] = {
    "power_w": "power_w",
    "sm_clock_mhz": "sm_clock_mhz",
    "gpu_util_pct": "gpu_util_pct",
    "memory_util_pct": "mem_util_pct",
    "memory_used_mb": "mem_used_mib",  # nvidia-smi memory.used, which is MiB
    "temperature_c": "temp_c",
}

_COLUMN_OF = {sig: col for col, sig in SIGNALS.items()}
"""Signal -> their column, which a range error names."""

CSV_COLUMNS: dict[str, str] = {
    "run_id": "run_id (one per file)",
    "timestamp": "t_ms (per device, from the run's first tick) and start_time",
    "gpu_id": "gpu_index",
    "power_w": "power_w (power_field `power_usage`: nvidia-smi power.draw)",
    "sm_clock_mhz": "sm_clock_mhz",
    "gpu_util_pct": "gpu_util_pct",
    "memory_util_pct": "mem_util_pct",
    "memory_used_mb": "mem_used_mib (nvidia-smi memory.used is MiB)",
    "temperature_c": "temp_c",
    "stage": "events of kind `stage` (label = the stage)",
    "time_relative_s": "dropped: derived from timestamp, which is kept at ms resolution",
    "memory_total_mb": "dropped: a device constant, not a time signal (the platform's "
                       "datasheet memory is in llm_powertrace_ds/specs.py)",
}
"""The seed's long CSV, column by column."""
DROPPED_COLUMNS = {k: v for k, v in CSV_COLUMNS.items() if v.startswith("dropped")}

# Their metadata JSON (configuration or full catalog entry): see :mod:`.seed_meta`.
_is_unknown = is_unknown


def meta_file(path: Path, meta_path: str | Path | None) -> Path | None:
    """The metadata JSON of a CSV.

    ``meta_path``; else the ``.json`` with the CSV's stem beside it; else
    ``metadata/<stem>.json`` when the CSV is ``raw/<stem>.csv`` of their export.
    """
    if meta_path is not None:
        return Path(meta_path)
    return (common.companion(path, path.stem + ".json")
            or request_timeline.export_companion(path, "metadata", ".json"))


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def plan_columns(header: list[str], path: Path, line: int, factors: dict[str, common.Factorizer],
                 zone: dt.tzinfo = dt.timezone.utc) -> dict[str, tuple[int, Converter]]:
    """Converters of the columns we keep; raises when a required column is missing."""
    index: dict[str, int] = {}
    for i, cell in enumerate(header):
        index.setdefault(cell.lower(), i)
    for name in REQUIRED:
        if name not in index:
            raise InputError(f"no {name} column; the header has {common.list_names(header)}",
                             file=path, line=line, field=name)
    plan: dict[str, tuple[int, Converter]] = {
        "ts": (index["timestamp"], common.timestamp_converter(
            file=path, field="timestamp", zone=zone)),
        "gpu": (index["gpu_id"], common.numeric_converter(file=path, field="gpu_id")),
    }
    for name, target in SIGNALS.items():
        if name in index:
            plan[f"signal:{target}"] = (index[name], common.numeric_converter(
                file=path, field=name, nonnegative=name == "power_w"))
    for name in ("run_id", "stage"):
        if name in index:
            plan[name] = (index[name], factors.setdefault(name, common.Factorizer()).converter())
    return plan


def read_trace(path: Path, zone: dt.tzinfo = dt.timezone.utc, unread: list[str] | None = None
               ) -> tuple[common.Table, dict[str, common.Factorizer]]:
    """Read the CSV; a short or cut-off line is an error (this is a curated export).

    ``unread``, when given, receives the columns no signal reads and :data:`CSV_COLUMNS` does
    not explain (the importer lists them: no silent drops).
    """
    factors: dict[str, common.Factorizer] = {}
    with ArrowCsvReader(path, cut_last="error") as reader:
        header = reader.read_header()
        plan = plan_columns(header, path, reader.header_line, factors, zone)
        if unread is not None:
            used = {idx for idx, _ in plan.values()}
            unread.extend(accounting.not_imported(
                [h for i, h in enumerate(header) if i not in used and h.strip()], (),
                {k.lower(): v for k, v in DROPPED_COLUMNS.items()} | DROPPED_COLUMNS))
        table = reader.read(plan)
    if len(table.lines) == 0:
        raise InputError("no data rows after the header", file=path, line=table.last_line + 1,
                         field="power_w")
    return table, factors


def build_devices(table: common.Table, path: Path) -> list[DeviceData]:
    """One :class:`DeviceData` per ``gpu_id``, each on its own timestamps.

    The table's signal columns move into the devices: they leave ``table.columns`` (its
    ``ts``, ``run_id`` and ``stage`` stay for the run id and the stage events).
    """
    cols = table.columns
    gpu = cols["gpu"]
    keys = _round_robin(gpu)
    # in a round-robin log row i of the first cycle holds keys[i] and every row one of them:
    # the first bad key is the first bad row
    ids = gpu if keys is None else keys
    bad = ~np.isfinite(ids) | (ids != np.round(ids)) | (ids < 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError("a gpu_id must be a whole number >= 0", file=path,
                         line=int(table.lines[row]), field="gpu_id")
    devices = []
    names = [k for k in cols if k.startswith("signal:") or k == "ts"]
    if keys is not None:
        # rows cycle through the GPUs in ascending order (what a logger writes): device i is
        # every len(keys)-th row from row i, no sort needed. Signals are copied (contiguous
        # for the metrics); timestamps and lines stay strided views: assemble_run's
        # ``ts_ms - t0`` makes the run's contiguous copy, and lines only name errors
        step = len(keys)
        split = _split_columns(cols, names, lambda name, v, i: v[i::step] if name == "ts"
                               else v[i::step].copy(), range(step))
        parts = [(int(key), split[i], table.lines[i::step]) for i, key in enumerate(keys)]
    else:
        # one stable sort by GPU, then each device is a slice (file order kept within a GPU)
        small = gpu.max() < 2**15  # whole numbers >= 0 (checked): int16 keys sort by radix
        order = np.argsort(gpu.astype(np.int16) if small else gpu, kind="stable")
        by_gpu = gpu[order]  # sorted: each GPU starts where the value changes
        starts = np.r_[0, np.flatnonzero(by_gpu[1:] != by_gpu[:-1]) + 1]
        bounds = np.r_[starts, len(order)]
        spans = list(zip(bounds[:-1], bounds[1:], strict=True))
        split = _split_columns(cols, names, lambda name, v, i: v[spans[i][0]:spans[i][1]],
                               range(len(spans)), order=order)
        lines = table.lines[order]
        parts = [(int(by_gpu[start]), split[i], lines[start:stop])
                 for i, (start, stop) in enumerate(spans)]
    for key, part, lines_of in parts:
        signals = {k.split(":", 1)[1]: v for k, v in part.items() if k.startswith("signal:")}
        dev = DeviceData(gpu_index=key, ts_ms=part["ts"], lines=lines_of, signals=signals)
        common.check_increasing(dev, file=path)
        devices.append(dev)
    if not any(np.isfinite(d.signals["power_w"]).any() for d in devices):
        raise InputError("no usable power value: every value is empty", file=path,
                         line=int(table.lines[0]), field="power_w")
    return devices


def _split_columns(cols: dict[str, np.ndarray], names: list[str],
                   pick: Callable[[str, np.ndarray, int], np.ndarray], devices: range, *,
                   order: np.ndarray | None = None) -> list[dict[str, np.ndarray]]:
    """Per device, ``pick(name, column, device)`` of each named column (reordered by ``order``).

    Column by column, and each signal column leaves ``cols`` once split (``ts`` stays: the stage
    events read it): freed, its memory takes the next column's copies, where fresh pages would
    cost a page fault each.
    """
    out: list[dict[str, np.ndarray]] = [{} for _ in devices]
    for name in names:
        column = cols[name] if name == "ts" else cols.pop(name)
        if order is not None:
            column = column[order]
        for i in devices:
            out[i][name] = pick(name, column, i)
        del column
    return out


def _round_robin(gpu: np.ndarray) -> np.ndarray | None:
    """The GPUs in order when the rows cycle through them ascending (0, 1, …, 0, 1, …), else None.

    Then the stable sort by GPU is the same as taking every k-th row, which costs no sort.
    """
    n = len(gpu)
    if n == 0:
        return None
    head = gpu[: min(n, 1025)]
    drops = np.flatnonzero(head[1:] <= head[:-1])
    k = int(drops[0]) + 1 if len(drops) else len(head)  # gpu[:k] rises strictly
    keys = gpu[:k]
    if n % k or not np.array_equal(gpu.reshape(-1, k), np.broadcast_to(keys, (n // k, k))):
        return None
    return keys


def csv_run_id(table: common.Table, factors: dict[str, common.Factorizer],
               path: Path) -> str | None:
    """The CSV's one run id (``None`` when the column is absent or empty)."""
    if "run_id" not in table.columns:
        return None
    codes = table.columns["run_id"]
    if len(codes) and codes[0] >= 0 and codes.min() == codes.max():
        # the usual file: one run id on every row (two passes, no masks)
        return common.check_run_id(factors["run_id"].levels[int(codes[0])], file=path,
                                   line=int(table.lines[0]))
    valid = codes[codes >= 0]
    if len(valid) == 0:
        return None
    first = int(valid[0])
    other = (codes >= 0) & (codes != first)
    if other.any():
        row = int(np.flatnonzero(other)[0])
        raise InputError(f"a second run id {factors['run_id'].levels[int(codes[row])]!r} (the file "
                         f"starts with {factors['run_id'].levels[first]!r}); import one run per "
                         "file", file=path, line=int(table.lines[row]), field="run_id")
    row = int(np.flatnonzero(codes >= 0)[0])
    return common.check_run_id(factors["run_id"].levels[first], file=path,
                               line=int(table.lines[row]))


def stage_events(table: common.Table, factors: dict[str, common.Factorizer]
                 ) -> list[tuple[int, Event]]:
    """One ``stage`` event (rank ``None``) at each change of the non-empty stage label."""
    if "stage" not in table.columns:
        return []
    codes = table.columns["stage"]
    # the labelled rows (few) in time order, file order among equal times: what a stable sort
    # of every row keeps of them, without sorting every row
    rows = np.flatnonzero(codes >= 0)
    labelled = rows[np.argsort(table.columns["ts"][rows], kind="stable")]
    if len(labelled) == 0:
        return []
    seq = codes[labelled]
    change = np.r_[True, seq[1:] != seq[:-1]]
    levels = factors["stage"].levels
    return [(int(table.columns["ts"][row]), Event(t_ms=0, kind="stage", label=levels[int(code)]))
            for row, code in zip(labelled[change], seq[change], strict=True)]


# ---------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------


def import_powertrace_csv(path: str | Path, *, workload: str,
                          meta_path: str | Path | None = None, platform: str | None = None,
                          num_gpus: int | None = None,
                          zone: dt.tzinfo = dt.timezone.utc) -> Run:
    """Import one LLM-PowerTrace CSV (and its metadata JSON) as a :class:`Run`.

    Args:
        path: the CSV.
        workload: ``finetune`` (what their traces are) or ``inference``.
        meta_path: their metadata JSON (default: the ``.json`` beside the CSV, if any).
        platform: the split slug (default: from their ``gpu_type``).
        num_gpus: devices in the run (default: their ``gpu_count``, else the GPUs found).
        zone: time zone of zone-less timestamps (theirs end in ``Z``: UTC).

    Returns:
        The run, with their run id.

    Raises:
        InputError: bad input, naming the file, the line and the field.
    """
    path = Path(path)
    unread: list[str] = []
    table, factors = read_trace(path, zone, unread)
    devices = build_devices(table, path)
    meta = common.base_meta(FORMAT, workload)
    json_path = meta_file(path, meta_path)
    if json_path is not None:
        meta.update(map_meta(common.load_meta_file(json_path), workload, file=json_path))
    else:
        log.warning("%s: no metadata JSON beside it; model and settings unknown", path)
    run_id = csv_run_id(table, factors, path)
    if run_id and meta.get("run_id") not in (None, run_id):
        log.warning("%s: run id %r differs from the metadata's %r; kept the CSV's", path, run_id,
                    meta["run_id"])
    meta["run_id"] = run_id or meta.get("run_id") or \
        f"import-{FORMAT}-{common.file_sha256(path)[:12]}"
    meta["power_field"] = "power_usage"  # they logged nvidia-smi power.draw
    timeline_csv = request_timeline.export_companion(path, "requests", ".csv")
    if timeline_csv is not None:  # requests/<run_id>.csv of their export
        meta["source_metadata"] = request_timeline.with_timeline(
            meta.get("source_metadata"), request_timeline.read_timeline_csv(timeline_csv),
            file=timeline_csv)
    accounting.record_not_imported(meta, unread, file=path)
    all_flags = common.finish_meta(devices, meta, platform=platform, num_gpus=num_gpus,
                                   file=path)
    return common.assemble_run(devices, meta, file=path, flags=all_flags,
                               events=stage_events(table, factors),
                               fields=_COLUMN_OF)
