"""Validate the NVML sampler on a real GPU: idle, a bf16 matmul load, idle.

    python bench/gpu_validate.py [--idle-s 10] [--load-s 40] [--period-ms 100] [--size 8192]
                                 [--json PATH]

Runs, under the sampler at ``--period-ms``: ``--idle-s`` of idle, ``--load-s`` of back-to-back
bf16 matmuls on the first visible GPU (``cuda:0``), and ``--idle-s`` of idle again, marking each
phase with ``stage`` events. Prints one JSON object:

* ``fields``: what the start-up probe found per GPU (``ok``/``not_supported``/...), the
  ``power_field`` used, driver/NVML/CUDA versions;
* ``ticks``, ``missed_ticks``, ``read_latency_mean_ms``, ``lateness_p99_ms``, ``sampler_state``;
* ``idle_mean_w`` (both idle phases, first second of each skipped), ``loaded_mean_w`` (the load
  phase, its first 2 s skipped);
* ``energy_ratio``: trapezoid integral of the instant power over the whole window divided by the
  energy counter's difference over the same samples (target 0.98-1.02);
* ``instant_changes``: ticks whose instant power differs from the previous tick's (the driver's
  real update rate; with ``instant_changes_per_s``).

Needs only torch (CUDA), nvidia-ml-py and the sampler. It **changes no GPU setting** (no power
limit, no clock lock, no persistence mode); it only raises the sampler process's CPU priority
where that is permitted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _report  # noqa: E402


def analyse(staging: Path, *, idle_s: float, load_s: float) -> dict[str, Any]:
    """The report of one validation run from its staging folder (spool + events)."""
    from generation.events import read_raw_events
    from generation.sampler import read_spool

    spool = read_spool(staging)
    prov = spool.provenance
    stages = [(t, label) for t, kind, _s, _r, _q, label in read_raw_events(staging)
              if kind == "stage"]
    marks = {label: t for t, label in stages}
    rows = spool.device_samples(0)
    t = rows["t_after_ns"].astype(np.int64)
    p = rows["power_w"]
    e = rows["energy_mj"]

    def window(start_ns: int, end_ns: int) -> np.ndarray:
        return (t > start_ns) & (t <= end_ns)

    idle = (window(marks["idle_before"] + int(1e9), marks["load"])
            | window(marks["idle_after"] + int(1e9), marks["end"]))
    loaded = window(marks["load"] + int(2e9), marks["idle_after"])
    fin_p = np.isfinite(p)
    fin_e = np.isfinite(e)
    both = fin_p & fin_e
    ratio = None
    if both.sum() > 2:
        integral_j = float(np.trapezoid(p[both], t[both] / 1e9))
        counter_j = float(e[both][-1] - e[both][0]) / 1000.0
        ratio = integral_j / counter_j if counter_j > 0 else None
    pf = p[fin_p]
    changes = int((np.diff(pf) != 0).sum()) if len(pf) > 1 else 0
    span_s = (t[-1] - t[0]) / 1e9 if len(t) > 1 else float("nan")
    s = spool.summary
    return {
        "gpu_name": spool.devices[0]["name"] if spool.devices else None,
        "gpus_sampled": len(spool.devices),
        "power_field": prov.get("power_field"),
        "fields": {str(d["gpu_index"]): d.get("details", {}).get("probes", {})
                   for d in spool.devices},
        "driver_version": prov.get("driver_version"),
        "nvml_version": prov.get("nvml_version"),
        "cuda_version": prov.get("cuda_version"),
        "sampler_priority": s.priority,
        "sampler_state": s.state,
        "ticks": s.ticks,
        "missed_ticks": s.missed_ticks,
        "read_latency_mean_ms": _r(s.read_latency_mean_ms),
        "lateness_p99_ms": _r(s.lateness_p99_ms),
        "faults": s.faults,
        "idle_mean_w": _r(float(np.nanmean(p[idle]))) if idle.any() else None,
        "loaded_mean_w": _r(float(np.nanmean(p[loaded]))) if loaded.any() else None,
        "loaded_mean_avg_field_w": (_r(float(np.nanmean(rows["power_avg_w"][loaded])))
                                    if loaded.any() and np.isfinite(rows["power_avg_w"]).any()
                                    else None),
        "energy_ratio": _r(ratio, 4),
        "energy_ratio_target": [0.98, 1.02],
        "instant_changes": changes,
        "instant_changes_per_s": _r(changes / span_s) if span_s == span_s and span_s else None,
        "phases_s": {"idle": idle_s, "load": load_s},
    }


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None or value != value else round(float(value), digits)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--load-s", type=float, default=40.0)
    parser.add_argument("--period-ms", type=float, default=100.0)
    parser.add_argument("--size", type=int, default=8192, help="matmul size (n x n, bf16)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the staging folder here instead of a temporary one")
    _report.add_json_option(parser)
    args = parser.parse_args(argv)
    started = _report.machine()
    # CUDA's default order is "fastest first"; NVML's is PCI bus order. Make them agree so
    # cuda:0 is the sampler's first visible GPU.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    import torch

    from generation.events import EventRecorder
    from generation.sampler import Sampler, SamplerConfig

    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device visible to torch"}))
        return 1
    dev = torch.device("cuda:0")
    a = torch.randn(args.size, args.size, dtype=torch.bfloat16, device=dev)
    b = torch.randn(args.size, args.size, dtype=torch.bfloat16, device=dev)
    (a @ b).sum().item()  # warm up cuBLAS before t0
    torch.cuda.synchronize(dev)

    tmp = None
    if args.keep is None:
        tmp = tempfile.TemporaryDirectory(prefix="gpu-validate-")
        staging = Path(tmp.name) / "run"
    else:
        staging = args.keep
    cfg = SamplerConfig(source="nvml", period_ms=args.period_ms)
    iterations = 0
    with Sampler(cfg, staging) as sampler:
        rec = EventRecorder(staging, rank=None)
        rec.mark("stage", label="idle_before")
        time.sleep(args.idle_s)
        rec.mark("stage", label="load")
        end = time.monotonic() + args.load_s
        while time.monotonic() < end:
            for _ in range(20):
                torch.mm(a, b)
            torch.cuda.synchronize(dev)
            iterations += 20
        rec.mark("stage", label="idle_after")
        time.sleep(args.idle_s)
        rec.mark("stage", label="end")
        rec.close()
    report = analyse(staging, idle_s=args.idle_s, load_s=args.load_s)
    report["matmul"] = {"size": args.size, "dtype": "bfloat16", "iterations": iterations,
                        "tflops": round(2 * args.size**3 * iterations / args.load_s / 1e12, 1),
                        "torch": torch.__version__, "device": torch.cuda.get_device_name(dev)}
    report["sampler_summary_state"] = sampler.summary.state if sampler.summary else None
    print(json.dumps(report))
    if tmp is not None:
        tmp.cleanup()
    if args.json:
        _report.write(args.json, _report.document("gpu_validate", results_of(report),
                                                  script=__file__, argv=argv, started=started))
    return 0


def results_of(report: dict[str, Any]) -> list[_report.Result]:
    """The figures of a validation report, the energy ratio with its target (0.98 to 1.02)."""
    res = _report.result
    return [
        res("gpu", report["matmul"]["device"], "device"),
        res("energy_ratio", report["energy_ratio"], "integral / counter",
            within=(0.98, 1.02)),
        res("idle_mean_w", report["idle_mean_w"], "W"),
        res("loaded_mean_w", report["loaded_mean_w"], "W"),
        res("missed_ticks", report.get("missed_ticks"), "ticks"),
        res("lateness_p99_ms", report["lateness_p99_ms"], "ms"),
        res("instant_changes_per_s", report["instant_changes_per_s"], "1/s"),
        res("matmul_tflops", report["matmul"]["tflops"], "TFLOP/s"),
    ]


if __name__ == "__main__":
    sys.exit(main())
