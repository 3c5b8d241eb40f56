"""A plain time/power CSV: one published total of a device, a node or a cluster.

Many published analyses ship only ``time, power`` — a node's or a whole cluster's draw. Such a
file becomes a run with **one** series that is flagged ``aggregate_series`` (unless
``num_gpus`` is 1, when it is simply that device):

- ``power_w`` = the power column × the unit's factor (``W`` 1, ``kW`` 10³, ``MW`` 10⁶): the
  total of ``num_gpus`` devices. Node-total metrics (energy, mean, peaks, ramps, spectrum) are
  computed on it as on any run; the per-device lists (``gpu_energy_j``, ``gpu_peak_power_w``,
  ...) are null with the reason in ``metric_notes``, and no device identity (name, limit) is
  invented. Physical ranges are checked on the per-device mean (total ÷ ``num_gpus``).
- Time: a timestamp (ISO 8601; a zone-less one is in ``--tz``), which also gives
  ``start_time``; or a number of seconds since any origin (``time_unit="s"``, or ``ms``), when
  ``start_time`` stays null.
- An empty cell or ``NaN``/``NA`` power is null; any other value that is not a number stops
  the import with an error naming the file, the line, the column and the value. A cut-off last
  line (no newline, too few cells) is dropped with a log line.
- ``sampler`` = ``import:series``; ``power_field`` is null (the file does not say which
  reading it sums); ``run_id`` = ``import-series-<first 12 hex of the file's sha256>``.
- ``sample_hold``: ``linear`` (default) or ``previous`` (``--hold previous``) for a
  change-only log, which writes a row only when the reading changes: the metrics then hold
  each reading until the next one instead of interpolating (``llm_powertrace_ds/metrics``).
- Sizes: the rows' times are checked before anything is sized from them — an interval over
  ``checks.MAX_GAP_S`` or a span over ``checks.MAX_SPAN_S`` is refused naming the line and the
  column (the nvidia-smi rule), so the metrics' grid is bounded by the rows, not by a time.
- A power column whose name says it holds energy (``gpu0_energy``, ``energy_j``, ``..._mJ``,
  ``Wh``) is refused: a joule column read as watts is a wrong number, not a trace. Zeus'
  window CSV has its own importer (``import zeus``).
"""

from __future__ import annotations

import csv
import datetime as dt
import logging
import math
import re
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .. import checks, schema
from ..errors import InputError
from ..run import DeviceSeries, Run, coerce_meta
from .common import (
    DeviceData,
    base_meta,
    check_run_id,
    file_sha256,
    fill_model,
    is_null_token,
    load_meta_file,
    median_period_ms,
    resolve_platform,
    resolve_zone,
    scrub_meta,
)

FORMAT = "series"
UNIT_FACTORS = {"W": 1.0, "kW": 1e3, "MW": 1e6}
"""Power unit -> factor to W."""
TIME_UNITS = {"s": 1000.0, "ms": 1.0}
"""Unit of a numeric time column -> factor to ms."""
MAX_TIME_MS = 1e15
"""Largest numeric time (ms, ≈ 31,700 years): beyond it a time is not a clock reading, and
int64 milliseconds would overflow."""
ENERGY_COLUMN_RE = re.compile(r"(energy|joule|(^|[^a-z])(m?j|k?wh)([^a-z]|$))", re.IGNORECASE)
"""A column name that says it holds energy, not power (``gpu0_energy``, ``E [mJ]``, ``kWh``)."""
log = logging.getLogger("llm_powertrace_ds.importers")


