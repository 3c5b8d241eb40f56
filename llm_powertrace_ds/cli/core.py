"""Core subcommands: import, validate, list, pack, demo, export (``card`` lives in ``cards/cli.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import schema
from ..errors import UsageError
from ..hub import resolve_dataset
from ..memory import reuse_freed_memory
from ._common import add_format, emit, out_dir


def register(sub: argparse._SubParsersAction) -> None:
    """Add the core subcommands."""
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser(
        "import", help="import existing power logs into a dataset folder", formatter_class=fmt,
        description="Import power logs measured by other tools into a dataset folder.",
        epilog="examples:\n  llm-powertrace import nvidia-smi gpu.csv --out llm-powertrace "
        "--workload inference --platform a100_sxm4_80gb --tz America/Phoenix\n"
        "  llm-powertrace import mlenergy-v2 benchmark/data/llm_text_generation/chat --out "
        "mlenergy")
    p.add_argument("log_format", metavar="FORMAT",
                   choices=["nvidia-smi", "powertrace-csv", "dcgm", "mlenergy-v2", "mlenergy-v3",
                            "requests-csv", "wattameter", "series", "zeus"],
                   help="log format: nvidia-smi, powertrace-csv, dcgm (dcgmi dmon output); "
                   "wattameter (nvml_*.log of WattAMeter, files or folders: one run per Slurm "
                   "job, its nodes joined); series (a time/power CSV of a device, node or "
                   "cluster total: --time-col, --power-col, --unit, --num-gpus); "
                   "requests-csv (a request log onto the published run --run); or mlenergy-v2 (FILE is an "
                   "ML.ENERGY leaderboard v2 task folder, e.g. .../chat: runs-table rows "
                   "without traces); mlenergy-v3 (ML.ENERGY benchmark v3 results.json files or "
                   "folders of them: one inference run per file, its GPUs' power timelines); "
                   "zeus (one Zeus power log: the legacy power CSV, a PowerMonitor timeline "
                   "JSON or the lines `python -m zeus.monitor power` prints, optionally with "
                   "its ZeusMonitor window CSV)")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="log files")
    p.add_argument("--out", type=Path, default=Path("llm-powertrace"),
                   help="dataset folder (default: llm-powertrace)")
    p.add_argument("--workload", choices=schema.WORKLOADS, default=None,
                   help="what ran while the log was taken (required for nvidia-smi and "
                   "powertrace-csv; mlenergy-v2 is inference)")
    p.add_argument("--meta", type=Path, default=None,
                   help="flat JSON/YAML mapping of our column names (for powertrace-csv: "
                   "its own metadata JSON; default: the .json beside the CSV if any)")
    p.add_argument("--platform", default=None,
                   help="platform slug, one of the known ones or a split of --out (default: "
                   "from the GPU name in the log, else `unknown`)")
    p.add_argument("--new-platform", action="store_true",
                   help="accept a --platform slug that is neither known nor in --out, opening "
                   "a new split (default: off)")
    p.add_argument("--num-gpus", type=int, default=None,
                   help="GPUs in a log without a GPU column (default: inferred)")
    p.add_argument("--tz", default="UTC",
                   help="IANA time zone of zone-less timestamps (default: UTC)")
    p.add_argument("--run", default=None, metavar="RUN_ID",
                   help="requests-csv: the published inference run the requests belong to")
    p.add_argument("--time-col", default=None, help="series: the time column")
    p.add_argument("--power-col", default=None, help="series: the power column")
    p.add_argument("--unit", choices=["W", "kW", "MW"], default=None,
                   help="series: the power column's unit")
    p.add_argument("--time-unit", choices=["s", "ms"], default="s",
                   help="series: unit of a numeric time column (default: s)")
    p.add_argument("--hold", choices=list(schema.SAMPLE_HOLDS), default="linear",
                   help="series: how a reading holds until the next row: linear "
                   "(interpolated) or previous (a change-only log, e.g. Zeus' PowerMonitor; "
                   "default: linear)")
    add_format(p)
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("validate", help="check every run's quality flags", formatter_class=fmt,
                       epilog="example:\n  llm-powertrace validate llm-powertrace --format json")
    p.add_argument("dir", type=Path, help="dataset folder")
    p.add_argument("--repair", action="store_true",
                   help="first remove what an interrupted publish left (temporary files, runs "
                   "rows without a trace) (default: off)")
    add_format(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("list", help="list the runs of a dataset folder", formatter_class=fmt,
                       epilog="example:\n  llm-powertrace list llm-powertrace --format csv")
    p.add_argument("dir", type=Path, help="dataset folder")
    add_format(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("pack", help="merge per-run files into <=500 MB shards in a new folder",
                       formatter_class=fmt,
                       epilog="example:\n  llm-powertrace pack llm-powertrace --out packed")
    p.add_argument("src", type=Path, help="dataset folder to read (never modified)")
    p.add_argument("--out", type=Path, required=True, help="new folder to write")
    p.add_argument("--max-shard-mb", type=float, default=500.0,
                   help="largest shard in MB (default: 500)")
    add_format(p)
    p.set_defaults(func=cmd_pack)

    p = sub.add_parser(
        "export", help="write a config as long-format Parquet/CSV (one row per tick per device)",
        formatter_class=fmt,
        epilog="example:\n  llm-powertrace export llm-powertrace --config finetune --long "
        "--file-format parquet --out finetune.parquet")
    p.add_argument("dataset", help="DIR_OR_REPO: dataset folder or Hub repo id")
    p.add_argument("--config", required=True, help="config name, e.g. finetune, inference_runs")
    p.add_argument("--split", default=None, help="platform (default: all)")
    p.add_argument("--long", action="store_true",
                   help="one row per tick per device, metadata alongside (default: off)")
    p.add_argument("--file-format", choices=["parquet", "csv"], default="parquet",
                   help="output file type (default: parquet)")
    p.add_argument("--out", type=Path, required=True, help="output file")
    p.set_defaults(func=cmd_export)


def cmd_import(args: argparse.Namespace) -> int:
    reuse_freed_memory()  # run after run of alike size: keep freed buffers (memory.py)
    from ..hooks import card_writers, rebuild_card
    from ..importers.publish import ImportOptions, import_stream

    out_dir(args.out)
    if args.platform is not None:
        _check_platform(args)
    if args.log_format == "requests-csv":
        return _import_requests(args)
    if args.log_format == "mlenergy-v2":
        return _import_summaries(args)
    if args.log_format == "mlenergy-v3":
        if args.workload not in (None, "inference"):
            raise UsageError("mlenergy-v3 results are inference runs; drop --workload finetune")
        given = [o for o, v in (("--meta", args.meta), ("--num-gpus", args.num_gpus)) if v]
        if given:
            raise UsageError(f"mlenergy-v3 results carry their own metadata and GPUs; drop "
                             f"{' and '.join(given)}")
        return _import_runs(args)
    if args.workload is None:
        raise UsageError(f"import {args.log_format} needs --workload (finetune or inference)")
    if args.log_format in ("wattameter", "series", "zeus"):
        return _import_runs(args)
    options = ImportOptions(fmt=args.log_format, workload=args.workload, meta_path=args.meta,
                            platform=args.platform, num_gpus=args.num_gpus, tz=args.tz)
    results = []
    try:
        # with a card writer, rebuild_card below writes the configs block: one walk of data/
        for res in import_stream(args.files, args.out, options, configs_block=not card_writers()):
            results.append({"run_id": res.run_id, "platform": res.platform,
                            "num_gpus": res.num_gpus, "samples": res.samples,
                            "flags": list(res.flags), "files": list(res.files)})
    finally:
        if results:  # whatever was published, the folder's card must list it: once per call
            rebuild_card(args.out)
    emit(results, args.format, ["run_id", "platform", "num_gpus", "samples", "flags"])
    return 0


def _check_platform(args: argparse.Namespace) -> None:
    """Refuse a ``--platform`` slug that is neither known nor a split of ``--out``."""
    from ..layout import shard_folders
    from ..names import check_platform

    existing = ({s for splits in shard_folders(args.out).values() for s in splits}
                if args.out.is_dir() else set())
    check_platform(args.platform, existing, allow_new=args.new_platform)


def _import_runs(args: argparse.Namespace) -> int:
    """Import logs that become runs one at a time, then publish them.

    ``wattameter`` (one run per job over many files), ``series`` and ``mlenergy-v3`` (one run per
    file), ``zeus`` (one run of a power log and its window CSV).
    """
    from ..hooks import card_writers, rebuild_card
    from ..importers.publish_runs import publish_runs

    if args.log_format == "mlenergy-v3":
        from ..importers.mlenergy_v3 import iter_mlenergy_v3

        runs = iter_mlenergy_v3(args.files, platform=args.platform)  # one file at a time
    elif args.log_format == "zeus":
        from ..importers.zeus import iter_zeus

        runs = ((args.files[0], run) for run in iter_zeus(
            args.files, workload=args.workload, meta_path=args.meta, platform=args.platform,
            num_gpus=args.num_gpus, tz=args.tz))
    elif args.log_format == "wattameter":
        from ..importers.wattameter import iter_wattameter

        runs = ((args.files[0], run) for run in iter_wattameter(
            args.files, workload=args.workload, meta_path=args.meta, platform=args.platform,
            num_gpus=args.num_gpus, tz=args.tz))  # one job in memory at a time
    else:
        from ..importers.series import import_series

        missing = [o for o, v in (("--time-col", args.time_col), ("--power-col", args.power_col),
                                  ("--unit", args.unit), ("--num-gpus", args.num_gpus))
                   if v is None]
        if missing:
            raise UsageError(f"import series needs {', '.join(missing)}")
        runs = ((path, import_series(path, time_col=args.time_col, power_col=args.power_col,
                                     unit=args.unit, num_gpus=args.num_gpus,
                                     workload=args.workload, platform=args.platform,
                                     meta_path=args.meta, tz=args.tz, time_unit=args.time_unit,
                                     hold=args.hold))
                for path in args.files)
    results = []
    try:
        for res in publish_runs(args.out, runs, configs_block=not card_writers()):
            results.append({"run_id": res.run_id, "platform": res.platform,
                            "num_gpus": res.num_gpus, "samples": res.samples,
                            "flags": list(res.flags), "files": list(res.files)})
    finally:
        if results:
            rebuild_card(args.out)
    emit(results, args.format, ["run_id", "platform", "num_gpus", "samples", "flags"])
    return 0


def _import_requests(args: argparse.Namespace) -> int:
    from ..errors import InputError
    from ..hooks import rebuild_card
    from ..importers.requests import attach_requests

    if not args.run or len(args.files) != 1:
        raise InputError("requests-csv needs one FILE and --run RUN_ID", field="--run")
    res = attach_requests(args.out, args.run, "csv", args.files[0])
    rebuild_card(args.out)
    emit([{"run_id": res.run_id, "files": res.files}], args.format, ["run_id", "files"])
    return 0


def _import_summaries(args: argparse.Namespace) -> int:
    from ..hooks import rebuild_card
    from ..importers import import_summaries
    from ..importers.mlenergy_v2 import publish_summaries

    if args.workload not in (None, "inference"):
        raise UsageError("mlenergy-v2 summaries are inference runs; drop --workload finetune")
    runs = [pair for path in args.files for pair in import_summaries(args.log_format, path)]
    try:
        publish_summaries(args.out, runs)
    finally:
        rebuild_card(args.out)
    emit([{"run_id": r.run_id, "platform": r.platform, "num_gpus": r.meta.get("num_gpus"),
           "samples": 0, "flags": r.flags} for r, _ in runs], args.format,
         ["run_id", "platform", "num_gpus", "samples", "flags"])
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    reuse_freed_memory()  # run after run of alike size: keep freed buffers (memory.py)
    from ..folder_check import validate_folder

    rows = []
    root = resolve_dataset(args.dir)
    if getattr(args, "repair", False):
        from ..shards import repair_folder

        for note in repair_folder(root):
            path, sep, what = note.partition(": ")
            rows.append({"run_id": None, "platform": None, "status": "repaired", "flags": [],
                         "messages": [f"'{path}': {what}" if sep else f"removed '{path}'"]})
    report = validate_folder(root)
    rows += [{"run_id": None, "platform": None, "status": "error", "flags": [],
              "messages": [message]} for message in report.problems]
    rows += [{"run_id": r.run_id, "platform": r.platform,
              "status": "error" if r.errors else "ok", "flags": r.flags,
              "messages": r.messages} for r in report.runs]
    rows.sort(key=lambda r: (r["run_id"] is not None, r["run_id"] or ""))
    emit(rows, args.format, ["run_id", "platform", "status", "flags", "messages"]
         if any(r["run_id"] is None for r in rows) else ["run_id", "platform", "status", "flags"])
    return 0 if report.ok else 1


def cmd_list(args: argparse.Namespace) -> int:
    from ..shards import list_runs

    cols = ["run_id", "workload", "platform", "model_family", "num_gpus", "duration_s",
            "energy_j", "mean_power_w", "peak_power_w", "quality_flags"]
    emit([{c: r.get(c) for c in cols} for r in list_runs(resolve_dataset(args.dir))], args.format,
         cols)
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    reuse_freed_memory()  # run after run of alike size: keep freed buffers (memory.py)
    from ..folder_check import pack_valid
    from ..hooks import rebuild_card

    out = out_dir(args.out)
    res = pack_valid(resolve_dataset(args.src), out,
                     max_shard_bytes=int(args.max_shard_mb * 1024 * 1024))
    if res.rows:
        rebuild_card(out)
    emit([{"folder": k, "rows": v, "shards": res.shards[k]} for k, v in res.rows.items()],
         args.format, ["folder", "rows", "shards"])
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ..export import export
    from ..names import check_name, check_split, known_configs

    root = resolve_dataset(args.dataset)
    check_name(args.config, known_configs(), what="config", field="--config")
    check_split(root, args.split, [args.config])
    rows = export(root, args.config, args.out, split=args.split,
                  long=args.long, file_format=args.file_format)
    if not args.quiet:
        print(f"{rows} rows -> {args.out}")
    return 0
