"""``llm-powertrace demo``: the embedded default job.

Picks the best sampler (NVML when a GPU is usable, else ``cpu_proxy``), runs the demo
fine-tuning and inference sweeps on tiny zoo models, builds the card (with figures), loads the
result back with ``datasets.load_dataset``, prints a short metrics table per run and the paths of
the plots, then shows how to import one's own nvidia-smi log, and ends with the path of the
explorer written beside the dataset (``<out>-explorer/index.html``). Re-running resumes: complete runs
are skipped. ``--quick`` runs a deterministic third of each sweep (task 0 of 3), so a later full
``demo`` reuses those runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from llm_powertrace_ds import shards
from llm_powertrace_ds.cli import emit

DEMO_SWEEPS = ("demo-finetune.yaml", "demo-inference.yaml")
QUICK_TASKS = 3
RUN_BUDGET_S = 30.0
"""A demo run should take at most this long (wall time, 2 cores); longer ones are named."""
WARMUP_DOMINATES = 0.5
"""A run whose warm-up is more than this share of its measured window is flagged: its
energy per token then mostly measures warm-up (model loading, first-call kernel builds)."""
TABLE_COLUMNS = ["run_id", "workload", "num_gpus", "energy_j", "mean_power_w", "peak_power_w",
                 "par", "ramp_abs_p99_1s_w_per_s", "energy_per_token_j"]

IMPORT_HINT = """Real GPU data: the package ships one real sample, the ML.ENERGY leaderboard v2 chat
summaries (A100/H100, Apache-2.0; summaries, no power series). Import it with
  python -c "from llm_powertrace_ds.samples import load_sample; load_sample('mlenergy-v2-chat')"
or `llm-powertrace get --list` for public datasets to download. Import your own nvidia-smi log:

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
    base = Path(__file__).resolve().parent / "sweeps"
    return [base / name for name in DEMO_SWEEPS]


def warmup_shares(root: Path) -> dict[str, tuple[float, float]]:
    """``run_id -> (warm-up s, measured window s)`` of every run of a dataset folder.

    Warm-up = Σ (warmup_end − warmup_begin) over the run-level and rank-0 warm-up events;
    the window = last − first tick of the run's first device row.
    """
    from llm_powertrace_ds.metrics import event_windows
    from llm_powertrace_ds.run import Event, Run

    out: dict[str, tuple[float, float]] = {}
    for workload in ("finetune", "inference"):
        for batch in shards.iter_batches(root, workload, columns=["run_id", "t_ms", "events"]):
            ids = batch.column("run_id").to_pylist()
            for i, rid in enumerate(ids):
                if rid in out:
                    continue
                t = batch.column("t_ms")[i].values
                window_s = (t[-1].as_py() - t[0].as_py()) / 1000.0 if len(t) > 1 else 0.0
                events = [Event(e["t_ms"], e["kind"], rank=e["rank"])
                          for e in batch.column("events")[i].as_py() or []
                          if e["rank"] in (None, 0)]
                probe = Run(meta={"run_id": rid}, devices=[], events=events)
                warm_s = sum(e - b for b, e in event_windows(probe, "warmup_begin",
                                                              "warmup_end")) / 1000.0
                out[rid] = (warm_s, window_s)
    return out


def warmup_flags(shares: dict[str, tuple[float, float]]) -> dict[str, str]:
    """A note for each run whose warm-up dominates its window (see ``WARMUP_DOMINATES``).

    Example:
        >>> warmup_flags({"a": (198.0, 202.0), "b": (1.0, 9.0)})
        {'a': 'warm-up 198 s of a 202 s window (98 %): its energy per token mostly measures warm-up'}
    """
    notes = {}
    for rid, (warm_s, window_s) in shares.items():
        if window_s > 0 and warm_s / window_s > WARMUP_DOMINATES:
            notes[rid] = (f"warm-up {warm_s:.0f} s of a {window_s:.0f} s window "
                          f"({100 * warm_s / window_s:.0f} %): its energy per token mostly "
                          "measures warm-up")
    return notes


