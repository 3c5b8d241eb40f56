"""One mitigation plan applied to one profile: cap → floor → storage, then the grid side's figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import UsageError
from . import strategies as st
from .controller import MIN_RAMP_W_PER_S
from .grid import DEFAULT_BANDS, RAMP_WINDOWS_S, Band, profile_metrics
from .profile import Profile

JSON_SHAPE = "llm-powertrace/mitigate/2"
MIN_EFFICIENCY = 0.01
"""Lowest round-trip efficiency accepted: below it the losses (1/η − 1) outgrow any figure."""
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
                math.isfinite(self.ramp_limit_w_per_s)
                and MIN_RAMP_W_PER_S <= self.ramp_limit_w_per_s <= 1e15):
            raise UsageError(f"{self.ramp_limit_w_per_s!r} is not a ramp limit in "
                             f"[{MIN_RAMP_W_PER_S:g}, 1e15] W/s", field="--ramp-limit")
        if not (math.isfinite(self.efficiency) and MIN_EFFICIENCY <= self.efficiency <= 1):
            raise UsageError(f"{self.efficiency!r} is not an efficiency in "
                             f"[{MIN_EFFICIENCY:g}, 1]", field="--efficiency")
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


def worse_than_load(load: dict[str, Any], grid: dict[str, Any]) -> list[str]:
    """Every figure a limit can name on which the grid side is worse than the load itself.

    Compared: ``range_w``, ``swing_p95_p5_w``, the window ramps at each time scale and the RMS
    power in each band (a relative margin of 1e-9 for rounding). An empty list: the strategy
    never makes the grid side worse than the load at those time scales.
    """
    out = []
    tol = 1e-6 * max(load["range_w"], 1e-9)  # rounding: a millionth of the load's range

    def cmp(name: str, g: float | None, p: float | None, unit: str, scale_s: float = 1.0) -> None:
        if g is not None and p is not None and g > p * (1 + 1e-9) + tol / scale_s:
            out.append(f"{name} {g:.4g} {unit} > the load's {p:.4g} {unit}")

    cmp("range", grid["range_w"], load["range_w"], "W")
    cmp("swing p95-p5", grid["swing_p95_p5_w"], load["swing_p95_p5_w"], "W")
    for w, v in grid["ramp_max_w_per_s"].items():
        cmp(f"ramp over {w} s", v, load["ramp_max_w_per_s"].get(w), "W/s", float(w))
    for band, v in grid["band_rms_w"].items():
        cmp(f"band {band} RMS", v, load["band_rms_w"].get(band), "W")
    return out


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
                      "range_w": float(load.max() - load.min()),
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
                        "range_w": float(load.max() - load.min())}
    grid = load
    soc = None
    if plan.ramp_limit_w_per_s is not None:
        s = st.storage(load, dt, plan.ramp_limit_w_per_s, plan.efficiency)
        grid, soc = s.grid_w, s.soc_j
        hours = profile.duration_s / 3600.0
        ctl = s.control
        t0 = float(profile.start_s[0])
        a, b = ctl.span
        out["storage"] = {
            "ramp_limit_w_per_s": s.ramp_limit_w_per_s,
            "ramp_limit_mw_per_min": s.ramp_limit_w_per_s * 60 / 1e6,
            "energy_j": s.energy_j, "energy_mwh": s.energy_j / 3.6e9,
            "power_w": s.power_w, "discharge_power_w": s.discharge_power_w,
            "charge_power_w": s.charge_power_w,
            "start": ctl.start.to_json() if ctl.start else None,
            "stop": ctl.stop.to_json() if ctl.stop else None,
            "energy_with_starts_stops_j": s.energy_with_starts_stops_j,
            "energy_with_starts_stops_mwh": s.energy_with_starts_stops_j / 3.6e9,
            "time_constant_s": ctl.time_constant_s,
            "steady_from_s": float(profile.start_s[a]) - t0,
            "steady_to_s": float(profile.start_s[b - 1] + profile.dt_s[b - 1]) - t0,
            "sized_from_s": float(profile.start_s[ctl.sized_from]) - t0,
            "sized_to_s": float(profile.start_s[ctl.sized_to - 1] + profile.dt_s[ctl.sized_to - 1])
            - t0,
            "energy_to_span_end_j": ctl.energy_to_span_end_j,
            "discharged_j": s.discharged_j, "charged_j": s.charged_j,
            "net_discharged_j": s.discharged_j - s.charged_j,
            "efficiency": s.efficiency, "losses_j": s.losses_j,
            "losses_pct": _pct(s.losses_j, energy0),
            "full_cycles_per_hour": (s.discharged_j / s.energy_with_starts_stops_j / hours
                                     if s.energy_with_starts_stops_j > 0 and hours > 0
                                     else None),
            "controller": "state-of-charge-restoring smoother: grid side = the load's slow mean "
                          "(time constant τ) − (SoC − setpoint)/τ, τ = (2 + e^-3)·range/R; "
                          "warm start at the steady mean, sized after 8τ and before the last "
                          "2τ of the steady span (no forecast)"}
        notes.append("storage: a start before steady_from_s and a stop after steady_to_s are "
                     "sized apart (start, stop); level changes inside the span, such as jobs "
                     "starting or stopping there, are part of energy_j")
        if ctl.sized_from == a and ctl.sized_to == b:
            notes.append("storage: the steady span is shorter than the 8τ warm-up and 2τ "
                         f"cool-down ({10 * ctl.time_constant_s:.4g} s): sized over the whole span, "
                         "so the size may still depend on the horizon")
    grid_metrics, grid_notes = metrics(grid)
    if out["storage"] is not None:
        grid_metrics["energy_with_losses_j"] = grid_metrics["energy_j"] + out["storage"][
            "losses_j"]
    notes += [f"grid side: {n}" for n in grid_notes if n not in notes]
    worse = worse_than_load(load_metrics, grid_metrics)
    notes += [f"grid side worse than the load: {w}" for w in worse]
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
        "grid_worse_than_load": worse,
        "notes": notes,
    }
    return Mitigation(profile=profile, plan=plan, load_w=load, grid_w=grid, soc_j=soc,
                      summary=summary)
