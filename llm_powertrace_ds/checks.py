"""Input checks of a run before anything of it is written.

Physical ranges, one GPU model per run, metadata keys, and the free-text gate (``privacy``).

The importers call :func:`check_import` on what they parsed (devices as arrays, metadata as a
mapping), so a file with an absurd value is refused with a one-line error naming the file, the
line and the field; ``shards.publish_run`` calls :func:`check_publishable` on every run, from
any source, as the last gate. ``validate`` flags ``implausible_value`` on runs already published.

Policy (issue 12, items 1, 8, 9, 10):

* **Ranges** (:data:`SIGNAL_RANGES_BY_NAME`): a value outside its physical range, or one that is
  not finite once stored in its column's type (``1e308`` W is ``inf`` as float32), is refused
  on import. The ceilings are generous (5 kW per device: a GB200 superchip draws ~2.7 kW).
* **One GPU model per run**: a log whose devices name GPUs of different platforms (an H100 and
  an A100) is refused; the split is a platform, and a run belongs to one split. Import each
  device's rows separately, or pass ``--platform`` to file the run deliberately.
* **Metadata keys**: provenance columns (:data:`IMPORTER_KEYS`) are the importer's alone; a
  ``--meta`` file that sets one is refused, listing the keys a meta may set.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from . import privacy, schema
from .errors import InputError

_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Range:
    """An inclusive physical range of one signal or column, in the column's unit."""

    low: float
    high: float

    def text(self) -> str:
        return f"{self.low:g}..{self.high:g}"


SIGNAL_RANGES_BY_NAME: dict[str, Range] = {
    "power_w": Range(0.0, 5000.0),
    "power_avg_w": Range(0.0, 5000.0),
    "energy_mj": Range(0.0, 1e15),
    "gpu_util_pct": Range(0.0, 100.0),
    "mem_util_pct": Range(0.0, 100.0),
    "mem_used_mib": Range(0.0, 4 * 1024 * 1024),
    "sm_clock_mhz": Range(0.0, 10_000.0),
    "mem_clock_mhz": Range(0.0, 40_000.0),
    "temp_c": Range(-40.0, 150.0),
    "clock_event_reasons": Range(0.0, float(2**62)),
}
"""Physical range of each per-tick signal (power per device; memory up to 4 TiB)."""

DEVICE_RANGES: dict[str, Range] = {
    "power_limit_w": Range(0.0, 5000.0),
    "default_power_limit_w": Range(0.0, 5000.0),
}

META_MIN_ONE = ("num_gpus", "concurrency", "batch_size", "grad_accum", "global_batch_size",
                "seq_len", "dp_size", "tp_size", "pp_size", "num_requests", "max_steps")
"""Counts that are at least 1 when given."""
META_SIGNED = ("seed",)
"""Numeric columns that may be negative."""

IMPORTER_KEYS = ("run_id", "sweep", "sampler", "workload", "schema_version", "start_time",
                 "power_field", "quality_flags", "host_hash", "model_source", "gpu_uuid_hash",
                 "package_version", "torch_version", "transformers_version", "peft_version",
                 "trl_version", "nvml_version") + schema.SOURCE_COLUMN_NAMES
"""Provenance columns only the importer (or the generator) sets; a ``--meta`` file may not."""


class _Device(Protocol):
    gpu_index: int
    signals: dict[str, np.ndarray]
    gpu_name: str | None
    power_limit_w: float | None
    default_power_limit_w: float | None


def meta_keys_allowed(workload: str, *, extra: Iterable[str] = ()) -> list[str]:
    """The keys a ``--meta`` file may set for ``workload`` (every run-level column but provenance)."""
    names = [n for n in schema.RUN_LEVEL_FIELDS[workload] if n not in IMPORTER_KEYS]
    return sorted({*names, "gpu_name", "power_limit_w", "default_power_limit_w", *extra})


def check_meta_keys(raw: Mapping[str, Any], workload: str, *, file: str | Path,
                    allowed_provenance: Sequence[str] = ()) -> None:
    """Refuse a metadata mapping that sets a provenance column.

    Args:
        raw: the metadata as read (our column names).
        workload: the run's workload.
        file: the metadata file, for the error.
        allowed_provenance: provenance keys this format's metadata legitimately carries (the
            powertrace-csv JSON has its own ``run_id``).

    Raises:
        InputError: naming the first refused key and listing the keys a meta may set.
    """
    for key in raw:
        if key in IMPORTER_KEYS and key not in allowed_provenance:
            allowed = ", ".join(meta_keys_allowed(workload, extra=allowed_provenance))
            raise InputError(f"{key} is provenance the importer sets itself and cannot be given; "
                             f"a meta file may set: {allowed}", file=file, field=key)


