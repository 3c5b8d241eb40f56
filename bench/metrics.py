"""Benchmark: the whole metric suite (``compute_run_metrics``) on >= 20 M per-device samples.

A synthetic 8-GPU training run (per-device jitter and clock offsets of a few ms, step-shaped
power with noise, checkpoint dips, a few logging gaps, an energy counter, step and checkpoint
events) is built in memory; after one untimed warm-up call (imports, first touch of memory),
the metric suite and one ``numpy.sum`` pass over every power sample are timed side by side in
one process, ``--repeat`` times each, and the best time of each is reported.

Prints one JSON object: ``{"samples", "metrics_s", "metrics_cpu_s", "numpy_sum_s",
"samples_per_s", "samples_per_cpu_s", "threads", "ratio"}`` where ``samples_per_s = samples /
metrics_s`` (wall clock; target >= 10 M, issue 13), ``samples_per_cpu_s = samples /
metrics_cpu_s`` (CPU seconds of every thread of the process: the work itself, whatever the
cores), ``threads`` whether the seed-compatible ramps ran in a second thread (runs of at least
``metrics.THREAD_MIN_SAMPLES`` readings on a machine with more than one core; ``--inline``
keeps everything in one thread) and ``ratio = metrics_s / numpy_sum_s`` (for information).

Usage: python bench/metrics.py [--devices 8] [--samples-per-device 2500000] [--repeat 3] [--inline]
[--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import _report
import numpy as np

from llm_powertrace_ds import metrics
from llm_powertrace_ds.metrics import compute_run_metrics
from llm_powertrace_ds.run import DeviceSeries, Event, Run


def make_run(devices: int, n: int, seed: int = 0) -> Run:
    """A long synthetic training run (see the module docstring)."""
    rng = np.random.default_rng(seed)
    base = np.arange(n, dtype=np.int64) * 100
    step_ms = 1700
    devs = []
    for g in range(devices):
        t = base + g * 3 + rng.integers(-4, 5, n)
        t[1:] = np.maximum(t[1:], t[:-1] + 1)  # keep strictly increasing after jitter
        phase = (t % step_ms) / step_ms
        power = np.where(phase < 0.7, 620.0, 260.0) + rng.normal(0, 15, n)
        power[(t % 600_000) < 20_000] = 180.0  # checkpoint dips every 10 min
        gaps = rng.integers(1000, n - 1000, 5)
        for s in gaps:  # logger stalls: 1 s of missing readings
            power[s:s + 10] = np.nan
        energy = np.cumsum(np.nan_to_num(power, nan=400.0) * 100.0)  # mJ
        devs.append(DeviceSeries(g, t, {"power_w": power, "energy_mj": energy},
                                 power_limit_w=700.0, default_power_limit_w=700.0))
    steps = np.arange(0, n * 100, step_ms)
    events = [Event(int(s), "step_begin", step=i, rank=0) for i, s in enumerate(steps)]
    for c in range(0, n * 100, 600_000):
        events += [Event(c, "checkpoint_begin", rank=0), Event(c + 20_000, "checkpoint_end", rank=0)]
    meta = {"run_id": "bench", "workload": "finetune", "platform": "h100_sxm_80gb",
            "sample_period_ms": 100.0, "tokens": 10**9}
    return Run(meta, devs, sorted(events, key=lambda e: e.t_ms))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=8, help="devices (default: 8)")
    ap.add_argument("--samples-per-device", type=int, default=2_500_000,
                    help="samples per device (default: 2,500,000)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions (default: 3)")
    ap.add_argument("--inline", action="store_true",
                    help="compute every metric group in one thread (default: the seed-compatible "
                         "ramps of a large run in a second thread)")
    _report.add_json_option(ap)
    args = ap.parse_args()
    started = _report.machine()
    if args.inline:
        metrics.THREAD_MIN_SAMPLES = 2**62
    run = make_run(args.devices, args.samples_per_device)
    samples = sum(len(d) for d in run.devices)
    powers = [d.power_w for d in run.devices]
    metrics_s = numpy_s = cpu_s = float("inf")
    result = compute_run_metrics(run)  # warm-up: imports, first touch of memory
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        for p in powers:
            np.sum(p)
        numpy_s = min(numpy_s, time.perf_counter() - t0)
        t0, c0 = time.perf_counter(), time.process_time()
        result = compute_run_metrics(run)
        metrics_s = min(metrics_s, time.perf_counter() - t0)
        cpu_s = min(cpu_s, time.process_time() - c0)
    assert result["energy_j"] is not None and result["synchrony_index"] is not None
    threads = samples >= metrics.THREAD_MIN_SAMPLES and (os.cpu_count() or 1) > 1
    out = {"samples": samples, "metrics_s": round(metrics_s, 4),
           "metrics_cpu_s": round(cpu_s, 4), "numpy_sum_s": round(numpy_s, 5),
           "samples_per_s": round(samples / metrics_s),
           "samples_per_cpu_s": round(samples / cpu_s), "threads": threads,
           "ratio": round(metrics_s / numpy_s, 1)}
    print(json.dumps(out))
    if args.json:
        _report.write(args.json, _report.document("metrics", [
            _report.result("samples", samples, "samples"),
            _report.result("metrics_s", out["metrics_s"], "s (wall, best)"),
            _report.result("metrics_cpu_s", out["metrics_cpu_s"], "CPU-s (best)"),
            _report.result("samples_per_s", out["samples_per_s"], "samples/s", at_least=10e6),
            _report.result("samples_per_cpu_s", out["samples_per_cpu_s"], "samples/CPU-s"),
            _report.result("ramps_in_second_thread", threads, "flag"),
            _report.result("metrics_over_numpy_sum", out["ratio"], "ratio"),
        ], script=__file__, started=started))


if __name__ == "__main__":
    main()
