"""Load profiles for ``mitigate``: a plain ``t_s,power_w`` CSV or ``facility --out``'s Parquet.

A profile is **piecewise constant**: sample k holds ``power_w[k]`` for ``dt_s[k]`` seconds from
``start_s[k]``. That is exact for interval means (``facility``'s profiles, 1 s or 15 min meter
data) and is sample-and-hold for instantaneous readings (a CSV of instants: each value holds until
the next instant; the last one for the median interval). Sample-and-hold never averages a spike
away, unlike linear interpolation between unaligned samples.

Bounds (checked before anything large is allocated): the input must be a regular file (no FIFO,
no device), a CSV of at most :data:`MAX_CSV_BYTES` and :data:`MAX_SAMPLES` rows, read as a stream.
"""

from __future__ import annotations

import csv
import json
import math
import os
import stat
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, UsageError

MAX_SAMPLES = 10_000_000
"""Most samples a profile may hold (11.6 days at 0.1 s, 116 days at 1 s): about 0.5 GB of work
arrays. Resample a longer profile to a coarser resolution first."""
MAX_CSV_BYTES = 1 << 30
"""Largest CSV read (1 GiB): far above MAX_SAMPLES rows of two numbers."""
MAX_POWER_W = 1e13
"""Largest power a profile may hold (10 TW, far above any site): larger is a unit mistake."""
MAX_TIME_S = 1e10
"""Largest |t_s| (about 317 years)."""
MIN_STEP_S = 1e-6
"""Shortest time step (1 µs, far below any power sensor's interval): a shorter one, such as a
subnormal 5e-324 s, would make every ramp P/Δt infinite."""
REGULAR_TOLERANCE = 0.01
"""A time base is *regular* when every interval is within 1 % of the median interval."""
FACILITY_META_KEY = b"llm_powertrace_facility"
FACILITY_COLUMNS = ("facility", "it", "gpu")
CSV_HEADER = ("t_s", "power_w")
ONE_S_AVERAGE_MARKERS = ("power_is_1s_average", "1 s average", "1 s-averag", "1-s average")
"""Words by which a ``facility`` summary says that a source's sensor reports 1 s averages."""


@dataclass(frozen=True)
class Profile:
    """A piecewise-constant load profile (see the module docstring).

    Attributes:
        start_s: start of each sample's interval, s, strictly increasing.
        dt_s: how long each sample holds, s (> 0).
        power_w: the load, W (finite, ≥ 0).
        kind: ``"csv"`` or ``"facility"``.
        file: the input file's name (never its path).
        column: which power it is (``power_w`` of a CSV; ``facility``/``it``/``gpu`` of a site).
        sensor_average_s: averaging window of the sensor behind the profile, when known (1.0
            for GPUs whose ``power.draw`` is a 1 s average): band power above 1/(2·window) is
            filtered by the sensor, not absent.
        measured: False for composed profiles (``facility``): they are models, not measurements.
        notes: what was assumed while reading.
    """

    start_s: np.ndarray
    dt_s: np.ndarray
    power_w: np.ndarray
    kind: str
    file: str
    column: str
    sensor_average_s: float | None = None
    measured: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)
    cpu_proxy: bool = False
    """True when composed from ``cpu_proxy`` runs: modelled CPU activity, NOT GPU data."""
    nominal_resolution_s: float | None = None
    """The resolution the profile was made at (a facility profile's, or a resampling's), when
    its last interval may be partial; None: the median interval."""

    @property
    def resolution_s(self) -> float:
        """The resolution everything is computed at, s.

        The nominal one, else the median interval (to 12 significant digits: time stamps in
        text carry rounding noise).
        """
        if self.nominal_resolution_s is not None:
            return self.nominal_resolution_s
        return float(f"{float(np.median(self.dt_s)):.12g}")

    @property
    def regular(self) -> bool:
        """True when every interval is within :data:`REGULAR_TOLERANCE` of the resolution.

        The last, possibly partial, interval of a ``facility`` profile is excepted.
        """
        body = self.dt_s[:-1] if len(self.dt_s) > 1 else self.dt_s
        res = self.resolution_s
        return bool(np.all(np.abs(body - res) <= REGULAR_TOLERANCE * res))

    @property
    def duration_s(self) -> float:
        return float(self.dt_s.sum())

    @property
    def energy_j(self) -> float:
        """E = Σ_k P_k · Δt_k."""
        return float(np.dot(self.power_w, self.dt_s))


def _regular_file(path: Path, option: str) -> os.stat_result:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError("no such file", file=path.name, field=option) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=path.name, field=option) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file (a FIFO, device or folder cannot be a profile)",
                         file=path.name, field=option)
    return st


