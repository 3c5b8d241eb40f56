"""Power-grid-facing per-run metrics: energy, levels, ramps, oscillations, synchrony, states.

How the node total is formed (alignment)
    Every device keeps its own timestamps. The node total is formed by linear interpolation of
    every device onto one common grid (default 0.1 s, :data:`GRID_MS`) over the span where all
    devices are present (from the latest first sample to the earliest last sample) and summing
    — never by grouping equal timestamps, so two samples of one device can never be added into
    one bucket. A *gap* is an interval between two valid readings of a device longer than
    :data:`GAP_PERIODS` sample periods; grid points strictly inside a gap of any device are
    invalid, so the total splits into gap-free *segments*. Shape metrics (percentiles, peaks,
    ramps, spectra, coincidence, states) use gap-free segments only. Energy integrates across
    gaps (the device drew power while the logger stalled); ``gap_s`` says how much of the run
    rests on that bridging.

Conventions
    P(t) is the node total on the grid (W), Δ = 0.1 s the grid step, C = Σ_d limit_d the sum of
    the devices' power limits (N × limit for identical devices), D the run's duration.
    Percentiles are linear-interpolated (``numpy.percentile``). A metric that cannot be computed
    is ``None`` and ``metric_notes`` gets ``"<metric>: <reason>"`` — never a crash, never a
    made-up number.

The formulas are in the docstrings of the ``_group`` functions below, one ``- ``name`` =``
line per metric; :func:`metric_formulas` returns them (the dataset card prints the same text).
Everything is vectorised (interpolation, lagged differences, cumulative sums, filters, FFTs);
there is no per-sample Python loop.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .run import DeviceSeries, Event, Run
from .schema import GAP_PERIODS

GRID_MS = 100
"""Step of the common grid of the node total (ms)."""
RAMP_WINDOWS: tuple[tuple[str, float], ...] = (("100ms", 0.1), ("1s", 1.0), ("5s", 5.0),
                                               ("10s", 10.0))
"""Ramp horizons δ (name as written in the metric, seconds)."""
SPECTRUM_BAND_HZ = (0.05, 5.0)
"""Band of the dominant-frequency search (5 Hz is the Nyquist frequency of the 0.1 s grid)."""
BANDS_HZ = {"low": (0.1, 1.0), "mid": (1.0, 2.5), "high": (2.5, 5.0)}
"""Oscillation bands: [lo, hi) Hz, the last one closed at the Nyquist frequency."""
WELCH_SEGMENT_S = 102.4
"""Length of one Welch window (1024 points at 0.1 s, resolution ≈ 0.01 Hz)."""
MIN_CYCLES = 5
"""Full cycles a dominant oscillation must complete inside one Welch window."""
BACKGROUND_BINS = 21
"""Width (bins, ≈ 0.2 Hz) of the running median that estimates the spectrum's background."""
PEAK_FALSE_ALARM = 0.01
"""Chance that noise alone yields a peak anywhere in the band (Bonferroni over its bins)."""
MIN_PEAK_RATIO = 4.0
"""A dominant peak holds at least this many times its local background (6 dB)."""
MIN_SPECTRUM_S = 20.0
"""Shortest gap-free stretch a spectrum is computed on (resolves 0.05 Hz)."""
SYNC_HIGHPASS_HZ = 0.05
"""Corner of the 2nd-order Butterworth high-pass applied before the synchrony correlation."""
IDLE_FRACTION_OF_LIMIT = 0.2
NEAR_LIMIT_FRACTION = 0.9
STEP_FRACTION_OF_LIMIT = 0.1
STEP_WINDOW_S = 1.0
CHECKPOINT_BASELINE_S = 10.0
PROJECTED_DEVICES = 1000
_CHUNK = 1 << 16

PER_DEVICE_NAMES = ("gpu_energy_j", "gpu_energy_counter_j", "gpu_mean_power_w",
                    "gpu_peak_power_w")


def _ramp_names() -> list[str]:
    names = []
    for unit in ("w_per_s", "pct_per_s"):
        for tag, _ in RAMP_WINDOWS:
            names += [f"ramp_up_max_{tag}_{unit}", f"ramp_down_max_{tag}_{unit}",
                      f"ramp_abs_p95_{tag}_{unit}", f"ramp_abs_p99_{tag}_{unit}"]
    return names


ENERGY_NAMES = ("energy_j", "energy_counter_j", "energy_mismatch_pct", "energy_per_token_j",
                "steady_energy_j", "steady_energy_per_token_j", "idle_power_w")
LEVEL_NAMES = ("duration_s", "mean_power_w", "p5_power_w", "p50_power_w", "p95_power_w",
               "p99_power_w", "peak_power_w", "peak_power_1s_w", "peak_power_60s_w", "par",
               "par_1s", "par_60s", "load_factor", "limit_utilisation")
RAMP_NAMES = tuple(_ramp_names())
SEED_RAMP_NAMES = ("ramp_up_p95_1s_w_per_s", "ramp_up_p99_1s_w_per_s",
                   "ramp_down_p99_1s_w_per_s", "ramp_event_frequency_1s",
                   "ramp_up_p95_5s_w_per_s", "ramp_up_p99_5s_w_per_s", "ramp_down_p99_5s_w_per_s",
                   "ramp_up_p95_10s_w_per_s", "ramp_up_p99_10s_w_per_s",
                   "ramp_down_p99_10s_w_per_s")
"""The seed-compatible metrics (the seed authors' definitions, same names as their catalog)."""
OSCILLATION_NAMES = ("swing_w", "dynamic_range_1s_w", "dynamic_range_10s_w", "dominant_freq_hz",
                     "dominant_amplitude_w", "band_rms_low_w", "band_rms_mid_w",
                     "band_rms_high_w", "band_fraction_low", "band_fraction_mid",
                     "band_fraction_high", "step_freq_hz")
ACROSS_NAMES = ("coincidence_factor", "diversity_factor", "synchrony_index",
                "projected_swing_1000_w")
STATE_NAMES = ("idle_fraction", "near_limit_fraction", "step_count", "checkpoint_dip_pct",
               "checkpoint_dip_s")
GAP_NAMES = ("gap_count", "gap_s")
SAMPLING_NAMES = ("sampling_interval_observed_median_s", "sampling_interval_observed_p95_s")
METRIC_NAMES: tuple[str, ...] = (ENERGY_NAMES + LEVEL_NAMES + RAMP_NAMES + SEED_RAMP_NAMES
                                 + OSCILLATION_NAMES + ACROSS_NAMES + STATE_NAMES + GAP_NAMES
                                 + SAMPLING_NAMES)
"""Every node-total metric, in column order (the runs configs declare the same names)."""
INT_METRICS = frozenset({"gap_count", "step_count"})


# ---------------------------------------------------------------------------------------------
# Preparation: valid samples per device, the common grid, gap-free segments
# ---------------------------------------------------------------------------------------------

@dataclass
class _Dev:
    index: int
    t_ms: np.ndarray  # int64, strictly increasing, valid readings only
    p: np.ndarray  # float64 W
    period_ms: float
    gap_idx: np.ndarray  # i such that t[i] -> t[i+1] is a gap
    energy_j: float | None = None  # trapezoid on the device's own timestamps


