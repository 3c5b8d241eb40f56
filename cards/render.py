"""Render the card (front matter + sections) and write ``README.md`` atomically."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from llm_powertrace_ds import croissant, layout, schema
from llm_powertrace_ds.privacy import strip_control
from llm_powertrace_ds.shards import folder_lock, write_text_atomic

from . import analysis
from . import figures as figures_mod
from .analysis import cited_sources
from .card_text import REPO_PLACEHOLDER, CardOptions
from .front_matter import _YAML_DUMPER, card_metadata, configs_yaml, data_licence
from .metric_docs import metric_groups
from .sections_data import (
    _axes_section,
    _configs_section,
    _families_section,
    _figures_section,
    _how_to_use,
    _intro,
    _long_rows_note,
    _platforms_section,
)
from .sections_method import (
    PAPER_BIBTEX,
    _dictionary_section,
    _facility_section,
    _licence_citation_changelog,
    _limitations_section,
    _measurement_section,
    _metrics_section,
    _quality_section,
    dataset_bibtex,
)
from .summary import FolderSummary, summarize

# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------

def render_card(root: str | Path, options: CardOptions | None = None, *,
                summary: FolderSummary | None = None,
                figures: list[figures_mod.Figure] | None = None) -> str:
    """Render the card's text (YAML front matter + Markdown body).

    Args:
        root: the dataset folder.
        options: card options (default ``CardOptions()``).
        summary: a precomputed ``summarize(root)``.
        figures: the figures to link (default: those already current in ``root/figures``;
            :func:`write_card` draws missing ones first).

    Returns:
        The card text; the same folder and options always give the same text.
    """
    options = options or CardOptions()
    summary = summary or summarize(root)
    if figures is None:
        figures = [f for f in figures_mod.planned_figures(summary) if f.available]
    meta = yaml.dump(card_metadata(root, options, summary), Dumper=_YAML_DUMPER,
                     sort_keys=False, allow_unicode=True, width=1000)
    body: list[str] = []
    for section in (_intro(summary, options), _configs_section(summary), _long_rows_note(summary),
                    _how_to_use(summary, options), _figures_section(figures, summary),
                    _platforms_section(summary), _families_section(summary),
                    _axes_section(summary), _measurement_section(summary),
                    _quality_section(summary), _limitations_section(summary),
                    _metrics_summary() + analysis.seed_note(), _facility_section(),
                    analysis.scaling_section(summary.root), analysis.sources_section(summary.all_runs, summary.root),
                    _columns_summary(summary),
                    _licence_citation_changelog(summary, options.repo_id)):
        body += section
    while body and body[-1] == "":
        body.pop()
    return "\n".join(["---", meta.rstrip(), "---", "", *body, ""])


DETAILS_DIR = "card"
"""The card's long reference sections, each a Markdown file of its own beside ``README.md``:
the card keeps summaries and links, so its size follows the data, not the schema."""
METRICS_DETAILS = f"{DETAILS_DIR}/metrics.md"
COLUMNS_DETAILS = f"{DETAILS_DIR}/columns.md"


def _metrics_summary() -> list[str]:
    _, groups = metric_groups()
    n = sum(len(g.metrics) for g in groups)
    return ["## Metrics", "",
            f"{n} per-run metrics in `finetune_runs` / `inference_runs`, computed from the traces "
            "by `llm_powertrace_ds.metrics` (a metric that cannot be computed is null and "
            "`metric_notes` says why): "
            + "; ".join(f"{g.title.lower()} ({len(g.metrics)})" for g in groups) + ". "
            f"Every definition with its formula: [{METRICS_DETAILS}]({METRICS_DETAILS}).", ""]


def _columns_summary(summary: FolderSummary) -> list[str]:
    present = [c for c in schema.ALL_CONFIGS if c in summary.globs]
    if not present:
        return []
    return ["## Columns", "",
            "Units are in the names; categorical values are plain strings; a value the source "
            "does not report is null, never 0. Columns per config: "
            + ", ".join(f"`{c}` {len(schema.column_doc(c))}" for c in present) + ". "
            f"Every column with its type, unit and description: "
            f"[{COLUMNS_DETAILS}]({COLUMNS_DETAILS}) (and, machine-readable, `croissant.json`).",
            ""]


def render_details(root: str | Path, summary: FolderSummary | None = None) -> dict[str, str]:
    """The card's detail files: ``{path relative to the folder: Markdown text}``."""
    summary = summary or summarize(root)
    out = {METRICS_DETAILS: ["# LLM-PowerTrace: metric definitions", "",
                             *_metrics_section()]}
    columns = _dictionary_section(summary)
    if columns:
        out[COLUMNS_DETAILS] = ["# LLM-PowerTrace: columns", "", *columns]
    texts = {}
    for path, lines in out.items():
        while lines and lines[-1] == "":
            lines.pop()
        texts[path] = strip_control("\n".join(lines) + "\n")
    return texts


