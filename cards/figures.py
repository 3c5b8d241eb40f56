"""The card's figures: one representative power trace per workload and platform, as PNG.

Figures go to ``<root>/figures/trace-<workload>-<platform>.png`` (never under ``data/``) and
are linked from the card by relative path. They are drawn by ``llm_powertrace_ds.plots.plot_run``
(matplotlib, optional: imported only when a figure has to be drawn). Each PNG carries a key (a hash of the chosen run's runs-table row and of
the plotting code) in a PNG text chunk; a figure whose key matches is not drawn again,
so rebuilding the card after every run costs nothing when the figures are current, and running
the builder twice leaves every file byte-identical.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from llm_powertrace_ds import layout, schema
from llm_powertrace_ds.atomic import atomic_path
from llm_powertrace_ds.shards import read_table, run_from_rows

from .summary import FolderSummary

FIGURES_DIR = "figures"
FIGURE_VERSION = "1"
KEY_FIELD = "llm-powertrace-key"
FIGURES_ENV = "LLM_POWERTRACE_CARD_FIGURES"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Figure:
    """A figure the card links.

    Attributes:
        workload: ``finetune`` or ``inference``.
        platform: the split.
        run_id: the run drawn.
        path: path relative to the dataset root (POSIX).
        key: the content key stored in the PNG.
        available: the PNG exists and is current.
    """

    workload: str
    platform: str
    run_id: str
    path: str
    key: str
    available: bool


def drawing_enabled() -> bool:
    """Whether figures are drawn by default: unless ``LLM_POWERTRACE_CARD_FIGURES`` is ``0``."""
    value = os.environ.get(FIGURES_ENV, "1").strip().lower()
    return value not in ("0", "false", "no", "off")


def matplotlib_available() -> bool:
    """Whether matplotlib can be imported (without importing it)."""
    return importlib.util.find_spec("matplotlib") is not None


def representative_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median mean power (ties by run id), preferring runs without warnings.

    Example:
        >>> representative_run([{"run_id": "a", "mean_power_w": 1.0},
        ...                     {"run_id": "b", "mean_power_w": 3.0},
        ...                     {"run_id": "c", "mean_power_w": 2.0}])["run_id"]
        'c'
    """
    clean = [r for r in runs if not set(r.get("quality_flags") or []) - {"cpu_proxy"}]
    pool = clean or runs
    ranked = sorted(pool, key=lambda r: (r.get("mean_power_w") is None,
                                         r.get("mean_power_w") or 0.0, r["run_id"]))
    return ranked[(len(ranked) - 1) // 2]


def _plots_source_hash() -> str:
    """Hash of the plotting code, so that a changed ``plots.py`` redraws every figure."""
    spec = importlib.util.find_spec("llm_powertrace_ds.plots")
    origin = spec.origin if spec else None
    data = Path(origin).read_bytes() if origin and Path(origin).is_file() else b""
    return hashlib.sha256(data).hexdigest()[:12]


def figure_key(run: dict[str, Any]) -> str:
    """Content key of a run's figure: changes when the run is republished or the code changes."""
    text = json.dumps(run, sort_keys=True, default=str)
    seed = f"{FIGURE_VERSION}\n{_plots_source_hash()}\n{text}"
    return hashlib.sha256(seed.encode()).hexdigest()[:20]


def png_text(path: Path) -> dict[str, str]:
    """The ``tEXt`` chunks of a PNG file (``{}`` when it is not a readable PNG)."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    if not data.startswith(_PNG_SIGNATURE):
        return {}
    out: dict[str, str] = {}
    pos = len(_PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        ctype = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if ctype == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        elif ctype in (b"IDAT", b"IEND"):
            break
        pos += 12 + length
    return out


def planned_figures(summary: FolderSummary) -> list[Figure]:
    """One figure per (workload, platform) with runs, marked available when its PNG is current."""
    out = []
    for workload in schema.WORKLOADS:
        by_platform: dict[str, list[dict[str, Any]]] = {}
        for run in summary.runs.get(workload, []):
            by_platform.setdefault(run["platform"], []).append(run)
        for platform, runs in sorted(by_platform.items()):
            run = representative_run(runs)
            rel = f"{FIGURES_DIR}/trace-{workload}-{platform}.png"
            key = figure_key(run)
            current = png_text(summary.root / rel).get(KEY_FIELD) == key
            out.append(Figure(workload, platform, run["run_id"], rel, key, current))
    return out


def _trace_rows(root: Path, workload: str, platform: str, run_id: str) -> list[dict[str, Any]]:
    """The trace rows of one run, reading only that platform's shards (the run's own file first)."""
    files = layout.shard_files(root, workload, platform)
    files.sort(key=lambda p: p.stem != run_id)
    for path in files:
        table = read_table(path)  # an .arrow or a .parquet shard (layout.READ_SUFFIXES)
        rows = table.filter(pc.equal(table["run_id"], run_id)).to_pylist()
        if rows:
            return rows
    return []


def with_png_text(data: bytes, key: str, value: str) -> bytes:
    """``data`` (a PNG) with a ``tEXt`` chunk ``key: value`` inserted after its header chunk."""
    body = key.encode("latin-1") + b"\0" + value.encode("latin-1")
    chunk = (len(body).to_bytes(4, "big") + b"tEXt" + body
             + zlib.crc32(b"tEXt" + body).to_bytes(4, "big"))
    end = len(_PNG_SIGNATURE) + 12 + int.from_bytes(data[8:12], "big")
    return data[:end] + chunk + data[end:]


def render_trace(rows: list[dict[str, Any]], path: Path, key: str) -> None:
    """Draw one run with ``llm_powertrace_ds.plots.plot_run`` and store ``key`` in the PNG.

    The PNG is written under a hidden temporary name and renamed into place.
    """
    from llm_powertrace_ds.plots import plot_run

    run = run_from_rows(rows)
    with atomic_path(path, suffix=".png") as tmp:  # plot_run picks the format from the suffix
        plot_run(run, tmp)
        tmp.write_bytes(with_png_text(tmp.read_bytes(), KEY_FIELD, key))


def update_figures(summary: FolderSummary, *, render: bool = True) -> list[Figure]:
    """Bring ``figures/`` up to date and return the figures the card can link.

    Draws each figure whose PNG is missing or stale (when ``render`` and matplotlib is
    installed) and removes every other trace figure (stale ones it could not redraw, and those
    of (workload, platform) pairs no longer present), so ``figures/`` holds exactly what the
    card links.
    """
    planned = planned_figures(summary)
    can_draw = render and matplotlib_available()
    out = []
    for fig in planned:
        if not fig.available and can_draw:
            rows = _trace_rows(summary.root, fig.workload, fig.platform, fig.run_id)
            if rows:
                render_trace(rows, summary.root / fig.path, fig.key)
                fig = Figure(fig.workload, fig.platform, fig.run_id, fig.path, fig.key, True)
        if fig.available:
            out.append(fig)
    wanted = {summary.root / f.path for f in out}
    fig_dir = summary.root / FIGURES_DIR
    if fig_dir.is_dir():
        for stale in sorted(fig_dir.glob("trace-*.png")):
            if stale not in wanted:
                stale.unlink()
    return out