def _number(text: str, *, file: str, line: int, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{text.strip()[:40]!r} is not a number", file=file, line=line,
                         field=name) from None
    if not math.isfinite(value):
        raise InputError(f"{text.strip()[:40]!r} is not finite", file=file, line=line,
                         field=name)
    return value


def read_csv(path: str | Path, *, sensor_average_s: float | None = None) -> Profile:
    """Read a ``t_s,power_w`` CSV (header required; any regular or irregular time base).

    Raises:
        InputError: naming the file, the line and the field, for a missing or different header,
            a row that is not two numbers, NaN/inf, negative power, time that does not
            increase, fewer than two rows, or more than :data:`MAX_SAMPLES`.
    """
    path = Path(path)
    name = path.name
    st = _regular_file(path, "PROFILE")
    if st.st_size > MAX_CSV_BYTES:
        raise InputError(f"{st.st_size} bytes is more than the {MAX_CSV_BYTES} a profile may "
                         "have; resample it to a coarser resolution first", file=name)
    t = array("d")
    p = array("d")
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise InputError("empty file: expected the header 't_s,power_w'", file=name,
                                 line=1)
            if tuple(h.strip() for h in header) != CSV_HEADER:
                raise InputError(f"header {','.join(header)[:80]!r} is not 't_s,power_w'",
                                 file=name, line=1)
            last = -math.inf
            for row in reader:
                line = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != 2:
                    raise InputError(f"expected 2 fields, got {len(row)}", file=name, line=line)
                ts = _number(row[0], file=name, line=line, name="t_s")
                pw = _number(row[1], file=name, line=line, name="power_w")
                if pw < 0:
                    raise InputError(f"negative power {pw:g} W", file=name, line=line,
                                     field="power_w")
                if pw > MAX_POWER_W:
                    raise InputError(f"{pw:g} W is more than {MAX_POWER_W:g} W (a unit "
                                     "mistake?)", file=name, line=line, field="power_w")
                if abs(ts) > MAX_TIME_S:
                    raise InputError(f"{ts:g} s is beyond ±{MAX_TIME_S:g} s", file=name,
                                     line=line, field="t_s")
                if ts <= last:
                    raise InputError(f"time {ts:g} s does not increase (previous {last:g} s)",
                                     file=name, line=line, field="t_s")
                if t and ts - last < MIN_STEP_S:
                    raise InputError(f"time step {ts - last:.3g} s is shorter than "
                                     f"{MIN_STEP_S:g} s", file=name, line=line, field="t_s")
                if len(t) >= MAX_SAMPLES:
                    raise InputError(f"more than {MAX_SAMPLES} samples; resample the profile to "
                                     "a coarser resolution first", file=name, line=line)
                last = ts
                t.append(ts)
                p.append(pw)
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=name) from None
    except csv.Error as exc:
        raise InputError(f"not CSV: {exc}", file=name) from None
    if len(t) < 2:
        raise InputError(f"{len(t)} sample(s): a profile needs at least two", file=name,
                         field="t_s")
    start = np.frombuffer(t, dtype=np.float64).copy()
    diffs = np.diff(start)
    dt = np.append(diffs, float(np.median(diffs)))
    notes = ("each CSV value holds until the next time stamp (sample-and-hold); the last one "
             f"for the median interval ({float(np.median(diffs)):g} s)",)
    return Profile(start_s=start, dt_s=dt, power_w=np.frombuffer(p, dtype=np.float64).copy(),
                   kind="csv", file=name, column="power_w", sensor_average_s=sensor_average_s,
                   notes=notes)


def _mentions_1s_average(summary: dict[str, Any]) -> bool:
    texts: list[str] = []
    for key in ("limits", "notes"):
        value = summary.get(key)
        if isinstance(value, list):
            texts.extend(str(v) for v in value)
    if any(m in t for t in texts for m in ONE_S_AVERAGE_MARKERS):
        return True
    sources = summary.get("sources")
    return isinstance(sources, list) and any(
        isinstance(s, dict) and bool(s.get("power_is_1s_average")) for s in sources)


def _checked_columns(schema: Any, column: str, name: str) -> list[str]:
    """The columns to read, each present and numeric, or one line naming the first that is not."""
    import pyarrow as pa

    wanted = ["resolution_s", "start_s", "length_s", f"{column}_kw"]
    for col in wanted:
        index = schema.get_field_index(col)
        if index < 0:
            raise InputError("the column is missing", file=name, field=col)
        kind = schema.field(index).type
        if not (pa.types.is_floating(kind) or pa.types.is_integer(kind)):
            raise InputError(f"the column holds {kind}, not numbers", file=name, field=col)
    return wanted


