"""The metrics' common ground.

Constants, column names, per-device preparation, the node total on the common grid
(:class:`Aligned`), the output collector and event windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..request_rows import number_column, request_blocks
from ..run import DeviceSeries, Event, Run, sample_hold
from ..schema import GAP_PERIODS

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
               "checkpoint_dip_s", "checkpoint_dip_count")
GAP_NAMES = ("gap_count", "gap_s")
SAMPLING_NAMES = ("sampling_interval_observed_median_s", "sampling_interval_observed_p95_s")
WORK_PREFIX = "work_"
"""Prefix of the work-window twin of a metric (``work_peak_power_w``; see ``metrics.window``)."""
WORK_BASE_NAMES: tuple[str, ...] = (("energy_j", "energy_per_token_j") + LEVEL_NAMES
                                    + RAMP_NAMES + OSCILLATION_NAMES)
"""The metrics that also exist over the work window, under ``work_<name>``."""
WORK_WINDOW_NAMES = ("work_window_start_s", "work_window_end_s", "work_window_source")
WORK_NAMES: tuple[str, ...] = WORK_WINDOW_NAMES + tuple(WORK_PREFIX + n for n in WORK_BASE_NAMES)
METRIC_NAMES: tuple[str, ...] = (ENERGY_NAMES + LEVEL_NAMES + RAMP_NAMES + SEED_RAMP_NAMES
                                 + OSCILLATION_NAMES + ACROSS_NAMES + STATE_NAMES + GAP_NAMES
                                 + SAMPLING_NAMES + WORK_NAMES)
"""Every node-total metric, in column order (the runs configs declare the same names)."""
INT_METRICS = frozenset({"gap_count", "step_count", "checkpoint_dip_count"})


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
    energy_j: float | None = None  # integral on the device's own timestamps (hold_energy_j)
    hold: str = "linear"  # the run's sample_hold: ``linear`` or ``previous``


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
    levels: Any = field(default=None, repr=False)  # metrics.levels.Levels, set by the caller
    _segs: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    memo: dict[Any, Any] = field(default_factory=dict, repr=False)
    """Results computed from this total (levels, ramps, ranges, spectrum), by name: a run
    whose work window is the whole trace computes its ``work_*`` twins from the same total,
    and reads them here instead of computing them twice (set ``levels`` before the first)."""

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


COUNTED_MEDIAN_SPAN = 1 << 16
"""Widest range (max − min) of integers whose median :func:`interval_median` takes by counting."""


def interval_median(values: np.ndarray) -> float:
    """``float(numpy.median(values))``, by counting for integers of a narrow range.

    Sampling intervals in ms take a handful of values (100 ± jitter), where ``numpy.median``'s
    partition is slow (≈ 0.45 ms for 72,000 intervals). Counting finds the same order
    statistics in one ``bincount`` of ``values − min``: the value of rank r (0-based) is the
    first v with more than r values ≤ v, and the median is (a + b) / 2 of the ranks
    ⌊(n − 1)/2⌋ and ⌊n/2⌋ summed in float64, as numpy forms it (a when n is odd). Floats,
    an empty array and a range over :data:`COUNTED_MEDIAN_SPAN` go to ``numpy.median``.
    """
    n = len(values)
    if n == 0 or values.dtype.kind not in "iu":
        return float(np.median(values))
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > COUNTED_MEDIAN_SPAN:
        return float(np.median(values))
    at_most = np.cumsum(np.bincount(values - lo))  # at_most[v]: values <= lo + v
    a = lo + int(np.searchsorted(at_most, (n - 1) // 2, side="right"))
    b = lo + int(np.searchsorted(at_most, n // 2, side="right"))
    return (float(a) + float(b)) / 2.0


def hold_energy_j(t_ms: np.ndarray, p: np.ndarray, hold: str) -> float:
    """Energy (J) of readings ``p`` (W) at increasing ``t_ms`` under a sample hold.

    ``linear``: E = Σ_i (P_i + P_i+1) / 2 · (t_i+1 − t_i) (trapezoid); ``previous``:
    E = Σ_i P_i · (t_i+1 − t_i) (each reading held until the next; the last one closes the
    run). Times in ms, so each sum is divided by 1000.
    """
    if len(t_ms) < 2:
        return 0.0
    dt = np.diff(t_ms).astype(np.float64)
    if hold == "previous":
        return float(np.dot(dt, p[:-1])) / 1000.0
    return 0.5 * float(np.dot(dt, p[:-1] + p[1:])) / 1000.0


def held_at(t_ms: np.ndarray, p: np.ndarray, at: np.ndarray, hold: str) -> np.ndarray:
    """The device's power at the times ``at`` (inside its span) under its sample hold.

    ``linear``: linear interpolation between the readings around each time; ``previous``:
    the last reading at or before it.
    """
    if hold == "previous":
        i = np.searchsorted(t_ms, at, side="right") - 1
        return p[np.clip(i, 0, len(p) - 1)]
    return np.interp(at, t_ms, p)


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
    hold = sample_hold(run.meta)
    if len(t) < 2:
        return _Dev(index, t, p, float("nan"), np.zeros(0, dtype=np.int64), hold=hold)
    stride = max(1, len(dt) // 200_000)  # the period needs no exact median of millions
    median = interval_median(dt[::stride])
    declared = run.meta.get("sample_period_ms")
    period = max(float(declared), median) if declared else median
    limit = GAP_PERIODS * period
    # a change-only source (hold ``previous``) logs nothing while the reading stays: a long
    # interval is a held value, not a gap
    gap_idx = (np.flatnonzero(dt > limit) if hold != "previous" and dt.max() > limit
               else np.zeros(0, dtype=np.int64))
    return _Dev(index, t, p, period, gap_idx, hold_energy_j(t, p, hold), hold=hold)


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
        row = held_at(d.t_ms, d.p, grid, d.hold)
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
        if value is not None and not isinstance(value, (int, list, str)):
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


def _percentile_lerp(a: float, b: float, gamma: float) -> float:
    """The linear interpolation numpy.percentile makes between order statistics a ≤ b."""
    diff = b - a
    return b - diff * (1.0 - gamma) if gamma >= 0.5 else a + diff * gamma


def _percentiles(x: np.ndarray, qs: tuple[float, ...] | list[float]) -> list[float]:
    """``numpy.percentile(x, qs)`` (its default ``linear`` method), reordering ``x`` in place.

    The same values to the last bit: the order statistics around each virtual index
    (n − 1) · q / 100 by one ``ndarray.partition`` on just those indices, interpolated as numpy
    does. Faster than ``numpy.percentile`` (which also partitions at the first and last index
    and costs ~0.1 ms of Python per call on the thousands of small arrays of an import). An
    array holding NaN or inf goes to ``numpy.percentile`` itself.
    """
    n = len(x)
    if not n or not math.isfinite(float(np.add.reduce(x))):
        return [float(v) for v in np.atleast_1d(np.percentile(x, qs, overwrite_input=True))]
    virtual = [(n - 1) * (q / 100.0) for q in qs]
    kth = sorted({min(int(math.floor(v)) + j, n - 1) for v in virtual for j in (0, 1)})
    stat = _order_statistics(x, kth)
    out = []
    for v in virtual:
        lo = int(math.floor(v))
        if lo >= n - 1:
            out.append(stat[n - 1])
        else:
            out.append(_percentile_lerp(stat[lo], stat[lo + 1], v - lo))
    return out


BAND_SELECT_MIN = 1 << 14
"""Arrays from this length on whose wanted ranks lie close together (a p95 and a p99) are
narrowed to a band of values before the partition (:func:`_order_statistics`)."""
_SAMPLE_STEP = 64


def _order_statistics(x: np.ndarray, kth: list[int]) -> dict[int, float]:
    """The k-th smallest value of ``x`` for each k of ``kth`` (sorted; finite ``x``).

    Partitioning the whole array costs ≈ 10 ns a value. When the ranks span under an eighth of
    a long array, a strided sample of every 64th value bounds them instead: [low, high] are
    sample order statistics a safety margin beyond the ranks' places. With B values below
    ``low`` and the band S = {low ≤ x ≤ high}, rank k of ``x`` is rank k − B of S whenever
    B ≤ min(kth) and B + |S| > max(kth) (checked; otherwise the whole array is partitioned),
    so the values are exactly the partition's. ``x`` may be reordered.
    """
    n = len(x)
    k0, k1 = kth[0], kth[-1]
    if n >= BAND_SELECT_MIN and 8 * (k1 - k0) < n:
        sample = x[::_SAMPLE_STEP].copy()
        s = len(sample)
        margin = 2 * math.isqrt(s) + 2  # ≈ 4 standard deviations of a sample rank
        a, b = int(k0 * s / n) - margin, int(k1 * s / n) + margin
        inside = [k for k in (a, b) if 0 <= k < s]
        if inside:
            sample.partition(inside)
        low = sample[a] if a >= 0 else -np.inf
        high = sample[b] if b < s else np.inf
        below = int(np.count_nonzero(x < low))
        band = x[(x >= low) & (x <= high)]
        if below <= k0 and below + len(band) > k1:
            band.partition([k - below for k in kth])
            return {k: float(band[k - below]) for k in kth}
    x.partition(kth)
    return {k: float(x[k]) for k in kth}


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
    from .filters import sliding_max, sliding_min

    key = ("sliding_range", k)
    if key in al.memo:
        return al.memo[key]
    ok = al.lag_pairs(k)
    if not ok.any():
        al.memo[key] = None
        return None
    x = al.total if al.valid.all() else np.where(al.valid, al.total, 0.0)
    rng = sliding_max(x, k + 1)  # window j covers [j, j + k]
    rng -= sliding_min(x, k + 1)
    al.memo[key] = value = float(rng.max() if ok.all() else rng[ok].max())
    return value


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
    """Integral (J) of one device between two times, clipped to its span, under its hold.

    The readings inside (t0, t1) plus the power at both ends (:func:`held_at`), integrated
    by :func:`hold_energy_j`: trapezoid for ``linear``, steps for ``previous``.
    """
    a, b = max(t0_ms, float(d.t_ms[0])), min(t1_ms, float(d.t_ms[-1]))
    if b <= a:
        return 0.0
    inner = d.t_ms[(d.t_ms > a) & (d.t_ms < b)].astype(np.float64)
    t = np.concatenate(([a], inner, [b]))
    return hold_energy_j(t, held_at(d.t_ms.astype(np.float64), d.p, t, d.hold), d.hold)


def _tokens(run: Run) -> float | None:
    key = "tokens" if run.workload == "finetune" else "tokens_out"
    tokens = run.meta.get(key)
    if tokens is None and run.workload == "inference" and run.requests:
        total = 0.0
        for block in request_blocks(run.requests):  # whole counts: exact in any order
            outs = number_column(block, "output_tokens")
            if np.isnan(outs).any():
                total = math.nan
                break
            total += float(np.sum(outs))
        if not math.isnan(total):
            tokens = total
    return float(tokens) if tokens else None


def _steady_tokens(run: Run, t0: int, t1: int) -> float | None:
    if not run.requests:
        return None
    total, any_known = 0.0, False
    # one block of requests at a time (a spilled log is never held whole), summed in order
    for block in request_blocks(run.requests):
        first, finish, k = (number_column(block, name)
                            for name in ("first_token_ms", "finish_ms", "output_tokens"))
        known = ~(np.isnan(first) | np.isnan(finish) | np.isnan(k))
        if not known.any():
            continue
        any_known = True
        first, finish, k = first[known], finish[known], k[known]
        in_first = ((first >= t0) & (first <= t1)).astype(np.float64)
        span = finish - first
        overlap = np.clip(np.minimum(finish, t1) - np.maximum(first, t0), 0.0, None)
        rest = np.where(span > 0, overlap / np.where(span > 0, span, 1.0),
                        ((finish >= t0) & (finish <= t1)).astype(np.float64))
        total += float(np.sum(np.minimum(k, 1.0) * in_first + np.maximum(k - 1.0, 0.0) * rest))
    return total if any_known else None