@dataclass
class Aligned:
    """The node total on the common grid (see the module docstring).

    Attributes:
        grid_ms: int64 grid times (ms on the run clock).
        devices: one float64 array per device: its power interpolated onto the grid.
        total: float64 node total, NaN where a device is inside a gap.
        valid: bool mask of gap-free grid points.
        step_s: grid step in seconds.
    """

    grid_ms: np.ndarray
    devices: list[np.ndarray]
    total: np.ndarray
    valid: np.ndarray
    step_s: float
    _segid: np.ndarray | None = field(default=None, repr=False)
    _pairs: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _diffs: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _values: np.ndarray | None = field(default=None, repr=False)
    _segs: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def values(self) -> np.ndarray:
        """The node total at the gap-free points, in no particular order.

        Cached and shared: callers may reorder it in place, e.g.
        ``np.percentile(..., overwrite_input=True)``.
        """
        if self._values is None:
            self._values = self.total.copy() if self.valid.all() else self.total[self.valid]
        return self._values

    @property
    def segid(self) -> np.ndarray:
        """Segment id per grid point: the number of invalid points up to and including it."""
        if self._segid is None:
            self._segid = np.cumsum(~self.valid)
        return self._segid

    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts, stops) index arrays of the gap-free segments (cached, read-only)."""
        if self._segs is None:
            edges = np.diff(np.concatenate(([0], self.valid.astype(np.int8), [0])))
            starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
            starts.flags.writeable = stops.flags.writeable = False
            self._segs = (starts, stops)
        return self._segs

    def lag_pairs(self, k: int) -> np.ndarray:
        """Bool mask over j in [0, n-k): points j and j+k lie in one gap-free segment (cached)."""
        if k not in self._pairs:
            n = len(self.total)
            if k >= n:
                self._pairs[k] = np.zeros(0, dtype=bool)
            elif self.valid.all():
                self._pairs[k] = np.ones(n - k, dtype=bool)
            else:
                seg = self.segid
                self._pairs[k] = self.valid[:n - k] & (seg[k:] == seg[:n - k])
        return self._pairs[k]

    def lag_diff(self, k: int) -> np.ndarray:
        """P(t + kΔ) − P(t) for every pair inside one gap-free segment (cached: do not modify)."""
        if k not in self._diffs:
            ok = self.lag_pairs(k)
            if not ok.size:
                self._diffs[k] = np.zeros(0)
            else:
                d = self.total[k:] - self.total[:-k]
                self._diffs[k] = d if ok.all() else d[ok]
        return self._diffs[k]


def _prepare_device(run: Run, dev: DeviceSeries, index: int,
                    notes: list[str]) -> _Dev | None:
    p = dev.power_w
    t = dev.t_ms
    if len(p) != len(t):
        notes.append(f"gpu {index}: power_w and t_ms differ in length; device ignored")
        return None
    ok = np.isfinite(p)
    if not ok.all():
        t, p = t[ok], p[ok]
    dt = np.diff(t)
    if len(t) > 1 and dt.min() <= 0:
        order = np.argsort(t, kind="stable")
        t, p = t[order], p[order]
        keep = np.concatenate(([True], t[1:] > t[:-1]))
        t, p = t[keep], p[keep]
        dt = np.diff(t)
        notes.append(f"gpu {index}: timestamps not increasing; sorted, duplicates dropped")
    if len(t) < 2:
        return _Dev(index, t, p, float("nan"), np.zeros(0, dtype=np.int64))
    stride = max(1, len(dt) // 200_000)  # the period needs no exact median of millions
    median = float(np.median(dt[::stride]))
    declared = run.meta.get("sample_period_ms")
    period = max(float(declared), median) if declared else median
    limit = GAP_PERIODS * period
    gap_idx = np.flatnonzero(dt > limit) if dt.max() > limit else np.zeros(0, dtype=np.int64)
    energy = 0.5 * float(np.dot(dt, p[:-1] + p[1:])) / 1000.0  # Σ (P_i + P_i+1)/2 · Δt_i
    return _Dev(index, t, p, period, gap_idx, energy)


def align(devs: list[_Dev], grid_ms: int = GRID_MS) -> Aligned | None:
    """Interpolate devices onto the common grid over the span where all are present.

    Returns ``None`` when the devices share no span of at least one grid step.
    """
    start = max(int(d.t_ms[0]) for d in devs)
    end = min(int(d.t_ms[-1]) for d in devs)
    if end - start < grid_ms:
        return None
    grid = np.arange(start, end + 1, grid_ms, dtype=np.int64)
    n = len(grid)
    rows = []
    total = np.zeros(n)
    los, his = [], []
    for d in devs:
        row = np.interp(grid, d.t_ms, d.p)
        total += row
        rows.append(row)
        if d.gap_idx.size:  # grid points strictly inside a gap: [lo, hi)
            los.append(np.searchsorted(grid, d.t_ms[d.gap_idx], side="right"))
            his.append(np.searchsorted(grid, d.t_ms[d.gap_idx + 1], side="left"))
    if los:
        mark = (np.bincount(np.concatenate(los), minlength=n + 1)[:n + 1]
                - np.bincount(np.concatenate(his), minlength=n + 1)[:n + 1])
        valid = np.cumsum(mark)[:n] == 0
        total[~valid] = np.nan
    else:
        valid = np.ones(n, dtype=bool)
    return Aligned(grid, rows, total, valid, grid_ms / 1000.0)


def node_total(run: Run, grid_ms: int = GRID_MS) -> Aligned | None:
    """The run's node total on the common grid, or ``None`` when it cannot be formed."""
    devs = [_prepare_device(run, d, i, []) for i, d in enumerate(run.devices)]
    if not devs or any(d is None or len(d.t_ms) < 2 for d in devs):
        return None
    return align([d for d in devs if d is not None], grid_ms)


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

class _Out:
    """Collects metrics and the reasons for nulls."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.notes: list[str] = []

    def set(self, name: str, value: Any) -> None:
        if value is not None and not isinstance(value, (int, list)):
            value = float(value)
            if not math.isfinite(value):
                self.null(name, "not finite")
                return
        self.values[name] = value

    def null(self, names: str | tuple[str, ...] | list[str], reason: str) -> None:
        for name in (names,) if isinstance(names, str) else names:
            if name in self.values:
                continue
            self.values[name] = None
            self.notes.append(f"{name}: {reason}")


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _window_means(cs: np.ndarray, starts: np.ndarray, stops: np.ndarray, w: int) -> np.ndarray:
    """Means of non-overlapping w-point windows anchored at each segment's start.

    ``cs`` is the cumulative sum of the total with a leading 0 (invalid points as 0).
    """
    counts = (stops - starts) // w
    if counts.sum() == 0:
        return np.zeros(0)
    first = np.repeat(starts, counts)
    offset = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    wstart = first + w * offset
    return (cs[wstart + w] - cs[wstart]) / w


def _sliding_range(al: Aligned, k: int) -> float | None:
    """Largest max − min over windows of k+1 grid points inside one gap-free segment."""
    from scipy.ndimage import maximum_filter1d, minimum_filter1d

    ok = al.lag_pairs(k)
    if not ok.any():
        return None
    x = al.total if al.valid.all() else np.where(al.valid, al.total, 0.0)
    size = k + 1
    half = size // 2
    n = len(x)
    # the centred filter's output at i covers [i - half, i - half + k]: window start j is i = j + half
    rng = maximum_filter1d(x, size=size, mode="nearest")[half:half + n - k]
    rng -= minimum_filter1d(x, size=size, mode="nearest")[half:half + n - k]
    return float(rng.max() if ok.all() else rng[ok].max())


def _capacity_w(run: Run) -> float | None:
    """C = Σ_d limit_d: each device's enforced limit, else its default when no cap was set."""
    capped = run.meta.get("power_limit_setting_w") is not None
    limits = []
    for d in run.devices:
        lim = d.power_limit_w
        if lim is None and not capped:
            lim = d.default_power_limit_w
        if lim is None:
            lim = run.meta.get("power_limit_w")
        if lim is None or not lim > 0:
            return None
        limits.append(float(lim))
    return float(sum(limits)) if limits else None


class _EventIndex:
    """A run's events grouped by kind (one pass over the events)."""

    def __init__(self, events: list[Event]) -> None:
        self.by_kind: dict[str, list[Event]] = {}
        for e in events:
            self.by_kind.setdefault(e.kind, []).append(e)


def _events(run: Run | _EventIndex, kind: str) -> list[Event]:
    """Events of one kind from one source: run-level if any, else the lowest rank's."""
    index = run if isinstance(run, _EventIndex) else _EventIndex(run.events)
    evs = index.by_kind.get(kind, [])
    if not evs:
        return []
    ranks = {e.rank for e in evs}
    pick = None if None in ranks else min(r for r in ranks if r is not None)
    seen: dict[int, Event] = {}
    for e in evs:
        if e.rank == pick:
            seen.setdefault(int(e.t_ms), e)
    return [seen[t] for t in sorted(seen)]