def read_facility(path: str | Path, *, resolution_s: float | None = None,
                  column: str = "facility", sensor_average_s: float | None = None) -> Profile:
    """Read the profile Parquet that ``llm-powertrace facility --out`` writes.

    Args:
        path: the Parquet file.
        resolution_s: which of its profiles (0.1, 1, 60, 900 s); default the finest.
        column: ``facility`` (what the grid sees, default), ``it`` or ``gpu``.
        sensor_average_s: the sources' sensor window; default 1 s when the file's summary says
            its sources report 1 s averages (``power_is_1s_average``), else unknown.
    """
    import pyarrow.parquet as pq

    path = Path(path)
    name = path.name
    _regular_file(path, "PROFILE")
    if column not in FACILITY_COLUMNS:
        raise UsageError(f"{column!r} is not one of {', '.join(FACILITY_COLUMNS)}",
                         field="--column")
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
        raise InputError(f"not a Parquet file ({type(exc).__name__})", file=name) from None
    meta = pf.schema_arrow.metadata or {}
    if FACILITY_META_KEY not in meta:
        raise InputError("not a profile written by 'llm-powertrace facility --out' (no "
                         f"{FACILITY_META_KEY.decode()} metadata)", file=name)
    if pf.metadata.num_rows > 4 * MAX_SAMPLES:
        raise InputError(f"{pf.metadata.num_rows} rows is more than a profile may have",
                         file=name)
    try:
        summary = json.loads(meta[FACILITY_META_KEY])
    except (ValueError, RecursionError):
        raise InputError("its facility summary is not JSON", file=name,
                         field=FACILITY_META_KEY.decode()) from None
    if not isinstance(summary, dict):
        raise InputError(f"its facility summary is a JSON {type(summary).__name__}, not an "
                         "object", file=name, field=FACILITY_META_KEY.decode())
    table = pf.read(columns=[c for c in _checked_columns(pf.schema_arrow, column, name)])
    res_all = table.column("resolution_s").to_numpy(zero_copy_only=False).astype(np.float64)
    if not np.all(np.isfinite(res_all)) or np.any(res_all <= 0):
        raise InputError("holds a resolution that is not a positive finite number", file=name,
                         field="resolution_s")
    available = sorted({float(r) for r in np.unique(res_all)})
    if not available:
        raise InputError("the profile is empty", file=name)
    res = available[0] if resolution_s is None else resolution_s
    match = [r for r in available if math.isclose(r, res, rel_tol=1e-9)]
    if not match:
        raise UsageError(f"{res:g} s is not one of the file's resolutions "
                         f"({', '.join(f'{r:g}' for r in available)} s)", field="--resolution-s")
    keep = np.isclose(res_all, match[0], rtol=1e-9)
    start = table.column("start_s").to_numpy(zero_copy_only=False)[keep].astype(np.float64)
    dt = table.column("length_s").to_numpy(zero_copy_only=False)[keep].astype(np.float64)
    power = table.column(f"{column}_kw").to_numpy(zero_copy_only=False)[keep].astype(
        np.float64) * 1e3
    order = np.argsort(start, kind="stable")
    start, dt, power = start[order], dt[order], power[order]
    for values, field_name in ((start, "start_s"), (dt, "length_s"), (power, f"{column}_kw")):
        if not np.all(np.isfinite(values)):
            raise InputError("holds NaN or inf", file=name, field=field_name)
    if len(power) < 2:
        raise InputError(f"{len(power)} sample(s) at {match[0]:g} s: a profile needs two",
                         file=name)
    if np.any(dt <= 0) or np.any(np.diff(start) <= 0):
        raise InputError("intervals do not increase", file=name, field="start_s")
    if np.any(dt < MIN_STEP_S) or np.any(np.diff(start) < MIN_STEP_S):
        raise InputError(f"an interval is shorter than {MIN_STEP_S:g} s", file=name,
                         field="length_s")
    if np.any(np.abs(start) > MAX_TIME_S) or float(dt.sum()) > MAX_TIME_S:
        raise InputError(f"times beyond {MAX_TIME_S:g} s", file=name, field="start_s")
    if np.any(power < 0) or np.any(power > MAX_POWER_W):
        raise InputError(f"power outside [0, {MAX_POWER_W:g}] W", file=name,
                         field=f"{column}_kw")
    if sensor_average_s is None and _mentions_1s_average(summary):
        sensor_average_s = 1.0
    sources = summary.get("sources") if isinstance(summary, dict) else None
    cpu_proxy = isinstance(sources, list) and any(
        isinstance(src, dict) and bool(src.get("cpu_proxy")) for src in sources)
    notes = [f"the site's {column} power at {match[0]:g} s (interval means) from "
             "'facility --out': composed from measured runs, not measured itself"]
    return Profile(start_s=start, dt_s=dt, power_w=power, kind="facility", file=name,
                   column=column, sensor_average_s=sensor_average_s, measured=False,
                   notes=tuple(notes), nominal_resolution_s=match[0], cpu_proxy=cpu_proxy)


