"""The storage controller: a grid side that follows the load's slow mean within a ramp limit.

A site's storage sits between the load P and the grid. The controller sets the grid side G; the
storage delivers P − G (charges when negative); its state of charge S obeys S' = G − P. Sample k
holds P_k for Δt_k, and G_k for the same interval, so S is an exact sum.

**Control law** (causal, no forecast), with one time constant τ:

- the load's slow mean M, a first-order low-pass: M_k = M_{k−1} + α_k (P_k − M_{k−1}),
  α_k = 1 − exp(−Δt_k/τ);
- the grid side G_k = M_k − (S_{k−1} − S*)/τ: the slow mean, plus a restoring term that brings
  the state of charge back to its setpoint S*;
- S_k = S_{k−1} + (G_k − P_k) Δt_k.

In the continuous limit the grid side is G = H·P with H(s) = (1 + 2τs)/(1 + τs)²: H(0) = 1 (the
grid side follows the load's mean, so nothing drifts) and H'(0) = 0 (every deviation of the state
of charge is restored: a step of the load leaves S where it started). The impulse response
h(t) = e^{−t/τ}(2 − t/τ)/τ has total variation (4 + 2e^{−3})/τ, so for any load inside a range
ΔP the grid side ramps at most |G'| ≤ ΔP (2 + e^{−3})/τ. Choosing

    τ = (2 + e^{−3}) · ΔP / R                                   (:func:`time_constant_s`)

keeps every grid-side ramp within R, whatever the load does inside its range; the ramp actually
reached is checked on the computed grid side and τ lengthened if discretisation ever exceeds R.

**Warm start and warm-up.** The controller starts in the steady state: M at the load's mean over
the first 2τ of the steady span (:func:`steady_span`), S at its setpoint. The storage is sized on
what follows a warm-up of :data:`WARMUP_TAU` time constants and precedes a cool-down of
:data:`COOLDOWN_TAU` before the span's end, so for a periodic load the size is that of the
periodic steady state: it depends neither on the horizon nor on the start phase. ΔP in τ is the
robust range :data:`RANGE_QUANTILES` of the span.

**Starts and stops** (the load rising from below its steady range at the beginning, falling
below it at the end) are sized separately, in closed form: a step ΔP under a ramp limit R needs
storage ΔP²/(2R) and power ΔP (the grid ramps over ΔP/R seconds); a job that ramps itself at R
needs no storage and takes ΔP/R seconds; a floor that holds the load while the grid ramps down
burns ΔP²/(2R). On the grid side of the whole profile, before the steady span the grid follows
the load within R (a start is a ramp at R up to the controller's grid side), after it likewise
(a stop is a ramp at R down from it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RANGE_GAIN = 2.0 + math.exp(-3.0)
"""τ = RANGE_GAIN · ΔP / R: the total variation of the impulse response, halved, times τ."""
WARMUP_TAU = 8.0
"""Warm-up in time constants: a transient of the warm start decays as (t/τ)e^{−t/τ}, to 0.27 %
of its scale after 8τ."""
MIN_RAMP_W_PER_S = 1e-3
"""Slowest grid ramp limit accepted (1 mW/s): below it τ would outgrow any horizon."""
MIN_TAU_STEPS = 10.0
"""τ is at least this many of the profile's longest interval, so the discrete law stays stable."""
COOLDOWN_TAU = 2.0
"""The last 2τ before the steady span's end are left out of the periodic size: a job's last
seconds (what follows its last repeat) are part of its stop, whose allowance ΔP²/(2R) covers
them; ``energy_to_span_end_j`` keeps the excursion up to the end."""
RANGE_QUANTILES = (0.1, 99.9)
"""The range that sets τ: p99.9 − p0.1 of the steady span, so that a one-off dip (a job's first
seconds) does not change the size of the periodic swing; τ is still lengthened if the grid side
would ramp faster than R."""
HEAD_S = 10.0
"""A start within the profile's first 10 s is the profile's own beginning: the grid side is
warm-started at the steady mean from the first sample (no history to ramp from), and the start
is sized only in closed form."""
STEADY_QUANTILE = 5.0
"""The steady range's lower edge: the 5th percentile of the load in the middle half of the
profile (a start or a stop at the ends cannot move it)."""