def event_windows(run: Run | _EventIndex, begin: str, end: str) -> list[tuple[int, int]]:
    """(begin, end) pairs of events: each begin with the first end after it."""
    begins = np.array([e.t_ms for e in _events(run, begin)], dtype=np.int64)
    ends = np.array([e.t_ms for e in _events(run, end)], dtype=np.int64)
    nxt = np.searchsorted(ends, begins, side="right")
    has = nxt < len(ends)
    return [(int(b), int(ends[i])) for b, i in zip(begins[has], nxt[has], strict=True)]


def _device_integral(d: _Dev, t0_ms: float, t1_ms: float) -> float:
    """Trapezoid integral (J) of one device between two times, clipped to its span."""
    a, b = max(t0_ms, float(d.t_ms[0])), min(t1_ms, float(d.t_ms[-1]))
    if b <= a:
        return 0.0
    inner = d.t_ms[(d.t_ms > a) & (d.t_ms < b)].astype(np.float64)
    t = np.concatenate(([a], inner, [b]))
    return float(np.trapezoid(np.interp(t, d.t_ms, d.p), t / 1000.0))


def _tokens(run: Run) -> float | None:
    key = "tokens" if run.workload == "finetune" else "tokens_out"
    tokens = run.meta.get(key)
    if tokens is None and run.workload == "inference" and run.requests:
        outs = [r.get("output_tokens") for r in run.requests]
        if outs and all(o is not None for o in outs):
            tokens = float(np.sum(np.asarray(outs, dtype=np.float64)))
    return float(tokens) if tokens else None


def _steady_tokens(run: Run, t0: int, t1: int) -> float | None:
    if not run.requests:
        return None
    rows = [(r.get("first_token_ms"), r.get("finish_ms"), r.get("output_tokens"))
            for r in run.requests]
    rows = [r for r in rows if None not in r]
    if not rows:
        return None
    first, finish, k = (np.array(c, dtype=np.float64) for c in zip(*rows, strict=True))
    in_first = ((first >= t0) & (first <= t1)).astype(np.float64)
    span = finish - first
    overlap = np.clip(np.minimum(finish, t1) - np.maximum(first, t0), 0.0, None)
    rest = np.where(span > 0, overlap / np.where(span > 0, span, 1.0),
                    ((finish >= t0) & (finish <= t1)).astype(np.float64))
    return float(np.sum(np.minimum(k, 1.0) * in_first + np.maximum(k - 1.0, 0.0) * rest))


# ---------------------------------------------------------------------------------------------
# Metric groups (each docstring states the formula of each metric it sets)
# ---------------------------------------------------------------------------------------------

def _group_energy(run: Run, devs: list[_Dev | None], out: _Out, ev: _EventIndex) -> None:
    """Energy.

    - ``gpu_energy_j`` = per device d: Σ_i (P_d,i + P_d,i+1) / 2 · (t_d,i+1 − t_d,i) on the
      device's own timestamps, missing readings dropped, bridging gaps (trapezoid).
    - ``gpu_energy_counter_j`` = per device: Σ_i max(0, E_d,i+1 − E_d,i) / 1000 of the energy
      counter (mJ), null when the device reports no counter.
    - ``gpu_mean_power_w`` = gpu_energy_j / (t_d,last − t_d,first).
    - ``gpu_peak_power_w`` = max_i P_d,i over the device's own readings.
    - ``energy_j`` = Σ_d gpu_energy_j (null when a device has fewer than 2 power readings).
    - ``energy_counter_j`` = Σ_d gpu_energy_counter_j (null when any device lacks a counter).
    - ``energy_mismatch_pct`` = 100 · (energy_j − energy_counter_j) / energy_counter_j.
    - ``energy_per_token_j`` = energy_j / tokens; tokens = training tokens (``tokens``) for
      fine-tuning, generated tokens (``tokens_out``, else Σ output_tokens of the request log) for
      inference — the ML.ENERGY convention.
    - ``steady_energy_j`` = Σ_d ∫ P_d dt between the first ``steady_begin`` event and the next
      ``steady_end`` (trapezoid on each device's own timestamps, ends interpolated).
    - ``steady_energy_per_token_j`` = steady_energy_j / tokens generated in the steady window;
      per request the first token counts at ``first_token_ms`` and the other output_tokens − 1
      are spread uniformly over (first_token_ms, finish_ms].
    - ``idle_power_w`` = Σ_d ∫ P_d dt / (t1 − t0) between the first ``idle_begin`` event and the
      next ``idle_end`` (the idle padding before the workload; trapezoid, ends interpolated).
    """
    energies: list[float | None] = []
    counters: list[float | None] = []
    means: list[float | None] = []
    peaks: list[float | None] = []
    for d, dev in zip(devs, run.devices, strict=True):
        if d is None or len(d.t_ms) < 2:
            energies.append(None)
            means.append(None)
            peaks.append(float(d.p.max()) if d is not None and len(d.p) else None)
        else:
            e = float(d.energy_j)  # type: ignore[arg-type]
            energies.append(e)
            span = (d.t_ms[-1] - d.t_ms[0]) / 1000.0
            means.append(float(e / span) if span > 0 else None)
            peaks.append(float(d.p.max()))
        counters.append(counter_energy_j(dev.t_ms, dev.signals.get("energy_mj")))
    out.set("gpu_energy_j", energies)
    out.set("gpu_energy_counter_j", counters)
    out.set("gpu_mean_power_w", means)
    out.set("gpu_peak_power_w", peaks)

    missing = [i for i, e in enumerate(energies) if e is None]
    energy = None
    if not run.devices:
        out.null(ENERGY_NAMES, "the run has no devices")
        return
    if missing:
        out.null("energy_j", f"gpu {', '.join(map(str, missing))} has fewer than 2 power readings")
    else:
        energy = float(sum(energies))  # type: ignore[arg-type]
        out.set("energy_j", energy)
    if any(c is None for c in counters):
        out.null("energy_counter_j", "no energy counter")
        out.null("energy_mismatch_pct", "no energy counter")
    else:
        counter = float(sum(counters))  # type: ignore[arg-type]
        out.set("energy_counter_j", counter)
        if energy is None:
            out.null("energy_mismatch_pct", "energy_j is null")
        elif counter <= 0:
            out.null("energy_mismatch_pct", "energy counter did not advance")
        else:
            out.set("energy_mismatch_pct", mismatch_pct(energy, counter))
    tokens = _tokens(run)
    if energy is None:
        out.null("energy_per_token_j", "energy_j is null")
    elif tokens is None or tokens <= 0:
        out.null("energy_per_token_j", "no token count")
    else:
        out.set("energy_per_token_j", energy / tokens)

    idle = event_windows(ev, "idle_begin", "idle_end")
    if not idle or idle[0][1] <= idle[0][0]:
        out.null("idle_power_w", "no idle_begin/idle_end events")
    elif missing:
        out.null("idle_power_w", "a device has fewer than 2 power readings")
    else:
        a, b = idle[0]
        out.set("idle_power_w", float(sum(_device_integral(d, a, b) for d in devs
                                          if d is not None)) / ((b - a) / 1000.0))

    windows = event_windows(ev, "steady_begin", "steady_end")
    if not windows:
        out.null(("steady_energy_j", "steady_energy_per_token_j"),
                 "no steady_begin/steady_end events")
        return
    if missing:
        out.null(("steady_energy_j", "steady_energy_per_token_j"),
                 "a device has fewer than 2 power readings")
        return
    t0, t1 = windows[0]
    steady = float(sum(_device_integral(d, t0, t1) for d in devs if d is not None))
    out.set("steady_energy_j", steady)
    st = _steady_tokens(run, t0, t1)
    if st is None or st <= 0:
        out.null("steady_energy_per_token_j", "no request log with tokens in the steady window")
    else:
        out.set("steady_energy_per_token_j", steady / st)


