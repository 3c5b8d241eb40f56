"""Grid limits as input: the cheapest cap/floor/storage combination that meets them.

Limits file (YAML, at most :data:`MAX_LIMITS_BYTES`)::

    ramp:                         # change between consecutive window means, per time scale
      - {window_s: 1, max_w_per_s: 2MW/s}
      - {window_s: 1min, max_w_per_s: 6MW/min}
    max_range_w: 30MW             # dynamic range: max − min at the profile's resolution
    bands:                        # oscillation: RMS power in a frequency band (spectral limit)
      - {low_hz: 0.1, high_hz: 1.0, max_rms_w: 100kW}

Every key is optional; at least one limit is required. Values take units (``units.py``: a
time, a ramp, a power); a bare number is SI (s, W/s, W). ``max_swing_w`` is read as the older
spelling of ``max_range_w`` (the same max − min).

The search (over a documented grid, with pruning, bounded):
    * caps of 100 % (none), 95, 90, … 50 % of the reference; floors of 0 % (none), 5, 10, … 95 %,
      below the cap (a floor at the cap would flatten the site into a constant load);
      for each (cap, floor) either no storage, or storage whose grid-side ramp limit R is one of
      R₀, R₀/2, … R₀/2^:data:`MAX_HALVINGS`, R₀ the smallest ``max_w_per_s`` of the ramp limits
      (a grid side ramping at most R has window ramps of at most R at every time scale) — or,
      without ramp limits, half the profile's steepest ramp. The largest R that meets every
      limit is found by bisection (R₀ first, then the smallest; a slower grid side is smoother
      at every time scale, so feasibility is monotone in R).
    * A cap at or above the peak, or a floor at or below the lowest load, changes nothing and
      is skipped (the same as none); a cap at or below the lowest load would flatten the site
      into a constant load and ends the caps.
    * Every evaluation is one vectorised pass; the search stops after
      :data:`BUDGET_SAMPLE_PASSES` samples × evaluations and says so in its statement.
    * "Cheapest" is lexicographic, in this order: work lost above a cap (J), then energy wasted
      (a floor's extra energy + storage losses, J), then storage energy (J), then storage power (W).
      Lost work comes first because a cap slows the job by an amount this tool cannot measure.
    * When nothing in that grid meets every limit, the result says so and which limits failed for
      the combination that came closest (fewest failed limits, then the smallest sum of
      value/limit over the failed ones, then least wasted energy).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import bounded
from ..errors import InputError
from ..units import Kind, parse_quantity
from . import strategies as st
from .apply import Plan
from .controller import MIN_RAMP_W_PER_S
from .grid import Band, band_rms, window_ramp_max
from .profile import Profile

MAX_LIMITS_BYTES = 64 * 1024
CAP_GRID_PCT: tuple[float | None, ...] = (None, 95, 90, 85, 80, 75, 70, 65, 60, 55, 50)
FLOOR_GRID_PCT: tuple[float | None, ...] = (None,) + tuple(float(x) for x in range(5, 100, 5))
MAX_HALVINGS = 12
BUDGET_SAMPLE_PASSES = 6e7
"""Most samples × evaluations one search spends (about 70 evaluations of a day at 0.1 s, 20 s
on one core): past it the search stops and its statement says so."""


@dataclass(frozen=True)
class RampLimit:
    window_s: float
    max_w_per_s: float


@dataclass(frozen=True)
class Limits:
    """Grid limits (see the module docstring)."""

    ramps: tuple[RampLimit, ...] = ()
    max_range_w: float | None = None
    bands: tuple[Band, ...] = ()
    file: str = "limits"


UNIT_KIND: dict[str, Kind] = {"window_s": "time", "max_w_per_s": "ramp", "max_range_w": "power",
                              "max_rms_w": "power"}


def _positive(value: Any, *, file: str, field: str) -> float:
    key = field.rsplit(".", 1)[-1]
    if isinstance(value, str):  # a unit, or YAML 1.1 reading 1.0e4 (no exponent sign) as text
        kind = UNIT_KIND.get(key)
        try:
            value = (parse_quantity(value, kind, option=field) if kind is not None
                     else float(value))
        except ValueError as exc:
            reason = exc.reason if isinstance(exc, InputError) else f"{value!r} is not a number"
            raise InputError(reason, file=file, field=field) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{value!r} is not a number", file=file, field=field)
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise InputError(f"{value!r} is not a positive finite number", file=file, field=field)
    if key == "max_w_per_s" and v < MIN_RAMP_W_PER_S:
        raise InputError(f"{v!r} W/s is below the slowest ramp limit, {MIN_RAMP_W_PER_S:g} W/s",
                         file=file, field=field)
    return v


def _entries(data: dict[str, Any], key: str, keys: Sequence[str], file: str
             ) -> list[dict[str, float]]:
    raw = data.get(key)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InputError("expected a list", file=file, field=key)
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) != set(keys):
            raise InputError(f"item {i}: expected exactly the keys {', '.join(keys)}", file=file,
                             field=key)
        out.append({k: _positive(item[k], file=file, field=f"{key}[{i}].{k}") for k in keys})
    return out


def load_limits(path: str | Path) -> Limits:
    """Read and check a limits file (regular file, ≤ 64 KiB, YAML mapping of known keys)."""
    import yaml

    path = Path(path)
    name = path.name
    # the one bounded reader: a regular file (a FIFO or /dev/zero refused before reading),
    # at most MAX_LIMITS_BYTES, UTF-8, and at most bounded.MAX_DEPTH levels before parsing
    text = bounded.read_text(path, max_bytes=MAX_LIMITS_BYTES, field="--limits")
    try:
        bounded.check_yaml_depth(text, file=name)
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise InputError("not YAML", file=name, line=None if line is None else line + 1) from None
    if not isinstance(data, dict):
        raise InputError("expected a mapping with ramp, max_range_w and/or bands", file=name)
    unknown = sorted(set(map(str, data)) - {"ramp", "max_range_w", "max_swing_w", "bands"})
    if unknown:
        raise InputError(f"unknown key(s) {', '.join(unknown)}; known: ramp, max_range_w, bands",
                         file=name, field=unknown[0])
    if "max_swing_w" in data:
        if "max_range_w" in data:
            raise InputError("max_swing_w is the older spelling of max_range_w: give one",
                             file=name, field="max_swing_w")
        data["max_range_w"] = data.pop("max_swing_w")
    ramps = tuple(RampLimit(e["window_s"], e["max_w_per_s"])
                  for e in _entries(data, "ramp", ("window_s", "max_w_per_s"), name))
    bands = []
    for i, e in enumerate(_entries(data, "bands", ("low_hz", "high_hz", "max_rms_w"), name)):
        if e["low_hz"] >= e["high_hz"]:
            raise InputError(f"low_hz {e['low_hz']:g} is not below high_hz {e['high_hz']:g}",
                             file=name, field=f"bands[{i}]")
        bands.append(Band(e["low_hz"], e["high_hz"], e["max_rms_w"]))
    span = data.get("max_range_w")
    limits = Limits(ramps=ramps, bands=tuple(bands), file=name,
                    max_range_w=None if span is None else _positive(span, file=name,
                                                                    field="max_range_w"))
    if not limits.ramps and limits.max_range_w is None and not limits.bands:
        raise InputError("no limit given (ramp, max_range_w or bands)", file=name)
    return limits


@dataclass(frozen=True)
class Check:
    limit: str
    value: float | None
    maximum: float

    @property
    def met(self) -> bool:
        return self.value is not None and self.value <= self.maximum * (1 + 1e-9)

    def to_json(self) -> dict[str, Any]:
        return {"limit": self.limit, "value": self.value, "max": self.maximum, "met": self.met}


def check(power_w: np.ndarray, dt_s: np.ndarray, limits: Limits,
          sensor_average_s: float | None = None) -> list[Check]:
    """Each limit against a grid-side profile (window-mean ramps, swing, band RMS)."""
    out = []
    for r in limits.ramps:
        value = window_ramp_max(power_w, dt_s, r.window_s)
        out.append(Check(f"ramp over {r.window_s:g} s (W/s)", value, r.max_w_per_s))
    if limits.max_range_w is not None:
        out.append(Check("range (W)", float(power_w.max() - power_w.min()), limits.max_range_w))
    if limits.bands:
        res = float(np.median(dt_s))
        values, _ = band_rms(power_w, res, limits.bands, sensor_average_s)
        for b in limits.bands:
            assert b.max_rms_w is not None
            out.append(Check(f"band {b.label} RMS (W)", values[b.label], b.max_rms_w))
    return out


def verifiable(profile: Profile, limits: Limits) -> None:
    """Refuse limits that no combination could be checked against on this profile."""
    res = profile.resolution_s
    for i, r in enumerate(limits.ramps):
        if r.window_s < res * (1 - 1e-9) or r.window_s * 2 > profile.duration_s:
            raise InputError(f"window_s {r.window_s:g} cannot be checked on a {res:g} s profile "
                             f"of {profile.duration_s:g} s", file=limits.file,
                             field=f"ramp[{i}].window_s")
    if limits.bands:
        values, notes = band_rms(profile.power_w, res, limits.bands)
        for i, b in enumerate(limits.bands):
            if values[b.label] is None:
                why = next((n for n in notes if n.startswith(f"band {b.label}")), "unresolved")
                raise InputError(why, file=limits.file, field=f"bands[{i}]")


def _cost(c: st.CapResult | None, f: st.FloorResult | None,
          s: st.StorageResult | None) -> tuple[float, float, float, float]:
    return ((c.energy_above_cap_j if c else 0.0),
            (f.extra_energy_j if f else 0.0) + (s.losses_j if s else 0.0),
            (s.energy_j if s else 0.0), (s.power_w if s else 0.0))


@dataclass(frozen=True)
class SearchResult:
    feasible: bool
    plan: Plan
    checks: tuple[Check, ...]
    evaluated: int
    statement: str
    steps: tuple[str, ...] = ()
    """How the search went: what each tried combination failed on, in order (at most 50)."""
    complete: bool = True
    """False when the evaluation budget ran out before the grid was exhausted."""


def _bisect_largest(n: int, ok: Any) -> int | None:
    """The smallest index i in [0, n) with ok(i), ok monotone (False up to some i, then True).

    None when ok(n − 1) is False. Index 0 is the largest ramp limit (cheapest storage): tried first, then the smallest (if it
    fails, none does), then halving the interval: at most 2 + ⌈log2 n⌉ evaluations.
    """
    if ok(0):
        return 0
    if n == 1 or not ok(n - 1):
        return None
    lo, hi = 0, n - 1  # ok(lo) False, ok(hi) True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def search(profile: Profile, limits: Limits, *, efficiency: float = st.DEFAULT_EFFICIENCY,
           reference_w: float | None = None, progress: bool = False,
           budget_sample_passes: float | None = None) -> SearchResult:
    """The cheapest plan in the documented grid that meets every limit (module docstring).

    Bounded: each evaluation is one vectorised pass over the profile (the storage controller is
    two IIR filters); the storage ramp limits of one (cap, floor) are searched by bisection over
    the :data:`MAX_HALVINGS` + 1 halvings (feasibility is monotone in R: a slower grid side is
    smoother at every time scale), and the whole search stops after
    :data:`BUDGET_SAMPLE_PASSES` samples × evaluations, saying so. ``progress`` draws a bar on
    standard error (the command line does for profiles of 100,000 samples and more).
    """
    verifiable(profile, limits)
    p0, dt = profile.power_w, profile.dt_s
    ref = reference_w if reference_w is not None else float(p0.max())
    sensor = profile.sensor_average_s
    r_start = (min(r.max_w_per_s for r in limits.ramps) if limits.ramps else
               max(float(np.abs(np.diff(p0) / dt[:-1]).max()) / 2.0, MIN_RAMP_W_PER_S))
    levels = 1 + min(MAX_HALVINGS, int(math.floor(math.log2(r_start / MIN_RAMP_W_PER_S))))
    budget = BUDGET_SAMPLE_PASSES if budget_sample_passes is None else budget_sample_passes
    max_evals = max(8, int(budget // len(p0)))
    evaluated = 0
    steps: list[str] = []
    best: tuple[tuple[float, float, float, float], Plan, list[Check]] | None = None
    closest: tuple[tuple[int, float, float], Plan, list[Check]] | None = None
    bar = _bar(progress, min(max_evals, len(CAP_GRID_PCT) * len(FLOOR_GRID_PCT)
                             * (3 + math.ceil(math.log2(MAX_HALVINGS + 1)))))

    class OutOfBudget(Exception):
        pass

    def consider(plan: Plan, cost: tuple[float, float, float, float], checks: list[Check]
                 ) -> bool:
        nonlocal best, closest, evaluated
        evaluated += 1
        bar.update(1)
        failed = [c for c in checks if not c.met]
        if len(steps) < 50:
            steps.append(f"{_describe(plan)}: " + ("meets every limit" if not failed else
                                                   "fails " + ", ".join(c.limit for c in failed)))
        if not failed:
            if best is None or cost < best[0]:
                best = (cost, plan, checks)
            return True
        excess = sum((c.value / c.maximum if c.value is not None else math.inf) for c in failed)
        key = (len(failed), excess, cost[1])
        if closest is None or key < closest[0]:
            closest = (key, plan, checks)
        return False

    def gate() -> None:
        if evaluated >= max_evals:
            raise OutOfBudget

    complete = True
    try:
        peak, low = float(p0.max()), float(p0.min())
        for cap_pct in CAP_GRID_PCT:
            if cap_pct is not None and cap_pct / 100.0 * ref >= peak:
                continue  # a cap above the peak changes nothing: the same as no cap
            if cap_pct is not None and cap_pct / 100.0 * ref <= low:
                break  # a cap at or below the lowest load flattens the site: not a plan
            c = st.cap(p0, dt, cap_pct / 100.0 * ref) if cap_pct is not None else None
            after_cap = c.power_w if c else p0
            for floor_pct in FLOOR_GRID_PCT:
                if floor_pct is not None and cap_pct is not None and floor_pct >= cap_pct:
                    break  # a floor at the cap is a flat line: not a plan for a working site
                if floor_pct is not None and floor_pct / 100.0 * ref <= low:
                    continue  # a floor below the lowest load changes nothing: as no floor
                f = (st.floor(after_cap, dt, floor_pct / 100.0 * ref)
                     if floor_pct is not None else None)
                load = f.power_w if f else after_cap
                cost = _cost(c, f, None)
                if best is not None and cost[:2] >= best[0][:2]:
                    break  # floors only waste more from here on
                gate()
                plan = Plan(cap_pct=cap_pct, floor_pct=floor_pct, efficiency=efficiency,
                            reference_w=reference_w)
                if consider(plan, cost, check(load, dt, limits, sensor)):
                    continue

                def ok(i: int, cap_pct: float | None = cap_pct, floor_pct: float | None = floor_pct,
                       c: st.CapResult | None = c, f: st.FloorResult | None = f,
                       load: np.ndarray = load) -> bool:
                    gate()
                    r = r_start / 2.0 ** i
                    s = st.storage(load, dt, r, efficiency)
                    splan = Plan(cap_pct=cap_pct, floor_pct=floor_pct, ramp_limit_w_per_s=r,
                                 efficiency=efficiency, reference_w=reference_w)
                    return consider(splan, _cost(c, f, s), check(s.grid_w, dt, limits, sensor))

                _bisect_largest(levels, ok)
            if best is not None:
                break  # a smaller cap only loses more work
    except OutOfBudget:
        complete = False
    finally:
        bar.close()
    cut = ("" if complete else f" (search stopped after {evaluated} evaluations, the budget of "
           f"{budget:.3g} sample-passes for {len(p0)} samples; the grid was not exhausted)")
    if best is not None:
        plan, checks = best[1], best[2]
        statement = ("every limit is met " + ("as the profile is" if plan.empty else
                                             "with " + _describe(plan))) + cut
        return SearchResult(True, plan, tuple(checks), evaluated, statement, tuple(steps),
                            complete)
    assert closest is not None
    plan, checks = closest[1], closest[2]
    failed = "; ".join(f"{ck.limit} {ck.value if ck.value is None else f'{ck.value:.4g}'} > "
                       f"{ck.maximum:.4g}" for ck in checks if not ck.met)
    statement = (f"no combination meets every limit (caps ≥ {CAP_GRID_PCT[-1]} %, floors ≤ "
                 f"{FLOOR_GRID_PCT[-1]:g} %, storage ramps ≥ {r_start / 2 ** (levels - 1):.4g} "
                 f"W/s){cut}; the closest still fails: {failed}")
    return SearchResult(False, plan, tuple(checks), evaluated, statement, tuple(steps), complete)


def _describe(plan: Plan) -> str:
    parts = [p for p in (f"cap {plan.cap_pct:g} %" if plan.cap_pct else "",
                         f"floor {plan.floor_pct:g} %" if plan.floor_pct else "",
                         f"storage with grid ramps ≤ {plan.ramp_limit_w_per_s:.4g} W/s"
                         if plan.ramp_limit_w_per_s else "") if p]
    return " + ".join(parts) if parts else "nothing"


def _bar(enabled: bool, total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, desc="limits search", unit="eval",
                leave=False, file=sys.stderr)
