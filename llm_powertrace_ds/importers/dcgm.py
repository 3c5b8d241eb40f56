"""DCGM logs: the text output of ``dcgmi dmon -e 155,156,150,203,100,101 -d 100``.

``dcgmi dmon`` prints a header naming each field by its short tag, a units line, then one line
per entity per interval::

    #Entity   POWER  TOTEC     TMPTR  GPUTL  SMCLK  MMCLK
    ID        W      mJ        C      %      MHZ    MHZ
    GPU 0     71.52  81536712  33     0      345    1593
    GPU 1     70.96  80112233  31     0      345    1593

The header may repeat (dmon reprints it); ``N/A`` is null. Fields (DCGM field id -> column):

=====  =======  ====================================  ===========================================
id     tag      DCGM field                            column
=====  =======  ====================================  ===========================================
155    POWER    ``DCGM_FI_DEV_POWER_USAGE`` (W)       ``power_w``, ``power_field = power_usage``
156    TOTEC    ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``  ``energy_mj`` (mJ, re-based to 0 at t0)
150    TMPTR    ``DCGM_FI_DEV_GPU_TEMP`` (C)          ``temp_c``
203    GPUTL    ``DCGM_FI_DEV_GPU_UTIL`` (%)          ``gpu_util_pct``
100    SMCLK    ``DCGM_FI_DEV_SM_CLOCK`` (MHz)        ``sm_clock_mhz``
101    MMCLK    ``DCGM_FI_DEV_MEM_CLOCK`` (MHz)       ``mem_clock_mhz``
=====  =======  ====================================  ===========================================

**What field 155 means per GPU generation.** It is NVML's ``nvmlDeviceGetPowerUsage``: an
instantaneous reading before Ampere and on the A100 (GA100), a **1 s moving average** on the
other Ampere GPUs, Ada, Hopper and Blackwell — such runs carry the flag ``power_is_1s_average``
(from the GPU name in ``--meta`` or ``--platform``). The energy counter (156) is exact on Volta
and newer; energy totals come from it, the power trace gives the shape.

**Time.** ``dcgmi dmon`` prints no timestamps: sample ``k`` of a GPU is placed at
``t_ms = k * period_ms`` — the nominal schedule of dmon's ``-d`` delay, which must be given
(``sample_period_ms`` in the metadata). ``start_time`` is the metadata's, else null. Gaps in
dmon's own loop are therefore invisible; the energy counter still totals them correctly, and a
counter-vs-integral disagreement beyond 5 % is flagged ``energy_mismatch``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from .. import checks
from ..errors import InputError
from ..run import Run
from .common import (
    DeviceData,
    assemble_run,
    base_meta,
    file_sha256,
    finish_meta,
    is_null_token,
    load_meta_file,
    scrub_meta,
)

FORMAT = "dcgm"
MIN_PERIOD_MS = 0.1
"""Shortest ``sample_period_ms`` accepted: ten samples per millisecond of the run clock (ms
resolution) is already more than it can tell apart."""
MAX_PERIOD_MS = 3_600_000.0
"""Longest ``sample_period_ms`` accepted (one hour)."""
FIELDS: dict[str, tuple[str, str]] = {
    "POWER": ("power_w", "W"),
    "TOTEC": ("energy_mj", "mJ"),
    "TMPTR": ("temp_c", "C"),
    "GPUTL": ("gpu_util_pct", "%"),
    "SMCLK": ("sm_clock_mhz", "MHZ"),
    "MMCLK": ("mem_clock_mhz", "MHZ"),
}
"""dmon short tag -> (column, unit dmon prints)."""
_TAG_OF = {col: tag for tag, (col, _) in FIELDS.items()}
"""Column -> the dmon tag a range error names."""
_ENTITY_RE = re.compile(r"^GPU\s+(\d+)\s+(.*)$")


def _parse(path: Path) -> tuple[list[str], dict[int, list[tuple[int, list[float]]]]]:
    """(field tags, {gpu: [(line, values)]}); raises ``InputError`` naming line and field."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Failed to read '{path}': {type(exc).__name__}: {exc}",
                         file=path) from None
    tags: list[str] | None = None
    rows: dict[int, list[tuple[int, list[float]]]] = {}
    lines = text.split("\n")
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            header = line.lstrip("#").split()
            if not header or header[0].lower() != "entity":
                raise InputError(f"expected a '#Entity ...' header, got {line[:40]!r}", file=path,
                                 line=lineno)
            found = header[1:]
            unknown = [t for t in found if t not in FIELDS]
            if unknown:
                raise InputError(f"unknown dmon field {unknown[0]!r}; known: "
                                 f"{', '.join(FIELDS)} (-e 155,156,150,203,100,101)",
                                 file=path, line=lineno, field=unknown[0])
            if "POWER" not in found:
                raise InputError("no POWER column: record field 155 (dcgmi dmon -e 155,...)",
                                 file=path, line=lineno, field="POWER")
            if tags is not None and found != tags:
                raise InputError("the header changed in the middle of the log", file=path,
                                 line=lineno)
            tags = found
            continue
        if line.startswith("ID"):
            continue  # the units line
        m = _ENTITY_RE.match(line)
        if not m:
            if lineno == len(lines) and not text.endswith("\n"):
                continue  # a cut-off last line
            raise InputError(f"expected 'GPU <index> <values>', got {line[:40]!r}", file=path,
                             line=lineno)
        if tags is None:
            raise InputError("a sample before the '#Entity' header", file=path, line=lineno)
        cells = m.group(2).split()
        if len(cells) != len(tags):
            if lineno == len(lines) and not text.endswith("\n"):
                continue
            raise InputError(f"{len(cells)} values where the header has {len(tags)}",
                             file=path, line=lineno)
        values = []
        for tag, cell in zip(tags, cells, strict=True):
            if is_null_token(cell):
                values.append(math.nan)
                continue
            try:
                values.append(float(cell))
            except ValueError:
                raise InputError(f"value {cell!r} is not a number", file=path, line=lineno,
                                 field=tag) from None
        rows.setdefault(int(m.group(1)), []).append((lineno, values))
    if tags is None or not rows:
        raise InputError("no samples: is this `dcgmi dmon` output?", file=path)
    return tags, rows


