"""Importer of ``nvidia-smi --query-gpu=... --format=csv[,nounits] -lms N`` logs.

Handles every shape real logs have: units in the header (``power.draw [W]``) or in every value
(``34.44 W``), ``", "`` separators, ``YYYY/MM/DD HH:MM:SS.mmm`` local timestamps with no zone
(read in ``tz``), one row per GPU per tick with an ``index`` (and ``uuid``, hashed; ``name``, the
platform) column, or no GPU column at all (GPUs repeat in a fixed order within a tick; their
number is inferred from the timestamp clusters unless given), ``[N/A]``/``[Not Supported]``
(null), repeated header lines of appended logs (skipped), a cut-off last line (dropped) and
multi-second stalls (kept; validation flags them ``stall``).

Each GPU keeps its own timestamps; nothing is resampled.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from .. import checks
from ..errors import InputError
from ..privacy import hash_identifier
from ..run import Run, coerce_meta
from . import accounting, common
from .arrow_csv import ArrowCsvReader
from .common import Converter, DeviceData

log = logging.getLogger("llm_powertrace_ds.importers.nvidia_smi")

FORMAT = "nvidia-smi"

POWER_FIELDS: tuple[tuple[str, str], ...] = (
    ("power.draw.instant", "instant"),
    ("power.draw", "power_usage"),
    ("power.draw.average", "average"),
)
"""Power query fields in order of preference for ``power_w``, with their ``power_field``."""

SIGNAL_FIELDS: dict[str, str] = {
    "clocks.sm": "sm_clock_mhz",
    "clocks.current.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
    "clocks.current.memory": "mem_clock_mhz",
    "utilization.gpu": "gpu_util_pct",
    "utilization.memory": "mem_util_pct",
    "memory.used": "mem_used_mib",
    "temperature.gpu": "temp_c",
}
_SIGNAL_COLUMNS = {sig: q for q, sig in SIGNAL_FIELDS.items()
                   if list(SIGNAL_FIELDS.values()).count(sig) == 1}
"""Signal -> the query a range error names: signals with one spelling only (the clocks have two,
and the table does not keep which was read)."""
LIMIT_FIELDS: dict[str, str] = {
    "enforced.power.limit": "power_limit_w",
    "power.limit": "power_limit_w",
    "power.default_limit": "default_power_limit_w",
}
ID_FIELDS: dict[str, str] = {
    "index": "index", "uuid": "uuid", "gpu_uuid": "uuid", "name": "name", "gpu_name": "name",
    "driver_version": "driver_version",
}
UNITS: dict[str, frozenset[str]] = {
    "power": frozenset({"W"}),
    "sm_clock_mhz": frozenset({"MHz"}),
    "mem_clock_mhz": frozenset({"MHz"}),
    "gpu_util_pct": frozenset({"%"}),
    "mem_util_pct": frozenset({"%"}),
    "mem_used_mib": frozenset({"MiB"}),
    "temp_c": frozenset({"C", "°C"}),
}
REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.", "clock_throttle_reasons.",
                   "clocks_event_reason.")
REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
    "hw_slowdown": 0x8, "sync_boost": 0x10, "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100, "display_clocks_setting": 0x100,
}
"""NVML ``nvmlClocksEventReason*`` bits of the per-reason query fields."""

DROPPED_FIELDS: dict[str, str] = {
    "memory.total": "a device constant, not a time signal",
    "memory.free": "memory.total - memory.used",
    "memory.reserved": "a driver reservation, constant",
    "pci.bus_id": "names a slot of one machine (never published)",
    "serial": "a board serial number identifies hardware (never published)",
    "count": "the GPU column gives the devices",
    "pstate": "no column; clocks and power say what the state does",
    "fan.speed": "no column (air-cooled boards only)",
    "temperature.memory": "no column (HBM temperature)",
    "clocks.gr": "the graphics clock equals the SM clock on data-centre GPUs",
    "clocks.current.graphics": "the graphics clock equals the SM clock on data-centre "
                               "GPUs",
    "power.max_limit": "a device constant",
    "power.min_limit": "a device constant",
}
"""Query fields read by no column, on purpose, with the reason (docs/importers.md)."""

RESERVED_META = checks.IMPORTER_KEYS
"""Columns the importer sets itself; a ``--meta`` file may not."""

MAX_INFERRED_GPUS = 64
_INFER_ROWS = 20_000
_HEADER_RE = re.compile(r"^(.*?)\s*\[([^\]]*)\]\s*$")


# ---------------------------------------------------------------------------------------------
# Header
# ---------------------------------------------------------------------------------------------


def parse_header(cells: list[str]) -> dict[str, tuple[int, str | None]]:
    """Map each query field of the header to (column index, unit); first occurrence wins."""
    out: dict[str, tuple[int, str | None]] = {}
    for i, cell in enumerate(cells):
        match = _HEADER_RE.match(cell)
        name, unit = (match.group(1), match.group(2).strip()) if match else (cell, None)
        out.setdefault(name.strip().lower(), (i, unit or None))
    return out


def _reason_name(query: str) -> str | None:
    for prefix in REASON_PREFIXES:
        if query.startswith(prefix):
            return query[len(prefix):]
    return None


def _check_unit(query: str, unit: str | None, target: str, path: Path, line: int) -> None:
    allowed = UNITS.get(target)
    if unit and allowed is not None and unit not in allowed:
        raise InputError(f"unit {common.one_line(unit)!r} is not supported; expected "
                         f"{' or '.join(sorted(allowed))}",
                         file=path, line=line, field=query)


def plan_columns(header: dict[str, tuple[int, str | None]], path: Path, line: int,
                 zone: dt.tzinfo, factors: dict[str, common.Factorizer]
                 ) -> dict[str, tuple[int, Converter]]:
    """Choose the columns to read and their converters, or raise when a must-have is missing."""
    if "timestamp" not in header:
        raise InputError(f"no timestamp column; the header has {common.list_names(list(header))}",
                         file=path, line=line, field="timestamp")
    plan: dict[str, tuple[int, Converter]] = {
        "ts": (header["timestamp"][0],
               common.timestamp_converter(file=path, field="timestamp", zone=zone)),
    }
    for query, _ in POWER_FIELDS:
        if query in header:
            idx, unit = header[query]
            _check_unit(query, unit, "power", path, line)
            plan[f"power:{query}"] = (idx, common.numeric_converter(
                file=path, field=query, units=UNITS["power"], nonnegative=True))
    if not any(key.startswith("power:") for key in plan):
        raise InputError(
            "no power column (power.draw, power.draw.instant or power.draw.average); the header "
            f"has {common.list_names(list(header))}", file=path, line=line, field="power.draw")
    _plan_signals(plan, header, path, line)
    _plan_reasons(plan, header, path)
    for query, target in ID_FIELDS.items():
        if query in header and target not in plan:
            idx = header[query][0]
            if target == "index":
                plan[target] = (idx, common.numeric_converter(file=path, field=query, units=frozenset()))
            else:
                plan[target] = (idx, factors.setdefault(target, common.Factorizer()).converter())
    return plan


def _plan_signals(plan: dict[str, tuple[int, Converter]],
                  header: dict[str, tuple[int, str | None]], path: Path, line: int) -> None:
    for query, target in {**SIGNAL_FIELDS, **LIMIT_FIELDS}.items():
        key = f"signal:{target}" if target in SIGNAL_FIELDS.values() else f"limit:{target}"
        if query not in header or key in plan:
            continue
        idx, unit = header[query]
        units = UNITS["power"] if key.startswith("limit:") else UNITS[target]
        _check_unit(query, unit, target if key.startswith("signal:") else "power", path, line)
        plan[key] = (idx, common.numeric_converter(file=path, field=query, units=units))


def _plan_reasons(plan: dict[str, tuple[int, Converter]],
                  header: dict[str, tuple[int, str | None]], path: Path) -> None:
    for query, (idx, _) in header.items():
        reason = _reason_name(query)
        if reason == "active" and "reasons:active" not in plan:
            plan["reasons:active"] = (idx, common.reasons_converter(file=path, field=query))
        elif reason in REASON_BITS:
            plan[f"reason:{reason}"] = (idx, common.active_converter(file=path, field=query))


# ---------------------------------------------------------------------------------------------
# GPUs
# ---------------------------------------------------------------------------------------------


def _positions(segments: np.ndarray) -> np.ndarray:
    """Row position within its segment (segments restart at repeated header lines)."""
    n = len(segments)
    if n == 0:
        return np.zeros(0, np.int64)
    starts = np.r_[0, np.flatnonzero(np.diff(segments)) + 1]
    seg_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    return np.arange(n) - seg_start


def infer_gpu_count(ts_ms: np.ndarray, segments: np.ndarray) -> tuple[int, str]:
    """Infer how many GPUs repeat within each tick of a log that has no GPU column.

    The rows of one tick are read a few ms apart, ticks a period apart. For each candidate count
    ``n`` the rows are cut into groups of ``n``: the right ``n`` is the largest for which the
    gaps inside groups stay under half the typical gap between groups.

    Returns:
        The count and a sentence saying how it was inferred.
    """
    ts, seg = ts_ms[:_INFER_ROWS], segments[:_INFER_ROWS]
    if len(ts) < 3:
        return 1, "too few rows to see ticks; assumed 1 GPU"
    d = np.diff(ts).astype(np.float64)
    same = seg[1:] == seg[:-1]
    pos = _positions(seg)[:-1]
    best, why = 1, f"every row is its own tick (median interval {np.median(d[same]):.0f} ms)"
    for n in range(2, min(MAX_INFERRED_GPUS, len(ts) - 1) + 1):
        boundary = (pos % n == n - 1) & same
        inside = (pos % n != n - 1) & same
        if boundary.sum() < 1 or inside.sum() < 1:
            continue
        gap = float(np.median(d[boundary]))
        spread = float(np.quantile(d[inside], 0.95))
        if gap > 0 and spread <= 0.5 * gap:
            best = n
            why = (f"rows cluster in groups of {n} (within a tick <= {spread:.0f} ms apart, "
                   f"ticks {gap:.0f} ms apart)")
    return best, why


def gpu_keys(table: common.Table, factors: dict[str, common.Factorizer], path: Path,
             num_gpus: int | None) -> np.ndarray:
    """The GPU index of every row: the ``index`` column, else ``uuid`` order, else position."""
    cols = table.columns
    if "index" in cols:
        idx = cols["index"]
        bad = ~np.isfinite(idx) | (idx != np.round(idx)) | (idx < 0)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputError("a GPU index must be a whole number >= 0", file=path,
                             line=int(table.lines[row]), field="index")
        return idx.astype(np.int64)
    if "uuid" in cols:
        codes = cols["uuid"]
        if (codes < 0).any():
            row = int(np.flatnonzero(codes < 0)[0])
            raise InputError("a GPU uuid is missing", file=path, line=int(table.lines[row]),
                             field="uuid")
        return codes
    if num_gpus is not None:
        count, why = num_gpus, "given (--num-gpus)"
    else:
        count, why = infer_gpu_count(cols["ts"], table.segments)
    log.info("%s: no GPU column; %d GPU(s): %s; rows assigned to GPUs in order within each tick",
             path, count, why)
    return _positions(table.segments) % count


def _reasons(cols: dict[str, np.ndarray], mask: np.ndarray) -> np.ndarray | None:
    if "reasons:active" in cols:
        return cols["reasons:active"][mask]
    parts = [(REASON_BITS[k.split(":", 1)[1]], v[mask]) for k, v in cols.items()
             if k.startswith("reason:")]
    if not parts:
        return None
    known = np.zeros(int(mask.sum()), dtype=bool)
    bits = np.zeros(int(mask.sum()), dtype=np.float64)
    for bit, values in parts:
        known |= np.isfinite(values)
        bits += np.where(values == 1, bit, 0)
    return np.where(known, bits, np.nan)


def _text_mode(codes: np.ndarray, factor: common.Factorizer | None) -> str | None:
    if factor is None:
        return None
    valid = codes[codes >= 0]
    if len(valid) == 0:
        return None
    values, counts = np.unique(valid, return_counts=True)
    return factor.levels[int(values[int(np.argmax(counts))])]


def build_devices(table: common.Table, keys: np.ndarray, power_key: str,
                  factors: dict[str, common.Factorizer], path: Path) -> list[DeviceData]:
    """Split the rows by GPU into :class:`DeviceData` with their signals."""
    cols = table.columns
    devices = []
    for key in np.unique(keys):
        mask = keys == key
        signals = {"power_w": cols[power_key][mask]}
        if "power:power.draw.average" in cols:
            signals["power_avg_w"] = cols["power:power.draw.average"][mask]
        for name, values in cols.items():
            if name.startswith("signal:"):
                signals[name.split(":", 1)[1]] = values[mask]
        reasons = _reasons(cols, mask)
        if reasons is not None:
            signals["clock_event_reasons"] = reasons
        uuid = _text_mode(cols["uuid"][mask], factors.get("uuid")) if "uuid" in cols else None
        dev = DeviceData(
            gpu_index=int(key), ts_ms=cols["ts"][mask], lines=table.lines[mask], signals=signals,
            gpu_name=_text_mode(cols["name"][mask], factors.get("name")) if "name" in cols else None,
            gpu_uuid_hash=hash_identifier(uuid) if uuid else None,
            power_limit_w=common.mode_of(cols["limit:power_limit_w"][mask])
            if "limit:power_limit_w" in cols else None,
            default_power_limit_w=common.mode_of(cols["limit:default_power_limit_w"][mask])
            if "limit:default_power_limit_w" in cols else None,
        )
        common.check_increasing(dev, file=path)
        devices.append(dev)
    return devices


def choose_power(table: common.Table, path: Path) -> tuple[str, str]:
    """The column for ``power_w`` (first usable in preference order) and its ``power_field``."""
    present = [(q, f) for q, f in POWER_FIELDS if f"power:{q}" in table.columns]
    for query, power_field in present:
        if np.isfinite(table.columns[f"power:{query}"]).any():
            return f"power:{query}", power_field
    raise InputError("no usable power value: every value is null ([N/A] or empty)", file=path,
                     line=int(table.lines[0]), field=present[0][0])


# ---------------------------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------------------------


def sidecar_path(path: Path) -> Path | None:
    """``<stem>.job_info.yaml`` (or ``.yml``) beside the log, when it exists."""
    for suffix in (".job_info.yaml", ".job_info.yml"):
        candidate = common.companion(path, path.stem + suffix)
        if candidate is not None:
            return candidate
    return None


def _find_details(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        return {}
    job = data.get("job", data)
    details = job.get("details", job) if isinstance(job, dict) else {}
    return details if isinstance(details, dict) else {}


def read_sidecar(path: Path, workload: str) -> dict[str, Any]:
    """Our metadata from a ``.job_info.yaml`` sidecar: the model and the batch size only.

    ``model_name`` -> ``model_name`` (and the family guessed from it), ``hf_name`` ->
    ``model_label``, ``batch_size`` -> ``concurrency`` with ``batching = static`` (inference) or
    ``batch_size`` (fine-tuning). Everything else (``system_name``, prompts, dates) is dropped:
    metadata never carries host names, user names, addresses or paths.
    """
    details = _find_details(common.read_structured(path))
    meta: dict[str, Any] = {}
    for key, target in (("model_name", "model_name"), ("hf_name", "model_label")):
        if isinstance(details.get(key), (str, int, float)):
            meta[target] = str(details[key])
    batch = details.get("batch_size")
    if batch is not None:
        if workload == "inference":
            meta.update(concurrency=batch, batching="static")
        else:
            meta["batch_size"] = batch
    meta = common.scrub_meta(meta, source=str(path))
    if meta.get("model_name"):
        meta["model_family"] = common.family_from_name(meta["model_name"])
    log.info("%s: read %s from the sidecar", path, ", ".join(sorted(meta)) or "nothing")
    return coerce_meta({k: v for k, v in meta.items() if v is not None}, workload, file=path)


def read_user_meta(meta_path: Path, workload: str) -> dict[str, Any]:
    """A ``--meta`` file: a flat mapping of our column names, checked and coerced."""
    raw = common.load_meta_file(meta_path)
    checks.check_meta_keys(raw, workload, file=meta_path)
    if raw.get("workload") not in (None, workload):
        raise InputError(f"value {raw['workload']!r} contradicts --workload {workload}",
                         file=meta_path, field="workload")
    meta = coerce_meta(raw, workload, file=meta_path)
    return common.scrub_meta(meta, source=str(meta_path))


# ---------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------


def read_log(path: Path, zone: dt.tzinfo, unread: list[str] | None = None
             ) -> tuple[common.Table, dict[str, common.Factorizer]]:
    """Read the log's wanted columns (raises on a missing timestamp/power column or no rows).

    ``unread``, when given, receives the header fields that no column reads and no entry of
    :data:`DROPPED_FIELDS` explains (the importer lists them: no silent drops).
    """
    factors: dict[str, common.Factorizer] = {}
    with ArrowCsvReader(path, cut_last="drop") as reader:
        header = parse_header(reader.read_header())
        plan = plan_columns(header, path, reader.header_line, zone, factors)
        if unread is not None:
            used = {idx for idx, _ in plan.values()}
            unread.extend(accounting.not_imported(
                [name for name, (idx, _) in header.items() if idx not in used], (),
                DROPPED_FIELDS))
        table = reader.read(plan)
    if len(table.lines) == 0:
        power = next(q for q, _ in POWER_FIELDS if q in header)
        raise InputError("no data rows after the header", file=path,
                         line=table.last_line + 1, field=power)
    return table, factors


def import_nvidia_smi(path: str | Path, *, workload: str, meta_path: str | Path | None = None,
                      platform: str | None = None, num_gpus: int | None = None,
                      zone: dt.tzinfo = dt.timezone.utc) -> Run:
    """Import one nvidia-smi CSV log as a :class:`Run`.

    Args:
        path: the log.
        workload: ``finetune`` or ``inference``.
        meta_path: a flat JSON/YAML mapping of our column names; when ``None``, a
            ``<stem>.job_info.yaml`` sidecar is read if present.
        platform: the split slug (default: from the GPU name in the log or the metadata).
        num_gpus: GPUs of a log without a GPU column (default: inferred).
        zone: time zone of the zone-less timestamps.

    Returns:
        The run (``run_id`` = ``import-nvidia-smi-<first 12 hex of the file's sha256>``).

    Raises:
        InputError: bad input, naming the file, the line and the field.
    """
    path = Path(path)
    unread: list[str] = []
    table, factors = read_log(path, zone, unread)
    power_key, power_field = choose_power(table, path)
    devices = build_devices(table, gpu_keys(table, factors, path, num_gpus), power_key,
                            factors, path)

    meta = common.base_meta(FORMAT, workload)
    side = sidecar_path(path) if meta_path is None else None
    if meta_path is not None:
        meta.update(read_user_meta(Path(meta_path), workload))
    elif side is not None:
        meta.update(read_sidecar(side, workload))
    meta["run_id"] = f"import-{FORMAT}-{common.file_sha256(path)[:12]}"
    meta["power_field"] = power_field
    if "driver_version" in table.columns:
        driver = _text_mode(table.columns["driver_version"], factors.get("driver_version"))
        meta["driver_version"] = driver or meta.get("driver_version")
    accounting.record_not_imported(meta, unread, file=path)
    all_flags = common.finish_meta(devices, meta, platform=platform, num_gpus=num_gpus,
                                   file=path)
    log.info("%s: zone-less timestamps read as %s", path, zone)
    fields = {**_SIGNAL_COLUMNS, "power_w": power_key.split(":", 1)[1]}  # the query chosen
    return common.assemble_run(devices, meta, file=path, flags=all_flags, fields=fields)
