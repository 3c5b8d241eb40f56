"""The ``facility`` subcommand: node, rack and site load profiles composed from measured runs.

Thin: parses, calls :func:`llm_powertrace_ds.facility.run_facility`, prints, writes.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..hub import resolve_dataset
from ..units import format_quantity, option_type, parse_quantity

TABLE_ROWS = [  # (metric key, unit shown; SI keys converted by llm_powertrace_ds.units)
    ("energy_j", "MWh"), ("mean_w", "MW"), ("peak_w", "MW"), ("par", ""),
    ("swing_p95_p5_w", "MW"), ("range_w", "MW"), ("ramp_up_max_1s_w_per_s", "MW/s"),
    ("ramp_down_max_1s_w_per_s", "MW/s"), ("ramp_up_max_60s_w_per_s", "MW/min"),
    ("ramp_down_max_60s_w_per_s", "MW/min"), ("peak_60s_w", "MW"),
    ("demand_peak_900s_w", "MW"), ("band_rms_low_w", "MW"), ("band_rms_mid_w", "MW"),
    ("band_rms_high_w", "MW"), ("it_peak_w", "MW"), ("gpu_peak_w", "MW"), ("rack_peak_w", "kW"),
]


def _mix(items: list[str]) -> dict[str, float] | None:
    if not items:
        return None
    out: dict[str, float] = {}
    for item in items:
        run_id, sep, share = item.rpartition("=")
        try:
            if not sep or not run_id:
                raise ValueError
            out[run_id] = float(share)
        except ValueError:
            raise InputError(f"{item!r} is not RUN_ID=SHARE", field="--mix") from None
    return out


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``facility`` subcommand."""
    from ..facility import DEFAULT_NODES_PER_RACK, DEFAULT_OVERHEAD, OVERHEAD_PRESETS, SYNC_MODES

    p = sub.add_parser(
        "facility", help="compose node, rack and site load profiles from measured runs",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Fill a site of N GPUs with jobs replaying measured runs (whole nodes each), "
        "add non-GPU node power and PUE, and report the load a utility sees at 0.1 s, 1 s, "
        "1 min and 15 min: peak, PAR, ramps (MW/s, MW/min), swing, band RMS, the 15-min demand "
        "peak and the load-duration curve. Everything extrapolated (phase model, overhead, "
        "tiling) is listed under 'limits'; the result is never a measurement.",
        epilog="examples:\n  llm-powertrace facility llm-powertrace --gpus 1024 --sync "
        "independent --duration 1h --out site.parquet\n"
        "  llm-powertrace facility llm-powertrace --gpus 10000 --arrivals 24 --duration 24h "
        "--job-gpus 8:2048 --job-duration 30min:12h\n"
        "  llm-powertrace facility llm-powertrace --gpus 10000 --schedule site.csv\n"
        "  llm-powertrace facility llm-powertrace --gpus 8 --sync lockstep --pue 1 "
        "--node-overhead none --format json")
    p.add_argument("dir", metavar="DIR_OR_REPO", help="dataset folder or Hub dataset repo id")
    p.add_argument("--config", default=None, choices=("finetune_runs", "inference_runs"),
                   help="runs table to draw jobs from (default: the one the folder holds, "
                   "finetune_runs first)")
    p.add_argument("--window", default="work", choices=("work", "whole"),
                   help="replay each run's work window, without idle head and tail (default), "
                   "or its whole trace")
    p.add_argument("--where", nargs="+", action="extend", default=[], metavar="AXIS=VALUE",
                   help="keep runs whose column AXIS equals VALUE; repeatable (default: all)")
    p.add_argument("--mix", nargs="+", action="extend", default=[], metavar="RUN_ID=SHARE",
                   help="share of the site's nodes per run (default: equal shares)")
    p.add_argument("--gpus", type=int, required=True, metavar="N", help="GPUs on the site")
    p.add_argument("--gpus-per-node", type=int, default=8, metavar="G",
                   help="GPUs per node; jobs occupy whole nodes (default: 8)")
    p.add_argument("--nodes-per-rack", type=int, default=DEFAULT_NODES_PER_RACK, metavar="K",
                   help=f"nodes per rack, for rack peaks (default: {DEFAULT_NODES_PER_RACK})")
    p.add_argument("--node-overhead", default=DEFAULT_OVERHEAD, metavar="MODEL",
                   help=f"non-GPU node power: auto, {', '.join(OVERHEAD_PRESETS)} or "
                   f"IDLE:FRACTION, e.g. 1.5kW:0.3 (default: {DEFAULT_OVERHEAD}: by the runs' "
                   "platform)")
    pue = p.add_mutually_exclusive_group()
    pue.add_argument("--pue", type=float, default=None, metavar="P",
                     help="constant PUE (default: 1.0, i.e. facility = IT power; the Uptime "
                     "Institute's 2024 survey average was about 1.56)")
    pue.add_argument("--pue-curve", type=Path, default=None, metavar="FILE",
                     help="CSV 'it_load_fraction,pue' or 'it_power_kw,pue'")
    p.add_argument("--sync", choices=SYNC_MODES, default="lockstep",
                   help="phase relation between jobs (default: lockstep)")
    p.add_argument("--duration", type=option_type("time", "--duration"), default=None,
                   metavar="TIME", help="horizon (24h, 90min; a bare number is seconds; "
                   "default: the longest selected run, or a schedule's last end)")
    over = p.add_mutually_exclusive_group()
    over.add_argument("--schedule", type=Path, default=None, metavar="FILE",
                      help="jobs over time: CSV or YAML with job, trace (run id) or selection "
                      "(AXIS=VALUE[,...]), gpus, start, end (times with units)")
    over.add_argument("--arrivals", type=int, default=None, metavar="N",
                      help="jobs over time: N seeded arrivals over --duration (uniform times, "
                      "log-uniform sizes and durations, first come first served)")
    p.add_argument("--job-gpus", default="8:1024", metavar="MIN:MAX",
                   help="--arrivals: job size bounds in GPUs (default: 8:1024)")
    p.add_argument("--job-duration", default="30min:12h", metavar="MIN:MAX",
                   help="--arrivals: job duration bounds, times with units (default: 30min:12h)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the phase and arrival draws (default: 0)")
    p.add_argument("--out", type=Path, default=None, metavar="PROFILE.parquet",
                   help="write the four profiles (default: none)")
    p.add_argument("--plot", type=Path, default=None, metavar="FIGURE.png",
                   help="draw the profiles and the load-duration curve (needs the plot extra)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="output format (default: table)")
    p.set_defaults(func=cmd_facility)


def _cell(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    return str(v)


MAX_EVENT_LINES = 60
"""Most job starts and stops listed in the table (all of them are in the JSON)."""


def _ramp_report(data: dict[str, Any]) -> None:
    """The site's steepest ramps and every job start and stop (the events a utility sees)."""
    m = data["metrics"]
    print("ramps: steepest 1 s rise "
          f"{format_quantity(m.get('ramp_up_max_1s_w_per_s'), 'MW/s')}, fall "
          f"{format_quantity(m.get('ramp_down_max_1s_w_per_s'), 'MW/s')}; steepest 60 s rise "
          f"{format_quantity(m.get('ramp_up_max_60s_w_per_s'), 'MW/min')}, fall "
          f"{format_quantity(m.get('ramp_down_max_60s_w_per_s'), 'MW/min')}")
    evs = data["events"]
    for e in evs[:MAX_EVENT_LINES]:
        step = "null" if e["step_w"] is None else format_quantity(e["step_w"], "MW")
        print(f"  {e['kind']:<5} t={e['t_s']:>9.1f} s  {e['jobs']} job(s), {e['gpus']} GPUs, "
              f"step {step} over {e['ramp_s']:.1f} s, steepest 1 s ramp "
              f"{format_quantity(e['ramp_max_1s_w_per_s'], 'MW/s')}")
    if len(evs) > MAX_EVENT_LINES:
        print(f"  ... {len(evs) - MAX_EVENT_LINES} more start(s) and stop(s) in --format json")
    if not evs:
        print("  no job starts or stops in view (jobs already running through the horizon)")


def cmd_facility(args: argparse.Namespace) -> int:
    from .. import facility as fac

    cfg = fac.FacilityConfig(
        gpus=args.gpus, gpus_per_node=args.gpus_per_node, nodes_per_rack=args.nodes_per_rack,
        overhead=(None if args.node_overhead.strip() == "auto"
                  else fac.parse_overhead(args.node_overhead, args.gpus_per_node)),
        pue=(fac.load_pue_curve(args.pue_curve) if args.pue_curve is not None
             else fac.Pue(1.0 if args.pue is None else args.pue)),
        sync=args.sync, duration_s=args.duration, seed=args.seed, window=args.window)
    arrivals = None
    if args.arrivals is not None:
        lo, sep, hi = args.job_gpus.partition(":")
        dlo, dsep, dhi = args.job_duration.partition(":")
        try:
            if not sep:
                raise ValueError
            gpus_lo, gpus_hi = int(lo), int(hi)
        except ValueError:
            raise InputError(f"{args.job_gpus!r} is not MIN:MAX GPUs", field="--job-gpus"
                             ) from None
        if not dsep:
            raise InputError(f"{args.job_duration!r} is not MIN:MAX", field="--job-duration")
        arrivals = fac.Arrivals(args.arrivals, gpus_lo, gpus_hi,
                                parse_quantity(dlo, "time", option="--job-duration"),
                                parse_quantity(dhi, "time", option="--job-duration"),
                                seed=args.seed)
    root = resolve_dataset(args.dir)
    result = fac.run_facility(root, cfg, config=args.config, where=args.where,
                              mix=_mix(args.mix), schedule=args.schedule, arrivals=arrivals)
    data = fac.to_json(result)
    if args.out is not None:
        fac.write_profile(result, args.out, data)
    if args.plot is not None:
        from ..plots import plot_facility

        plot_facility(fac.profiles(result), fac.load_duration_curve(result.facility_w),
                      args.plot, title=f"{cfg.gpus} GPUs, {data['sync']} — composed, "
                      "not measured" + (" (cpu_proxy sources: NOT GPU data)"
                                        if any(s["cpu_proxy"] for s in data["sources"]) else ""))
    if args.format == "json":
        print(json.dumps(data, indent=2, allow_nan=False))  # strict JSON: never Infinity/NaN
        return 0
    site = data["site"]
    print(f"site: {site['gpus']} GPUs, {site['nodes']} nodes, {site['racks']} racks, "
          f"{site['jobs']} jobs, {site['duration_s']:g} s; "
          f"{'sync' if data['sync'] in ('lockstep', 'independent', 'measured') else 'jobs'}: "
          f"{data['sync']} "
          "(composed, not measured)")
    for s in data["sources"]:
        print(f"source {s['run_id']}: {s['devices']} device(s), share {s['share']:.3g}, "
              f"{s['jobs']} jobs; tile: {s['tile']}")
    width = max(len(k) for k, _ in TABLE_ROWS)
    for key, unit in TABLE_ROWS:
        value = data["metrics"].get(key)
        cell = (_cell(value) if not unit or value is None
                else format_quantity(value, unit))
        print(f"  {key:<{width}}  {cell:>16}")
    _ramp_report(data)
    for line in data["limits"]:
        print(f"limit: {line}")
    for line in data["notes"]:
        print(f"note: {line}")
    for path in (args.out, args.plot):
        if path is not None:
            print(f"wrote {path}")
    return 0
