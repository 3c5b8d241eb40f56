"""How long ``mitigate --limits`` takes on a day of a site at 0.1 s (864,000 samples).

The profile is synthetic and says so: a 6.5 MW site whose load oscillates ±100 kW with a 4 s
period (a training step), with 1 % noise, a 2 MW checkpoint dip of 20 s every 10 minutes, a job
start after 5 minutes of idle and a stop 30 minutes before the end. Three limits files:

- ``met``: limits a storage plan meets (1 MW/min over 1 s and 60 s windows, a 3 MW range, 10 kW
  RMS in 0.1-1 Hz);
- ``floor``: a 1 MW range no storage alone can meet (a floor is needed);
- ``impossible``: a 1 W range, which nothing meets: the search runs to its budget.

For each: wall seconds of :func:`llm_powertrace_ds.mitigation.search`, its evaluations, whether
it was complete, against the target of 30 s. Beside them, one storage pass of the controller
(two IIR filters) and one pass of the pure-Python ramp limiter the search used to run 2,000 times,
on the same profile, and their ratio.

Usage: python bench/mitigation_limits.py [--hours 24] [--json docs/data/bench/mitigation_limits.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report  # noqa: E402

from llm_powertrace_ds import mitigation as mit  # noqa: E402
from llm_powertrace_ds.mitigation import strategies as st  # noqa: E402

BUDGET_S = 30.0
DT_S = 0.1
RAMP_W_PER_S = 1e6 / 60


def day_profile(hours: float, seed: int = 0) -> mit.Profile:
    """The synthetic site of the module docstring."""
    n = int(round(hours * 3600 / DT_S))
    t = np.arange(n) * DT_S
    rng = np.random.default_rng(seed)
    p = 6.5e6 + 1e5 * np.sign(np.sin(2 * np.pi * t / 4.0)) + 6.5e4 * rng.standard_normal(n)
    p[(t % 600.0) < 20.0] -= 2e6
    idle = 3.9e6
    p[t < 300.0] = idle
    p[t >= t[-1] - 1800.0] = idle
    return mit.Profile(start_s=t, dt_s=np.full(n, DT_S), power_w=np.maximum(p, 0.0),
                       kind="csv", file="synthetic-day.csv", column="power_w")


LIMITS = {
    "met": mit.Limits(ramps=(mit.limits.RampLimit(1.0, RAMP_W_PER_S),
                             mit.limits.RampLimit(60.0, RAMP_W_PER_S)),
                      max_range_w=3e6, bands=(mit.Band(0.1, 1.0, 1e4),), file="met"),
    "floor": mit.Limits(ramps=(mit.limits.RampLimit(60.0, RAMP_W_PER_S),), max_range_w=1e6,
                        file="floor"),
    "impossible": mit.Limits(ramps=(mit.limits.RampLimit(60.0, RAMP_W_PER_S),),
                             max_range_w=1.0, file="impossible"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0, help="profile length (default: 24)")
    _report.add_json_option(ap)
    args = ap.parse_args()
    started = _report.machine()
    prof = day_profile(args.hours)
    st.storage(prof.power_w, prof.dt_s, RAMP_W_PER_S)  # imports and caches warm
    t0 = time.perf_counter()
    st.storage(prof.power_w, prof.dt_s, RAMP_W_PER_S)
    controller_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    st.ramp_limited(prof.power_w, prof.dt_s, RAMP_W_PER_S)
    python_pass_s = time.perf_counter() - t0
    out: dict[str, object] = {"samples": len(prof.power_w), "hours": args.hours,
                              "controller_pass_s": controller_s,
                              "python_limiter_pass_s": python_pass_s,
                              "python_over_controller": python_pass_s / controller_s}
    rows = [_report.result("samples", len(prof.power_w), "samples"),
            _report.result("controller_pass_s", round(controller_s, 3), "s (wall)"),
            _report.result("python_limiter_pass_s", round(python_pass_s, 3), "s (wall)"),
            _report.result("python_over_controller", round(python_pass_s / controller_s, 2),
                           "ratio")]
    for name, limits in LIMITS.items():
        t0 = time.perf_counter()
        res = mit.search(prof, limits)
        seconds = time.perf_counter() - t0
        out[name] = {"seconds": seconds, "evaluated": res.evaluated, "feasible": res.feasible,
                     "complete": res.complete, "statement": res.statement}
        rows += [_report.result(f"{name}_search_s", round(seconds, 2), "s (wall)",
                                at_most=BUDGET_S),
                 _report.result(f"{name}_evaluations", res.evaluated, "passes"),
                 _report.result(f"{name}_feasible", res.feasible, "flag"),
                 _report.result(f"{name}_complete", res.complete, "flag")]
        print(f"{name}: {seconds:.2f} s, {res.evaluated} evaluations, feasible {res.feasible}, "
              f"complete {res.complete}", file=sys.stderr)
    print(json.dumps(out, indent=2))
    if args.json:
        _report.write(args.json, _report.document("mitigation_limits", rows, script=__file__,
                                                  started=started))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
