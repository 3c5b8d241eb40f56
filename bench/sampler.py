"""Benchmark the sampler's timing against a naive ``read(); sleep(period)`` loop, side by side.

    python bench/sampler.py [--seconds S] [--load N] [--period-ms P] [--json PATH]

Starts ``N`` busy processes (children of this process, so they also load the measured
``cpu_proxy`` tree), then runs, at the same time and for ``S`` seconds:

* the sampler (``cpu_proxy``, one device: this process's tree) in its own process, with whatever
  scheduling priority it can get here (reported), and
* a naive loop in another process at default priority: ``read(); time.sleep(period)`` with the
  same ``cpu_proxy`` read.

A tick's deviation is ``|tick time - its deadline|`` where the tick time is the sample's
timestamp (after the read); the naive loop's deadlines are ``start + k * period``. ``missed_ticks``
counts deadlines that passed without a tick; ``drift_ms`` is the last tick's time minus its
deadline; ``cpu_pct_of_core`` is the process's CPU time (user + system, as the kernel's tick-based
accounting reports it) over the measured wall time (start-up excluded);
``cpu_pct_of_core_schedstat`` is the same from the scheduler's nanosecond run-time counter
(``/proc/<pid>/task/*/schedstat``) where the kernel has it. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import _report
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _busy() -> None:  # pragma: no cover - runs in a child
    while True:
        pass


def _naive(pid: int, period_ms: float, seconds: float, out_path: str) -> None:
    """A naive sampler: read, then sleep one period; records its tick times."""
    from generation.sampler.cpu_proxy import CpuProxySource
    from generation.sampler.process import register_pid

    tmp = Path(out_path).parent / "naive-staging"
    register_pid(tmp, 0, pid)
    source = CpuProxySource(tmp / "pids")
    source.open()
    period_s = period_ms / 1000.0
    start = time.monotonic_ns()
    cpu0 = time.process_time()
    ticks = []
    end = start + int(seconds * 1e9)
    while True:
        source.read(0)
        now = time.monotonic_ns()
        if now > end:
            break
        ticks.append(now)
        time.sleep(period_s)
    cpu = time.process_time() - cpu0
    wall = (time.monotonic_ns() - start) / 1e9
    Path(out_path).write_text(json.dumps({"start": start, "ticks": ticks, "cpu_s": cpu,
                                          "wall_s": wall}))


def _schedstat_s(pid: int) -> float | None:
    """Run time of every thread of ``pid`` in s from ``/proc/<pid>/task/*/schedstat`` (ns)."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _stats(dev_ms: np.ndarray, missed: int, drift_ms: float, cpu_pct: float, ticks: int) -> dict:
    return {
        "p50_dev_ms": round(float(np.percentile(dev_ms, 50)), 3),
        "p99_dev_ms": round(float(np.percentile(dev_ms, 99)), 3),
        "max_dev_ms": round(float(dev_ms.max()), 3),
        "missed_ticks": int(missed),
        "drift_ms": round(float(drift_ms), 3),
        "cpu_pct_of_core": round(float(cpu_pct), 3),
        "ticks": int(ticks),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--load", type=int, default=0, help="busy processes to start")
    parser.add_argument("--period-ms", type=float, default=100.0)
    parser.add_argument("--priority", default="auto", choices=("auto", "fifo", "nice", "none"),
                        help="the sampler's priority policy (default: the best permitted)")
    _report.add_json_option(parser)
    args = parser.parse_args(argv)
    started = _report.machine()

    import psutil

    from generation.sampler import Sampler, SamplerConfig, read_spool

    ctx = mp.get_context("spawn")
    loads = [ctx.Process(target=_busy, daemon=True) for _ in range(args.load)]
    for p in loads:
        p.start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-sampler-") as tmp:
            staging = Path(tmp) / "run"
            naive_out = Path(tmp) / "naive.json"
            cfg = SamplerConfig(source="cpu_proxy", period_ms=args.period_ms,
                                priority=args.priority)
            sampler = Sampler(cfg, staging, pids=[os.getpid()])
            sampler.start()
            pid = sampler.pid
            assert pid is not None, "the sampler did not start"
            proc = psutil.Process(pid)
            cpu0 = sum(proc.cpu_times()[:2])
            run0 = _schedstat_s(pid)
            t0 = time.monotonic()
            naive = ctx.Process(target=_naive, args=(os.getpid(), args.period_ms, args.seconds,
                                                     str(naive_out)))
            naive.start()
            naive.join(args.seconds + 60)
            remaining = args.seconds - (time.monotonic() - t0)
            if remaining > 0:
                time.sleep(remaining)
            cpu1 = sum(proc.cpu_times()[:2])
            run1 = _schedstat_s(pid)
            wall = time.monotonic() - t0
            summary = sampler.stop()
            spool = read_spool(staging)
            ticks = spool.ticks()
            dev = np.abs(ticks["t_after_ns"] - ticks["deadline_ns"]) / 1e6
            result = {"sampler": _stats(dev, int(ticks["missed"].sum()),
                                        (ticks["t_after_ns"][-1] - ticks["deadline_ns"][-1]) / 1e6,
                                        100.0 * (cpu1 - cpu0) / wall, len(ticks))}
            if run0 is not None and run1 is not None:
                # the scheduler's own ns run time: exact, unlike tick-sampled cpu_times
                result["sampler"]["cpu_pct_of_core_schedstat"] = round(
                    100.0 * (run1 - run0) / wall, 3)
            nv = json.loads(naive_out.read_text())
            period_ns = int(round(args.period_ms * 1e6))
            t = np.asarray(nv["ticks"], dtype=np.int64)
            k = np.arange(len(t), dtype=np.int64)  # tick k serves deadline start + k*period
            deadlines = nv["start"] + k * period_ns
            ndev = np.abs(t - deadlines) / 1e6
            expected = int((t[-1] - nv["start"]) // period_ns) + 1
            result["naive"] = _stats(ndev, expected - len(t), (t[-1] - deadlines[-1]) / 1e6,
                                     100.0 * nv["cpu_s"] / nv["wall_s"], len(t))
            result["config"] = {"seconds": args.seconds, "load": args.load,
                                "period_ms": args.period_ms, "cpus": os.cpu_count(),
                                "sampler_priority": summary.priority,
                                "naive_priority": "default (nice 0)",
                                "sampler_state": summary.state,
                                "sampler_read_latency_mean_ms":
                                    round(summary.read_latency_mean_ms or float("nan"), 3)}
    finally:
        for p in loads:
            p.terminate()
        for p in loads:
            p.join(5)
    print(json.dumps(result))
    if args.json:
        rows = [_report.result(f"{who}_{key}", result[who][key], unit)
                for who in ("sampler", "naive")
                for key, unit in (("p50_dev_ms", "ms"), ("p99_dev_ms", "ms"),
                                  ("max_dev_ms", "ms"), ("missed_ticks", "ticks"),
                                  ("drift_ms", "ms"), ("cpu_pct_of_core", "% of a core"),
                                  ("ticks", "ticks"))]
        if "cpu_pct_of_core_schedstat" in result["sampler"]:
            rows.append(_report.result("sampler_cpu_pct_of_core_schedstat",
                                       result["sampler"]["cpu_pct_of_core_schedstat"],
                                       "% of a core"))
        rows.append(_report.result("sampler_priority", result["config"]["sampler_priority"],
                                   "policy"))
        _report.write(args.json, _report.document("sampler", rows, script=__file__,
                                                  argv=argv, started=started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