def _read_columns(path: Path, time_col: str, power_col: str) -> tuple[list[str], list[str],
                                                                     list[int]]:
    try:
        raw = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Failed to read '{path}': {type(exc).__name__}: {exc}",
                         file=path) from None
    try:
        dialect: Any = csv.Sniffer().sniff(raw[:4096], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    rows = list(csv.reader(raw.splitlines(), dialect))
    header_at = next((i for i, r in enumerate(rows) if any(c.strip() for c in r)), None)
    if header_at is None:
        raise InputError("the file is empty", file=path)
    header = [c.strip() for c in rows[header_at]]
    for col, opt in ((time_col, "--time-col"), (power_col, "--power-col")):
        if col not in header:
            raise InputError(f"no column {col!r} ({opt}); the header has: "
                             f"{', '.join(header)[:300]}", file=path, line=header_at + 1,
                             field=col)
    ti, pi = header.index(time_col), header.index(power_col)
    times: list[str] = []
    powers: list[str] = []
    lines: list[int] = []
    last_row = len(rows)
    for i, row in enumerate(rows[header_at + 1:], start=header_at + 2):
        if not any(c.strip() for c in row):
            continue
        if len(row) <= max(ti, pi):
            if i == last_row and not raw.endswith(("\n", "\r")):
                log.warning("%s: line %d is cut off (no newline): dropped", path, i)
                continue
            raise InputError(f"{len(row)} cells where the header has {len(header)}", file=path,
                             line=i)
        times.append(row[ti].strip())
        powers.append(row[pi].strip())
        lines.append(i)
    if not times:
        raise InputError("no data rows", file=path)
    return times, powers, lines


def _times_ms(texts: list[str], lines: list[int], *, path: Path, field: str,
              zone: dt.tzinfo, time_unit: str) -> tuple[np.ndarray, bool]:
    """(epoch-or-origin ms, is_wall_clock); the first row decides which kind the column is."""
    try:
        float(texts[0])
        numeric = True
    except ValueError:
        numeric = False
    if numeric:
        numbers = np.empty(len(texts), dtype=np.float64)
        for k, text in enumerate(texts):
            try:
                numbers[k] = float(text)
            except ValueError:
                raise InputError(f"value {text[:40]!r} is not a number of {time_unit} like the "
                                 "first row's", file=path, line=lines[k], field=field) from None
            if not math.isfinite(numbers[k]) or abs(numbers[k]) * TIME_UNITS[time_unit] > MAX_TIME_MS:
                raise InputError(f"value {text[:40]!r} is not a finite time within "
                                 f"±{MAX_TIME_MS / TIME_UNITS[time_unit]:.0e} {time_unit}",
                                 file=path, line=lines[k], field=field)
        return np.round(numbers * TIME_UNITS[time_unit]).astype(np.int64), False
    out = np.empty(len(texts), dtype=np.int64)
    for k, text in enumerate(texts):
        try:
            stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"value {text[:40]!r} is neither a number of {time_unit} nor an "
                             "ISO 8601 time", file=path, line=lines[k], field=field) from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=zone)
        out[k] = round(stamp.timestamp() * 1000)
    return out, True


