"""Generator subcommands: ``generate``, ``merge``, ``salvage``.

``generate`` and ``salvage`` need the ``generate`` extra; they import ``generation`` inside the
command (never at import time) and print one line naming the extra when it is missing. ``merge``
needs only the dataset library. Registered with the CLI through the ``llm_powertrace.commands``
entry-point group (pyproject.toml), so the library never imports ``generation``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from llm_powertrace_ds.cli import add_format, emit, out_dir
from llm_powertrace_ds.errors import (
    InputError,
    MissingExtra,
    UsageError,
)

EXTRA_HINT = "pip install 'llm-powertrace[generate]'"
EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as shells expect."""

SLURM_EXAMPLE = """\
  # one Slurm array task per slice of the sweep, all writing into one shared folder:
  #SBATCH --array=0-7
  llm-powertrace generate generation/sweeps/finetune-scale.yaml --out llm-powertrace \\
      --task-index $SLURM_ARRAY_TASK_ID --num-tasks 8
"""


def _import_generation(what: str):  # noqa: ANN202 - returns a module
    """Import ``generation.<what>`` or raise a one-line error naming the extra."""
    import importlib

    try:
        return importlib.import_module(f"generation.{what}")
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == "generation" or exc.name.startswith("generation.")):
            raise MissingExtra(f"the generator is not installed: {EXTRA_HINT}") from None
        raise MissingExtra(f"{exc.name} is not installed (needed by `llm-powertrace "
                           f"generate`): {EXTRA_HINT}") from None


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``generate``, ``merge`` and ``salvage``."""
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser(
        "generate", help="run a sweep file into a dataset folder (resumable)", formatter_class=fmt,
        description="Run every run of a sweep file under the power sampler and publish it into "
        "a dataset folder. Runs already published are skipped (resume); a failing run is "
        "recorded `failed` and the sweep goes on.",
        epilog="examples:\n  llm-powertrace generate generation/sweeps/demo-finetune.yaml "
        "--out llm-powertrace\n  llm-powertrace generate sweep.yaml --out ds --dry-run\n"
        + SLURM_EXAMPLE)
    p.add_argument("sweep", type=Path, help="sweep YAML file, or a campaign file (a list of "
                   "sweeps with a budget: generation/campaigns/)")
    p.add_argument("--out", type=Path, default=Path("llm-powertrace"),
                   help="dataset folder (default: llm-powertrace)")
    p.add_argument("--task-index", type=int, default=0,
                   help="this task's slice of the sweep, 0-based (default: 0)")
    p.add_argument("--num-tasks", type=int, default=1,
                   help="number of slices the sweep is split into (default: 1)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the expanded runs (done/todo) and run nothing (default: off)")
    p.add_argument("--fail-fast", action="store_true",
                   help="stop at the first failed run (default: record it and go on)")
    p.add_argument("--assume-platform", metavar="SLUG",
                   help="with --dry-run on a machine without a GPU: plan for this platform "
                   "(e.g. h100_sxm_80gb; its memory decides which cells are too big; "
                   "default: unknown)")
    p.add_argument("--plan", action="store_true",
                   help="campaign: print runs and GPU-hours per sweep and in total against the "
                   "budget, and run nothing (default: off)")
    p.add_argument("--slurm", type=Path, metavar="FILE",
                   help="with --plan: write the campaign's Slurm array script to FILE")
    p.add_argument("--parallel-runs", metavar="N|auto",
                   help="run independent runs side by side on this node, each pinned to its "
                   "own GPUs with its own trace (auto: one per group of GPUs a run needs; "
                   "default: one run at a time)")
    p.add_argument("--nnodes", type=int, help="multi-node: nodes of each run (default: "
                   "$SLURM_NNODES, else 1)")
    p.add_argument("--node-rank", type=int, help="multi-node: this node's rank (default: "
                   "$SLURM_NODEID, else 0); node 0 plans, samples its GPUs and publishes")
    p.add_argument("--master-addr", help="multi-node: host of node 0 (default: $MASTER_ADDR, "
                   "else the first host of $SLURM_JOB_NODELIST)")
    p.add_argument("--master-port", type=int, help="multi-node: rendezvous port on node 0 "
                   "(default: $MASTER_PORT, else 29511)")
    p.add_argument("--redo-salvaged", action="store_true",
                   help="re-measure runs that were salvaged (their attempts are kept; default: "
                   "a salvaged run counts as done)")
    add_format(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "merge", help="combine dataset folders made on different machines", formatter_class=fmt,
        description="Copy every per-run file of the SRC folders into DIR. A run already in DIR "
        "with identical files is skipped; the same run id with different content is an error "
        "(nothing is copied then).",
        epilog="example:\n  llm-powertrace merge task0 task1 --into llm-powertrace")
    p.add_argument("src", type=Path, nargs="+", metavar="SRC", help="dataset folders to read")
    p.add_argument("--into", type=Path, required=True, help="dataset folder to fill")
    add_format(p)
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser(
        "salvage", help="publish a killed attempt of a run, flagged incomplete",
        formatter_class=fmt,
        epilog="example:\n  llm-powertrace salvage llm-powertrace ft-llama-tiny-lora-...")
    p.add_argument("dir", type=Path, help="dataset folder")
    p.add_argument("run_id", help="the run whose last killed attempt to publish")
    add_format(p)
    p.set_defaults(func=cmd_salvage)


# ---------------------------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------------------------

GENERATE_COLUMNS = ["index", "run_id", "status", "seconds", "model", "method", "batch_size",
                    "parallelism", "steps", "tokens_per_s", "mean_power_w", "error"]


def cmd_generate(args: argparse.Namespace) -> int:
    runner = _import_generation("runner")
    if not args.sweep.exists():
        raise InputError(f"sweep file '{args.sweep}' does not exist")
    campaign = _import_generation("campaign")
    if campaign.is_campaign(args.sweep):
        return cmd_campaign(args, campaign, runner)
    if args.plan or args.slurm:
        raise UsageError("--plan and --slurm take a campaign file (generation/campaigns/), "
                         f"not the sweep '{args.sweep}'")
    if getattr(args, "parallel_runs", None) and not args.dry_run:
        parallel = _import_generation("parallel_runs")
        return parallel.run_parallel(args)
    multinode = _import_generation("multinode")
    node = multinode.node_settings(args.nnodes, args.node_rank, args.master_addr,
                                   args.master_port)
    if node.nnodes > 1 and not args.dry_run:
        return multinode.run_multinode(args, node)
    if args.num_tasks < 1 or not 0 <= args.task_index < args.num_tasks:
        raise UsageError(f"--task-index {args.task_index} must be in [0, --num-tasks "
                         f"{args.num_tasks})")
    quiet = getattr(args, "quiet", False)
    import logging

    sampler_log = logging.getLogger("generation.sampler")
    level = sampler_log.level
    if not getattr(args, "debug", False):
        # one line per sampler start is noise over a sweep; warnings still show
        sampler_log.setLevel(logging.WARNING)
    out_dir(args.out)
    try:
        report = runner.generate(args.sweep, args.out, task_index=args.task_index,
                                 num_tasks=args.num_tasks, dry_run=args.dry_run,
                                 fail_fast=args.fail_fast,
                                 progress=not quiet and sys.stderr.isatty(),
                                 progress_lines=not quiet and not sys.stderr.isatty(),
                                 redo_salvaged=getattr(args, "redo_salvaged", False),
                                 assume_platform=getattr(args, "assume_platform", None))
    except KeyboardInterrupt:
        # One line, no traceback; the run in progress is marked ``interrupted`` (its spool is
        # kept: the same command resumes, `salvage` publishes what was measured).
        print("interrupted: the run in progress is marked interrupted; run the same command "
              "to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        sampler_log.setLevel(level)  # the caller's logging as it was (main() may run in-process)
    if not args.dry_run and args.out.is_dir():
        from llm_powertrace_ds.hooks import rebuild_card

        rebuild_card(args.out)  # once per command (publishing keeps only the configs block)
    rows = [o.row() for o in report.outcomes]
    emit(rows, args.format, GENERATE_COLUMNS if not args.dry_run else DRY_RUN_COLUMNS)
    if not quiet and args.format == "table":
        print(f"{report.sweep}: {len(report.outcomes)} of {report.total_runs} runs on "
              f"{report.machine.platform} ({report.machine.source}): "
              f"{report.status_summary()}", file=sys.stderr)
    if not quiet and args.dry_run:
        print(dry_run_summary(report), file=sys.stderr)
    return 1 if report.failed else 0


DRY_RUN_COLUMNS = ["index", "run_id", "status", "model", "method", "batch_size", "seq_len",
                   "precision", "gradient_checkpointing", "parallelism", "dp_size", "mem_gib",
                   "gpu_gib", "error"]


def cmd_campaign(args: argparse.Namespace, campaign: Any, runner: Any) -> int:
    """A campaign file: ``--plan`` (with ``--slurm``), ``--dry-run``, or every sweep in turn."""
    import json

    if args.slurm and not args.plan:
        raise UsageError("--slurm is written with --plan")
    if args.plan:
        plan = campaign.plan_campaign(args.sweep)
        if args.slurm:
            from llm_powertrace_ds.atomic import write_text_atomic

            write_text_atomic(args.slurm, campaign.slurm_script(args.sweep, plan))
        if args.format == "json":
            print(json.dumps(plan.as_dict(), indent=2))
        else:
            emit([{"sweep": s.name, "workload": s.workload, "runs": s.runs,
                   "gpu_hours": round(s.gpu_hours, 1), "max_gpus": s.max_gpus,
                   "too_big": len(s.too_big)} for s in plan.sweeps], args.format,
                 ["sweep", "workload", "runs", "gpu_hours", "max_gpus", "too_big"])
            if args.format == "table":
                d = plan.as_dict()
                print(f"{d['campaign']}: {d['runs']} runs, {d['gpu_hours']} GPU-hours of a "
                      f"{d['budget_gpu_hours']:g} budget on {d['platform']} "
                      f"({'fits' if d['fits_budget'] else 'OVER BUDGET'}); families "
                      f"{', '.join(d['families'])}; {d['too_big']} cells too big (--dry-run "
                      "lists them)" + (f"; Slurm script: {args.slurm}" if args.slurm else ""))
        return 0 if plan.gpu_hours <= plan.budget_gpu_hours else 1
    loaded = campaign.load_campaign(args.sweep)
    rows: list[dict[str, Any]] = []
    failed = 0
    for sweep_path in loaded.sweeps:
        try:
            report = runner.generate(sweep_path, args.out, dry_run=args.dry_run,
                                     fail_fast=args.fail_fast, progress=not args.dry_run,
                                     assume_platform=loaded.platform)
        except MissingExtra as exc:  # an engine sweep without its engine: say so, go on
            if not args.dry_run:
                raise
            rows.append({"sweep": sweep_path.stem, "status": "needs_extra", "error": str(exc)})
            continue
        rows += [{"sweep": report.sweep, **o.row()} for o in report.outcomes]
        failed += len(report.failed)
    if not args.dry_run and args.out.is_dir():
        from llm_powertrace_ds.hooks import rebuild_card

        rebuild_card(args.out)
    emit(rows, args.format, ["sweep", *DRY_RUN_COLUMNS] if args.dry_run
         else ["sweep", *GENERATE_COLUMNS])
    return 1 if failed else 0


def dry_run_summary(report: Any) -> str:
    """What a dry run plans: the sampler a real run would use, the time, assumptions."""
    machine = report.machine
    sampler = report.sampler or {}
    est = report.estimate
    lines = [f"sampler: {sampler.get('source', machine.source)}, every "
             f"{sampler.get('period_ms', 100.0):g} ms"]
    if est is not None:
        lines.append(f"time: {est.text()}")
    if machine.extra.get("assumed"):
        lines.append("planned for an assumed GPU machine (NVML is not usable here): "
                     f"{machine.num_devices} GPUs, platform '{machine.platform}'; a real run "
                     "needs a GPU here, and its run ids (which hash the platform) will differ")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# salvage
# ---------------------------------------------------------------------------------------------

def cmd_salvage(args: argparse.Namespace) -> int:
    attempts = _import_generation("attempts")
    res = attempts.salvage(args.dir, args.run_id)
    from llm_powertrace_ds.hooks import rebuild_card

    rebuild_card(args.dir)
    emit([{"run_id": res.run_id, "flags": res.flags, "files": res.files}], args.format,
         ["run_id", "flags", "files"])
    return 0


# ---------------------------------------------------------------------------------------------
# merge
# ---------------------------------------------------------------------------------------------

def cmd_merge(args: argparse.Namespace) -> int:
    from llm_powertrace_ds.merge import merge

    copied, identical = merge(list(args.src), out_dir(args.into, "--into"))
    rows = [{"run_id": r, "action": "copied"} for r in copied]
    rows += [{"run_id": r, "action": "identical"} for r in sorted(identical)]
    emit(rows, args.format, ["run_id", "action"])
    return 0