def read_profile(path: str | Path, *, resolution_s: float | None = None,
                 column: str | None = None, sensor_average_s: float | None = None) -> Profile:
    """A profile from a CSV or a ``facility`` Parquet (by content: Parquet files start 'PAR1')."""
    path = Path(path)
    _regular_file(path, "PROFILE")
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic == b"PAR1":
        return resample(read_facility(path, resolution_s=resolution_s,
                                      column=column or "facility",
                                      sensor_average_s=sensor_average_s), None)
    if column not in (None, "power_w"):
        raise UsageError("--column applies to 'facility --out' profiles only", field="--column")
    return resample(read_csv(path, sensor_average_s=sensor_average_s), resolution_s)


def skip(profile: Profile, skip_s: float) -> Profile:
    """The profile without its first ``skip_s`` seconds, e.g. to ask where a size depends on.

    Whole samples: from the first sample that starts at or after start + skip_s.

    Raises:
        UsageError: a negative skip, or one that leaves fewer than two samples.
    """
    if skip_s == 0:
        return profile
    if not (math.isfinite(skip_s) and skip_s > 0):
        raise UsageError(f"{skip_s!r} is not a duration ≥ 0 s", field="--skip")
    at = int(np.searchsorted(profile.start_s, profile.start_s[0] + skip_s - 1e-9))
    if len(profile.power_w) - at < 2:
        raise UsageError(f"{skip_s:g} s leaves fewer than two samples of the "
                         f"{profile.duration_s:g} s profile", field="--skip")
    return Profile(start_s=profile.start_s[at:], dt_s=profile.dt_s[at:],
                   power_w=profile.power_w[at:], kind=profile.kind, file=profile.file,
                   column=profile.column, sensor_average_s=profile.sensor_average_s,
                   measured=profile.measured,
                   notes=profile.notes + (f"the first {skip_s:g} s left out (--skip)",),
                   nominal_resolution_s=profile.nominal_resolution_s,
                   cpu_proxy=profile.cpu_proxy)


def resample(profile: Profile, resolution_s: float | None) -> Profile:
    """Interval means of ``profile`` over [k·R, (k+1)·R) from its start.

    Exact: the energy E(t) = ∫ P is piecewise linear, so P̄_k = (E((k+1)R) − E(kR)) / R; the last
    interval may be partial. ``None`` or the profile's own resolution returns it unchanged.

    Raises:
        UsageError: R finer than the profile (samples cannot be invented) or longer than it.
    """
    if resolution_s is None:
        return profile
    res = float(resolution_s)
    own = profile.resolution_s
    if not math.isfinite(res) or res <= 0:
        raise UsageError(f"{resolution_s!r} is not a positive number of seconds",
                         field="--resolution-s")
    if res < own * (1 - 1e-9):
        raise UsageError(f"{res:g} s is finer than the profile's {own:g} s: samples cannot be "
                         "invented", field="--resolution-s")
    if profile.regular and math.isclose(res, own, rel_tol=1e-9):
        return profile
    t0 = float(profile.start_s[0])
    end = t0 + profile.duration_s
    intervals = (end - t0) / res
    if intervals > MAX_SAMPLES:
        raise UsageError(f"{res:g} s makes {intervals:.3g} intervals of the {end - t0:g} s span, "
                         f"more than {MAX_SAMPLES}", field="--resolution-s")
    n = int(math.ceil(intervals - 1e-9))
    if n < 2:
        raise UsageError(f"{res:g} s leaves fewer than two intervals in {end - t0:g} s",
                         field="--resolution-s")
    # Cumulative energy at each sample start, then at the grid edges (piecewise linear).
    knots_t = np.append(profile.start_s, profile.start_s[-1] + profile.dt_s[-1])
    knots_e = np.concatenate(([0.0], np.cumsum(profile.power_w * profile.dt_s)))
    # Gaps between a sample's end and the next start hold nothing: the CSV reader makes none.
    edges = np.minimum(t0 + np.arange(n + 1) * res, end)
    energy = np.interp(edges, knots_t, knots_e)
    dt = np.diff(edges)
    power = np.diff(energy) / dt
    notes = profile.notes + (f"resampled from {own:g} s to {res:g} s interval means",)
    return Profile(start_s=edges[:-1], dt_s=dt, power_w=power, kind=profile.kind,
                   file=profile.file, column=profile.column,
                   sensor_average_s=profile.sensor_average_s, measured=profile.measured,
                   notes=notes, nominal_resolution_s=res, cpu_proxy=profile.cpu_proxy)
