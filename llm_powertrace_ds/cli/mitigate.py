"""The ``mitigate`` subcommand: what a cap, a floor or storage does to a load's grid side.

Thin: parses, calls :mod:`llm_powertrace_ds.mitigation`, prints, writes.
Exit codes: 0 ok; 1 when ``--limits`` cannot be met by any searched combination (the statement
says why); 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..formatting import human_number
from ..units import option_type, to_unit

EXAMPLES = """examples:
  llm-powertrace mitigate site.parquet --ramp-limit 1MW/min --format json
  llm-powertrace mitigate load.csv --floor-pct 70 --cap-pct 95
  llm-powertrace mitigate site.parquet --limits grid-limits.yaml --figure mitigate.png
"""


def _finite(option: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not finite")
        return value
    parse.__name__ = option
    return parse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``mitigate`` subcommand."""
    from ..mitigation import DEFAULT_EFFICIENCY

    p = sub.add_parser(
        "mitigate", help="size the storage, floor or cap a load needs to meet grid limits",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read a load profile (a 't_s,power_w' CSV, or the Parquet that 'facility "
        "--out' writes) and report what a power cap, a power floor and storage with a grid-side "
        "ramp limit do to the grid side (range, p95-p5 swing, ramps per time scale, band power) and "
        "what each costs (storage power and energy, losses, cycles; energy burnt by a floor; "
        "work above a cap). Applied in the order cap, floor, storage; computed at the profile's "
        "own resolution. With --limits, the cheapest combination that meets a grid's limits.",
        epilog=EXAMPLES)
    p.add_argument("profile", metavar="PROFILE", type=Path,
                   help="'t_s,power_w' CSV, or 'facility --out' Parquet")
    p.add_argument("--ramp-limit", "--ramp-limit-w-per-s", dest="ramp_limit_w_per_s",
                   type=option_type("ramp", "--ramp-limit"), default=None, metavar="R",
                   help="storage lets the grid side ramp at most R (units: 1MW/min, 16.7kW/s; "
                   "a bare number is W/s)")
    p.add_argument("--floor-pct", type=_finite("--floor-pct"), default=None, metavar="X",
                   help="keep the load at or above X %% of the reference (default reference: "
                   "the profile's peak)")
    p.add_argument("--cap-pct", type=_finite("--cap-pct"), default=None, metavar="X",
                   help="cap the load at X %% of the reference")
    p.add_argument("--ceiling", "--ceiling-w", dest="ceiling_w",
                   type=option_type("power", "--ceiling"), default=None, metavar="POWER",
                   help="reference of the percentages, e.g. GPUs x TDP plus overhead "
                   "(units: 20MW, 500kW; a bare number is W; default: the profile's peak)")
    p.add_argument("--efficiency", type=_finite("--efficiency"), default=DEFAULT_EFFICIENCY,
                   metavar="ETA", help="storage round-trip efficiency (default: "
                   f"{DEFAULT_EFFICIENCY}, NREL ATB's utility-scale lithium-ion figure)")
    p.add_argument("--limits", type=Path, default=None, metavar="FILE",
                   help="YAML grid limits (ramp per time scale, dynamic range, band power): search "
                   "the cheapest combination; not with --cap-pct/--floor-pct/--ramp-limit")
    p.add_argument("--resolution-s", type=option_type("time", "--resolution-s"), default=None,
                   metavar="S",
                   help="compute at S s interval means (coarser than the input; for a facility "
                   "profile, one of its resolutions; default: the input's finest)")
    p.add_argument("--skip", type=option_type("time", "--skip"), default=0.0, metavar="TIME",
                   help="leave out the profile's first TIME (30s, 2min; a bare number is s), "
                   "e.g. to check that a size does not depend on where the profile starts")
    p.add_argument("--column", choices=("facility", "it", "gpu"), default=None,
                   help="which power of a facility profile (default: facility)")
    p.add_argument("--sensor-average-s", type=option_type("time", "--sensor-average-s"),
                   default=None,
                   metavar="S", help="the input sensor's averaging window (1 for GPUs whose "
                   "power.draw is a 1 s average): band power above 1/(2S) Hz is flagged as "
                   "under-reported (default: from the facility profile, else unknown)")
    p.add_argument("--out", type=Path, default=None, metavar="GRID.csv",
                   help="write t_s,load_w,grid_w,soc_j (default: none)")
    p.add_argument("--figure", type=Path, default=None, metavar="FIGURE.png",
                   help="load, grid side and state of charge on one time axis (plot extra)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="output format (default: table)")
    p.set_defaults(func=cmd_mitigate)


def _write_csv(result: Any, path: Path) -> None:
    import numpy as np

    from ..atomic import atomic_path

    prof = result.profile
    soc = result.soc_j if result.soc_j is not None else np.full(len(prof.power_w), np.nan)
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", newline="") as fh:
        fh.write("t_s,load_w,grid_w,soc_j\n")
        for row in zip(prof.start_s.tolist(), result.load_w.tolist(), result.grid_w.tolist(),
                       soc.tolist(), strict=True):
            fh.write(",".join("" if isinstance(v, float) and math.isnan(v) else repr(float(v))
                              for v in row) + "\n")


def _cell(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return human_number(v)
    return str(v)


def _scale(peak_w: float) -> tuple[str, str, str]:
    """Power, energy and ramp units of the table: MW, MWh, MW/min at site scale, else kW."""
    return ("MW", "MWh", "MW/min") if peak_w >= 1e6 else ("kW", "kWh", "kW/min")


def _in(value: Any, unit: str) -> str:
    return _cell(None if value is None else to_unit(value, unit))


def _print_table(data: dict[str, Any]) -> None:
    inp = data["input"]
    pu, eu, ru = _scale(max(data["load"]["peak_w"], data["grid"]["peak_w"]))
    print(f"input: {inp['file']} ({inp['kind']}, {inp['column']}), {inp['samples']} samples, "
          f"{inp['duration_s']:g} s; computed at {data['resolution_s']:g} s"
          + ("" if inp["measured"] else " — composed, not measured")
          + (" — cpu_proxy sources: NOT GPU data" if inp["cpu_proxy"] else ""))
    if data.get("search"):
        s = data["search"]
        print(f"limits ({s['file']}): {s['statement']} [{s['evaluated']} combinations tried]")
        for c in s["checks"]:
            print(f"  {'ok  ' if c['met'] else 'FAIL'} {c['limit']}: {_cell(c['value'])} "
                  f"(max {_cell(c['max'])})")
    units = {"_w": pu, "_j": eu, "_w_per_s": ru}
    for name in ("cap", "floor", "storage"):
        part = data.get(name)
        if not part:
            continue
        print(f"{name}:")
        for k, v in part.items():
            if k.endswith(("_mwh", "_mw_per_min")):
                continue  # the same figure in the table's units below
            if isinstance(v, dict):
                cells = []
                for kk, vv in v.items():
                    sfx = next((x for x in ("_w_per_s", "_w", "_j") if kk.endswith(x)), "")
                    if kk.endswith("_mwh"):
                        continue
                    cells.append(f"{kk[: -len(sfx)]} {_in(vv, units[sfx])} {units[sfx]}" if sfx
                                 else f"{kk} {_cell(vv)}")
                print(f"  {k}: " + ", ".join(cells))
                continue
            suffix = next((x for x in ("_w_per_s", "_w", "_j") if k.endswith(x)), "")
            if suffix and isinstance(v, float):
                print(f"  {k[: -len(suffix)]:<30} {_in(v, units[suffix])} {units[suffix]}")
            else:
                print(f"  {k:<30} {_cell(v)}")
    width = 26
    print(f"  {'':<{width}} {'load':>12} {'grid side':>12}")
    for key, unit in (("energy_j", eu), ("mean_w", pu), ("peak_w", pu), ("min_w", pu),
                      ("range_w", pu), ("swing_p95_p5_w", pu), ("ramp_up_max_w_per_s", ru),
                      ("ramp_down_max_w_per_s", ru)):
        label = f"{key.rsplit('_w', 1)[0] if key.endswith(('_w', '_w_per_s')) else key[:-2]} ({unit})"
        print(f"  {label:<{width}} {_in(data['load'][key], unit):>12} "
              f"{_in(data['grid'][key], unit):>12}")
    for w, v in data["load"]["ramp_max_w_per_s"].items():
        label = f"ramp over {w} s ({ru})"
        print(f"  {label:<{width}} {_in(v, ru):>12} "
              f"{_in(data['grid']['ramp_max_w_per_s'].get(w), ru):>12}")
    for band, v in data["load"]["band_rms_w"].items():
        label = f"band_rms {band} ({pu})"
        print(f"  {label:<{width}} {_in(v, pu):>12} "
              f"{_in(data['grid']['band_rms_w'].get(band), pu):>12}")
    for note in data["notes"]:
        print(f"note: {note}")


def cmd_mitigate(args: argparse.Namespace) -> int:
    from .. import mitigation as mit

    explicit = [o for o, v in (("--cap-pct", args.cap_pct), ("--floor-pct", args.floor_pct),
                               ("--ramp-limit", args.ramp_limit_w_per_s)) if v is not None]
    if args.limits is not None and explicit:
        raise UsageError("--limits searches the combination itself", field=explicit[0])
    if args.sensor_average_s is not None and not (1e-6 <= args.sensor_average_s <= 3600):
        raise UsageError(f"{args.sensor_average_s!r} is not a window in [1e-06, 3600] s",
                         field="--sensor-average-s")
    if args.figure is not None:  # fail before the work when the extra is missing
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            from ..errors import MissingExtra

            raise MissingExtra("matplotlib is not installed: pip install "
                               "'llm-powertrace[plot]'") from None
    limits = mit.load_limits(args.limits) if args.limits is not None else None
    profile = mit.skip(mit.read_profile(args.profile, resolution_s=args.resolution_s,
                                        column=args.column,
                                        sensor_average_s=args.sensor_average_s), args.skip)
    found = None
    if limits is not None:
        mit.Plan(efficiency=args.efficiency, reference_w=args.ceiling_w).check()
        found = mit.search(profile, limits, efficiency=args.efficiency,
                           reference_w=args.ceiling_w,
                           progress=sys.stderr.isatty() and len(profile.power_w) >= 100_000)
        plan = found.plan
    else:
        plan = mit.Plan(cap_pct=args.cap_pct, floor_pct=args.floor_pct,
                        ramp_limit_w_per_s=args.ramp_limit_w_per_s, efficiency=args.efficiency,
                        reference_w=args.ceiling_w)
    ramp_windows = sorted({*mit.RAMP_WINDOWS_S, *(r.window_s for r in limits.ramps)}
                          if limits else mit.RAMP_WINDOWS_S)
    bands = tuple(mit.Band(lo, hi) for lo, hi in mit.DEFAULT_BANDS_HZ)
    if limits:
        bands += tuple(b for b in limits.bands
                       if all((b.low_hz, b.high_hz) != (x.low_hz, x.high_hz) for x in bands))
    result = mit.apply(profile, plan, bands=bands, ramp_windows_s=ramp_windows)
    data = dict(result.summary)
    if found is not None:
        assert limits is not None
        data["search"] = {"file": limits.file, "feasible": found.feasible,
                          "statement": found.statement, "evaluated": found.evaluated,
                          "plan": {"cap_pct": plan.cap_pct, "floor_pct": plan.floor_pct,
                                   "ramp_limit_w_per_s": plan.ramp_limit_w_per_s},
                          "steps": found.steps,
                          "checks": [c.to_json() for c in found.checks]}
    if args.out is not None:
        _write_csv(result, args.out)
    if args.figure is not None:
        from ..mitigation.figure import plot_mitigation

        plot_mitigation(result, args.figure)
    if args.format == "json":
        print(json.dumps(data, indent=2, allow_nan=False))
    else:
        _print_table(data)
        for path in (args.out, args.figure):
            if path is not None:
                print(f"wrote {path}")
    return 0 if found is None or found.feasible else 1
