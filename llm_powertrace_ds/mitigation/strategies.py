"""The three ways to make a load acceptable to the grid: cap, floor, storage (in that order).

Order: a **cap** first shapes the work (energy above the cap is work not done at that moment),
a **floor** then keeps the load from falling below a level (energy burnt on purpose, the way GPU
firmware power smoothing and "burn" kernels keep a floor), and **storage** last decouples what the
grid sees from what the load draws. Each takes and returns a piecewise-constant profile on the
same time base (sample k holds for Δt_k), so energies are exact sums Σ P_k Δt_k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .controller import Controlled, control

DEFAULT_EFFICIENCY = 0.85
"""Round-trip efficiency of the storage: 85 %, NREL's Annual Technology Baseline assumption for
utility-scale lithium-ion battery storage (ATB 2024, "Utility-Scale Battery Storage")."""


@dataclass(frozen=True)
class CapResult:
    """A cap C: the load becomes min(P, C).

    ``energy_above_cap_j`` = Σ max(P_k − C, 0) Δt_k: the work the load could not draw while
    capped. The slowdown this causes (the job taking longer) is not modelled.
    """

    cap_w: float
    energy_above_cap_j: float
    power_w: np.ndarray


@dataclass(frozen=True)
class FloorResult:
    """A floor F: the load becomes max(P, F); ``extra_energy_j`` = Σ max(F − P_k, 0) Δt_k."""

    floor_w: float
    extra_energy_j: float
    power_w: np.ndarray


@dataclass(frozen=True)
class StorageResult:
    """Storage behind a ramp-limited grid connection (see :func:`storage`)."""

    ramp_limit_w_per_s: float
    efficiency: float
    grid_w: np.ndarray
    """What the grid supplies to the site (the losses' make-up excluded, see ``losses_j``)."""
    soc_j: np.ndarray
    """Energy stored relative to the start, after each sample (lossless accounting)."""
    control: Controlled
    """The controller's run: time constant, steady span, warm-up, starts and stops."""
    power_w: float
    """Rating for the periodic swing: the larger of discharge and charge power after warm-up."""
    discharge_power_w: float
    charge_power_w: float
    energy_j: float
    """Usable energy for the periodic swing: the SoC excursion after warm-up (converged)."""
    discharged_j: float
    charged_j: float
    losses_j: float

    @property
    def energy_with_starts_stops_j(self) -> float:
        """energy_j + the start's ΔP²/(2R) + the stop's: the setpoint leaves room for both."""
        c = self.control
        return self.energy_j + sum(x.storage_energy_j for x in (c.start, c.stop) if x)


def cap(power_w: np.ndarray, dt_s: np.ndarray, cap_w: float) -> CapResult:
    """P'_k = min(P_k, C); energy above the cap = Σ max(P_k − C, 0) Δt_k."""
    out = np.minimum(power_w, cap_w)
    return CapResult(cap_w=cap_w, energy_above_cap_j=float(np.dot(power_w - out, dt_s)),
                     power_w=out)


def floor(power_w: np.ndarray, dt_s: np.ndarray, floor_w: float) -> FloorResult:
    """P'_k = max(P_k, F); extra energy = Σ max(F − P_k, 0) Δt_k."""
    out = np.maximum(power_w, floor_w)
    return FloorResult(floor_w=floor_w, extra_energy_j=float(np.dot(out - power_w, dt_s)),
                       power_w=out)


def ramp_limited(power_w: np.ndarray, dt_s: np.ndarray, ramp_w_per_s: float) -> np.ndarray:
    """The grid side G of a causal ramp-rate limiter.

    G_0 = P_0 and G_k = clip(P_k, G_{k−1} − R·Δt_{k−1}, G_{k−1} + R·Δt_{k−1}).

    The grid side follows the load as fast as R allows and never faster. Not the storage
    controller (it never restores the state of charge, which then drifts with every dip); kept
    as the reference a start or stop of ΔP is sized against: it needs ΔP²/(2R).
    """
    p = power_w.tolist()
    steps = (dt_s * ramp_w_per_s).tolist()
    g = [0.0] * len(p)
    prev = p[0]
    g[0] = prev
    for k in range(1, len(p)):
        step = steps[k - 1]
        target = p[k]
        if target > prev + step:
            prev = prev + step
        elif target < prev - step:
            prev = prev - step
        else:
            prev = target
        g[k] = prev
    return np.asarray(g, dtype=np.float64)


def storage(power_w: np.ndarray, dt_s: np.ndarray, ramp_w_per_s: float,
            efficiency: float = DEFAULT_EFFICIENCY) -> StorageResult:
    """Size the storage that lets the grid side ramp at most R while the load draws P.

    The grid side G is set by the state-of-charge-restoring controller of
    :mod:`.controller` (it follows the load's slow mean, restores the state of charge to its
    setpoint, ramps at most R); the storage delivers P_k − G_k (charges when negative):

    - ``energy_j`` = max S − min S after the warm-up, S_k = Σ_{j ≤ k} (G_j − P_j) Δt_j on the
      steady span: the converged size for the periodic swing (independent of horizon and start
      phase for a periodic load); ``discharge_power_w`` = max (P − G), ``charge_power_w`` =
      max (G − P), over the same samples, ``power_w`` the larger;
    - starts and stops: ΔP²/(2R) each, in ``control.start`` / ``control.stop``;
    - ``discharged_j`` = Σ max(P − G, 0) Δt, ``charged_j`` = Σ max(G − P, 0) Δt over the whole
      profile; ``losses_j`` = discharged_j · (1/η − 1), η the round-trip efficiency: every joule
      delivered had to be charged with 1/η joules; the grid supplies the losses as a slow
      make-up charge (added to its energy, not to its ramps).

    Sizing is lossless: a lossy storage needs the same usable energy plus the make-up.

    Known answers (tests): a square wave of step ΔP and period T gives the closed form of the
    controller's periodic steady state, whatever the horizon and phase; a single step ΔP gives
    a start of ΔP²/(2R).
    """
    if not (math.isfinite(ramp_w_per_s) and ramp_w_per_s > 0):
        raise ValueError(f"ramp limit {ramp_w_per_s!r} W/s is not a positive number")
    if not (0 < efficiency <= 1):
        raise ValueError(f"efficiency {efficiency!r} is not in (0, 1]")
    c = control(power_w, dt_s, ramp_w_per_s)
    exchange = power_w - c.grid_w  # > 0: the storage discharges into the load
    discharged = float(np.dot(np.maximum(exchange, 0.0), dt_s))
    charged = float(np.dot(np.maximum(-exchange, 0.0), dt_s))
    return StorageResult(
        ramp_limit_w_per_s=ramp_w_per_s, efficiency=efficiency, grid_w=c.grid_w, soc_j=c.soc_j,
        control=c, power_w=max(c.discharge_power_w, c.charge_power_w),
        discharge_power_w=c.discharge_power_w, charge_power_w=c.charge_power_w,
        energy_j=c.energy_j, discharged_j=discharged, charged_j=charged,
        losses_j=discharged * (1.0 / efficiency - 1.0))
