"""Benchmark: a 10,000-GPU, 1-hour site at 0.1 s composed from 20 source runs (``facility``).

Twenty synthetic 8-GPU fine-tuning runs of 10 min each (step-shaped power with jitter and
noise, step events; generated, not measured) are published into a temporary dataset folder.
Then, for each sync mode, a fresh child process does what ``llm-powertrace facility`` does —
reads the 20 runs through the library's readers, composes the site (1,250 jobs of one node),
computes the site metrics, writes the four profiles to Parquet — and reports its wall time and
its peak resident memory (``ru_maxrss``: the whole child, interpreter and imports included).
A ``numpy`` pass that only adds 10,000 GPU series of 36,000 samples (the least any composition
must do) is timed in the same child, side by side.

A day of a site (mode ``arrivals``): the same 10,000 GPUs over 24 h at 0.1 s, filled by
:data:`DAY_JOBS` jobs from the seeded arrival model (sizes 8-2,048 GPUs, durations 30 min-12 h,
log-uniform; first come, first served), each job a measured ramp-up, its steady block repeated
and a measured ramp-down; timed the same way, with the number of starts and stops the ramp
report lists.

Prints one JSON object: per mode ``{"seconds", "peak_rss_mb", "time_ratio", "rss_ratio",
"numpy_floor_s"}`` with ``time_ratio = seconds / 30`` and ``rss_ratio = peak_rss_mb / 2048``
(the budget: both ≤ 1); the day adds ``"jobs"``, ``"starts"`` and ``"stops"`` and has no
``numpy`` floor (its jobs replay shared templates: no per-GPU pass to compare with).

Usage: python bench/facility.py [--gpus 10000] [--duration 3600] [--runs 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _report
import numpy as np

from llm_powertrace_ds import shards
from llm_powertrace_ds.run import DeviceSeries, Event, Run

BUDGET_S = 30.0
BUDGET_MB = 2048.0
DAY_S = 86_400.0
DAY_JOBS = 24
MODES = ("lockstep", "independent", "measured", "arrivals")


def make_run(i: int, devices: int = 8, seconds: float = 600.0) -> Run:
    """A synthetic 8-GPU training run (see the module docstring)."""
    rng = np.random.default_rng(i)
    n = int(seconds * 10)
    t = np.arange(n, dtype=np.int64) * 100
    step = int(rng.integers(12, 30))  # ticks per step, one per run
    phase = (np.arange(n) % step) / step
    level = np.where(phase < 0.75, 560.0 + 10 * i, 240.0)
    level[:50] = 90.0
    devs = [DeviceSeries(g, t + g, {"power_w": np.roll(level, int(rng.integers(0, 2)))
                                    + rng.normal(0, 12, n)},
                         power_limit_w=700.0, default_power_limit_w=700.0)
            for g in range(devices)]
    events = [Event(int(s * 100), "step_begin", step=k) for k, s in enumerate(range(50, n, step))]
    meta = {"run_id": f"bench-{i:02d}", "workload": "finetune", "platform": "h100_sxm_80gb",
            "model_family": "llama", "model_name": "llama-bench", "sweep": "bench", "repeat": 0,
            "num_gpus": devices, "sample_period_ms": 100.0, "sampler": "nvml",
            "power_field": "instant", "start_time": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            "tokens": 10**7}
    return Run(meta, devs, events)


def child(root: str, gpus: int, duration: float, sync: str, out: str) -> None:
    """Compose once and print {"seconds", "peak_rss_mb", "numpy_floor_s"} (a fresh process)."""
    from llm_powertrace_ds import facility as fac

    t0 = time.perf_counter()
    extra: dict[str, int] = {}
    if sync == "arrivals":
        duration = DAY_S
        cfg = fac.FacilityConfig(gpus=gpus, duration_s=duration)
        model = fac.Arrivals(DAY_JOBS, 8, 2048, 1800.0, 12 * 3600.0, seed=0)
        result = fac.run_facility(root, cfg, arrivals=model)
    else:
        cfg = fac.FacilityConfig(gpus=gpus, sync=sync, duration_s=duration)  # type: ignore[arg-type]
        result = fac.run_facility(root, cfg)
    data = fac.to_json(result)
    fac.write_profile(result, out, data)
    seconds = time.perf_counter() - t0
    if sync == "arrivals":
        extra = {"jobs": len(result.jobs),
                 "starts": sum(e["jobs"] for e in data["events"] if e["kind"] == "start"),
                 "stops": sum(e["jobs"] for e in data["events"] if e["kind"] == "stop")}
    floor = None
    if sync != "arrivals":  # the day has no such floor: its jobs share templates, not GPUs
        n = int(duration * 10)
        series = np.random.default_rng(0).random((8, n))
        t1 = time.perf_counter()
        total = np.zeros(n)
        for g in range(gpus):
            total += series[g % 8]
        floor = time.perf_counter() - t1
    print(json.dumps({"seconds": seconds,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "numpy_floor_s": floor, **extra}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10_000, help="GPUs on the site (default: 10000)")
    ap.add_argument("--duration", type=float, default=3600.0, help="horizon, s (default: 3600)")
    ap.add_argument("--runs", type=int, default=20, help="source runs (default: 20)")
    ap.add_argument("--child", nargs=4, metavar=("ROOT", "SYNC", "OUT", "_"),
                    help=argparse.SUPPRESS)
    _report.add_json_option(ap)
    args = ap.parse_args()
    started = _report.machine()
    if args.child:
        child(args.child[0], args.gpus, args.duration, args.child[1], args.child[2])
        return
    report: dict[str, object] = {"gpus": args.gpus, "duration_s": args.duration,
                                 "source_runs": args.runs, "samples_per_profile":
                                 int(args.duration * 10), "budget_s": BUDGET_S,
                                 "budget_mb": BUDGET_MB}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ds"
        for i in range(args.runs):
            shards.publish_run(root, make_run(i), refresh_card=False)
        for sync in MODES:
            proc = subprocess.run(
                [sys.executable, __file__, "--gpus", str(args.gpus), "--duration",
                 str(args.duration), "--child", str(root), sync, str(Path(tmp) / "p.parquet"),
                 "-"], capture_output=True, text=True, check=True)
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            res["time_ratio"] = res["seconds"] / BUDGET_S
            res["rss_ratio"] = res["peak_rss_mb"] / BUDGET_MB
            report[sync] = res
    print(json.dumps(report, indent=2))
    if args.json:
        rows = []
        for sync in MODES:
            res = report[sync]
            assert isinstance(res, dict)
            name = "day_24h" if sync == "arrivals" else sync
            rows += [_report.result(f"{name}_seconds", round(res["seconds"], 3), "s (wall)",
                                    at_most=BUDGET_S),
                     _report.result(f"{name}_peak_rss_mb", round(res["peak_rss_mb"], 1), "MB",
                                    at_most=BUDGET_MB)]
            if res["numpy_floor_s"] is not None:
                rows.append(_report.result(f"{name}_numpy_floor_s",
                                           round(res["numpy_floor_s"], 3), "s (wall)"))
            if sync == "arrivals":
                rows += [_report.result("day_24h_jobs", res["jobs"], "jobs",
                                        at_least=20),
                         _report.result("day_24h_starts", res["starts"], "starts in the ramp "
                                        "report"),
                         _report.result("day_24h_stops", res["stops"], "stops in the ramp "
                                        "report")]
        _report.write(args.json, _report.document("facility", rows, script=__file__,
                                                  started=started))


if __name__ == "__main__":
    main()
