"""One JSON document per bench run: what was measured, on what, when, and against which target.

Every measuring script in ``bench/`` takes ``--json PATH`` and writes, through :func:`write`::

    {"bench": "metrics",
     "machine": {"cpu": "...", "cores": 2, "memory_gib": 7.8, "os": "Linux 6.8",
                 "python": "3.11.9", "load_avg_1min": 0.4, "load_avg_1min_end": 1.1},
     "date": "2026-12-03",
     "results": [{"name": "samples_per_s", "value": 1.2e7, "unit": "samples/s",
                  "target": ">= 10,000,000", "ok": true}, ...],
     "command": "python bench/metrics.py --samples-per-device 500000 --json ..."}

``docs/benchmarks.md`` is rendered from these files by ``bench/render_benchmarks.py``. The
machine block names the hardware, never the host or the user; ``ok`` is ``null`` where a figure
has no target or was not measured (``value`` null: missing is null, not 0).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from llm_powertrace_ds.atomic import write_text_atomic

REPO = Path(__file__).resolve().parents[1]

Value = float | int | bool | str | None


@dataclass(frozen=True)
class Result:
    """One measured figure.

    Attributes:
        name: what was measured (``snake_case``, the key the script prints).
        value: the figure; ``None`` when it could not be measured.
        unit: its unit (``"s"``, ``"samples/CPU-s"``, ``"ratio"``, ``"B/run"``).
        target: ``"<= 1.5"``-style target from the issue, or ``None``.
        ok: whether ``value`` meets ``target``; ``None`` without a target or a value.
    """

    name: str
    value: Value
    unit: str
    target: str | None = None
    ok: bool | None = None


def result(name: str, value: Value, unit: str, *, at_most: float | None = None,
           at_least: float | None = None, equals: Value = None,
           within: tuple[float, float] | None = None) -> Result:
    """A :class:`Result` whose ``ok`` is computed from one bound.

    Args:
        name: what was measured.
        value: the figure, or ``None`` when missing (NaN and infinities are stored as ``None``).
        unit: its unit.
        at_most: the target is ``value <= at_most``.
        at_least: the target is ``value >= at_least``.
        equals: the target is ``value == equals`` (a count, a flag).
        within: the target is ``low <= value <= high``.

    Returns:
        The result; ``ok`` is ``None`` when there is no bound or no value.

    Raises:
        ValueError: more than one bound given.

    Example:
        >>> result("filter_s", 0.12, "s", at_most=0.2).ok
        True
    """
    if isinstance(value, float) and not math.isfinite(value):
        value = None  # NaN or infinity: not measured, and not valid JSON either
    bounds = [b for b in (at_most, at_least, equals, within) if b is not None]
    if len(bounds) > 1:
        raise ValueError(f"{name}: give one of at_most, at_least, equals, within")
    if not bounds:
        return Result(name, value, unit)
    if within is not None:
        low, high = within
        target = f"{_number(low)} to {_number(high)}"
        if value is None:
            return Result(name, None, unit, target, None)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"{name}: value {value!r} cannot be compared with {within!r}")
        return Result(name, value, unit, target, bool(low <= value <= high))
    op: Literal["<=", ">=", "=="]
    bound: Value
    if at_most is not None:
        op, bound = "<=", at_most
    elif at_least is not None:
        op, bound = ">=", at_least
    else:
        op, bound = "==", equals
    target = f"{op} {_number(bound)}"
    if value is None:
        return Result(name, None, unit, target, None)
    if op == "==":
        ok = value == bound
    elif not isinstance(value, int | float) or not isinstance(bound, int | float):
        raise ValueError(f"{name}: value {value!r} cannot be compared with {bound!r}")
    else:
        ok = value <= bound if op == "<=" else value >= bound
    return Result(name, value, unit, target, bool(ok))


def _number(bound: Value) -> str:
    """A bound as a target shows it: ``1.5``, ``10,000,000``, ``yes``."""
    if isinstance(bound, bool):
        return "yes" if bound else "no"
    if not isinstance(bound, int | float):
        return str(bound)
    if isinstance(bound, float) and not bound.is_integer():
        return f"{bound:g}"
    return f"{int(bound):,}"


def _cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware"):
            return " ".join(value.split())
    return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return round(pages * size / 2**30, 1)


def machine() -> dict[str, Any]:
    """The machine a figure was measured on: hardware and software, no host or user name.

    Returns:
        ``cpu`` (model), ``cores`` (logical), ``memory_gib``, ``os`` (system and kernel
        release), ``python`` (version) and ``load_avg_1min`` when the run started (the other
        work on a shared machine; ``None`` where the OS has no load average).
    """
    try:
        load: float | None = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "memory_gib": _memory_gib(),
            "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "load_avg_1min": load}


def command(script: str, argv: Sequence[str]) -> str:
    """The command line that reproduces a run: ``python bench/<script> <args>``.

    Args:
        script: the bench script's file (``__file__``); only its name is kept.
        argv: the arguments after the script (``sys.argv[1:]``).

    Returns:
        The shell-quoted command, relative to the repository root (an argument that is a path
        inside the repository is written relative to it).
    """
    args = []
    for arg in argv:
        head, eq, tail = arg.rpartition("=") if arg.startswith("--") else ("", "", arg)
        path = Path(tail)
        if path.is_absolute() and path.resolve().is_relative_to(REPO):
            tail = path.resolve().relative_to(REPO).as_posix()
        args.append(f"{head}{eq}{tail}")
    return shlex.join(["python", f"bench/{Path(script).name}", *args])


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--json PATH`` (write the run's document there) to a bench script's parser."""
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the results as one JSON document for "
                             "docs/benchmarks.md (docs/data/bench/<bench>.json)")


def document(bench: str, results: Sequence[Result], *, script: str,
             argv: Sequence[str] | None = None, started: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """The JSON document of one bench run (see the module docstring).

    Args:
        bench: the bench's name (the script's stem).
        results: the figures, in the order the page shows them.
        script: the script's file (``__file__``).
        argv: its arguments (default ``sys.argv[1:]``).
        started: :func:`machine` taken when the run started (default: taken now); the load
            average now is added as ``load_avg_1min_end``.

    Returns:
        The document, ready for ``json.dumps``.

    Raises:
        ValueError: two results share a name.
    """
    names = [r.name for r in results]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{bench}: results named twice: {', '.join(dupes)}")
    mach = dict(started) if started is not None else machine()
    mach["load_avg_1min_end"] = machine()["load_avg_1min"]
    return {"bench": bench, "machine": mach,
            "date": dt.date.today().isoformat(), "results": [asdict(r) for r in results],
            "command": command(script, sys.argv[1:] if argv is None else argv)}


def write(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` as indented JSON (through a temporary name and a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(doc, indent=2) + "\n")
