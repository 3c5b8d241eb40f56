"""What ``llm-powertrace record`` costs the program it measures, measured side by side.

A CPU-bound child (a fixed number of loop iterations, ~1 s) runs ``--repeats`` times bare and
``--repeats`` times under ``record`` (the sampler on, ``--sampler``, no idle padding), interleaved
in ABBA order so that slow drifts of the machine cancel out. The child times *itself*
(``time.monotonic_ns`` around its loop), so the wall time compared is the work's, not the
start-up's. Per pair::

    slowdown_pct = 100 * (wall_recorded / wall_bare - 1)

The result is the pairs' mean with a two-sided 95 % Student-t interval
(``scipy.stats.t``). Start-up latency is measured twice:

* ``start_latency_s``: from the call of ``record_command`` to the release of the child (the
  sampler's spawn and first tick; no idle padding): what ``record`` adds in front of a program;
* ``cli_start_latency_s``: from launching the ``llm-powertrace record`` process to the child's
  first instruction (adds the interpreter and the CLI's imports, ``datasets`` among them).

Prints one JSON object. Usage::

    python bench/record_overhead.py [--repeats 6] [--iterations 20000000] [--sampler auto]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CHILD = """\
import json, sys, time
t0 = time.monotonic_ns()
x = 0
for i in range(int(sys.argv[2])):
    x += i
t1 = time.monotonic_ns()
json.dump({"start_ns": t0, "end_ns": t1}, open(sys.argv[1], "w"))
"""


def _bare(iterations: int, workdir: Path) -> float:
    out = workdir / "bare.json"
    subprocess.run([sys.executable, "-c", CHILD, str(out), str(iterations)], check=True)
    t = json.loads(out.read_text())
    return (t["end_ns"] - t["start_ns"]) / 1e9


def _recorded(iterations: int, workdir: Path, sampler: str, k: int) -> tuple[float, float]:
    from generation.record import RecordConfig, record_command

    out = workdir / "rec.json"
    outcome = record_command([sys.executable, "-c", CHILD, str(out), str(iterations)],
                             RecordConfig(out=workdir / f"ds{k}", workload="finetune",
                                          sampler=sampler))  # type: ignore[arg-type]
    if outcome.status != "published":
        raise SystemExit(f"the recorded run was not published: {outcome}")
    t = json.loads(out.read_text())
    assert outcome.child_start_ns is not None
    return (t["end_ns"] - t["start_ns"]) / 1e9, \
        (outcome.child_start_ns - outcome.record_start_ns) / 1e9


def _cli_latency(workdir: Path, sampler: str) -> float:
    out = workdir / "cli.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    launched = time.monotonic_ns()
    subprocess.run([sys.executable, "-m", "llm_powertrace_ds.cli", "-q", "record", "--out",
                    str(workdir / "cli-ds"), "--workload", "finetune", "--sampler", sampler,
                    "--idle-before-s", "0", "--idle-after-s", "0", "--", sys.executable, "-c",
                    CHILD, str(out), "1000"], check=True, env=env, stdout=subprocess.DEVNULL)
    return (json.loads(out.read_text())["start_ns"] - launched) / 1e9


def _interval(values: list[float]) -> tuple[float, float, float]:
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    half = float(stats.t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) \
        / len(values) ** 0.5
    return mean, mean - half, mean + half


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=20_000_000)
    parser.add_argument("--sampler", default="auto", choices=("auto", "nvml", "cpu_proxy"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    slowdowns, bare_s, rec_s, latencies = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        _bare(args.iterations, workdir)  # warm-up, discarded
        for k in range(args.repeats):
            order = ("bare", "rec") if k % 2 == 0 else ("rec", "bare")
            pair: dict[str, float] = {}
            for what in order:
                if what == "bare":
                    pair["bare"] = _bare(args.iterations, workdir)
                else:
                    pair["rec"], latency = _recorded(args.iterations, workdir, args.sampler, k)
                    latencies.append(latency)
            bare_s.append(pair["bare"])
            rec_s.append(pair["rec"])
            slowdowns.append(100.0 * (pair["rec"] / pair["bare"] - 1.0))
        cli = _cli_latency(workdir, args.sampler)
    mean, low, high = _interval(slowdowns)
    result = {
        "child_wall_s_bare": statistics.fmean(bare_s),
        "child_wall_s_recorded": statistics.fmean(rec_s),
        "slowdown_pct": mean, "ci95_pct": [low, high],
        "slowdown_ok_le_1pct": bool(high <= 1.0),
        "start_latency_s_mean": statistics.fmean(latencies),
        "start_latency_s_max": max(latencies),
        "start_latency_ok_le_1s": bool(max(latencies) <= 1.0),
        "pairs_slowdown_pct": [round(v, 3) for v in slowdowns],
        "cli_start_latency_s": cli,
        "repeats": args.repeats, "iterations": args.iterations, "sampler": args.sampler,
        "cpus": len(os.sched_getaffinity(0)),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
