"""``llm-powertrace explore DIR_OR_REPO --out SITE/``: write the static explorer site."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..hub import resolve_dataset


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``explore`` subcommand."""
    p = sub.add_parser(
        "explore", help="write an interactive explorer (a static site) for a dataset",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write a self-contained static site: a catalog of runs (filters, sorting), "
        "a zoomable run page (per-device power, node total, events, requests, utilisation, "
        "clocks, temperature, memory, metrics with formulas), a compare view and a sweep view. "
        "It opens from file:// and publishes as a static Hugging Face Space "
        "(python upload.py DIR --space ORG/NAME). Needs the `explore` extra (bokeh).",
        epilog="examples:\n  llm-powertrace explore llm-powertrace --out llm-powertrace-explorer\n"
        "  llm-powertrace explore org/llm-powertrace --out site --format json")
    p.add_argument("dir", metavar="DIR_OR_REPO", help="dataset folder or Hub dataset repo id")
    p.add_argument("--out", type=Path, required=True, metavar="SITE",
                   help="site folder to write (replaced if it is an explorer site already)")
    p.add_argument("--name", default=None,
                   help="dataset name shown on the pages (default: the folder or repo name)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="how the result is printed (default: table)")
    p.set_defaults(func=cmd_explore)


def cmd_explore(args: argparse.Namespace) -> int:
    from ..explore import build_site

    root = resolve_dataset(args.dir)
    name = args.name or (str(args.dir) if not Path(args.dir).exists() else None)
    report = build_site(root, args.out, name=name)
    if args.format == "json":
        print(json.dumps(report.as_json(), indent=2))
        return 0
    ratio = f"{report.ratio:.2f}x" if report.ratio is not None else "n/a"
    print(f"explorer: {report.out / 'index.html'}")
    print(f"runs: {report.runs}" + (f" ({report.proxy_runs} cpu_proxy)" if report.proxy_runs
                                    else ""))
    if report.skipped_runs:
        print(f"skipped: {report.skipped_runs} summary-only run(s): published summaries without "
              "a power trace have nothing to draw")
    print(f"size: data {report.data_bytes / 1e6:.2f} MB ({ratio} the dataset's trace bytes, "
          f"{report.trace_bytes / 1e6:.2f} MB) + pages and BokehJS "
          f"{report.library_bytes / 1e6:.2f} MB")
    return 0
