"""``llm-powertrace record``: run any command under the power sampler as one run.

Needs the ``generate`` extra's sampler (nvidia-ml-py, psutil; not torch). Registered with the
CLI through the ``llm_powertrace.commands`` entry-point group (pyproject.toml), so the library
never imports ``generation``; the recorder is imported inside the command.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from llm_powertrace_ds import schema
from llm_powertrace_ds.cli import add_format, emit, out_dir
from llm_powertrace_ds.errors import InputError, UsageError

REQUEST_FORMATS = ("vllm", "sglang", "csv")

EPILOG = """\
examples:
  llm-powertrace record --out llm-powertrace --workload finetune \\
      --set model_name=Llama-3.2-1B method=lora batch_size=8 -- torchrun --nproc-per-node 4 train.py
  llm-powertrace record --out llm-powertrace --workload inference \\
      --set model_name=Llama-3.1-8B serving_engine=vllm concurrency=64 \\
      --requests vllm:result.json -- vllm bench serve --model meta-llama/Llama-3.1-8B \\
      --max-concurrency 64 --save-result --save-detailed --result-filename result.json

The command's exit status is record's. A command that fails (or is interrupted) is kept as a
failed run in .staging/ and not published, unless --keep-failed.
"""


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``record``."""
    p = sub.add_parser(
        "record", help="run any command under the power sampler and publish it as one run",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Start the sampler, idle, run CMD (its own process group; SIGINT/SIGTERM "
        "forwarded), idle, stop, and publish one run through the same road as `generate`.")
    p.add_argument("--out", type=Path, default=Path("llm-powertrace"),
                   help="dataset folder (default: llm-powertrace)")
    p.add_argument("--workload", choices=schema.WORKLOADS, required=True,
                   help="what the command does")
    p.add_argument("--set", dest="axes", action="append", nargs="+", default=[],
                   metavar="AXIS=VALUE", help="a model or axis column of the run (repeatable)")
    p.add_argument("--meta", type=Path, default=None,
                   help="flat JSON/YAML mapping of column names (--set wins)")
    p.add_argument("--gpus", default=None,
                   help="NVML indices to read, e.g. 0,1 (default: CUDA_VISIBLE_DEVICES, or all)")
    p.add_argument("--idle-before-s", type=float, default=5.0,
                   help="idle padding before the command, s (default: 5)")
    p.add_argument("--idle-after-s", type=float, default=5.0,
                   help="idle padding after the command, s (default: 5)")
    p.add_argument("--sampler", choices=("auto", "nvml", "cpu_proxy"), default="auto",
                   help="power source (default: auto = nvml when a GPU is usable)")
    p.add_argument("--period-ms", type=float, default=100.0,
                   help="sampling period, ms (default: 100)")
    p.add_argument("--requests", default=None, metavar="FORMAT:FILE",
                   help="request log the command writes, put on the run clock after it ends: "
                   "vllm:FILE (vllm bench serve --save-result --save-detailed), sglang:FILE "
                   "(the stdout of sglang.bench_serving --print-requests), csv:FILE")
    p.add_argument("--keep-failed", action="store_true",
                   help="publish the run even when the command fails (default: keep it failed "
                   "in .staging/)")
    add_format(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                   help="the command to run")
    p.set_defaults(func=cmd_record)


def parse_axes(items: list[list[str]]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; raises ``InputError`` naming a bad item."""
    out: dict[str, str] = {}
    for item in (i for group in items for i in group):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--set {item!r} is not AXIS=VALUE", field="--set")
        out[key.strip()] = value.strip()
    return out


def parse_gpus(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise InputError(f"--gpus {text!r} is not a comma-separated list of indices",
                         field="--gpus") from None


def parse_requests(text: str | None) -> tuple[str, Path] | None:
    if text is None:
        return None
    fmt, sep, path = text.partition(":")
    if not sep or fmt not in REQUEST_FORMATS or not path:
        raise InputError(f"--requests {text!r} is not FORMAT:FILE with FORMAT one of "
                         f"{', '.join(REQUEST_FORMATS)}", field="--requests")
    return fmt, Path(path)


def cmd_record(args: argparse.Namespace) -> int:
    from llm_powertrace_ds.importers.common import load_meta_file

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command to record: llm-powertrace record [options] -- CMD [ARGS...]")
    from generation import record
    axes: dict[str, Any] = dict(load_meta_file(args.meta)) if args.meta else {}
    if axes:  # the file's values are checked as the file's: an error names it, not --set
        record.check_axes(axes, args.workload, file=args.meta)
    axes.update(parse_axes(args.axes))
    requests = parse_requests(args.requests)
    config = record.RecordConfig(out=out_dir(args.out), workload=args.workload, axes=axes,
                                 sampler=args.sampler, gpus=parse_gpus(args.gpus),
                                 period_ms=args.period_ms, idle_before_s=args.idle_before_s,
                                 idle_after_s=args.idle_after_s, keep_failed=args.keep_failed)
    loader = None
    if requests is not None:
        from generation.record import requests as request_logs

        loader = request_logs.loader(*requests)
    outcome = record.record_command(command, config, requests_from=loader)
    res = outcome.published
    row = {"run_id": outcome.run_id, "status": outcome.status, "exit_code": outcome.exit_code,
           "flags": res.flags if res else None,
           "energy_j": res.metrics.get("energy_j") if res else None,
           "mean_power_w": res.metrics.get("mean_power_w") if res else None}
    emit([row], args.format, ["run_id", "status", "exit_code", "energy_j", "mean_power_w",
                              "flags"])
    return outcome.exit_code  # a run kept as failed: the recording's warning says where, why
