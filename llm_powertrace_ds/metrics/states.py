"""State metrics (idle, near limit, steps, checkpoint dips), gaps and observed sampling."""

from __future__ import annotations

import numpy as np

from .core import (
    CHECKPOINT_BASELINE_S,
    IDLE_FRACTION_OF_LIMIT,
    NEAR_LIMIT_FRACTION,
    SAMPLING_NAMES,
    STATE_NAMES,
    STEP_FRACTION_OF_LIMIT,
    STEP_WINDOW_S,
    Aligned,
    _Dev,
    _EventIndex,
    _Out,
    _percentile_lerp,
    event_windows,
)


def _group_states(ev: _EventIndex, al: Aligned | None, cap: float | None, out: _Out,
                  dips: tuple[list[tuple[int, int]] | None, str] | None = None) -> None:
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
    - ``checkpoint_dip_count`` = number of checkpoints with gap-free power before and during
      them. Without checkpoint events, the checkpoint windows [b, e] are the dips detected from
      power in the work window (``metrics.detect``; flagged ``checkpoint_dips_detected``), and
      0 when the detector finds none.
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
    dip_names = ("checkpoint_dip_pct", "checkpoint_dip_s", "checkpoint_dip_count")
    if not windows and dips is not None:
        found, reason = dips
        if found is None:
            out.null(dip_names, f"no checkpoint events; none detected from power ({reason})")
            return
        if not found:
            out.set("checkpoint_dip_count", 0)
            out.null(dip_names[:2], "no checkpoint events and no dip detected from power")
            return
        windows = found
    if not windows:
        out.null(dip_names, "no checkpoint events")
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
    out.set("checkpoint_dip_count", len(depths))
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

    The intervals are whole milliseconds, so their order statistics come from a histogram (no
    array of every interval) and are interpolated as ``numpy.percentile`` does
    (:func:`_percentiles_of_ms`).
    """
    hist = np.zeros(0, dtype=np.int64)
    long: list[np.ndarray] = []
    for d in devs:
        if d is None or len(d.t_ms) < 2:
            continue
        dt = np.diff(d.t_ms)
        counts = np.bincount(np.minimum(dt, _HIST_MS))  # as long as the longest interval
        if len(counts) > len(hist):
            counts[:len(hist)] += hist
            hist = counts
        else:
            hist[:len(counts)] += counts
        if dt.max() >= _HIST_MS:
            long.append(dt[dt >= _HIST_MS])
    if not hist.any():
        out.null(SAMPLING_NAMES, "no device has 2 readings")
        return
    med, p95 = _percentiles_of_ms(hist[:_HIST_MS], np.sort(np.concatenate(long or [hist[:0]])),
                                  (50.0, 95.0))
    out.set("sampling_interval_observed_median_s", med)
    out.set("sampling_interval_observed_p95_s", p95)


_HIST_MS = 1 << 16
"""Intervals below this many ms are counted in a histogram; longer ones are kept and sorted."""


def _percentiles_of_ms(counts: np.ndarray, long_ms: np.ndarray, qs: tuple[float, ...]
                       ) -> list[float]:
    """``numpy.percentile(ms / 1000.0, qs)`` of the intervals, from their histogram.

    ``counts[v]`` intervals last v ms (v < len(counts)); ``long_ms`` are the longer ones,
    sorted. The k-th smallest interval comes from the cumulative counts; the result is
    interpolated between the two order statistics around the virtual index (n − 1) · q exactly as
    ``numpy.percentile``'s default (``linear``) method does, so the values are the same to the
    last bit (``test_metrics_behaviour`` compares them on random intervals).
    """
    cum = np.cumsum(counts)
    n_short = int(cum[-1])
    n = n_short + len(long_ms)

    def kth(k: int) -> float:
        ms = int(np.searchsorted(cum, k, side="right")) if k < n_short else int(long_ms[k - n_short])
        return ms / 1000.0

    res = []
    for q in qs:
        virtual = (n - 1) * (q / 100.0)
        lo = int(np.floor(virtual))
        if lo >= n - 1:
            res.append(kth(n - 1))
            continue
        res.append(_percentile_lerp(kth(lo), kth(lo + 1), virtual - lo))
    return res


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------