def _group_level(run: Run, devs: list[_Dev | None], al: Aligned | None, cap: float | None,
                 out: _Out) -> None:
    """Level.

    - ``duration_s`` = D = (max_d t_d,last − min_d t_d,first) / 1000 over valid readings.
    - ``mean_power_w`` = P̄ = energy_j / D (time-weighted mean of the node total).
    - ``p5_power_w``, ``p50_power_w``, ``p95_power_w``, ``p99_power_w`` = percentiles of P(t)
      over the gap-free points of the 0.1 s grid.
    - ``peak_power_w`` = max P(t) over the gap-free points of the 0.1 s grid.
    - ``peak_power_1s_w`` = max over non-overlapping 1 s windows (anchored at each gap-free
      segment's start, complete windows only) of the window mean of P.
    - ``peak_power_60s_w`` = max over non-overlapping 60 s windows of the window mean of P
      (as peak_power_1s_w).
    - ``par`` = peak_power_w / P̄ (peak-to-average ratio).
    - ``par_1s`` = peak_power_1s_w / P̄.
    - ``par_60s`` = peak_power_60s_w / P̄.
    - ``load_factor`` = P̄ / peak_power_w.
    - ``limit_utilisation`` = P̄ / C, C = Σ_d power limit_d (N × limit); null when a limit is
      unknown.
    """
    valid = [d for d in devs if d is not None and len(d.t_ms)]
    if len(valid) == len(run.devices) and valid:
        first = min(int(d.t_ms[0]) for d in valid)
        last = max(int(d.t_ms[-1]) for d in valid)
        out.set("duration_s", (last - first) / 1000.0)
    else:
        out.null("duration_s", "a device has no power readings")
    duration = out.values.get("duration_s")
    energy = out.values.get("energy_j")
    mean = None
    if energy is None:
        out.null("mean_power_w", "energy_j is null")
    elif not duration:
        out.null("mean_power_w", "zero duration")
    else:
        mean = energy / duration
        out.set("mean_power_w", mean)
    shape = ("p5_power_w", "p50_power_w", "p95_power_w", "p99_power_w", "peak_power_w",
             "peak_power_1s_w", "peak_power_60s_w", "par", "par_1s", "par_60s", "load_factor")
    if cap is None:
        out.null("limit_utilisation", "power limit unknown")
    elif mean is None:
        out.null("limit_utilisation", "mean_power_w is null")
    else:
        out.set("limit_utilisation", mean / cap)
    if al is None or not al.valid.any():
        out.null(shape, "no gap-free node total (devices share no common span)")
        return
    x = al.values()
    peak = float(x.max())
    p5, p50, p95, p99 = np.percentile(x, [5, 50, 95, 99], overwrite_input=True)
    out.set("p5_power_w", p5)
    out.set("p50_power_w", p50)
    out.set("p95_power_w", p95)
    out.set("p99_power_w", p99)
    out.set("peak_power_w", peak)
    starts, stops = al.segments()
    cs = np.empty(len(al.total) + 1)
    cs[0] = 0.0
    np.cumsum(al.total if al.valid.all() else np.where(al.valid, al.total, 0.0), out=cs[1:])
    for name, seconds in (("peak_power_1s_w", 1.0), ("peak_power_60s_w", 60.0)):
        w = max(1, int(round(seconds / al.step_s)))
        means = _window_means(cs, starts, stops, w)
        if means.size:
            out.set(name, means.max())
        else:
            out.null(name, f"no gap-free {seconds:g} s window")
    for name, num in (("par", "peak_power_w"), ("par_1s", "peak_power_1s_w"),
                      ("par_60s", "peak_power_60s_w")):
        value = _ratio(out.values.get(num), mean)
        if value is None:
            out.null(name, f"{num} or mean_power_w is null")
        else:
            out.set(name, value)
    value = _ratio(mean, peak)
    if value is None:
        out.null("load_factor", "mean_power_w is null or peak is 0")
    else:
        out.set("load_factor", value)


def _group_ramps(al: Aligned | None, cap: float | None, out: _Out) -> None:
    """Ramps, for δ ∈ {0.1, 1, 5, 10} s written ``100ms``, ``1s``, ``5s``, ``10s``.

    r_δ(t) = (P(t + δ) − P(t)) / δ over every grid point t with t and t + δ in one gap-free
    segment (overlapping windows, stride 0.1 s).

    - ``ramp_up_max_{δ}_w_per_s`` = max(0, max_t r_δ(t)).
    - ``ramp_down_max_{δ}_w_per_s`` = max(0, max_t −r_δ(t)) (a positive magnitude).
    - ``ramp_abs_p95_{δ}_w_per_s`` = p95 of |r_δ(t)|.
    - ``ramp_abs_p99_{δ}_w_per_s`` = p99 of |r_δ(t)|.
    - ``ramp_up_max_{δ}_pct_per_s`` = 100 · ramp_up_max_{δ}_w_per_s / C (% of N × limit per s;
      null when a limit is unknown).
    - ``ramp_down_max_{δ}_pct_per_s`` = 100 · ramp_down_max_{δ}_w_per_s / C.
    - ``ramp_abs_p95_{δ}_pct_per_s`` = 100 · ramp_abs_p95_{δ}_w_per_s / C.
    - ``ramp_abs_p99_{δ}_pct_per_s`` = 100 · ramp_abs_p99_{δ}_w_per_s / C.
    """
    for tag, delta in RAMP_WINDOWS:
        names = [f"ramp_up_max_{tag}_w_per_s", f"ramp_down_max_{tag}_w_per_s",
                 f"ramp_abs_p95_{tag}_w_per_s", f"ramp_abs_p99_{tag}_w_per_s"]
        pct = [n.replace("_w_per_s", "_pct_per_s") for n in names]
        if al is None:
            out.null(names + pct, "no gap-free node total")
            continue
        k = int(round(delta / al.step_s))
        if k < 1:
            out.null(names + pct, f"grid step {al.step_s:g} s is longer than δ")
            continue
        r = al.lag_diff(k) / (k * al.step_s)
        if not r.size:
            out.null(names + pct, f"no gap-free stretch of {delta:g} s")
            continue
        vals = [max(0.0, float(r.max())), max(0.0, float(-r.min()))]
        vals += list(np.percentile(np.abs(r, out=r), [95, 99], overwrite_input=True))
        for n, v in zip(names, vals, strict=True):
            out.set(n, v)
        if cap is None:
            out.null(pct, "power limit unknown")
        else:
            for n, v in zip(pct, vals, strict=True):
                out.set(n, 100.0 * v / cap)


_UNION_BLOCK = 1 << 20
"""Union points summed per block in :func:`_seed_union_total`: 8 MB temporaries, below the
allocator's mmap threshold, so they are reused instead of freshly faulted in for every device."""