def _in_range(values: np.ndarray, rng: Range) -> bool:
    """Whether every non-NaN value lies in ``rng`` (all NaN: ``True``), in two passes.

    ``fmin``/``fmax`` skip NaN (NaN only when every value is), and infinity falls outside every
    range, so this decides the usual column without the element-wise masks of the full test.
    """
    if not len(values):
        return True
    lo, hi = np.fmin.reduce(values), np.fmax.reduce(values)
    return bool(np.isnan(lo) or (lo >= rng.low and hi <= rng.high))


def _first_bad(values: np.ndarray, rng: Range) -> int | None:
    if rng.high <= _FLOAT32_MAX and _in_range(values, rng):
        return None  # every value finite in range, so also finite as float32
    with np.errstate(invalid="ignore", over="ignore"):
        as32 = values.astype(np.float32) if values.dtype.kind == "f" else values
        bad = ~np.isnan(values) & (~np.isfinite(as32) | (values < rng.low) | (values > rng.high))
    hits = np.flatnonzero(bad)
    return int(hits[0]) if len(hits) else None


def check_device_ranges(devices: Sequence[_Device], *, file: str | Path | None = None,
                        lines: Sequence[np.ndarray] | None = None,
                        fields: Mapping[str, str] | None = None) -> None:
    """Refuse the first sample outside its physical range (or not finite as float32).

    Args:
        devices: the devices (``signals`` name -> float64 array, NaN = missing).
        file: the source file, for the error.
        lines: per device, the source line of each sample.
        fields: signal name -> the source's column name, for the error.

    Raises:
        InputError: ``'<file>', line N, field '<column>': value 1e+12 is outside 0..5000``.
    """
    for k, dev in enumerate(devices):
        for name, values in dev.signals.items():
            rng = SIGNAL_RANGES_BY_NAME.get(name)
            if rng is None or len(values) == 0:
                continue
            row = _first_bad(np.asarray(values, dtype=np.float64), rng)
            if row is not None:
                line = int(lines[k][row]) if lines is not None and len(lines[k]) > row else None
                raise InputError(
                    f"value {float(values[row]):g} of GPU {dev.gpu_index} is outside the "
                    f"physical range {rng.text()} of {name}", file=file, line=line,
                    field=(fields or {}).get(name, name))
        for name, rng in DEVICE_RANGES.items():
            value = getattr(dev, name, None)
            if value is not None and not (math.isfinite(value) and rng.low <= value <= rng.high):
                raise InputError(f"value {value:g} of GPU {dev.gpu_index} is outside the physical "
                                 f"range {rng.text()}", file=file, field=name)


def check_meta_ranges(meta: Mapping[str, Any], *, file: str | Path | None = None) -> None:
    """Refuse non-finite numbers (as float32), negative quantities, and counts below 1."""
    for key, value in meta.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and math.isnan(value):
            continue
        if not math.isfinite(float(value)) or abs(float(value)) > _FLOAT32_MAX:
            raise InputError(f"value {value!r} is not a finite number", file=file, field=key)
        if key in META_SIGNED:
            continue
        low = 1 if key in META_MIN_ONE else 0
        if value < low:
            raise InputError(f"value {value!r} is below {low}", file=file, field=key)


def check_one_model(devices: Sequence[_Device], *, file: str | Path | None = None,
                    platform: str | None = None) -> None:
    """Refuse a run whose devices are GPUs of different platforms (unless ``platform`` is given).

    Raises:
        InputError: naming the two GPU names found.
    """
    if platform:
        return
    seen: dict[str, str] = {}
    for dev in devices:
        if dev.gpu_name:
            seen.setdefault(schema.platform_from_name(dev.gpu_name).slug, dev.gpu_name)
    if len(seen) > 1:
        names = list(seen.values())
        raise InputError(f"the log mixes GPU models ({names[0]!r} and {names[1]!r}); a run belongs "
                         "to one platform (split): import each model's rows as its own run",
                         file=file, field="name")


def check_texts(meta: Mapping[str, Any], devices: Sequence[_Device],
                labels: Iterable[tuple[str, str | None]] = (), *,
                file: str | Path | None = None) -> None:
    """The free-text gate (:func:`privacy.check_text`) on metadata, GPU names and labels."""
    privacy.check_meta_text(meta, file=file)
    for dev in devices:
        privacy.check_text("gpu_name", dev.gpu_name, file=file)
    for field, value in labels:
        privacy.check_text(field, value, file=file)


MAX_GAP_S = 6 * 3600.0
"""Longest interval between two samples of one device in an imported run (6 h)."""
MAX_SPAN_S = 3 * 86400.0
"""Longest imported run (3 days): the metrics' 100 ms grid over it is ~2.6 M points per GPU."""
MAX_GPU_INDEX = 4095
TIME_RANGE_MS = (631_152_000_000, 7_258_118_400_000)
"""Accepted sample times: 1990-01-01 to 2200-01-01 UTC (epoch ms)."""


