"""Level and ramp metrics on the node total, and the seed-compatible ramp metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..run import Run
from .core import (
    GRID_MS,
    RAMP_WINDOWS,
    SEED_RAMP_NAMES,
    Aligned,
    _Dev,
    _Out,
    _percentiles,
    _ratio,
    _window_means,
)


def _group_level(run: Run, devs: list[_Dev | None], al: Aligned | None, cap: float | None,
                 out: _Out) -> None:
    """Level.

    - ``duration_s`` = D = (max_d t_d,last − min_d t_d,first) / 1000 over valid readings.
    - ``mean_power_w`` = P̄ = energy_j / D (time-weighted mean of the node total).
    - ``p5_power_w``, ``p50_power_w``, ``p95_power_w``, ``p99_power_w`` = percentiles of Pₖ,
      the node total at the sampling instants: Σ_d P_d at each common sampling tick k (each
      device's reading nearest the tick, within half a period), or, when the devices are not
      read on a common tick, Σ_d (last reading of d) at every reading of any device
      (sample-and-hold); never interpolated, so spikes between grid points are not shaved
      (``metric_notes`` says which; ``metrics.levels``).
    - ``peak_power_w`` = max Pₖ (as the percentiles).
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
    peak, p5, p50, p95, p99, window_peaks = _level_stats(al)
    out.set("p5_power_w", p5)
    out.set("p50_power_w", p50)
    out.set("p95_power_w", p95)
    out.set("p99_power_w", p99)
    out.set("peak_power_w", peak)
    for name, seconds in (("peak_power_1s_w", 1.0), ("peak_power_60s_w", 60.0)):
        if window_peaks[name] is not None:
            out.set(name, window_peaks[name])
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


def _level_stats(al: Aligned) -> tuple[float, float, float, float, float, dict[str, Any]]:
    """(peak, p5, p50, p95, p99, {peak_power_1s_w, peak_power_60s_w}) of :func:`_group_level`.

    They depend on the node total alone: computed once per total (``Aligned.memo``).
    """
    if "level_stats" in al.memo:
        return al.memo["level_stats"]  # type: ignore[no-any-return]
    x = al.levels.values.copy() if al.levels is not None else al.values()
    peak = float(x.max())
    p5, p50, p95, p99 = _percentiles(x, (5, 50, 95, 99))
    starts, stops = al.segments()
    cs = np.zeros(len(al.total) + 1)  # cs[0] = 0: the sum before the first point
    np.cumsum(al.total if al.valid.all() else np.where(al.valid, al.total, 0.0), out=cs[1:])
    window_peaks: dict[str, Any] = {}
    for name, seconds in (("peak_power_1s_w", 1.0), ("peak_power_60s_w", 60.0)):
        w = max(1, int(round(seconds / al.step_s)))
        means = _window_means(cs, starts, stops, w)
        window_peaks[name] = means.max() if means.size else None
    al.memo["level_stats"] = stats = (peak, p5, p50, p95, p99, window_peaks)
    return stats


def _ramp_stats(al: Aligned, k: int) -> list[float] | None:
    """[up max, down max, |r| p95, |r| p99] of r over k grid steps (None: no pair); memoised."""
    key = ("ramp_stats", k)
    if key in al.memo:
        return al.memo[key]  # type: ignore[no-any-return]
    r = al.lag_diff(k) / (k * al.step_s)
    vals = None
    if r.size:
        vals = [max(0.0, float(r.max())), max(0.0, float(-r.min()))]
        vals += _percentiles(np.abs(r, out=r), (95, 99))
    al.memo[key] = vals
    return vals


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
        vals = _ramp_stats(al, k)
        if vals is None:
            out.null(names + pct, f"no gap-free stretch of {delta:g} s")
            continue
        for n, v in zip(names, vals, strict=True):
            out.set(n, v)
        if cap is None:
            out.null(pct, "power limit unknown")
        else:
            for n, v in zip(pct, vals, strict=True):
                out.set(n, 100.0 * v / cap)


_UNION_BLOCK = 1 << 18
"""Union points per block (about) in :func:`_union_blocks`: every temporary of a block (the
merge, its argsort, the carried-forward sums, the ramps) is a few MB, so the allocator reuses
the same memory block after block and caches stay warm, instead of faulting in fresh pages for
union-sized arrays (on a VM that cost more than the arithmetic)."""


def _union_blocks(devs: list[_Dev]) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """The seed authors' aggregate Σ_d (last reading of d at or before t), block by block.

    Yields ``(cut, t_ms, total)`` for consecutive runs of union timestamps — every timestamp t of
    any device from the moment every device has read once (the first one is that moment) — each
    run holding the union points after the previous ``cut`` up to and including its own. Linear
    time, memory bounded by a block: the timeline is cut at every k-th reading of the device
    with the most readings; within a block the devices' readings are merged (one stable argsort
    of the concatenated, already sorted per-device times), each reading's place in the block's
    union comes from the inverse permutation, and each device's carried-forward values are one
    ``numpy.repeat`` of its readings (starting from its last reading before the block), added
    to the block's total in device order: the same floating-point sums as a per-point loop.
    """
    start = max(int(d.t_ms[0]) for d in devs)
    end = max(int(d.t_ms[-1]) for d in devs)
    longest = max(devs, key=lambda d: len(d.t_ms)).t_ms
    step = max(1, _UNION_BLOCK // len(devs))
    cuts = longest[np.searchsorted(longest, start, side="right")::step]
    cuts = np.unique(np.r_[start, cuts[cuts < end], end])  # block b is (cuts[b], cuts[b + 1]]
    bounds = [np.searchsorted(d.t_ms, cuts, side="right") for d in devs]  # readings <= each cut
    for b in range(len(cuts) - 1):
        lead = b == 0  # the first block starts with the common start itself
        spans = [(int(bd[b]), int(bd[b + 1])) for bd in bounds]
        merged = np.concatenate([d.t_ms[lo:hi] for d, (lo, hi) in zip(devs, spans, strict=True)])
        order = np.argsort(merged, kind="stable")
        ordered = merged[order]
        new = np.empty(len(ordered), dtype=bool)
        new[:1] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
        times = ordered[new]
        n = len(times) + lead
        if lead:
            times = np.r_[start, times]
        where = np.empty_like(order)
        where[order] = np.cumsum(new) - (1 - lead)  # union index (in the block) of each reading
        total = np.zeros(n)
        k0 = 0
        for d, (lo, hi) in zip(devs, spans, strict=True):  # device order: a per-point loop's sums
            pos = where[k0:k0 + hi - lo]
            k0 += hi - lo
            held = np.diff(np.r_[0, pos, n])  # points each reading holds, from the one before
            total += np.repeat(d.p[lo - 1:hi], held)
        yield int(cuts[b + 1]), times, total


def _seed_aggregates(devs: list[_Dev], delta_s: float, grid_ms: int = GRID_MS
                     ) -> tuple[np.ndarray | None, tuple[np.ndarray, np.ndarray, float] | None]:
    """Both seed aggregates in one pass over :func:`_union_blocks`: ``(tick, union_ramps)``.

    ``tick`` = Pₖ, the per-tick aggregate Σ_d (last reading of d at or before t) on the 0.1 s
    grid from the common start to the last reading (None: shorter than one step): the union
    total at the last union point at or before each grid point, so the same sums.
    ``union_ramps`` = :func:`seed_ramps` on the union aggregate Pᵤ as ``(down, upward,
    minutes)``: ``down`` = −r for r < 0, ``upward`` = r for r ≥ 0 (views of one buffer, in no
    particular order), ``minutes`` = the union's span (None: no union point). P(t − δ) is
    interpolated on the union points from δ before each block on (carried over from the
    previous blocks), so every r is the one :func:`seed_ramps` computes on the whole series.
    """
    start = max(int(d.t_ms[0]) for d in devs)
    end = max(int(d.t_ms[-1]) for d in devs)
    grid = np.arange(start, end + 1, grid_ms, dtype=np.int64) if end - start >= grid_ms else None
    tick = np.empty(len(grid)) if grid is not None else None
    g0 = 0
    before = np.zeros(1)  # the previous block's last total, for grid points ahead of a block
    size = sum(len(d.t_ms) for d in devs) + 1  # at least the union's points
    buf = np.empty(size)
    nd = nu = 0
    carry_t = carry_p = np.zeros(0)  # the points before the block that t − δ can reach
    t0 = t_last = None
    for cut, t_ms, total in _union_blocks(devs):
        if grid is not None and tick is not None:
            g1 = int(np.searchsorted(grid, cut, side="right"))
            held = np.searchsorted(t_ms, grid[g0:g1], side="right")  # 0: before the block
            tick[g0:g1] = np.concatenate((before, total))[held]
            g0 = g1
        if not len(t_ms):  # cannot happen (every cut is a reading), but never index into it
            continue
        before = total[-1:]
        t_s = t_ms / 1000.0
        if t0 is None:
            t0 = float(t_s[0])
        t_last = float(t_s[-1])
        first = int(np.searchsorted(t_s, t0 + delta_s, side="left"))
        if first < len(t_s):
            x = t_s[first:] - delta_s
            r = np.empty(len(x))
            # P(t − δ) before the block's first point comes from the carried points
            split = int(np.searchsorted(x, t_s[0], side="left")) if carry_t.size else 0
            if split:
                r[:split] = np.interp(x[:split], np.concatenate((carry_t, t_s[:1])),
                                      np.concatenate((carry_p, total[:1])))
            r[split:] = np.interp(x[split:], t_s, total)
            np.subtract(total[first:], r, out=r)
            if delta_s != 1.0:
                r /= delta_s
            neg = r < 0
            k = int(np.count_nonzero(neg))
            np.compress(neg, r, out=buf[nd:nd + k])
            nd += k
            np.logical_not(neg, out=neg)  # r ≥ 0: r is finite (valid readings only)
            np.compress(neg, r, out=buf[size - nu - (len(r) - k):size - nu])
            nu += len(r) - k
        # keep the points a later block's t − δ can fall between: the last one more than δ
        # before the block's end and every later one
        keep = int(np.searchsorted(t_s, t_s[-1] - delta_s, side="left")) - 1
        if keep >= 0 or not carry_t.size:
            carry_t, carry_p = t_s[max(keep, 0):], total[max(keep, 0):]
        else:  # a block shorter than δ: older points still count
            xp, fp = np.concatenate((carry_t, t_s)), np.concatenate((carry_p, total))
            keep = max(0, int(np.searchsorted(xp, xp[-1] - delta_s, side="left")) - 1)
            carry_t, carry_p = xp[keep:], fp[keep:]
    if t0 is None or t_last is None:
        return tick, None
    down = buf[:nd]
    np.negative(down, out=down)
    return tick, (down, buf[size - nu:], (t_last - t0) / 60.0)


def seed_ramps(t_s: np.ndarray, p: np.ndarray, delta_s: float) -> np.ndarray:
    """r(t) = (P(t) − P(t − δ)) / δ at every sample t ≥ t_0 + δ, P(t − δ) linearly interpolated."""
    first = int(np.searchsorted(t_s, t_s[0] + delta_s, side="left"))
    if first >= len(t_s):
        return np.zeros(0)
    r = np.interp(t_s[first:] - delta_s, t_s, p)  # P(t − δ); then in place (no temporaries)
    np.subtract(p[first:], r, out=r)
    r /= delta_s
    return r


def _tick_ramps(p: np.ndarray, delta_s: float, grid_ms: int = GRID_MS) -> np.ndarray:
    """:func:`seed_ramps` on the 0.1 s tick grid, where t − δ is a grid point: a lagged difference."""
    k = int(round(delta_s * 1000 / grid_ms))
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
    tick, union = _seed_aggregates(ok, 1.0)
    for tag, delta in (("1s", 1.0), ("5s", 5.0), ("10s", 10.0)):
        over = "" if tag == "1s" else f" over {tag}"
        up_names = (f"ramp_up_p95_{tag}_w_per_s", f"ramp_up_p99_{tag}_w_per_s")
        r = _tick_ramps(tick, delta) if tick is not None else np.zeros(0)
        up = r[r > 0]
        if up.size:
            for name, value in zip(up_names, _percentiles(up, (95, 99)), strict=True):
                out.set(name, value)
        else:
            out.null(up_names, f"no up-ramps{over}")
        if tag == "1s":  # 5 s / 10 s keep the per-tick r: no published values to match there
            down, upward, minutes = union if union is not None else (r[:0], r[:0], 0.0)
        else:
            down = r[r < 0]
            np.negative(down, out=down)
        if down.size:
            out.set(f"ramp_down_p99_{tag}_w_per_s", _percentiles(down, (99,))[0])
        else:
            out.null(f"ramp_down_p99_{tag}_w_per_s", f"no down-ramps{over}")
        if tag == "1s":
            if not upward.size:
                out.null("ramp_event_frequency_1s", "no ramps")
                continue
            theta = _percentiles(upward, (95,))[0]  # ours: order is free
            out.set("ramp_event_frequency_1s", np.count_nonzero(upward >= theta) / minutes)