def machine_text() -> str:
    """``"2 CPU cores"``-style description of this machine (no host name)."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores} CPU core{'s' if cores != 1 else ''}"


def run_demo(out: Path, *, quick: bool = False, quiet: bool = False) -> int:
    """Run the demo into ``out``; returns the exit code (1 if a run failed).

    Raises:
        MissingExtra: the ``generate`` extra is not installed.
    """
    from llm_powertrace_ds.errors import InputError
    from llm_powertrace_ds.hooks import rebuild_card

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"'{out}' is a file; --out takes a folder", field="--out")
    from generation import runner, sampler  # torch and the workloads load here, not at --help
    logging.getLogger("generation.sampler").setLevel(logging.WARNING)
    source = sampler.resolve_source(sampler.SamplerConfig(source="auto"))
    _say(quiet, f"LLM-PowerTrace demo -> {out}/")
    _say(quiet, f"sampler: {SAMPLER_TEXT.get(source, source)}")
    if not quick:
        _say(quiet, "(`llm-powertrace demo --quick` runs a third of it; a later full demo "
             "reuses those runs)")
    failed = 0
    t0 = time.monotonic()
    slow: list[str] = []
    for path in sweep_paths():
        started = time.monotonic()
        tty = sys.stderr.isatty()
        report = runner.generate(path, out, task_index=0, num_tasks=QUICK_TASKS if quick else 1,
                                 progress=not quiet and tty, progress_lines=not quiet and not tty)
        failed += len(report.failed)
        _say(quiet, f"{report.sweep}: {len(report.outcomes)} of {report.total_runs} runs "
             f"({report.status_summary()}) in {time.monotonic() - started:.0f} s")
        for o in report.failed:
            _say(quiet, f"  failed {o.run_id}: {o.error}")
        slow += [f"{o.run_id} ({o.seconds:.0f} s)" for o in report.outcomes
                 if o.seconds > RUN_BUDGET_S]

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
    shares = warmup_shares(out)
    for row in rows:
        warm_s, window_s = shares.get(row["run_id"], (None, None))
        row["warmup_s"], row["window_s"] = warm_s, window_s
    flags = warmup_flags(shares)
    if not quiet:
        print()
        emit(rows, "table", TABLE_COLUMNS + ["warmup_s", "window_s"])
        print()
        for rid, note in sorted(flags.items()):
            print(f"flag: {rid}: {note}")
        for item in slow:
            print(f"slow: {item} took longer than the demo's {RUN_BUDGET_S:.0f} s budget per run")
    figures = sorted((out / "figures").glob("*.png"))
    for fig in figures:
        _say(quiet, f"plot: {fig}")
    if not figures:
        _say(quiet, "plots: none (install the `plot` extra: pip install 'llm-powertrace[plot]')")
    _say(quiet, f"\ndone in {time.monotonic() - t0:.0f} s on {machine_text()}. Re-running resumes; "
         f"`llm-powertrace plot {out} RUN_ID --out run.png` draws one run.\n")
    _say(quiet, IMPORT_HINT.format(out=out))
    _say(quiet, explorer_line(out))
    note = activation_note()
    if note:
        _say(quiet, note)
    return 1 if failed else 0


def activation_note(environ: dict[str, str] | None = None, prefix: str | None = None,
                    base_prefix: str | None = None, cwd: Path | None = None) -> str:
    """How to put the commands above on this shell's path, when they are not (``make demo``).

    Empty outside a virtual environment, or when its ``bin`` is already on ``PATH``.
    """
    environ = dict(os.environ) if environ is None else environ
    prefix = sys.prefix if prefix is None else prefix
    base_prefix = sys.base_prefix if base_prefix is None else base_prefix
    if prefix == base_prefix:
        return ""
    bin_dir = Path(prefix) / "bin"
    on_path = [Path(p) for p in environ.get("PATH", "").split(os.pathsep) if p]
    if any(p == bin_dir or (p.exists() and bin_dir.exists() and p.samefile(bin_dir))
           for p in on_path):
        return ""
    here = cwd or Path.cwd()
    try:
        shown = bin_dir.relative_to(here).as_posix()
    except ValueError:
        shown = str(bin_dir)
    return (f"\nThe commands above need the environment the demo ran in: `. {shown}/activate` "
            f"in this shell first (or prefix them with {shown}/).")


def explorer_line(out: Path) -> str:
    """Write the explorer beside the dataset (``<out>-explorer/``); the line naming its page."""
    from llm_powertrace_ds.explore.site import MissingExtra, build_site

    site = out.parent / f"{out.name}-explorer"
    try:
        report = build_site(out, site)
    except MissingExtra:
        return "explorer: not written (install the `explore` extra: pip install " \
            "'llm-powertrace[explore]')"
    return (f"explorer: {report.out / 'index.html'} (open it in a browser; "
            f"`llm-powertrace explore {out} --out SITE` rewrites it)")


# ---------------------------------------------------------------------------------------------
# The command (registered through the llm_powertrace.commands entry point)
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