def _line(lines: Sequence[np.ndarray] | None, k: int, row: int) -> int | None:
    return int(lines[k][row]) if lines is not None and len(lines[k]) > row else None


def check_times(devices: Sequence[Any], *, file: str | Path | None = None,
                lines: Sequence[np.ndarray] | None = None) -> None:
    """Refuse dates outside 1990-2200, a gap over ``MAX_GAP_S`` and a span over ``MAX_SPAN_S``.

    Every size derived from the timestamps (the metrics' grid, the plots) is bounded by these
    before anything is allocated from them (issue 12, item 17).

    Args:
        devices: objects with ``gpu_index`` and ``ts_ms`` (UTC epoch ms, increasing).
        file: the source file, for errors.
        lines: per device, the source line of each sample.

    Raises:
        InputError: naming the file, the line and ``timestamp``.
    """
    lo, hi = TIME_RANGE_MS
    for k, dev in enumerate(devices):
        ts = np.asarray(dev.ts_ms, dtype=np.int64)
        if len(ts) == 0:
            continue
        # the usual device: its extremes inside the range, no gap beyond the limit; the masks
        # and their first offending sample only when one is not
        inside = lo <= int(ts.min()) and int(ts.max()) < hi
        bad = np.zeros(0, np.int64) if inside else np.flatnonzero((ts < lo) | (ts >= hi))
        if len(bad):
            raise InputError("the date is outside 1990-2200", file=file,
                             line=_line(lines, k, int(bad[0])), field="timestamp")
        if not 0 <= int(dev.gpu_index) <= MAX_GPU_INDEX:
            raise InputError(f"GPU index {int(dev.gpu_index)} is outside 0..{MAX_GPU_INDEX}",
                             file=file, line=_line(lines, k, 0), field="index")
        if len(ts) > 1:
            steps = np.diff(ts)
            gaps = (np.flatnonzero(steps > MAX_GAP_S * 1000) if steps.max() > MAX_GAP_S * 1000
                    else np.zeros(0, np.int64))
            if len(gaps):
                i = int(gaps[0])
                raise InputError(f"GPU {int(dev.gpu_index)} has a gap of "
                                 f"{(ts[i + 1] - ts[i]) / 3.6e6:.1f} h (at most {MAX_GAP_S / 3600:g} h "
                                 "inside one run): import the parts before and after it as "
                                 "separate runs", file=file, line=_line(lines, k, i + 1),
                                 field="timestamp")
    starts = [int(d.ts_ms[0]) for d in devices if len(d.ts_ms)]
    ends = [int(d.ts_ms[-1]) for d in devices if len(d.ts_ms)]
    if starts and (max(ends) - min(starts)) > MAX_SPAN_S * 1000:
        raise InputError(f"the log spans {(max(ends) - min(starts)) / 8.64e7:.1f} days (at most "
                         f"{MAX_SPAN_S / 86400:g} days per run): split it into runs",
                         file=file, field="timestamp")


def check_import(devices: Sequence[_Device], meta: Mapping[str, Any], *, file: str | Path,
                 lines: Sequence[np.ndarray] | None = None,
                 fields: Mapping[str, str] | None = None,
                 labels: Iterable[tuple[str, str | None]] = ()) -> None:
    """Every check of an imported run (text, times, ranges, one GPU model), before assembly."""
    check_times(devices, file=file, lines=lines)
    check_texts(meta, devices, labels, file=file)
    check_meta_ranges(meta, file=file)
    check_device_ranges(devices, file=file, lines=lines, fields=fields)
    check_one_model(devices, file=file, platform=None)


def check_publishable(run: Any) -> None:
    """The last gate of ``publish_run``, for runs from any source: text and metadata ranges.

    Args:
        run: a ``Run`` (typed loosely: ``run.py`` is below this module).
    """
    labels = [("label", e.label) for e in run.events] + \
             [("request_id", e.request_id) for e in run.events]
    check_texts(run.meta, run.devices, labels)
    check_meta_ranges(run.meta)


def implausible_samples(devices: Sequence[_Device]) -> list[str]:
    """One message per device signal with samples outside its physical range (for ``validate``)."""
    out = []
    for dev in devices:
        for name, values in dev.signals.items():
            rng = SIGNAL_RANGES_BY_NAME.get(name)
            if rng is None or len(values) == 0:
                continue
            arr = np.asarray(values, dtype=np.float64)
            if _in_range(arr, rng):
                continue  # the usual signal (or one never reported: all NaN)
            with np.errstate(invalid="ignore"):
                bad = ~np.isnan(arr) & (~np.isfinite(arr) | (arr < rng.low) | (arr > rng.high))
            if bad.any():
                out.append(f"gpu {dev.gpu_index}: {int(bad.sum())} {name} sample(s) outside "
                           f"{rng.text()}")
    return out
