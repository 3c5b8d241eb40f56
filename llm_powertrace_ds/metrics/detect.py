"""Events from power alone: checkpoint dips and the training-step period.

Used only when the run has no such events (real events are never overwritten); what is found
is flagged ``checkpoint_dips_detected`` / ``step_period_detected`` and noted in
``metric_notes``. Both work on the node total on the 0.1 s grid inside the work window.

Checkpoint dips
    M(t) is the 1 s moving mean of P, B the median of M over the work window (the training
    level), F the lowest M there. A dip is a maximal stretch with M < B − (B − F) / 2 that lasts
    at least :data:`DIP_MIN_S`, lies inside the window (touches neither end) and reaches at
    least :data:`DIP_MIN_DEPTH` of B below B (min M ≤ (1 − 0.25) · B). When the stretches
    together cover more than :data:`DIP_MAX_SHARE` of the window, they are the workload's own
    rhythm, not saves, and none is reported.
Step period
    The autocorrelation r(τ) of P − mean(P) over the longest gap-free stretch of the window
    (at least :data:`MIN_STEP_STRETCH_S`); T is the lag of the highest local maximum of r after
    its first zero crossing, between :data:`MIN_STEP_S` and a third of the stretch (at most
    :data:`MAX_STEP_S`), refined by a parabola through the three points around it, kept when
    r(T) ≥ :data:`MIN_STEP_ACF`.
"""

from __future__ import annotations

import numpy as np

from .core import Aligned

DIP_MIN_S = 2.0
"""Shortest checkpoint dip (s): a save takes seconds; a step's own trough is shorter."""
DIP_MIN_DEPTH = 0.25
"""A dip's 1 s mean falls at least this share of the training level below it."""
DIP_MAX_SHARE = 0.3
"""Stretches covering more of the work window than this are the workload's rhythm, not dips."""
MIN_STEP_S = 0.3
"""Shortest step period searched (s)."""
MAX_STEP_S = 120.0
"""Longest step period searched (s)."""
MIN_STEP_STRETCH_S = 20.0
"""Shortest gap-free stretch the step period is searched on (s)."""
MIN_STEP_ACF = 0.3
"""Smallest autocorrelation at the step period for it to count."""


def _moving_mean(al: Aligned, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(means of windows [j, j + w), True where the window is gap-free)."""
    x = np.where(al.valid, al.total, 0.0)
    cs = np.concatenate(([0.0], np.cumsum(x)))
    cv = np.concatenate(([0], np.cumsum(al.valid.astype(np.int64))))
    return (cs[w:] - cs[:-w]) / w, (cv[w:] - cv[:-w]) == w


def detect_dips(al: Aligned) -> tuple[list[tuple[int, int]] | None, str]:
    """Checkpoint dips as (begin, end) times in ms, or ``None`` and the reason.

    Args:
        al: the node total on the grid, restricted to the work window.
    """
    w = max(1, int(round(1.0 / al.step_s)))
    if len(al.total) < 3 * w:
        return None, "the work window is shorter than 3 s"
    mean, full = _moving_mean(al, w)
    if not full.any():
        return None, "no gap-free 1 s window"
    base = float(np.median(mean[full]))
    floor = float(mean[full].min())
    if base <= 0:
        return None, "the training level is not positive"
    below = full & (mean < base - (base - floor) / 2.0)
    edges = np.diff(np.concatenate(([0], below.astype(np.int8), [0])))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    min_len = int(round(DIP_MIN_S / al.step_s))
    dips = []
    covered = 0
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
        covered += b - a
        if b - a < min_len or a == 0 or b >= len(mean):
            continue
        if float(mean[a:b].min()) > (1.0 - DIP_MIN_DEPTH) * base:
            continue
        dips.append((int(al.grid_ms[a]), int(al.grid_ms[min(b - 1 + w - 1, len(al.grid_ms) - 1)])))
    if covered > DIP_MAX_SHARE * int(full.sum()):
        return None, (f"power stays below the training level for more than "
                      f"{100 * DIP_MAX_SHARE:g} % of the work window: the workload's own "
                      "rhythm, not checkpoint saves")
    return dips, ""


def detect_step_period(al: Aligned) -> tuple[float | None, float, str]:
    """(T in s or ``None``, r(T), reason when ``None``) from the autocorrelation of P."""
    starts, stops = al.segments()
    if not starts.size:
        return None, 0.0, "no gap-free node total"
    longest = int(np.argmax(stops - starts))
    a, b = int(starts[longest]), int(stops[longest])
    n = b - a
    if n * al.step_s < MIN_STEP_STRETCH_S:
        return None, 0.0, f"no gap-free stretch of {MIN_STEP_STRETCH_S:g} s"
    x = al.total[a:b] - float(np.mean(al.total[a:b]))
    var = float(np.dot(x, x))
    if var <= 1e-12 * max(1.0, float(np.mean(np.abs(al.total[a:b])))) ** 2 * n:
        return None, 0.0, "flat power"
    kmin = max(2, int(np.ceil(MIN_STEP_S / al.step_s)))
    kmax = min(int(MAX_STEP_S / al.step_s), n // 3)
    if kmax <= kmin + 1:
        return None, 0.0, "the stretch is too short for the shortest step period"
    # r(0..kmax) only: zero padding to n + kmax + 1 points keeps the circular correlation of
    # those lags free of wrap-around (not to 2n: half the transform for a long stretch)
    size = 1 << int(np.ceil(np.log2(n + kmax + 1)))
    spec = np.fft.rfft(x, size)
    r = np.fft.irfft(spec * np.conj(spec), size)[:kmax + 1] / var
    neg = np.flatnonzero(r[1:kmax] < 0)
    if not neg.size:
        return None, 0.0, "the autocorrelation never falls below zero (a trend, no rhythm)"
    k0 = max(kmin, int(neg[0]) + 1)
    inner = np.arange(k0, kmax)
    peaks = inner[(r[inner] > r[inner - 1]) & (r[inner] >= r[inner + 1])]
    if not peaks.size:
        return None, 0.0, "no autocorrelation peak"
    k = int(peaks[np.argmax(r[peaks])])
    if r[k] < MIN_STEP_ACF:
        return None, float(r[k]), (f"no autocorrelation peak reaches {MIN_STEP_ACF:g} "
                                   f"(highest {r[k]:.2f})")
    y0, y1, y2 = float(r[k - 1]), float(r[k]), float(r[k + 1])
    den = y0 - 2.0 * y1 + y2
    shift = 0.5 * (y0 - y2) / den if den < 0 else 0.0
    return (k + shift) * al.step_s, y1, ""
