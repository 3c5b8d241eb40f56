"""Core subcommands: import, validate, list, pack, card, demo, generate."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from . import schema
from .hub import resolve_dataset

FORMATS = ("table", "json", "csv")


def emit(rows: list[dict[str, Any]], fmt: str, columns: list[str] | None = None) -> None:
    """Print rows as an aligned table, JSON (a list of objects) or CSV."""
    columns = columns or (list(rows[0]) if rows else [])
    if fmt == "json":
        print(json.dumps(rows, indent=2, default=str))
        return
    if fmt == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        return

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, list):
            return ",".join(map(str, v)) or "-"
        return "-" if v is None else str(v)

    table = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(t[i]) for t in table]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for t in table:
        print("  ".join(v.ljust(w) for v, w in zip(t, widths, strict=True)))


def out_dir(path: Path, option: str = "--out") -> Path:
    """Check that an output folder argument is not an existing file."""
    from .errors import InputError

    if path.exists() and not path.is_dir():
        raise InputError(f"'{path}' is a file; {option} takes a folder", field=option)
    return path


def add_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="output format (default: table)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the core subcommands."""
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser(
        "import", help="import existing power logs into a dataset folder", formatter_class=fmt,
        description="Import power logs measured by other tools into a dataset folder.",
        epilog="example:\n  llm-powertrace import nvidia-smi gpu.csv --out llm-powertrace "
        "--workload inference --platform a100_sxm4_80gb --tz America/Phoenix")
    p.add_argument("log_format", metavar="FORMAT", choices=["nvidia-smi", "powertrace-csv"],
                   help="log format: nvidia-smi or powertrace-csv")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="log files")
    p.add_argument("--out", type=Path, default=Path("llm-powertrace"),
                   help="dataset folder (default: llm-powertrace)")
    p.add_argument("--workload", choices=schema.WORKLOADS, required=True,
                   help="what ran while the log was taken")
    p.add_argument("--meta", type=Path, default=None,
                   help="flat JSON/YAML mapping of our column names (for powertrace-csv: "
                   "its own metadata JSON; default: the .json beside the CSV if any)")
    p.add_argument("--platform", default=None,
                   help="platform slug (default: from the GPU name in the log, else `unknown`)")
    p.add_argument("--num-gpus", type=int, default=None,
                   help="GPUs in a log without a GPU column (default: inferred)")
    p.add_argument("--tz", default="UTC",
                   help="IANA time zone of zone-less timestamps (default: UTC)")
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

    p = sub.add_parser("card", help="regenerate the dataset card (README.md)", formatter_class=fmt,
                       epilog="example:\n  llm-powertrace card llm-powertrace")
    p.add_argument("dir", type=Path, help="dataset folder")
    p.set_defaults(func=cmd_card)

    register_demo(sub)

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
    from .importers import import_file
    from .shards import publish_run, refresh_readme

    out_dir(args.out)
    # Read and check every file before publishing any: a bad file changes nothing.
    runs = [import_file(args.log_format, path, workload=args.workload, meta_path=args.meta,
                        platform=args.platform, num_gpus=args.num_gpus, tz=args.tz)
            for path in args.files]
    results = []
    try:
        for run in runs:
            res = publish_run(args.out, run, refresh_card=False)
            results.append({"run_id": res.run_id, "platform": run.platform,
                            "num_gpus": len(run.devices),
                            "samples": sum(len(d) for d in run.devices),
                            "flags": res.flags, "files": res.files})
    finally:
        if results:  # whatever was published, the folder's card must list it
            refresh_readme(args.out)
    emit(results, args.format, ["run_id", "platform", "num_gpus", "samples", "flags"])
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from .audit import audit_folder
    from .shards import list_runs, read_run
    from .validate import validate_run

    rows = []
    failed = False
    root = resolve_dataset(args.dir)
    if getattr(args, "repair", False):
        from .shards import repair_folder

        for rel in repair_folder(root):
            rows.append({"run_id": None, "platform": None, "status": "repaired", "flags": [],
                         "messages": [f"removed '{rel}'"]})
    folder = audit_folder(root)
    for message in folder.messages():
        failed = True
        rows.append({"run_id": None, "platform": None, "status": "error", "flags": [],
                     "messages": [message]})
    orphans = set(folder.orphan_rows)
    for info in list_runs(root):
        if info["run_id"] in orphans:
            continue
        run = read_run(root, info["run_id"])
        rep = validate_run(run)
        flags = sorted(set(rep.flags) | set(run.flags), key=schema.QUALITY_FLAGS.index)
        errors = [f for f in flags if f in schema.ERROR_FLAGS]
        failed |= bool(errors)
        rows.append({"run_id": run.run_id, "platform": run.platform,
                     "status": "error" if errors else "ok", "flags": flags,
                     "messages": rep.messages})
    emit(rows, args.format, ["run_id", "platform", "status", "flags", "messages"]
         if any(r["run_id"] is None for r in rows) else ["run_id", "platform", "status", "flags"])
    return 1 if failed else 0


def cmd_list(args: argparse.Namespace) -> int:
    from .shards import list_runs

    cols = ["run_id", "workload", "platform", "model_family", "num_gpus", "duration_s",
            "energy_j", "mean_power_w", "peak_power_w", "quality_flags"]
    emit([{c: r.get(c) for c in cols} for r in list_runs(resolve_dataset(args.dir))], args.format,
         cols)
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    from .shards import pack

    res = pack(resolve_dataset(args.src), out_dir(args.out), max_shard_bytes=int(args.max_shard_mb * 1024 * 1024))
    emit([{"folder": k, "rows": v, "shards": res.shards[k]} for k, v in res.rows.items()],
         args.format, ["folder", "rows", "shards"])
    return 0


def cmd_card(args: argparse.Namespace) -> int:
    from . import layout
    from .errors import InputError
    from .shards import refresh_readme

    root = Path(args.dir)
    if not layout.data_root(root).is_dir():
        raise InputError(f"'{root}' is not a dataset folder (no data/ inside)", field="DIR")
    refresh_readme(root)
    print(root / "README.md")
    return 0


def register_demo(sub: argparse._SubParsersAction) -> None:
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
    from .demo import run_demo

    return run_demo(args.out, quick=args.quick, quiet=args.quiet)


def cmd_export(args: argparse.Namespace) -> int:
    from .export import export

    rows = export(resolve_dataset(args.dataset), args.config, args.out, split=args.split,
                  long=args.long, file_format=args.file_format)
    if not args.quiet:
        print(f"{rows} rows -> {args.out}")
    return 0
