"""``llm-powertrace demo``: the embedded default job.

Picks the best sampler (NVML when a GPU is usable, else ``cpu_proxy``), runs the demo
fine-tuning and inference sweeps on tiny zoo models, builds the card (with figures), loads the
result back with ``datasets.load_dataset``, prints a short metrics table per run and the paths of
the plots, then shows how to import one's own nvidia-smi log. Re-running resumes: complete runs
are skipped. ``--quick`` runs a deterministic third of each sweep (task 0 of 3), so a later full
``demo`` reuses those runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import shards
from .cli_core import emit

DEMO_SWEEPS = ("demo-finetune.yaml", "demo-inference.yaml")
QUICK_TASKS = 3
TABLE_COLUMNS = ["run_id", "workload", "num_gpus", "energy_j", "mean_power_w", "peak_power_w",
                 "par", "ramp_abs_p99_1s_w_per_s", "energy_per_token_j"]

IMPORT_HINT = """Import your own nvidia-smi log (the project bundles no third-party trace):

  nvidia-smi --query-gpu=timestamp,index,uuid,name,power.draw,power.draw.instant,clocks.sm,\\
utilization.gpu,memory.used,temperature.gpu --format=csv,nounits -lms 100 > gpu.csv
  llm-powertrace import nvidia-smi gpu.csv --out {out} --workload inference --tz UTC
  llm-powertrace metrics {out} --config inference_runs
"""

SAMPLER_TEXT = {
    "nvml": "NVML: real per-GPU power readings every 100 ms (instant power, field 186).",
    "cpu_proxy": "cpu_proxy: no usable GPU here, so power is MODELLED from the workload "
    "processes' real CPU activity (60 W idle .. 300 W busy). These rows are labelled "
    "`cpu_proxy` everywhere and are not GPU measurements.",
}


def _say(quiet: bool, text: str = "") -> None:
    if not quiet:
        print(text, flush=True)


def sweep_paths() -> list[Path]:
    """The packaged demo sweep files."""
    import generation

    base = Path(generation.__file__).resolve().parent / "sweeps"
    return [base / name for name in DEMO_SWEEPS]


def run_demo(out: Path, *, quick: bool = False, quiet: bool = False) -> int:
    """Run the demo into ``out``; returns the exit code (1 if a run failed).

    Raises:
        MissingExtra: the ``generate`` extra is not installed.
    """
    from .cli_generate import _import_generation
    from .errors import InputError
    from .hooks import rebuild_card

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"'{out}' is a file; --out takes a folder", field="--out")
    runner = _import_generation("runner")
    sampler = _import_generation("sampler")
    logging.getLogger("generation.sampler").setLevel(logging.WARNING)
    source = sampler.resolve_source(sampler.SamplerConfig(source="auto"))
    _say(quiet, f"LLM-PowerTrace demo -> {out}/")
    _say(quiet, f"sampler: {SAMPLER_TEXT.get(source, source)}")
    failed = 0
    t0 = time.monotonic()
    for path in sweep_paths():
        started = time.monotonic()
        report = runner.generate(path, out, task_index=0, num_tasks=QUICK_TASKS if quick else 1,
                                 progress=not quiet and sys.stderr.isatty())
        failed += len(report.failed)
        _say(quiet, f"{report.sweep}: {len(report.outcomes)} of {report.total_runs} runs "
             f"({report.status_summary()}) in {time.monotonic() - started:.0f} s")
        for o in report.failed:
            _say(quiet, f"  failed {o.run_id}: {o.error}")

    rebuild_card(out)
    _say(quiet, f"card: {out / 'README.md'}")
    _say(quiet, "loading back with datasets.load_dataset:")
    from datasets import load_dataset

    with tempfile.TemporaryDirectory() as cache:  # a fresh cache: never a stale copy
        for config in ("finetune", "inference"):
            ds = load_dataset(str(out), config, cache_dir=cache)
            splits = ", ".join(f"{k}: {v.num_rows} rows" for k, v in ds.items())
            _say(quiet, f"  load_dataset({str(out)!r}, {config!r}) -> {splits}")
    rows: list[dict[str, Any]] = [{c: r.get(c) for c in TABLE_COLUMNS}
                                  for r in shards.list_runs(out)]
    if not quiet:
        print()
        emit(rows, "table", TABLE_COLUMNS)
        print()
    figures = sorted((out / "figures").glob("*.png"))
    for fig in figures:
        _say(quiet, f"plot: {fig}")
    if not figures:
        _say(quiet, "plots: none (install the `plot` extra: pip install 'llm-powertrace[plot]')")
    _say(quiet, f"\ndone in {time.monotonic() - t0:.0f} s. Re-running resumes; "
         f"`llm-powertrace plot {out} RUN_ID --out run.png` draws one run.\n")
    _say(quiet, IMPORT_HINT.format(out=out))
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# The command (registered through cli.COMMAND_MODULES)
# ---------------------------------------------------------------------------------------------

def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` subcommand (the embedded default job)."""
    p = sub.add_parser(
        "demo", help="run the embedded demo (tiny models, best available sampler)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  llm-powertrace demo --out llm-powertrace --quick")
    p.add_argument("--out", type=Path, default=Path("llm-powertrace"),
                   help="dataset folder (default: llm-powertrace)")
    p.add_argument("--quick", action="store_true", help="the shortest demo (default: off)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(args.out, quick=args.quick, quiet=args.quiet)
