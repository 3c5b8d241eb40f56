"""Benchmark the query API (``llm_powertrace_ds.query``) against the same queries in raw pyarrow.

Writes a folder of synthetic runs (3 platforms x 3 families, 4 devices each; 27 M samples by
default) through the shard writer, then answers two questions both ways, side by side in one
process on the same files, alternating, and checks that the answers are equal:

1. mean power per platform x model family, over every device sample;
2. the 99th percentile of each run's device samples.

Prints one JSON object: ``{"samples", "runs", "write_s", "query_s", "pyarrow_s", "ratio",
"ratio_best", "query_cpu_s", "pyarrow_cpu_s", "ratio_cpu", "rounds"}``: medians of ``--repeat``
alternating rounds (wall and CPU time), and the ratio of the best rounds.

Usage: python bench/query.py [--runs-per-group 10] [--devices 4] [--samples-per-device 75000]
[--json PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _report
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.query import Runs
from llm_powertrace_ds.run import DeviceSeries, Run

PLATFORMS = ("a100_sxm4_80gb", "h100_sxm_80gb", "l40s")
FAMILIES = ("llama", "qwen", "mistral")


def make_run(run_id: str, platform: str, family: str, devices: int, n: int,
             rng: np.random.Generator) -> Run:
    t = np.arange(n, dtype=np.int64) * 100
    devs = []
    for g in range(devices):
        power = 300 + 100 * np.sin(t / 5000.0 + g) + rng.normal(0, 5, n)
        devs.append(DeviceSeries(g, t + g, {"power_w": power}, gpu_name="bench",
                                 power_limit_w=700.0))
    meta = {"run_id": run_id, "workload": "finetune", "platform": platform,
            "model_family": family, "sweep": "bench", "num_gpus": devices,
            "sample_period_ms": 100.0,
            "start_time": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}
    return Run(meta, devs)


def query_api(root: Path) -> tuple[dict, dict]:
    sums: dict[tuple[str, str], list[float]] = {}
    per_run: dict[str, list[np.ndarray]] = {}
    for run, trace in Runs.load(root, workload="finetune").traces():
        acc = sums.setdefault((run.platform, run.model_family), [0.0, 0.0])
        acc[0] += float(trace.power_w.sum())
        acc[1] += len(trace.power_w)
        per_run.setdefault(run.run_id, []).append(trace.power_w)
    means = {k: s / n for k, (s, n) in sums.items()}
    p99 = {k: float(np.percentile(np.concatenate(v), 99)) for k, v in per_run.items()}
    return means, p99


def query_pyarrow(root: Path) -> tuple[dict, dict]:
    sums: dict[tuple[str, str], list[float]] = {}
    per_run: dict[str, list[np.ndarray]] = {}
    for path in sorted((root / "data" / "finetune").glob("*/*/*.arrow")):
        with pa.memory_map(str(path), "r") as src:
            for batch in ipc.open_stream(src):
                power = batch.column("power_w")
                offsets = power.offsets.to_numpy()
                values = pc.list_flatten(power).to_numpy()
                ids = batch.column("run_id").to_pylist()
                plats = batch.column("platform").to_pylist()
                fams = batch.column("model_family").to_pylist()
                for i, rid in enumerate(ids):
                    v = values[offsets[i] - offsets[0]:offsets[i + 1] - offsets[0]]
                    acc = sums.setdefault((plats[i], fams[i]), [0.0, 0.0])
                    acc[0] += float(v.sum())
                    acc[1] += len(v)
                    per_run.setdefault(rid, []).append(v)
    means = {k: s / n for k, (s, n) in sums.items()}
    p99 = {k: float(np.percentile(np.concatenate(v), 99)) for k, v in per_run.items()}
    return means, p99


def timed(fn: Callable[[Path], Any], root: Path) -> tuple[float, float, Any]:
    """Wall time, CPU time and result of ``fn(root)``.

    CPU time is less sensitive than wall time to other processes on shared cores.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(root)
    return time.perf_counter() - t0, time.process_time() - c0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-per-group", type=int, default=10)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--samples-per-device", type=int, default=75_000)
    ap.add_argument("--repeat", type=int, default=3)
    _report.add_json_option(ap)
    args = ap.parse_args()
    started = _report.machine()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "bench"
        t0 = time.perf_counter()
        n_runs = 0
        for plat in PLATFORMS:
            for fam in FAMILIES:
                for i in range(args.runs_per_group):
                    run = make_run(f"{plat}-{fam}-{i:03d}", plat, fam, args.devices,
                                   args.samples_per_device, rng)
                    shards.publish_run(root, run, refresh_card=False)
                    n_runs += 1
        write_s = time.perf_counter() - t0
        assert len(layout.shard_files(root, "finetune")) == n_runs
        api_times, raw_times, api_cpu, raw_cpu = [], [], [], []
        for _ in range(args.repeat):
            ta, ca, res_a = timed(query_api, root)
            tr, cr, res_r = timed(query_pyarrow, root)
            api_times.append(ta)
            raw_times.append(tr)
            api_cpu.append(ca)
            raw_cpu.append(cr)
            assert res_a == res_r, "the two paths disagree"
        q, r = statistics.median(api_times), statistics.median(raw_times)
        qc, rc = statistics.median(api_cpu), statistics.median(raw_cpu)
        out = {
            "samples": n_runs * args.devices * args.samples_per_device, "runs": n_runs,
            "write_s": round(write_s, 2), "query_s": round(q, 3), "pyarrow_s": round(r, 3),
            "ratio": round(q / r, 3), "ratio_best": round(min(api_times) / min(raw_times), 3),
            "query_cpu_s": round(qc, 3), "pyarrow_cpu_s": round(rc, 3),
            "ratio_cpu": round(qc / rc, 3),
            "rounds": {"query_s": [round(x, 3) for x in api_times],
                       "pyarrow_s": [round(x, 3) for x in raw_times]},
        }
        print(json.dumps(out))
    if args.json:
        res = _report.result
        _report.write(args.json, _report.document("query", [
            res("samples", out["samples"], "samples"),
            res("runs", out["runs"], "runs"),
            res("query_s", out["query_s"], "s (wall, median)"),
            res("pyarrow_s", out["pyarrow_s"], "s (wall, median)"),
            res("ratio", out["ratio"], "query API / raw pyarrow, wall"),
            res("ratio_best", out["ratio_best"], "query API / raw pyarrow, best rounds"),
            res("ratio_cpu", out["ratio_cpu"], "query API / raw pyarrow, CPU"),
        ], script=__file__, started=started))


if __name__ == "__main__":
    main()
