"""Benchmark the shard writer, ``datasets`` loading, and trace scans vs raw ``pyarrow.ipc``.

Writes >= 10 M samples through the shard writer, loads them with ``datasets``, and scans every
trace as numpy arrays through the analyst guide's path (docs/analyst-guide.md) vs raw ``pyarrow.ipc``.

Prints one JSON object:
``{"samples", "write_s", "load_cold_s", "load_warm_s", "scan_datasets_s", "scan_pyarrow_s",
"scan_ratio"}``; the two scans run side by side in one process on the same files.

``scan_ratio`` (that path over raw Arrow) has the target <= 1.5.

Usage: python bench/loader.py [--runs 100] [--devices 4] [--samples-per-device 25000] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
import time
from pathlib import Path

import _report
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
from datasets import load_dataset

from cards.builder import refresh_card
from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.run import DeviceSeries, Run
from llm_powertrace_ds.traces import iter_trace_arrays


def make_run(i: int, devices: int, n: int, rng: np.random.Generator) -> Run:
    t = np.arange(n, dtype=np.int64) * 100
    devs = []
    for g in range(devices):
        power = 300 + 100 * np.sin(t / 5000.0 + g) + rng.normal(0, 5, n)
        devs.append(DeviceSeries(g, t + g, {"power_w": power, "gpu_util_pct": np.full(n, 80.0)},
                                 gpu_name="NVIDIA H100 80GB HBM3", power_limit_w=700.0))
    meta = {"run_id": f"bench-{i:04d}", "workload": "finetune", "platform": "h100_sxm_80gb",
            "model_family": "llama", "sweep": "bench", "num_gpus": devices,
            "sample_period_ms": 100.0, "start_time": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}
    return Run(meta, devs)


def scan_datasets(ds) -> float:
    total = 0.0
    for _meta, t_ms, power in iter_trace_arrays(ds):
        total += float(power.sum()) + float(t_ms[-1])
    return total


def scan_pyarrow(files: list[Path]) -> float:
    total = 0.0
    for path in files:
        with pa.memory_map(str(path), "r") as src:
            for batch in ipc.open_stream(src):
                pw = batch.column("power_w")
                tm = batch.column("t_ms")
                pv, po = pw.values.to_numpy(), pw.offsets.to_numpy()
                tv, to = tm.values.to_numpy(), tm.offsets.to_numpy()
                for i in range(batch.num_rows):
                    total += float(pv[po[i]:po[i + 1]].sum()) + float(tv[to[i]:to[i + 1]][-1])
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--samples-per-device", type=int, default=25_000)
    _report.add_json_option(ap)
    args = ap.parse_args()
    started = _report.machine()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root, cache = Path(tmp) / "ds", Path(tmp) / "cache"
        t0 = time.perf_counter()
        for i in range(args.runs):
            shards.publish_run(root, make_run(i, args.devices, args.samples_per_device, rng),
                               refresh_card=False)
        refresh_card(root)
        write_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        ds = load_dataset(str(root), "finetune", split="h100_sxm_80gb", cache_dir=str(cache))
        load_cold_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ds = load_dataset(str(root), "finetune", split="h100_sxm_80gb", cache_dir=str(cache))
        load_warm_s = time.perf_counter() - t0

        files = layout.shard_files(root, "finetune", "h100_sxm_80gb")
        scan_pyarrow(files)  # warm the page cache for both
        best_ds, best_pa = [], []
        for _ in range(3):  # interleaved repeats; report the best of each
            t0 = time.perf_counter()
            a = scan_datasets(ds)
            best_ds.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = scan_pyarrow(files)
            best_pa.append(time.perf_counter() - t0)
        assert abs(a - b) <= 1e-6 * abs(b), (a, b)
        samples = int(pc.sum(pc.list_value_length(ds.data.column("power_w"))).as_py())
        out = {
            "samples": samples,
            "write_s": round(write_s, 3),
            "load_cold_s": round(load_cold_s, 3),
            "load_warm_s": round(load_warm_s, 3),
            "scan_datasets_s": round(min(best_ds), 4),
            "scan_pyarrow_s": round(min(best_pa), 4),
            "scan_ratio": round(min(best_ds) / min(best_pa), 3),
        }
        print(json.dumps(out))
    if args.json:
        r = _report.result
        _report.write(args.json, _report.document("loader", [
            r("samples", out["samples"], "samples"),
            r("write_s", out["write_s"], "s (wall)"),
            r("load_cold_s", out["load_cold_s"], "s (wall)"),
            r("load_warm_s", out["load_warm_s"], "s (wall)"),
            r("scan_datasets_s", out["scan_datasets_s"], "s (wall, best of 3)"),
            r("scan_pyarrow_s", out["scan_pyarrow_s"], "s (wall, best of 3)"),
            r("scan_ratio", out["scan_ratio"], "ratio", at_most=1.5),
        ], script=__file__, started=started))


if __name__ == "__main__":
    main()
