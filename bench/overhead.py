"""Training-throughput overhead of the measurement: the same tiny run with the sampler on and off.

One process trains one fixed tiny run (TRL ``SFTTrainer``, LoRA on ``llama-tiny`` by default)
``--repeats`` times in each condition, interleaved in ABBA order (on-off, off-on, ...) so that
slow drifts of the machine cancel out:

* **on**: the sampler runs (its own process, the configured source and period) and every event
  goes through ``generation.events.EventRecorder`` — exactly what ``generate`` does;
* **off**: no sampler, events dropped.

Throughput is the workload's own ``tokens_per_s`` (training tokens over the span from the first
step's begin to the last step's end). The slowdown of each on/off pair is
``100 * (1 - on / off)``; the result is their mean with a two-sided 95 % Student-t interval.
A warm-up run (discarded) comes first. Prints one JSON object::

    {"tokens_per_s_on": ..., "tokens_per_s_off": ..., "slowdown_pct": ...,
     "ci95_pct": [low, high], "repeats": N, ...}

Usage::

    python bench/overhead.py [--repeats 8] [--steps 30] [--model llama-tiny] [--source auto]
                             [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import _report  # noqa: E402


def _settings(args: argparse.Namespace, machine: Any) -> dict[str, Any]:
    from generation.workloads import get_workload

    spec = get_workload("finetune")
    values = {"model": args.model, "method": "lora", "lora_rank": 8, "batch_size": args.batch_size,
              "seq_len": args.seq_len, "max_steps": args.steps, "seed": 0}
    resolved = spec.resolve(values, machine)
    problems = spec.check(resolved, machine)
    if problems:
        raise SystemExit(f"bad benchmark settings: {problems}")
    return resolved


def _one(settings: dict[str, Any], machine: Any, *, sampler_on: bool, period_ms: float,
         workdir: Path) -> float:
    from generation.events import EventRecorder
    from generation.sampler import Sampler, SamplerConfig
    from generation.workloads import RunContext, get_workload

    spec = get_workload("finetune")
    staging = Path(tempfile.mkdtemp(prefix="on-" if sampler_on else "off-", dir=workdir))
    device = "cuda" if machine.cuda else "cpu"
    if not sampler_on:
        ctx = RunContext(run_id="bench", staging_dir=staging, mark=lambda *a, **k: None,
                         progress=False, device=device)
        return float(spec.run(settings, ctx)["tokens_per_s"])
    gpus = None
    if machine.source == "nvml":  # only the GPU the workload uses (cuda:0), resolved by UUID
        from generation.gpu_devices import resolve_workload_gpus

        gpus = tuple(g.nvml_index for g in resolve_workload_gpus(1))
    config = SamplerConfig(source=machine.source, period_ms=period_ms, gpu_indices=gpus)
    recorder = EventRecorder(staging, rank=0)
    with Sampler(config, staging):
        ctx = RunContext(run_id="bench", staging_dir=staging, mark=recorder.mark,
                         progress=False, device=device)
        result = spec.run(settings, ctx)
        recorder.close()
    return float(result["tokens_per_s"])


def t_quantile_975(df: int) -> float:
    """Two-sided 95 % Student-t quantile."""
    from scipy import stats

    return float(stats.t.ppf(0.975, df))


def summarise(on: list[float], off: list[float]) -> dict[str, Any]:
    """Mean throughputs, mean paired slowdown and its 95 % interval."""
    pairs = [100.0 * (1.0 - a / b) for a, b in zip(on, off, strict=True)]
    n = len(pairs)
    mean = statistics.fmean(pairs)
    half = (t_quantile_975(n - 1) * statistics.stdev(pairs) / math.sqrt(n)) if n > 1 else math.nan
    return {
        "tokens_per_s_on": round(statistics.fmean(on), 2),
        "tokens_per_s_off": round(statistics.fmean(off), 2),
        "slowdown_pct": round(mean, 3),
        "ci95_pct": [round(mean - half, 3), round(mean + half, 3)],
        "repeats": n,
    }


def main(argv: list[str] | None = None) -> int:
    from generation.gpu_devices import pci_bus_order_env

    pci_bus_order_env()  # before torch sees CUDA: cuda:0 is the GPU the sampler resolves
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=8, help="on/off pairs (default: 8)")
    parser.add_argument("--steps", type=int, default=30, help="optimiser steps per run (default: 30)")
    parser.add_argument("--model", default="llama-tiny", help="zoo model (default: llama-tiny)")
    parser.add_argument("--batch-size", type=int, default=4, help="batch size (default: 4)")
    parser.add_argument("--seq-len", type=int, default=128, help="sequence length (default: 128)")
    parser.add_argument("--source", default="auto", choices=("auto", "nvml", "cpu_proxy"),
                        help="sampler source (default: auto)")
    parser.add_argument("--period-ms", type=float, default=100.0,
                        help="sampling period (default: 100)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's own choice)")
    _report.add_json_option(parser)
    args = parser.parse_args(argv)
    host = _report.machine()
    if args.repeats < 2:
        parser.error("--repeats must be >= 2 for an interval")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    from generation.sweep import detect_machine
    from generation.workloads import get_workload

    machine = detect_machine({"source": args.source, "period_ms": args.period_ms})
    settings = _settings(args, machine)
    get_workload("finetune").prepare()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    on: list[float] = []
    off: list[float] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="powertrace-overhead-") as tmp:
        work = Path(tmp)
        _one(settings, machine, sampler_on=False, period_ms=args.period_ms, workdir=work)  # warm-up
        for i in range(args.repeats):
            order = (True, False) if i % 2 == 0 else (False, True)
            for sampler_on in order:
                tps = _one(settings, machine, sampler_on=sampler_on, period_ms=args.period_ms,
                           workdir=work)
                (on if sampler_on else off).append(tps)
    out = summarise(on, off)
    out.update(source=machine.source, platform=machine.platform, period_ms=args.period_ms,
               model=args.model, steps=args.steps, batch_size=args.batch_size,
               seq_len=args.seq_len, threads=torch.get_num_threads(),
               wall_s=round(time.monotonic() - started, 1),
               tokens_per_s_on_runs=[round(x, 1) for x in on],
               tokens_per_s_off_runs=[round(x, 1) for x in off])
    print(json.dumps(out))
    if args.json:
        res = _report.result
        _report.write(args.json, _report.document("overhead", [
            res("source", out["source"], "sampler source"),
            res("tokens_per_s_on", out["tokens_per_s_on"], "tokens/s (mean)"),
            res("tokens_per_s_off", out["tokens_per_s_off"], "tokens/s (mean)"),
            res("slowdown_pct", out["slowdown_pct"], "% (mean of pairs)"),
            res("slowdown_ci95_low_pct", out["ci95_pct"][0], "%"),
            res("slowdown_ci95_high_pct", out["ci95_pct"][1], "%"),
            res("pairs", out["repeats"], "on/off pairs"),
        ], script=__file__, argv=argv, started=host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
