"""What every command module of the CLI shares: output formats, ``emit``, ``out_dir``."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from ..formatting import human_number, safe_text

FORMATS = ("table", "json", "csv")


def _safe(v: Any) -> Any:
    """Dataset strings without terminal escapes or bidi overrides (lists and dicts too)."""
    if isinstance(v, str):
        return safe_text(v)
    if isinstance(v, list):
        return [_safe(x) for x in v]
    if isinstance(v, dict):
        return {k: _safe(x) for k, x in v.items()}
    return v


CSV_LIST_SEPARATOR = ";"


def csv_cell(v: Any) -> Any:
    """A CSV cell: a list as its items joined by ``;`` (``cpu_proxy;gap``), a dict as JSON.

    Never a Python repr (``['cpu_proxy']``), which no CSV reader turns back into values.
    """
    if isinstance(v, (list, tuple)):
        return CSV_LIST_SEPARATOR.join("" if x is None else str(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, default=str, sort_keys=True)
    return v


def add_global_flags(p: argparse.ArgumentParser) -> None:
    """Accept the top-level ``--quiet``/``-q`` and ``--debug`` after a command's name too.

    ``llm-powertrace facility DIR ... --quiet`` means what ``llm-powertrace --quiet facility
    DIR ...`` means. The defaults are suppressed, so a flag given before the command is kept;
    a command with an option of the same name keeps its own. Hidden from the command's help
    (the top-level help lists them).
    """
    for flags in (("--quiet", "-q"), ("--debug",)):
        if not any(f in p._option_string_actions for f in flags):
            p.add_argument(*flags, action="store_true", default=argparse.SUPPRESS,
                           help=argparse.SUPPRESS)


def emit(rows: list[dict[str, Any]], fmt: str, columns: list[str] | None = None) -> None:
    """Print rows as an aligned table, JSON (a list of objects) or CSV.

    Every string passes :func:`llm_powertrace_ds.formatting.safe_text` first: a dataset from
    elsewhere can hold terminal escapes (OSC 52 clipboard writes, screen clears) or
    bidirectional overrides, and none of them reaches the terminal.
    """
    rows = [_safe(r) for r in rows]
    columns = columns or (list(rows[0]) if rows else [])
    if fmt == "json":
        print(json.dumps(rows, indent=2, default=str))
        return
    if fmt == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows([{k: csv_cell(v) for k, v in r.items()} for r in rows])
        return

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return human_number(v)
        if isinstance(v, list):
            return ",".join(map(str, v)) or "-"
        return "-" if v is None else " ".join(str(v).split()) if "\n" in str(v) else str(v)

    table = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(t[i]) for t in table]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for t in table:
        print("  ".join(v.ljust(w) for v, w in zip(t, widths, strict=True)))


def out_dir(path: Path, option: str = "--out") -> Path:
    """Check that an output folder argument is not an existing file."""
    from ..errors import InputError

    if path.exists() and not path.is_dir():
        raise InputError(f"'{path}' is a file; {option} takes a folder", field=option)
    return path


def add_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="output format (default: table)")
