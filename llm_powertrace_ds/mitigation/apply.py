"""One mitigation plan applied to one profile: cap → floor → storage, then the grid side's figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import UsageError
from . import strategies as st
from .grid import DEFAULT_BANDS, RAMP_WINDOWS_S, Band, profile_metrics
from .profile import Profile

JSON_SHAPE = "llm-powertrace/mitigate/1"
ORDER = ("cap", "floor", "storage")


@dataclass(frozen=True)
class Plan:
    """What to apply. Percentages are of ``reference_w`` (default: the input profile's peak).

    Attributes:
        cap_pct: cap the load at this % of the reference (None: no cap).
        floor_pct: keep the load at or above this % of the reference (None: no floor).
        ramp_limit_w_per_s: storage lets the grid side ramp at most this fast (None: none).
        efficiency: the storage's round-trip efficiency η.
        reference_w: what the percentages refer to, e.g. GPUs × TDP plus overhead (a TDP-based
            ceiling); None: the input profile's peak.
    """

    cap_pct: float | None = None
    floor_pct: float | None = None
    ramp_limit_w_per_s: float | None = None
    efficiency: float = st.DEFAULT_EFFICIENCY
    reference_w: float | None = None

    def check(self) -> None:
        """Raise :class:`UsageError` naming the option for values no site could have."""
        for value, option in ((self.cap_pct, "--cap-pct"), (self.floor_pct, "--floor-pct")):
            if value is not None and not (math.isfinite(value) and 0 < value <= 100):
                raise UsageError(f"{value!r} is not a percentage in (0, 100]", field=option)
        if self.ramp_limit_w_per_s is not None and not (
                math.isfinite(self.ramp_limit_w_per_s) and 0 < self.ramp_limit_w_per_s <= 1e15):
            raise UsageError(f"{self.ramp_limit_w_per_s!r} is not a ramp limit in (0, 1e15] W/s",
                             field="--ramp-limit")
        if not (math.isfinite(self.efficiency) and 0 < self.efficiency <= 1):
            raise UsageError(f"{self.efficiency!r} is not an efficiency in (0, 1]",
                             field="--efficiency")
        if self.reference_w is not None and not (
                math.isfinite(self.reference_w) and 0 < self.reference_w <= 1e15):
            raise UsageError(f"{self.reference_w!r} is not a power in (0, 1e15] W",
                             field="--ceiling")
        if (self.cap_pct is not None and self.floor_pct is not None
                and self.floor_pct > self.cap_pct):
            raise UsageError(f"a floor of {self.floor_pct:g} % above a cap of {self.cap_pct:g} % "
                             "cannot both hold", field="--floor-pct")

    @property
    def empty(self) -> bool:
        return self.cap_pct is None and self.floor_pct is None and self.ramp_limit_w_per_s is None


@dataclass(frozen=True)
class Mitigation:
    """The result of :func:`apply`: the arrays (for figures and files) and the JSON summary."""

    profile: Profile
    plan: Plan
    load_w: np.ndarray
    """The load after cap and floor (what the site draws)."""
    grid_w: np.ndarray
    """What the grid supplies (the load itself without storage)."""
    soc_j: np.ndarray | None
    summary: dict[str, Any] = field(default_factory=dict)


def _pct(part: float, whole: float) -> float | None:
    return 100.0 * part / whole if whole > 0 else None


def apply(profile: Profile, plan: Plan, *,
          bands: Sequence[Band] | None = None,
          ramp_windows_s: Sequence[float] = RAMP_WINDOWS_S) -> Mitigation:
    """Apply ``plan`` to ``profile`` in the order cap → floor → storage (:data:`ORDER`)."""
    plan.check()
    bands = DEFAULT_BANDS if bands is None else bands
    p0, dt = profile.power_w, profile.dt_s
    peak = float(p0.max())
    ref = plan.reference_w if plan.reference_w is not None else peak
    energy0 = profile.energy_j

    def metrics(power: np.ndarray) -> tuple[dict[str, Any], list[str]]:
        return profile_metrics(power, dt, bands=bands, ramp_windows_s=ramp_windows_s,
                               sensor_average_s=profile.sensor_average_s)

    load_metrics, notes = metrics(p0)
    notes = list(profile.notes) + notes
    load = p0
    out: dict[str, Any] = {"cap": None, "floor": None, "storage": None}
    if plan.cap_pct is not None:
        c = st.cap(load, dt, plan.cap_pct / 100.0 * ref)
        load = c.power_w
        out["cap"] = {"cap_pct": plan.cap_pct, "cap_w": c.cap_w,
                      "energy_above_cap_j": c.energy_above_cap_j,
                      "energy_above_cap_mwh": c.energy_above_cap_j / 3.6e9,
                      "energy_above_cap_pct": _pct(c.energy_above_cap_j, energy0),
                      "swing_w": float(load.max() - load.min()),
                      "slowdown_modelled": False}
        notes.append("cap: the energy above the cap is work not done while capped; the job's "
                     "slowdown is not modelled (give a measured capped run to know it)")
    if plan.floor_pct is not None:
        f = st.floor(load, dt, plan.floor_pct / 100.0 * ref)
        load = f.power_w
        out["floor"] = {"floor_pct": plan.floor_pct, "floor_w": f.floor_w,
                        "extra_energy_j": f.extra_energy_j,
                        "extra_energy_mwh": f.extra_energy_j / 3.6e9,
                        "extra_energy_pct": _pct(f.extra_energy_j, energy0),
                        "swing_w": float(load.max() - load.min())}
    grid = load
    soc = None
    if plan.ramp_limit_w_per_s is not None:
        s = st.storage(load, dt, plan.ramp_limit_w_per_s, plan.efficiency)
        grid, soc = s.grid_w, s.soc_j
        hours = profile.duration_s / 3600.0
        out["storage"] = {
            "ramp_limit_w_per_s": s.ramp_limit_w_per_s, "power_w": s.power_w,
            "discharge_power_w": s.discharge_power_w, "charge_power_w": s.charge_power_w,
            "energy_j": s.energy_j, "energy_mwh": s.energy_j / 3.6e9,
            "discharged_j": s.discharged_j, "charged_j": s.charged_j,
            "net_discharged_j": s.discharged_j - s.charged_j,
            "efficiency": s.efficiency, "losses_j": s.losses_j,
            "losses_pct": _pct(s.losses_j, energy0),
            "full_cycles_per_hour": (s.discharged_j / s.energy_j / hours
                                     if s.energy_j > 0 and hours > 0 else None),
            "controller": "causal ramp-rate limit (no forecast)"}
    grid_metrics, grid_notes = metrics(grid)
    if out["storage"] is not None:
        grid_metrics["energy_with_losses_j"] = grid_metrics["energy_j"] + out["storage"][
            "losses_j"]
    notes += [f"grid side: {n}" for n in grid_notes if n not in notes]
    if not profile.measured:
        notes.append("the input is a composed profile (facility), not a measurement")
    if profile.cpu_proxy:
        notes.insert(0, "cpu_proxy sources: the profile is modelled CPU activity, NOT GPU data")
    summary = {
        "shape": JSON_SHAPE,
        "input": {"file": profile.file, "kind": profile.kind, "column": profile.column,
                  "samples": int(len(p0)), "duration_s": profile.duration_s,
                  "regular": profile.regular, "sensor_average_s": profile.sensor_average_s,
                  "measured": profile.measured, "cpu_proxy": profile.cpu_proxy},
        "resolution_s": profile.resolution_s,
        "order": [name for name in ORDER if out[name] is not None],
        "reference_w": ref,
        "reference": "--ceiling" if plan.reference_w is not None else "profile peak",
        "load": load_metrics,
        **out,
        "grid": grid_metrics,
        "notes": notes,
    }
    return Mitigation(profile=profile, plan=plan, load_w=load, grid_w=grid, soc_j=soc,
                      summary=summary)