def _seed_union_total(devs: list[_Dev]) -> tuple[np.ndarray, np.ndarray] | None:
    """The seed authors' aggregate: Σ_d (last reading of d at or before t).

    At every timestamp t of any device, from the moment every device has read once (t in s).
    Linear time: the readings after the common start are merged once (one stable argsort of
    the concatenated, already sorted per-device times), each reading's place in the union comes
    from the inverse permutation, and each device's carried-forward values are one
    ``numpy.repeat`` of its readings by the union points they hold for (no search per point),
    added to the total in device order (the same floating-point sums as a per-point loop).
    """
    start = max(int(d.t_ms[0]) for d in devs)
    first = [int(np.searchsorted(d.t_ms, start, side="right")) - 1 for d in devs]
    tails = [d.t_ms[i0 + 1:] for d, i0 in zip(devs, first, strict=True)]  # all > start
    # Union-sized buffers are reused where they can be: fresh memory costs more than the work.
    merged = np.concatenate(tails)
    order = np.argsort(merged, kind="stable")
    ordered = np.take(merged, order)
    new = np.ones(len(ordered), dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    n = int(np.count_nonzero(new)) + 1
    if n < 2:
        return None
    times = np.empty(n, dtype=np.int64)
    times[0] = start
    np.compress(new, ordered, out=times[1:])
    np.cumsum(new, out=merged)  # union index of each sorted reading (index 0 is the start)
    where = ordered  # reused: the union index of every reading, in the input order
    where[order] = merged
    del order, new, merged
    bounds = np.cumsum([0, *(len(tail) for tail in tails)])
    held = [(d.p[i0:], where[lo:hi]) for d, i0, lo, hi
            in zip(devs, first, bounds[:-1], bounds[1:], strict=True)]
    total = np.zeros(n)
    for b0 in range(0, n, _UNION_BLOCK):  # blocks: temporaries the allocator reuses
        b1 = min(n, b0 + _UNION_BLOCK)
        block = total[b0:b1]
        for values, pos in held:  # device order: the same sums as a per-point loop
            k0, k1 = np.searchsorted(pos, (b0, b1), side="right")  # readings held at b0, b1 - 1
            cuts = np.concatenate(([b0], pos[k0:k1], [b1]))
            block += np.repeat(values[k0:k1 + 1], np.diff(cuts))
    times_s = times.astype(np.float64)
    times_s /= 1000.0
    return times_s, total


def _seed_tick_total(devs: list[_Dev], grid_ms: int = GRID_MS) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-tick aggregate: Σ_d (last reading of d at or before t) on a 0.1 s grid (t in s).

    Linear time: reading j of a device holds from grid index ⌈(t_j − t_start) / grid⌉ until the
    next reading's, so the carried-forward values are one ``numpy.repeat`` per device.
    """
    start = max(int(d.t_ms[0]) for d in devs)
    end = max(int(d.t_ms[-1]) for d in devs)
    if end - start < grid_ms:
        return None
    grid = np.arange(start, end + 1, grid_ms, dtype=np.int64)
    total = np.zeros(len(grid))
    for d in devs:
        i0 = int(np.searchsorted(d.t_ms, start, side="right")) - 1  # last reading at start
        held = (d.t_ms[i0:] - start + (grid_ms - 1)) // grid_ms  # first grid index at/after t_j
        held[0] = 0
        np.minimum(held, len(grid), out=held)
        total += np.repeat(d.p[i0:], np.diff(held, append=len(grid)))
    return grid / 1000.0, total


def seed_ramps(t_s: np.ndarray, p: np.ndarray, delta_s: float) -> np.ndarray:
    """r(t) = (P(t) − P(t − δ)) / δ at every sample t ≥ t_0 + δ, P(t − δ) linearly interpolated."""
    first = int(np.searchsorted(t_s, t_s[0] + delta_s, side="left"))
    if first >= len(t_s):
        return np.zeros(0)
    r = np.interp(t_s[first:] - delta_s, t_s, p)  # P(t − δ); then in place (no temporaries)
    np.subtract(p[first:], r, out=r)
    r /= delta_s
    return r


def _tick_ramps(tick: tuple[np.ndarray, np.ndarray], delta_s: float,
                grid_ms: int = GRID_MS) -> np.ndarray:
    """:func:`seed_ramps` on the 0.1 s tick grid, where t − δ is a grid point: a lagged difference."""
    k = int(round(delta_s * 1000 / grid_ms))
    p = tick[1]
    if k < 1 or k >= len(p):
        return np.zeros(0)
    return (p[k:] - p[:-k]) / delta_s


def _group_seed_ramps(devs: list[_Dev | None], out: _Out) -> None:
    """Ramps as the seed authors define them (seed-compatible: number for number).

    The seed authors' catalog computes these on two aggregates of the devices, both with each
    device's last reading carried forward (no interpolation between devices, gaps not split):
    the per-tick total Pₖ on a 0.1 s grid (their analysis table: the up-ramp percentiles) and
    the total Pᵤ at every timestamp of any device (their export: the down-ramps and the ramp
    event frequency). r_δ(t) = (P(t) − P(t − δ)) / δ at every sample t ≥ t₀ + δ, P(t − δ) by
    linear interpolation. Reproduces their published values for pt220 within 0.1 % (up p95,
    event frequency, down p99) and pt017 within 1.5 %; for pt019 the up percentiles differ by
    ≈ 9 % (67.1 vs 73.4 W/s) under every aggregation tried, while its event frequency and down
    p99 match within 0.2 %: the catalog's up percentiles for that run were evidently computed
    on samples other than the published ones.

    - ``ramp_up_p95_1s_w_per_s`` = p95 of {r_1s : r_1s > 0} on Pₖ.
    - ``ramp_up_p99_1s_w_per_s`` = p99 of {r_1s : r_1s > 0} on Pₖ.
    - ``ramp_down_p99_1s_w_per_s`` = p99 of {−r_1s : r_1s < 0} on Pᵤ (a positive magnitude).
    - ``ramp_event_frequency_1s`` = #{r ≥ θ : r ∈ U} / ((t_last − t_first) / 60 s), U = {r_1s ≥ 0}
      on Pᵤ (flat stretches count as upward, as the authors count them), θ = p95 of U.
    - ``ramp_up_p95_5s_w_per_s``, ``ramp_up_p95_10s_w_per_s`` = p95 of {r_δ > 0} on Pₖ, δ = 5, 10 s.
    - ``ramp_up_p99_5s_w_per_s``, ``ramp_up_p99_10s_w_per_s`` = p99 of {r_δ > 0} on Pₖ.
    - ``ramp_down_p99_5s_w_per_s``, ``ramp_down_p99_10s_w_per_s`` = p99 of {−r_δ : r_δ < 0} on Pₖ
      (the catalog publishes no 5 s / 10 s values to match; Pₖ is 10× cheaper than Pᵤ).
    """
    ok = [d for d in devs if d is not None and len(d.t_ms) >= 2]
    if not ok or len(ok) != len(devs):
        out.null(SEED_RAMP_NAMES, "a device has fewer than 2 power readings")
        return
    tick, union = _seed_tick_total(ok), _seed_union_total(ok)
    for tag, delta in (("1s", 1.0), ("5s", 5.0), ("10s", 10.0)):
        over = "" if tag == "1s" else f" over {tag}"
        up_names = (f"ramp_up_p95_{tag}_w_per_s", f"ramp_up_p99_{tag}_w_per_s")
        r = _tick_ramps(tick, delta) if tick is not None else np.zeros(0)
        up = r[r > 0]
        if up.size:
            for name, value in zip(up_names, np.percentile(up, [95, 99], overwrite_input=True),
                                    strict=True):
                out.set(name, value)
        else:
            out.null(up_names, f"no up-ramps{over}")
        if tag == "1s":  # 5 s / 10 s keep the per-tick r: no published values to match there
            r = seed_ramps(*union, delta) if union is not None else np.zeros(0)
        down = r[r < 0]
        np.negative(down, out=down)
        if down.size:
            out.set(f"ramp_down_p99_{tag}_w_per_s", np.percentile(down, 99, overwrite_input=True))
        else:
            out.null(f"ramp_down_p99_{tag}_w_per_s", f"no down-ramps{over}")
        if tag == "1s":
            upward = r[r >= 0]
            if not upward.size or union is None:
                out.null("ramp_event_frequency_1s", "no ramps")
                continue
            theta = np.percentile(upward, 95, overwrite_input=True)  # a copy: order is free
            minutes = (union[0][-1] - union[0][0]) / 60.0
            out.set("ramp_event_frequency_1s", np.count_nonzero(upward >= theta) / minutes)


def welch_windows(al: Aligned, segment_s: float = WELCH_SEGMENT_S) -> int:
    """Number of Welch windows :func:`welch_psd` averages (0 when none fits)."""
    starts, stops = al.segments()
    lengths = stops - starts
    if not lengths.size:
        return 0
    nper = int(min(round(segment_s / al.step_s), lengths.max()))
    hop = max(1, nper // 2)
    use = lengths >= nper
    return int(((lengths[use] - nper) // hop + 1).sum())


def welch_psd(al: Aligned, segment_s: float = WELCH_SEGMENT_S,
              min_s: float = MIN_SPECTRUM_S) -> tuple[np.ndarray, np.ndarray] | None:
    """Welch power spectral density (W²/Hz) of the node total over its gap-free segments.

    Hann windows of ``min(segment_s, longest segment)`` with 50 % overlap, each linearly
    detrended, are taken inside every segment long enough and averaged (what
    ``scipy.signal.welch(..., detrend="linear")`` does on one segment). Returns ``None`` when no
    segment is at least ``min_s`` long.
    """
    from scipy.signal import get_window

    starts, stops = al.segments()
    lengths = stops - starts
    nmin = int(math.ceil(min_s / al.step_s))
    if not lengths.size or lengths.max() < nmin:
        return None
    nper = int(min(round(segment_s / al.step_s), lengths.max()))
    hop = nper // 2
    use = lengths >= nper
    counts = (lengths[use] - nper) // hop + 1
    first = np.repeat(starts[use], counts)
    offset = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    wstart = first + hop * offset
    frames = np.lib.stride_tricks.sliding_window_view(al.total, nper)[wstart]
    tc = np.arange(nper) - (nper - 1) / 2.0  # linear detrend by projection on (1, t)
    frames -= frames.mean(axis=1, keepdims=True)
    frames -= np.outer(frames @ tc / float(tc @ tc), tc)
    win = get_window("hann", nper)
    fs = 1.0 / al.step_s
    spec = np.abs(np.fft.rfft(frames * win, axis=1)) ** 2
    psd = spec.mean(axis=0) / (fs * np.sum(win ** 2))
    if nper % 2 == 0:
        psd[1:-1] *= 2
    else:
        psd[1:] *= 2
    freqs = np.fft.rfftfreq(nper, d=al.step_s)
    return freqs, psd


def _dominant_peak(freqs: np.ndarray, psd: np.ndarray, windows: int) -> tuple[int | None, str]:
    """Index of the dominant spectral peak, or ``None`` and the reason (see ``dominant_freq_hz``)."""
    from scipy.ndimage import median_filter
    from scipy.stats import chi2

    df = float(freqs[1] - freqs[0])
    lo = max(SPECTRUM_BAND_HZ[0], MIN_CYCLES * df)  # MIN_CYCLES full cycles per Welch window
    hi = SPECTRUM_BAND_HZ[1]
    band = np.flatnonzero((freqs >= lo - 1e-9) & (freqs <= hi + 1e-9))
    if band.size < 3:
        return None, f"the analysed window is too short for {MIN_CYCLES} cycles above 0.05 Hz"
    dof = windows + 1.0  # conservative for 50 %-overlapping Hann windows
    background = median_filter(psd, size=BACKGROUND_BINS, mode="nearest")
    background = background / (1.0 - 2.0 / (9.0 * dof)) ** 3  # median -> mean of chi2/dof
    ratio = psd / np.maximum(background, 1e-300)
    threshold = max(float(chi2.ppf(1.0 - PEAK_FALSE_ALARM / band.size, dof) / dof),
                    MIN_PEAK_RATIO)
    inner = band[(band > 0) & (band < len(psd) - 1)]
    local = inner[(psd[inner] > psd[inner - 1]) & (psd[inner] >= psd[inner + 1])]
    good = local[ratio[local] >= threshold]
    if not good.size:
        return None, (f"no spectral peak in {lo:.3g}-{hi:g} Hz stands {threshold:.1f}x above its "
                      "local background (trend or broadband fluctuation only)")
    return int(good[np.argmax(psd[good])]), ""


def _group_oscillations(ev: _EventIndex, al: Aligned | None, out: _Out) -> None:
    """Swings and oscillations.

    - ``swing_w`` = p95_power_w − p5_power_w.
    - ``dynamic_range_1s_w`` = max over windows [t, t + 1 s] inside one gap-free segment of
      (max P − min P) in the window (sliding, stride 0.1 s).
    - ``dynamic_range_10s_w`` = max over windows [t, t + 10 s] inside one gap-free segment of
      (max P − min P) in the window.
    - ``dominant_freq_hz`` = the frequency of the highest local maximum f* of S(f) in
      [f_lo, 5 Hz] that stands out of the background: S(f*) / B(f*) ≥ max(4, χ²_ν(1 − 0.01/m)/ν),
      B the running median of S over 21 bins (≈ 0.2 Hz) scaled from median to mean, ν = K + 1
      for K averaged windows, m the bins searched (a 1 % chance that noise alone passes
      anywhere in the band). S is the Welch PSD of the node total (Hann windows of 102.4 s,
      50 % overlap, each linearly detrended, gap-free segments only), f_lo = max(0.05 Hz,
      5 cycles per window). Null when no peak qualifies: a trend or broadband fluctuation is
      not an oscillation. 5 Hz is the Nyquist frequency of the 0.1 s grid (faster ones alias).
    - ``dominant_amplitude_w`` = √(2 · Σ_{|f − f*| ≤ 2 Δf} S(f) Δf), the amplitude of the sinusoid
      at the peak f* (the power in the Hann main lobe; Δf the bin width).
    - ``band_rms_low_w``, ``band_rms_mid_w``, ``band_rms_high_w`` = √(Σ_{f ∈ band} S(f) Δf) for
      the bands [0.1, 1), [1, 2.5) and [2.5, 5] Hz.
    - ``band_fraction_low``, ``band_fraction_mid``, ``band_fraction_high`` = Σ_{band} S /
      Σ_{0.05 ≤ f ≤ 5 Hz} S (share of the oscillation power between 0.05 and 5 Hz).
    - ``step_freq_hz`` = 1 / median(Δt between consecutive ``step_begin`` events) of one rank
      (run-level events, else the lowest rank; ``step_end`` when there is no ``step_begin``).
    """
    p5, p95 = out.values.get("p5_power_w"), out.values.get("p95_power_w")
    if p5 is None or p95 is None:
        out.null("swing_w", "percentiles are null")
    else:
        out.set("swing_w", p95 - p5)
    for name, seconds in (("dynamic_range_1s_w", 1.0), ("dynamic_range_10s_w", 10.0)):
        value = None
        if al is not None:
            value = _sliding_range(al, max(1, int(round(seconds / al.step_s))))
        if value is None:
            out.null(name, f"no gap-free {seconds:g} s window")
        else:
            out.set(name, value)

    spectral = ("dominant_freq_hz", "dominant_amplitude_w", "band_rms_low_w", "band_rms_mid_w",
                "band_rms_high_w", "band_fraction_low", "band_fraction_mid", "band_fraction_high")
    spec = welch_psd(al) if al is not None else None
    if spec is None:
        out.null(spectral, f"no gap-free stretch of {MIN_SPECTRUM_S:g} s")
    else:
        freqs, psd = spec
        df = freqs[1] - freqs[0]
        lo, hi = SPECTRUM_BAND_HZ
        band = (freqs >= lo - 1e-9) & (freqs <= hi + 1e-9)
        band_power = float(psd[band].sum() * df)
        for key, (b0, b1) in BANDS_HZ.items():
            last = b1 >= hi
            sel = (freqs >= b0 - 1e-9) & ((freqs <= b1 + 1e-9) if last else (freqs < b1 - 1e-9))
            power = float(psd[sel].sum() * df)
            out.set(f"band_rms_{key}_w", math.sqrt(max(power, 0.0)))
            if band_power > 0:
                out.set(f"band_fraction_{key}", power / band_power)
            else:
                out.null(f"band_fraction_{key}", "no oscillation power in 0.05-5 Hz")
        scale = max(1.0, float(np.mean(np.abs(al.values())))) if al is not None else 1.0
        if not band.any() or band_power <= 1e-18 * scale ** 2:
            out.null(("dominant_freq_hz", "dominant_amplitude_w"),
                     "flat spectrum (no oscillation in 0.05-5 Hz)")
        else:
            peak, reason = _dominant_peak(freqs, psd, welch_windows(al) if al is not None else 1)
            if peak is None:
                out.null(("dominant_freq_hz", "dominant_amplitude_w"), reason)
            else:
                lobe = psd[max(0, peak - 2):peak + 3].sum() * df
                out.set("dominant_freq_hz", freqs[peak])
                out.set("dominant_amplitude_w", math.sqrt(2.0 * lobe))

    steps = _events(ev, "step_begin") or _events(ev, "step_end")
    if len(steps) < 2:
        out.null("step_freq_hz", "fewer than 2 step events")
    else:
        dt = np.diff([e.t_ms for e in steps]) / 1000.0
        med = float(np.median(dt))
        if med > 0:
            out.set("step_freq_hz", 1.0 / med)
        else:
            out.null("step_freq_hz", "step events share one time")


def _group_across(al: Aligned | None, out: _Out) -> None:
    """Across devices (on the gap-free points of the 0.1 s grid).

    - ``coincidence_factor`` = max_t Σ_d P_d(t) / Σ_d max_t P_d(t) (1 when all peaks coincide).
    - ``diversity_factor`` = 1 / coincidence_factor.
    - ``synchrony_index`` = ρ̄, the mean over device pairs of the Pearson correlation of
      band-passed per-device power (2nd-order Butterworth high-pass at 0.05 Hz, started in
      its steady state, applied per gap-free segment of at least 20 s; the band extends to the 5 Hz Nyquist
      frequency). Needs ≥ 2 devices.
    - ``projected_swing_1000_w`` = s̄ · √(M (1 + (M − 1) max(ρ̄, 0))) with M = 1000, s̄ the mean
      per-device swing (p95 − p5 of P_d): the swing of 1,000 such devices whose pairwise
      correlation is ρ̄ (M · s̄ when fully synchronous, √M · s̄ when independent).
    """
    if al is None or not al.valid.any():
        out.null(ACROSS_NAMES, "no gap-free node total")
        return
    allvalid = bool(al.valid.all())
    peaks, swings = [], []
    for row in al.devices:  # one copy per device, partitioned in place for its percentiles
        v = row.copy() if allvalid else row[al.valid]
        peaks.append(float(v.max()))
        q5, q95 = np.percentile(v, [5, 95], overwrite_input=True)
        swings.append(float(q95 - q5))
    sum_peaks = float(sum(peaks))
    peak_total = float(al.values().max())
    if sum_peaks > 0 and peak_total > 0:
        cf = peak_total / sum_peaks
        out.set("coincidence_factor", cf)
        out.set("diversity_factor", 1.0 / cf)
    else:
        out.null(("coincidence_factor", "diversity_factor"), "peak power is not positive")
    ndev = len(al.devices)
    if ndev < 2:
        out.null(("synchrony_index", "projected_swing_1000_w"), "needs at least 2 devices")
        return
    from scipy.signal import butter, sosfilt, sosfilt_zi

    sos = butter(2, SYNC_HIGHPASS_HZ, btype="highpass", fs=1.0 / al.step_s, output="sos")
    zi = sosfilt_zi(sos)  # (sections, 2): start each device in its steady state
    starts, stops = al.segments()
    nmin = int(math.ceil(MIN_SPECTRUM_S / al.step_s))
    s1 = np.zeros(ndev)
    s2 = np.zeros((ndev, ndev))
    count = 0
    for a, b in zip(starts, stops, strict=True):
        if b - a < nmin:
            continue
        state = [zi * row[a] for row in al.devices]
        for c0 in range(a, b, _CHUNK):  # cache-sized chunks; the filter state carries over
            c1 = min(b, c0 + _CHUNK)
            y = np.empty((ndev, c1 - c0))
            for i, row in enumerate(al.devices):
                y[i], state[i] = sosfilt(sos, row[c0:c1], zi=state[i])
            s1 += y.sum(axis=1)
            s2 += y @ y.T
        count += b - a
    if count < 2:
        out.null(("synchrony_index", "projected_swing_1000_w"),
                 f"no gap-free stretch of {MIN_SPECTRUM_S:g} s")
        return
    mean = s1 / count
    cov = s2 / count - np.outer(mean, mean)
    var = np.diag(cov).copy()
    scale = max(1.0, float(np.mean(np.abs(al.values()))) / ndev) ** 2
    live = var > 1e-12 * scale
    if live.sum() < 2:
        out.null(("synchrony_index", "projected_swing_1000_w"),
                 "fewer than 2 devices with fluctuating power")
        return
    c = cov[np.ix_(live, live)]
    sd = np.sqrt(np.diag(c))
    corr = np.clip(c / np.outer(sd, sd), -1.0, 1.0)
    iu = np.triu_indices(len(sd), k=1)
    rho = float(corr[iu].mean())
    out.set("synchrony_index", rho)
    swing = float(np.mean(swings))
    m = PROJECTED_DEVICES
    out.set("projected_swing_1000_w", swing * math.sqrt(m * (1 + (m - 1) * max(rho, 0.0))))


def _group_states(ev: _EventIndex, al: Aligned | None, cap: float | None, out: _Out) -> None:
    """States.

    - ``idle_fraction`` = share of gap-free grid points with P(t) < 0.2 · C.
    - ``near_limit_fraction`` = share of gap-free grid points with P(t) ≥ 0.9 · C.
    - ``step_count`` = number of power steps: maximal runs of consecutive grid points t with
      |P(t + 1 s) − P(t)| > 0.1 · C and the same sign, inside one gap-free segment (one edge of a
      square wave counts once).
    - ``checkpoint_dip_pct`` = mean over checkpoints of 100 · (B − min_{[b, e]} P) / B, B the
      median of P over the 10 s before ``checkpoint_begin`` (b), e the next ``checkpoint_end``.
    - ``checkpoint_dip_s`` = mean over checkpoints of the time in [b, e] with P(t) < B − depth/2
      (width of the dip at half depth).
    """
    limit_names = ("idle_fraction", "near_limit_fraction", "step_count")
    if al is None or not al.valid.any():
        out.null(STATE_NAMES, "no gap-free node total")
        return
    x = al.values()
    if cap is None:
        out.null(limit_names, "power limit unknown")
    else:
        out.set("idle_fraction", float(np.mean(x < IDLE_FRACTION_OF_LIMIT * cap)))
        out.set("near_limit_fraction", float(np.mean(x >= NEAR_LIMIT_FRACTION * cap)))
        k = max(1, int(round(STEP_WINDOW_S / al.step_s)))
        ok = al.lag_pairs(k)
        if not ok.size:
            out.set("step_count", 0)
        else:
            d = al.total[k:] - al.total[:-k]  # NaN (never a step) where a point is invalid
            thr = STEP_FRACTION_OF_LIMIT * cap
            count = 0
            for flag in (d > thr, d < -thr):  # a run of one sign is one step
                flag &= ok
                count += int(flag[0]) + int(np.count_nonzero(flag[1:] & ~flag[:-1]))
            out.set("step_count", count)

    windows = event_windows(ev, "checkpoint_begin", "checkpoint_end")
    if not windows:
        out.null(("checkpoint_dip_pct", "checkpoint_dip_s"), "no checkpoint events")
        return
    grid = al.grid_ms
    depths, widths = [], []
    base_ms = CHECKPOINT_BASELINE_S * 1000
    bounds = np.array(windows, dtype=np.float64)
    i0 = np.searchsorted(grid, bounds[:, 0] - base_ms, side="left")
    i1 = np.searchsorted(grid, bounds[:, 0], side="left")
    i2 = np.searchsorted(grid, bounds[:, 1], side="right")
    for a, b, c in zip(i0, i1, i2, strict=True):  # one iteration per checkpoint, not per sample
        before = al.total[a:b][al.valid[a:b]]
        inside = al.total[b:c][al.valid[b:c]]
        if not before.size or not inside.size:
            continue
        base = float(np.median(before))
        if base <= 0:
            continue
        depth = base - float(inside.min())
        depths.append(100.0 * depth / base)
        widths.append(float(np.count_nonzero(inside < base - depth / 2)) * al.step_s
                      if depth > 0 else 0.0)
    if not depths:
        out.null(("checkpoint_dip_pct", "checkpoint_dip_s"),
                 "no checkpoint with gap-free power before and during it")
    else:
        out.set("checkpoint_dip_pct", float(np.mean(depths)))
        out.set("checkpoint_dip_s", float(np.mean(widths)))


def _group_gaps(devs: list[_Dev | None], out: _Out) -> None:
    """Gaps.

    - ``gap_count`` = number of gaps on the run clock: intervals between consecutive valid
      readings of a device longer than 3 sample periods (period = the declared
      ``sample_period_ms``, or the median interval when that is longer), overlapping gaps of
      several devices merged into one.
    - ``gap_s`` = total length (s) of the merged gaps: how much of ``energy_j`` rests on
      interpolation across missing readings.
    """
    starts, ends = [], []
    for d in devs:
        if d is None or not d.gap_idx.size:
            continue
        starts.append(d.t_ms[d.gap_idx])
        ends.append(d.t_ms[d.gap_idx + 1])
    if not starts:
        out.set("gap_count", 0)
        out.set("gap_s", 0.0)
        return
    s = np.concatenate(starts)
    e = np.concatenate(ends)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > reach[:-1]))
    cluster = np.cumsum(new) - 1
    cs = s[new]
    ce = np.zeros(len(cs), dtype=np.int64)
    np.maximum.at(ce, cluster, e)
    out.set("gap_count", int(len(cs)))
    out.set("gap_s", float((ce - cs).sum()) / 1000.0)


def _group_sampling(devs: list[_Dev | None], out: _Out) -> None:
    """Sampling (the seed authors' names).

    - ``sampling_interval_observed_median_s`` = median of t_d,i+1 − t_d,i over every device d and
      reading i (valid readings only), in s.
    - ``sampling_interval_observed_p95_s`` = p95 of the same intervals, in s.
    """
    diffs = [np.diff(d.t_ms) for d in devs if d is not None and len(d.t_ms) > 1]
    if not diffs:
        out.null(SAMPLING_NAMES, "no device has 2 readings")
        return
    dt = np.concatenate(diffs) / 1000.0
    med, p95 = np.percentile(dt, [50, 95], overwrite_input=True)  # dt is ours: no copy
    out.set("sampling_interval_observed_median_s", med)
    out.set("sampling_interval_observed_p95_s", p95)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------

def compute_run_metrics(run: Run, *, grid_ms: int = GRID_MS) -> dict[str, Any]:
    """All metrics of a run: node totals, per-device lists and ``metric_notes``.

    Every name of :data:`METRIC_NAMES` and :data:`PER_DEVICE_NAMES` is a key (``None`` when it
    cannot be computed, with the reason in ``metric_notes``). Never raises on bad signals (an
    empty trace, one sample, all-null power, no tokens).

    Args:
        run: the run.
        grid_ms: step of the common grid of the node total (default 100 ms).

    Returns:
        ``{metric: value}`` plus ``metric_notes`` (list of ``"<metric>: <reason>"``).

    numpy's BLAS runs on one thread here (``threadpoolctl``): a run's arrays are too small for threads to
    pay (OpenBLAS worker threads spun for up to 3x the metrics' own CPU time on a loaded 2-core
    machine), and a multi-threaded dot product sums in an order that depends on the thread
    count, so the last digits of ``gpu_energy_j`` and the like varied from machine to machine.
    """
    with _blas_controller().limit(limits=1, user_api="blas"):
        return _compute(run, grid_ms)


@functools.lru_cache(maxsize=1)
def _blas_controller() -> Any:
    """The process's ``threadpoolctl`` controller (inspecting the loaded libraries costs ~1 ms)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _compute(run: Run, grid_ms: int) -> dict[str, Any]:
    out = _Out()
    notes: list[str] = []
    devs = [_prepare_device(run, d, i, notes) for i, d in enumerate(run.devices)]
    ev = _EventIndex(run.events)
    _group_energy(run, devs, out, ev)
    al = None
    reason = None
    if not run.devices:
        reason = "the run has no devices"
    elif any(d is None or len(d.t_ms) < 2 for d in devs):
        reason = "a device has fewer than 2 power readings"
    else:
        al = align([d for d in devs if d is not None], grid_ms)
        if al is None:
            reason = "devices share no common span"
    cap = _capacity_w(run) if run.devices else None
    if al is None and reason:
        shape = [n for n in METRIC_NAMES if n not in ENERGY_NAMES + GAP_NAMES
                 + ("duration_s", "mean_power_w", "limit_utilisation")]
        out.null(shape, reason)
    _group_level(run, devs, al, cap, out)
    _group_ramps(al, cap, out)
    _group_seed_ramps(devs, out)
    _group_oscillations(ev, al, out)
    _group_across(al, out)
    _group_states(ev, al, cap, out)
    _group_gaps(devs, out)
    _group_sampling(devs, out)
    result: dict[str, Any] = {name: out.values.get(name) for name in METRIC_NAMES}
    for name in PER_DEVICE_NAMES:
        result[name] = out.values.get(name)
    result["metric_notes"] = notes + out.notes
    return result


def device_energy_j(dev: DeviceSeries) -> float | None:
    """Trapezoid energy of one device on its own timestamps: E = Σ (P_i + P_i+1)/2 · Δt_i.

    Missing readings are dropped first, so the integral bridges them (and gaps). ``None`` with
    fewer than 2 finite power readings.
    """
    p = dev.power_w
    ok = np.isfinite(p)
    if ok.sum() < 2:
        return None
    return float(np.trapezoid(p[ok], dev.t_ms[ok] / 1000.0))


def counter_energy_j(t_ms: np.ndarray, energy_mj: np.ndarray | None) -> float | None:
    """Energy the device's cumulative counter reports (J), or ``None``.

    E_counter = Σ_i max(0, E_i+1 − E_i) / 1000 over the finite counter readings (mJ) in time
    order: a counter reset (a step down) loses its interval, it never adds. ``None`` when there
    is no counter, its length differs from ``t_ms``, or it has fewer than 2 finite readings.
    The one counter rule of the project: metrics, ``validate`` and the generator's conversion
    all call it.
    """
    if energy_mj is None or len(energy_mj) != len(t_ms):
        return None
    ok = np.isfinite(energy_mj)
    if np.count_nonzero(ok) < 2:
        return None
    ct, cv = (t_ms, energy_mj) if ok.all() else (t_ms[ok], energy_mj[ok])
    if not np.all(ct[1:] > ct[:-1]):
        cv = cv[np.argsort(ct, kind="stable")]
    steps = np.diff(cv)
    resets = steps[steps < 0]
    return float((cv[-1] - cv[0] - resets.sum()) / 1000.0)


def mismatch_pct(energy_j: float | None, counter_j: float | None) -> float | None:
    """Signed mismatch 100 · (energy_j − counter_j) / counter_j (%), or ``None``.

    ``None`` when either energy is ``None`` or the counter did not advance (counter_j ≤ 0).
    """
    if energy_j is None or counter_j is None or counter_j <= 0:
        return None
    return 100.0 * (energy_j - counter_j) / counter_j


def device_mismatch_pct(dev: DeviceSeries) -> float | None:
    """:func:`mismatch_pct` of one device: its power integral against its energy counter.

    mismatch = 100 · (device_energy_j − counter_energy_j) / counter_energy_j; ``None`` as in
    :func:`device_energy_j`, :func:`counter_energy_j` and :func:`mismatch_pct`.
    """
    counter_j = counter_energy_j(dev.t_ms, dev.signals.get("energy_mj"))
    if counter_j is None:
        return None
    return mismatch_pct(device_energy_j(dev), counter_j)


_GROUPS: tuple[Callable[..., Any], ...] = (
    _group_energy, _group_level, _group_ramps, _group_seed_ramps, _group_oscillations,
    _group_across, _group_states, _group_gaps, _group_sampling,
)
METRIC_GROUPS = _GROUPS
"""The metric groups in column order; each docstring's first line is the group's title."""
_BULLET_NAMES_RE = re.compile(r"^``[^`]+``(, ``[^`]+``)*$")


def metric_formulas() -> dict[str, str]:
    """``{metric name: formula}`` parsed from the metric groups' docstrings (for the card).

    A formula is a docstring bullet ``- ``name`` = formula`` (continuation lines joined); names
    listed together share one formula; ramp names are expanded for every δ.
    """
    bullets: list[str] = []
    for fn in _GROUPS:
        inside = False
        for line in (fn.__doc__ or "").splitlines():
            text = line.strip()
            if text.startswith("- ``"):
                bullets.append(text[2:])
                inside = True
            elif inside and text and not text.startswith("-"):
                bullets[-1] += " " + text
            else:
                inside = False
    out: dict[str, str] = {}
    for bullet in bullets:
        left, sep, right = bullet.partition(" = ")
        if not sep or not _BULLET_NAMES_RE.match(left.strip()):
            continue
        for name in re.findall(r"``([^`]+)``", left):
            if "{δ}" in name:
                for tag, _ in RAMP_WINDOWS:
                    out[name.replace("{δ}", tag)] = right.strip().replace("{δ}", tag)
            else:
                out[name] = right.strip()
    return out