def import_series(path: str | Path, *, time_col: str, power_col: str,
                  unit: Literal["W", "kW", "MW"], num_gpus: int, workload: str,
                  platform: str | None = None, meta_path: str | Path | None = None,
                  tz: str | None = "UTC", time_unit: Literal["s", "ms"] = "s",
                  hold: Literal["linear", "previous"] = "linear") -> Run:
    """Import a time/power CSV as one aggregate series (see the module docstring).

    Args:
        path: the CSV file (``,``, ``;`` or tab separated, one header line).
        time_col: the time column (ISO 8601 timestamps, or numbers of ``time_unit``).
        power_col: the power column.
        unit: the power column's unit.
        num_gpus: devices the total sums (1 = the series is one device).
        workload: ``finetune`` or ``inference``.
        platform: the split slug (default ``unknown``, flag ``platform_unknown``).
        meta_path: flat JSON/YAML of our column names (model, ...).
        tz: IANA zone of zone-less timestamps.
        time_unit: unit of a numeric time column.
        hold: ``previous`` for a change-only log (each reading holds until the next row).

    Raises:
        InputError: bad input, naming the file, the line, the column and the value.

    Example:
        >>> run = import_series("cluster.csv", time_col="time", power_col="MW",  # doctest: +SKIP
        ...                     unit="MW", num_gpus=4096, workload="finetune")
    """
    path = Path(path)
    if unit not in UNIT_FACTORS:
        raise InputError(f"unit {unit!r} is not one of {', '.join(UNIT_FACTORS)}", field="--unit")
    if time_unit not in TIME_UNITS:
        raise InputError(f"time unit {time_unit!r} is not one of {', '.join(TIME_UNITS)}",
                         field="--time-unit")
    if num_gpus < 1:
        raise InputError(f"num_gpus must be at least 1, got {num_gpus}", field="--num-gpus")
    if hold not in schema.SAMPLE_HOLDS:
        raise InputError(f"hold {hold!r} is not one of {', '.join(schema.SAMPLE_HOLDS)}",
                         field="--hold")
    if ENERGY_COLUMN_RE.search(power_col):
        raise InputError(f"column {power_col!r} holds energy, not power: a joule column read "
                         "as watts would be a wrong trace (a Zeus window CSV: `import zeus`)",
                         file=path, field=power_col)
    meta_in = scrub_meta(load_meta_file(meta_path), source=str(meta_path)) if meta_path else {}
    times, powers, lines = _read_columns(path, time_col, power_col)
    t_ms, wall = _times_ms(times, lines, path=path, field=time_col, zone=resolve_zone(tz),
                           time_unit=time_unit)
    power = np.empty(len(powers), dtype=np.float64)
    for k, text in enumerate(powers):
        if not text or is_null_token(text):
            power[k] = math.nan
            continue
        try:
            power[k] = float(text) * UNIT_FACTORS[unit]
        except ValueError:
            raise InputError(f"value {text[:40]!r} is not a number", file=path, line=lines[k],
                             field=power_col) from None
        if not math.isfinite(power[k]):
            raise InputError(f"value {text[:40]!r} is not a finite number", file=path,
                             line=lines[k], field=power_col)
    arr_lines = np.array(lines, dtype=np.int64)
    bad = np.flatnonzero(np.diff(t_ms) <= 0)
    if len(bad):
        i = int(bad[0])
        raise InputError(f"time goes back or repeats after line {lines[i]}: each row's time "
                         "must increase", file=path, line=lines[i + 1], field=time_col)
    _check_span(t_ms, arr_lines, path=path, field=time_col)
    # physical ranges hold per device: check the mean device (total / N)
    per_device = DeviceData(gpu_index=0, ts_ms=t_ms, lines=arr_lines,
                            signals={"power_w": power / num_gpus})
    checks.check_device_ranges([per_device], file=path, lines=[arr_lines],
                               fields={"power_w": power_col})
    meta: dict[str, Any] = {**base_meta(FORMAT, workload), **meta_in}
    meta["run_id"] = check_run_id(str(meta.get("run_id") or
                                      f"import-{FORMAT}-{file_sha256(path)[:12]}"), file=path)
    slug, flags = resolve_platform(platform or meta.pop("platform", None), None)
    meta["platform"] = slug
    meta["num_gpus"] = num_gpus
    meta["sample_hold"] = hold
    meta.setdefault("source_metadata", _source_metadata(path, time_col, power_col, unit))
    checks.check_texts(meta, [], (), file=path)
    t0 = int(t_ms[0])
    meta["start_time"] = (dt.datetime.fromtimestamp(t0 / 1000, tz=dt.timezone.utc)
                          if wall else None)
    if meta.get("sample_period_ms") is None:
        meta["sample_period_ms"] = median_period_ms([per_device])
    fill_model(meta)
    clean = coerce_meta({k: v for k, v in meta.items() if v is not None}, workload, file=path)
    device = DeviceSeries(gpu_index=0, t_ms=t_ms - t0, signals={"power_w": power})
    run = Run(meta=clean, devices=[device])
    run.add_flags(*flags)
    if num_gpus > 1:
        run.add_flags("aggregate_series")
    if not run.meta.get("precision"):
        run.add_flags("precision_unknown")
    return run


def _check_span(t_ms: np.ndarray, lines: np.ndarray, *, path: Path, field: str) -> None:
    """Refuse an interval over ``checks.MAX_GAP_S`` or a span over ``checks.MAX_SPAN_S``.

    The metrics' 0.1 s grid is sized by the span: bounding the span and every interval here
    keeps what is allocated later proportional to the rows (a 4-row file with one time of
    10⁹ s would otherwise ask for a grid of 10¹⁰ points).
    """
    if len(t_ms) < 2:
        return
    steps = np.diff(t_ms)
    if int(steps.max()) > checks.MAX_GAP_S * 1000:
        i = int(np.argmax(steps > checks.MAX_GAP_S * 1000))
        raise InputError(f"a gap of {steps[i] / 3.6e6:.3g} h after line {int(lines[i])} (at "
                         f"most {checks.MAX_GAP_S / 3600:g} h inside one run): import the parts "
                         "before and after it as separate runs", file=path,
                         line=int(lines[i + 1]), field=field)
    span = int(t_ms[-1]) - int(t_ms[0])
    if span > checks.MAX_SPAN_S * 1000:
        raise InputError(f"the file spans {span / 8.64e7:.3g} days (at most "
                         f"{checks.MAX_SPAN_S / 86400:g} days per run): split it into runs",
                         file=path, line=int(lines[-1]), field=field)


def _source_metadata(path: Path, time_col: str, power_col: str, unit: str) -> str:
    import json

    return json.dumps({"format": "time/power CSV", "file": path.name, "time_column": time_col,
                       "power_column": power_col, "power_unit": unit}, sort_keys=True)


__all__ = ["FORMAT", "TIME_UNITS", "UNIT_FACTORS", "import_series"]