def write_card(root: str | Path, options: CardOptions | None = None, *,
               out_dir: str | Path | None = None) -> Path:
    """Draw missing figures, then write ``README.md`` atomically; return its path.

    Unchanged text is not rewritten, so a second call changes nothing.

    Args:
        root: the dataset folder the card describes.
        options: card options (default ``CardOptions()``).
        out_dir: write the card (and copy the figures) into this folder instead — e.g. a
            Parquet copy of ``root`` whose card must describe the same data.

    Returns:
        The path of the written ``README.md``.
    """
    options = options or CardOptions()
    root = Path(root)
    summary = summarize(root)
    draw = options.figures if options.figures is not None else figures_mod.drawing_enabled()
    figs = figures_mod.update_figures(summary, render=draw)
    text = render_card(root, options, summary=summary, figures=figs)
    dest = Path(out_dir) if out_dir is not None else root
    if dest.resolve() != root.resolve():
        for fig in figs:
            target = dest / fig.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / fig.path, target)
    path = dest / "README.md"
    layout.check_readme_is_ours(dest)  # never replace someone else's README
    text = strip_control(text)  # no ESC sequence or CR from old data reaches the card
    if layout.CARD_MARKER not in text:
        text = text.rstrip("\n") + "\n\n" + layout.CARD_MARKER + "\n"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        write_text_atomic(path, text)
    for rel, detail in render_details(root, summary).items():
        target = dest / rel
        if not target.exists() or target.read_text(encoding="utf-8") != detail:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(target, detail)
    write_croissant(root, options, summary=summary, out_dir=dest)
    return path


def render_croissant(root: str | Path, options: CardOptions | None = None, *,
                     summary: FolderSummary | None = None) -> str:
    """The folder's ``croissant.json`` text, from the facts the card states.

    Same licence, citation, configs and splits as the card; the fields from ``schema.py``.
    """
    options = options or CardOptions()
    summary = summary or summarize(root)
    repo = options.repo_id or REPO_PLACEHOLDER
    runs = summary.all_runs
    info = croissant.CroissantInfo(
        name=options.pretty_name,
        description=(
            "Time-resolved, per-device power traces of LLM fine-tuning and inference, with "
            f"every sweep axis and per-run power and energy metrics: {len(runs)} run(s) on "
            f"{len(summary.platforms)} platform(s) ({', '.join(summary.platforms)})."),
        licence=data_licence(root, summary),
        cite_as="\n".join([*dataset_bibtex(summary, options.repo_id), *PAPER_BIBTEX,
                            *(f"% and {c['name']} ({c['licence']}): {c['citation']}"
                              for c in cited_sources(runs, root))]),
        url=f"https://huggingface.co/datasets/{repo}")
    doc = croissant.croissant_metadata(info, configs_yaml(root, options.file_format), runs,
                                       file_format=options.file_format)
    return croissant.croissant_text(doc)


def write_croissant(root: str | Path, options: CardOptions | None = None, *,
                    summary: FolderSummary | None = None,
                    out_dir: str | Path | None = None) -> Path:
    """Write ``croissant.json`` atomically beside the card (unchanged text is not rewritten)."""
    text = strip_control(render_croissant(root, options, summary=summary))
    path = croissant.croissant_path(out_dir if out_dir is not None else root)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        write_text_atomic(path, text)
    return path


def refresh_card(root: str | Path, options: CardOptions | None = None) -> Path:
    """:func:`write_card` under the folder lock: what a command calls once, at its end.

    Raises:
        LockTimeout: another process holds the folder's card.
    """
    with folder_lock(root):
        return write_card(root, options)