def import_dcgm(path: str | Path, *, workload: str, meta_path: str | Path | None = None,
                platform: str | None = None, num_gpus: int | None = None) -> Run:
    """Import one ``dcgmi dmon`` log as a :class:`Run` (see the module docstring).

    Args:
        path: the log.
        workload: ``finetune`` or ``inference``.
        meta_path: flat JSON/YAML of column names; must give ``sample_period_ms`` (dmon's
            ``-d``); ``gpu_name`` sets the platform and the 1 s-average flag.
        platform: the split (default: from ``gpu_name``, else ``unknown``).
        num_gpus: devices in the run (default: the GPUs in the log).

    Raises:
        InputError: bad input, naming the file, the line and the field.
    """
    path = Path(path)
    raw_meta = load_meta_file(meta_path) if meta_path else {}
    # the provenance rule of every importer: --meta may not set what the importer sets itself;
    # dmon prints no clock, so the run's start_time is the user's to give
    checks.check_meta_keys(raw_meta, workload, file=meta_path or path,
                           allowed_provenance=("start_time",))
    meta_in = scrub_meta(raw_meta, source=str(meta_path)) if meta_path else {}
    period = meta_in.pop("sample_period_ms", None)
    try:
        period_ms = float(period) if period is not None else math.nan
    except (TypeError, ValueError):
        period_ms = math.nan
    if not (math.isfinite(period_ms) and period_ms > 0):
        raise InputError(f"dcgmi dmon prints no timestamps: give its -d delay as "
                         f"sample_period_ms in --meta (got {period!r})",
                         file=meta_path or path, field="sample_period_ms")
    if not MIN_PERIOD_MS <= period_ms <= MAX_PERIOD_MS:
        raise InputError(f"value {period!r} is not a dmon delay: dcgmi dmon -d takes "
                         f"{MIN_PERIOD_MS:g} to {MAX_PERIOD_MS:g} ms", file=meta_path or path,
                         field="sample_period_ms")
    start = meta_in.pop("start_time", None)
    tags, rows = _parse(path)
    # Without a start_time the samples still need an anchor on the epoch for the importers'
    # date checks; it is internal only: the run's start_time is null (set below).
    start_ms = checks.TIME_RANGE_MS[0]
    if start is not None:
        from ..run import coerce_value

        stamp = coerce_value("start_time", start, "timestamp[ms]", file=meta_path)
        start_ms = int(stamp.timestamp() * 1000)
    devices = []
    for gpu, samples in sorted(rows.items()):
        arr = np.array([v for _, v in samples], dtype=np.float64)
        k = np.arange(len(samples), dtype=np.int64)
        signals: dict[str, np.ndarray] = {}
        for j, tag in enumerate(tags):
            col = arr[:, j]
            if not np.isfinite(col).any():
                continue
            if tag == "TOTEC":
                col = col - col[np.isfinite(col)][0]
            signals[FIELDS[tag][0]] = col
        devices.append(DeviceData(gpu_index=gpu,
                                  ts_ms=start_ms + np.round(k * period_ms).astype(np.int64),
                                  lines=np.array([ln for ln, _ in samples], dtype=np.int64),
                                  signals=signals))
    meta: dict[str, Any] = {**base_meta(FORMAT, workload), **meta_in}
    meta.setdefault("run_id", f"import-{FORMAT}-{file_sha256(path)[:12]}")
    meta["power_field"] = "power_usage"
    meta["sample_period_ms"] = period_ms
    flags = finish_meta(devices, meta, platform=platform, num_gpus=num_gpus, file=path)
    run = assemble_run(devices, meta, file=path, flags=flags, fields=_TAG_OF)
    if start is None:
        run.meta["start_time"] = None
    else:
        run.meta["start_time"] = dt.datetime.fromtimestamp(start_ms / 1000, dt.timezone.utc)
    return run


__all__ = ["FIELDS", "FORMAT", "import_dcgm"]