@dataclass(frozen=True)
class Transient:
    """A start (or stop) of the load sized as a step ΔP under a ramp limit R."""

    delta_w: float
    """ΔP: from the level before the start to the steady mean (or from it down to the end)."""
    ramp_limit_w_per_s: float

    @property
    def storage_energy_j(self) -> float:
        """ΔP²/(2R): the triangle between the step and a grid ramping at R."""
        return self.delta_w ** 2 / (2.0 * self.ramp_limit_w_per_s)

    @property
    def job_ramp_s(self) -> float:
        """ΔP/R: how long the job itself must take to ramp so that no storage is needed."""
        return self.delta_w / self.ramp_limit_w_per_s

    def to_json(self) -> dict[str, float]:
        e = self.storage_energy_j
        return {"delta_w": self.delta_w, "storage_energy_j": e, "storage_energy_mwh": e / 3.6e9,
                "storage_power_w": self.delta_w, "job_ramp_s": self.job_ramp_s,
                "floor_energy_j": e}


@dataclass(frozen=True)
class Controlled:
    """The controller's result on one profile (see the module docstring)."""

    grid_w: np.ndarray
    """Grid side of the whole profile (start and stop ramps included)."""
    soc_j: np.ndarray
    """S − S(0) after each sample of the whole profile."""
    time_constant_s: float
    span: tuple[int, int]
    """[a, b): the steady span the controller ran on (sample indices)."""
    sized_from: int
    """First sample after the warm-up."""
    sized_to: int
    """First sample of the cool-down: the size is taken over [sized_from, sized_to)."""
    energy_j: float
    """SoC excursion after warm-up: max − min of S over [sized_from, sized_to)."""
    energy_to_span_end_j: float
    """The same up to the span's end b (the cool-down included)."""
    discharge_power_w: float
    charge_power_w: float
    start: Transient | None
    stop: Transient | None


def time_constant_s(range_w: float, ramp_w_per_s: float, max_dt_s: float) -> float:
    """τ = max((2 + e^{−3}) ΔP / R, 10 Δt_max): the ramp of the grid side stays within R."""
    return max(RANGE_GAIN * range_w / ramp_w_per_s, MIN_TAU_STEPS * max_dt_s)


