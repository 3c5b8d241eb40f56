"""How a job repeats: its measured ramp-up, a steady block cut at matching phase, its ramp-down.

A source's template (its work window on the 0.1 s grid) is split into three measured parts:

* **ramp-up** ``[0, b0)``: from the start of the work window to the start of the steady block;
* **steady block** ``[b0, b1)``: repeated seamlessly for as long as the job runs;
* **ramp-down** ``[b1, n)``: the rest of the steady window and the measured ramp-down.

The block is cut at *matching phase*, so that the sample after ``b1 - 1`` is ``b0`` with no restart
between repeats:

``steps``
    Step boundaries where the run has them: the first to the last ``step_begin`` (whole optimiser
    steps). A job may leave the block for the ramp-down at any step boundary inside it.
``period``
    Else the period P of the steady window by the run metrics' own step-period rule
    (:func:`llm_powertrace_ds.metrics.detect.detect_step_period`: the highest peak of the
    autocorrelation r(τ) = Σ_t x̃(t) x̃(t + τ) / Σ_t x̃(t)², x̃ = x − mean, after its first zero
    crossing, refined by a parabola, kept when r(P) ≥ 0.3; the window must be 20 s or longer).
    k is the most whole periods that fit in the steady window with two
    periods to spare; b0 lies in the window's first period and b1 within P/4 of b0 + k·P, the
    pair chosen so that the period after b1 best matches the period after b0 (least squares).
    A job may leave the block at any whole period (offset round(j·L/k), L = b1 − b0).
``matched``
    No period: b1 is the sample in the last
    :data:`MATCH_SEARCH_S` of the steady window whose next :data:`MATCH_WINDOW_S` best match
    those after b0 (least squares, the latest of equals); a job may leave the block at any
    offset whose next samples match those after b1 within twice the join's own error.
``events``
    A ``steady_begin``/``steady_end`` window without steps or a period: the window itself.

The steady window, when the run has no events that give it, is found from power: on the 1 s
centred moving mean M(t) of the node total, θ = the :data:`STEADY_PERCENTILE` th percentile of M over
the middle half of the work window; the steady window runs from the first to the last sample with
M ≥ θ. Dips inside it (checkpoints, evaluation) stay where they were measured: the block repeats
them at their measured offsets, never fills them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..metrics.core import Aligned
from ..metrics.detect import MIN_STEP_ACF, detect_step_period

STEADY_PERCENTILE = 5.0
"""Percentile of the 1 s mean over the middle half of the work window that bounds the steady window."""
MATCH_SEARCH_S = 10.0
"""Without a period: where b1 is searched, the last seconds of the steady window."""
MATCH_WINDOW_S = 2.0
"""Without a period: how many seconds after a cut are compared."""


@dataclass(frozen=True)
class Shape:
    """Where a template's ramp-up, steady block and ramp-down are.

    Attributes:
        steady: ``(s0, s1)`` grid indices of the steady window (end exclusive).
        block: ``(b0, b1)`` the repeated block (end exclusive).
        cuts: offsets from ``b0``, ascending and starting at 0, at which a job may leave the
            block for the ramp-down with matching phase.
        period_s: the period of the steady window, when one was found (s).
        how: ``steps``, ``period``, ``matched``, ``events`` or ``whole`` (see the module
            docstring; ``whole``: too short to split, the template is the block).
    """

    steady: tuple[int, int]
    block: tuple[int, int]
    cuts: tuple[int, ...]
    period_s: float | None
    how: str

    def describe(self, step_s: float) -> str:
        """One line for ``limits``: how the steady window is repeated."""
        b0, b1 = self.block
        s0, s1 = self.steady
        span = f"[{b0 * step_s:.1f} s, {b1 * step_s:.1f} s)"
        steady = f"steady window [{s0 * step_s:.1f} s, {s1 * step_s:.1f} s)"
        if self.how == "steps":
            return (f"{len(self.cuts)} whole steps {span} repeated, cut at step boundaries")
        if self.how == "period":
            assert self.period_s is not None
            return (f"{steady} repeated as {len(self.cuts)} periods of {self.period_s:.2f} s "
                    f"(autocorrelation) {span}, cut at matching phase")
        if self.how == "matched":
            return (f"{steady} has no period (autocorrelation below {MIN_STEP_ACF:g}): {span} "
                    "repeated, cut where the next samples best match the block's first ones")
        if self.how == "events":
            return f"steady-state window {span} (steady_begin/steady_end) repeated"
        return f"the whole template {span} repeated (too short for a steady window)"


def moving_mean(x: np.ndarray, w: int) -> np.ndarray:
    """Centred moving mean of ``w`` samples, the window shrunk at the ends (same length as x)."""
    cs = np.concatenate(([0.0], np.cumsum(x)))
    n = len(x)
    lo = np.clip(np.arange(n) - w // 2, 0, n)
    hi = np.clip(lo + w, 0, n)
    lo = np.maximum(0, hi - w)
    return (cs[hi] - cs[lo]) / np.maximum(1, hi - lo)


def detect_steady(total_w: np.ndarray, step_s: float) -> tuple[int, int] | None:
    """The steady window of a work-window template from power (module docstring), or ``None``."""
    n = len(total_w)
    w = max(1, int(round(1.0 / step_s)))
    if n < 4 * w:
        return None
    m = moving_mean(total_w, w)
    theta = float(np.percentile(m[n // 4: 3 * n // 4], STEADY_PERCENTILE))
    above = np.flatnonzero(m >= theta)
    s0, s1 = int(above[0]), int(above[-1]) + 1
    return (s0, s1) if s1 - s0 >= 2 else None


def period(x: np.ndarray, step_s: float) -> tuple[float, float] | None:
    """(period in samples, autocorrelation at it) of ``x``, or ``None``.

    The project's one step-period rule, :func:`llm_powertrace_ds.metrics.detect.detect_step_period`
    (the run metrics' ``step_period_detected``), applied to ``x`` alone.
    """
    n = len(x)
    if n < 4:
        return None
    al = Aligned(np.arange(n, dtype=np.int64) * int(round(step_s * 1000)), [x],
                 np.asarray(x, dtype=np.float64), np.ones(n, dtype=bool), step_s)
    found, r, _ = detect_step_period(al)
    return None if found is None else (found / step_s, r)


def _best_match(x: np.ndarray, b0: int, candidates: np.ndarray, w: int) -> tuple[int, float]:
    """The candidate c whose x[c:c+w] is closest (least squares) to x[b0:b0+w], and its error."""
    ref = x[b0:b0 + w]
    errs = [float(np.sum((x[c:c + w] - ref) ** 2)) for c in candidates]
    i = int(np.argmin(errs))
    return int(candidates[i]), errs[i]


def shape(total_w: np.ndarray, step_s: float, *, steps: np.ndarray | None = None,
          steady: tuple[int, int] | None = None) -> Shape:
    """Split a template (node total on the grid, W) into ramp-up, steady block and ramp-down.

    Args:
        total_w: the template's node total on the 0.1 s grid (W).
        step_s: grid step (s).
        steps: grid indices of the run's ``step_begin`` events inside the template.
        steady: the steady window from ``steady_begin``/``steady_end`` events, when the run
            has them; else it is found from power.

    Returns:
        The :class:`Shape` (module docstring for the rules).

    Example:
        >>> x = np.tile(np.r_[np.full(30, 1000.0), np.full(10, 600.0)], 20)
        >>> s = shape(np.r_[np.linspace(100, 1000, 20), x, np.linspace(1000, 100, 20)], 0.1)
        >>> s.how, round(s.period_s, 1)
        ('period', 4.0)
    """
    n = len(total_w)
    if steps is not None and steps.size >= 2 and steps[-1] > steps[0]:
        b0, b1 = int(steps[0]), int(steps[-1])
        cuts = tuple(int(s - b0) for s in steps if b0 <= s < b1)
        return Shape((b0, b1), (b0, b1), cuts, None, "steps")
    from_events = steady is not None
    window = steady if steady is not None else detect_steady(total_w, step_s)
    if window is None:
        return Shape((0, n), (0, n), (0,), None, "whole")
    s0, s1 = window
    x = total_w
    found = period(x[s0:s1], step_s)
    p = found[0] if found is not None else 0.0
    w = int(round(p))
    k = int((s1 - s0 - 2 * w) // p) if found is not None else 0
    if k >= 1:
        reach = max(1, int(round(p / 4)))
        best: tuple[float, int, int] | None = None
        for b0 in range(s0, s0 + w):
            centre = int(round(b0 + k * p))
            cand = np.arange(max(b0 + 1, centre - reach), min(s1 - w, centre + reach) + 1)
            if cand.size:
                b1, err = _best_match(x, b0, cand, w)
                if best is None or err < best[0]:
                    best = (err, b0, b1)
        if best is not None:
            _, b0, b1 = best
            length = b1 - b0
            cuts = tuple(sorted({int(round(j * length / k)) for j in range(k)}))
            return Shape((s0, s1), (b0, b1), cuts, p * step_s, "period")
    if from_events:
        return Shape((s0, s1), (s0, s1), (0,), None, "events")
    w = max(1, int(round(MATCH_WINDOW_S / step_s)))
    first = max(s0 + 1, s1 - w - int(round(MATCH_SEARCH_S / step_s)))
    cand = np.arange(first, s1 - w + 1)[::-1]  # the latest of equal matches
    if cand.size == 0:
        return Shape((s0, s1), (s0, s1), (0,), None, "matched")
    b1, err = _best_match(x, s0, cand, w)
    # where the job may leave the block: offsets whose next samples match those after b1 as
    # well as the block's own join does
    ref = x[b1:b1 + w]
    errs = np.array([float(np.sum((x[s0 + r:s0 + r + w] - ref) ** 2)) for r in range(b1 - s0)])
    scale = float(np.dot(ref, ref)) * 1e-12
    cuts = tuple(int(r) for r in np.flatnonzero(errs <= 2.0 * err + scale))
    return Shape((s0, s1), (s0, b1), cuts if cuts and cuts[0] == 0 else (0, *cuts), None,
                 "matched")


def job_indices(sh: Shape, n: int, length: int) -> np.ndarray:
    """Template indices of a job that runs ``length`` samples from its start.

    Ramp-up ``[0, b0)``, then m whole blocks and a partial block of r samples (r one of
    ``sh.cuts``), then the ramp-down ``[b1, n)``: m·L + r is the largest such span that keeps the
    job within ``length`` (L = b1 − b0), so the job ends at most one cut spacing early. A job
    shorter than its ramp-up and ramp-down together runs both (it ends late, by the difference).

    Example:
        >>> sh = Shape((2, 8), (2, 6), (0, 2), None, "steps")
        >>> job_indices(sh, 9, 11).tolist()
        [0, 1, 2, 3, 4, 5, 2, 3, 6, 7, 8]
    """
    b0, b1 = sh.block
    span = b1 - b0
    middle = length - b0 - (n - b1)
    if middle <= 0 or span <= 0:
        mid = np.zeros(0, dtype=np.int64)
    else:
        m, rest = divmod(middle, span)
        r = max(c for c in sh.cuts if c <= rest)
        mid = b0 + np.arange(m * span + r, dtype=np.int64) % span
    return np.concatenate([np.arange(b0, dtype=np.int64), mid,
                           np.arange(b1, n, dtype=np.int64)])