def steady_span(power_w: np.ndarray) -> tuple[int, int]:
    """[a, b): from the first to the last sample at or above the steady range's lower edge.

    The edge is the :data:`STEADY_QUANTILE` th percentile of the middle half of the profile:
    the samples before a (a start from a lower level) and from b on (a stop) are the
    transients, sized separately.
    """
    n = len(power_w)
    middle = power_w[n // 4: max(n // 4 + 1, 3 * n // 4)]
    edge = float(np.percentile(middle, STEADY_QUANTILE))
    at = np.flatnonzero(power_w >= edge)
    return int(at[0]), int(at[-1]) + 1


def _law(power_w: np.ndarray, dt_s: np.ndarray, tau: float, m0: float
         ) -> tuple[np.ndarray, np.ndarray]:
    """G and S − S* of the control law on one span, warm-started at M = m0, S = S*."""
    from scipy.signal import lfilter

    regular = bool(np.all(dt_s == dt_s[0]))
    if regular:
        dt = float(dt_s[0])
        alpha = 1.0 - math.exp(-dt / tau)
        m, _ = lfilter([alpha], [1.0, -(1.0 - alpha)], power_w, zi=[(1.0 - alpha) * m0])
        e = lfilter([dt], [1.0, -(1.0 - dt / tau)], m - power_w)
    else:  # an irregular time base: the same law, one step at a time
        alphas = (1.0 - np.exp(-dt_s / tau)).tolist()
        p_list, dts = power_w.tolist(), dt_s.tolist()
        m_list = [0.0] * len(p_list)
        e_list = [0.0] * len(p_list)
        mk, ek = m0, 0.0
        for k, (p, a, d) in enumerate(zip(p_list, alphas, dts, strict=True)):
            mk += a * (p - mk)
            ek += (mk - ek / tau - p) * d
            m_list[k], e_list[k] = mk, ek
        m, e = np.asarray(m_list), np.asarray(e_list)
    grid = m - np.concatenate(([0.0], e[:-1])) / tau
    return grid, e


def _limited(power_w: np.ndarray, dt_s: np.ndarray, ramp_w_per_s: float, g0: float,
             dt0: float = 0.0) -> np.ndarray:
    """G_k = clip(P_k, G_{k−1} ± R Δt_{k−1}) from G_{−1} = g0 (held for dt0 before sample 0)."""
    p = power_w.tolist()
    steps = [dt0 * ramp_w_per_s, *(dt_s[:-1] * ramp_w_per_s).tolist()]
    out = [0.0] * len(p)
    prev = g0
    for k, (target, step) in enumerate(zip(p, steps, strict=True)):
        prev = min(max(target, prev - step), prev + step)
        out[k] = prev
    return np.asarray(out, dtype=np.float64)


def control(power_w: np.ndarray, dt_s: np.ndarray, ramp_w_per_s: float) -> Controlled:
    """Run the controller on a load (see the module docstring for every formula).

    Args:
        power_w: the load P_k, W.
        dt_s: how long each sample holds, s.
        ramp_w_per_s: the grid side's ramp limit R, W/s.
    """
    n = len(power_w)
    t = np.concatenate(([0.0], np.cumsum(dt_s)))[:-1]
    a, b = steady_span(power_w)
    p, dt = power_w[a:b], dt_s[a:b]
    lo, hi = np.percentile(p, RANGE_QUANTILES)
    tau = time_constant_s(float(hi - lo), ramp_w_per_s, float(dt.max()))
    for _ in range(4):
        first = t[a] + 2.0 * tau
        head = p[: max(1, int(np.searchsorted(t[a:b], first)))]
        m0 = float(np.dot(head, dt[: len(head)]) / dt[: len(head)].sum())
        g, e = _law(p, dt, tau, m0)
        steps = np.abs(np.diff(g)) / dt[:-1] if len(g) > 1 else np.zeros(0)
        worst = float(steps.max()) if len(steps) else 0.0
        if worst <= ramp_w_per_s * (1 + 1e-9):
            break
        tau *= worst / ramp_w_per_s * 1.001  # discretisation exceeded R: lengthen τ
    rel = t[a:b] - t[a]
    warm = int(np.searchsorted(rel, WARMUP_TAU * tau))
    cool = int(np.searchsorted(rel, rel[-1] + dt[-1] - COOLDOWN_TAU * tau))
    if cool <= warm:
        warm, cool = 0, len(p)  # shorter than warm-up and cool-down: sized over the whole span
    sized_e, sized_x = e[warm:cool], p[warm:cool] - g[warm:cool]
    if warm == 0:  # the setpoint (the start) counts too
        energy = float(max(sized_e.max(), 0.0) - min(sized_e.min(), 0.0))
    else:
        energy = float(sized_e.max() - sized_e.min())
    to_end = float(e[warm:].max() - e[warm:].min()) if warm else energy
    grid = np.empty(n)
    grid[a:b] = g
    start = stop = None
    if a > 0 and t[a] - t[0] <= HEAD_S:  # the profile begins with the start: warm start
        grid[:a] = m0
        start = Transient(max(0.0, m0 - float(power_w[0])), ramp_w_per_s)
    elif a > 0:  # before the steady span the grid follows the load within R, then ramps at R
        grid[:a] = _limited(power_w[:a], dt_s[:a], ramp_w_per_s, float(power_w[0]))
        line = grid[a - 1] + ramp_w_per_s * (t[a:b] - t[a - 1])
        grid[a:b] = np.minimum(grid[a:b], line)
        start = Transient(max(0.0, m0 - float(power_w[0])), ramp_w_per_s)
    if b < n:  # after it, the grid follows the load down (and on) within R
        grid[b:] = _limited(power_w[b:], dt_s[b:], ramp_w_per_s, float(grid[b - 1]),
                            float(dt_s[b - 1]))
        end_mean = float(np.dot(p[-len(head):], dt[-len(head):]) / dt[-len(head):].sum())
        stop = Transient(max(0.0, end_mean - float(power_w[-1])), ramp_w_per_s)
    soc = np.cumsum((grid - power_w) * dt_s)
    return Controlled(
        grid_w=grid, soc_j=soc, time_constant_s=tau, span=(a, b), sized_from=a + warm,
        sized_to=a + cool, energy_j=energy, energy_to_span_end_j=to_end, discharge_power_w=max(0.0, float(sized_x.max())),
        charge_power_w=max(0.0, float(-sized_x.min())), start=start, stop=stop)
