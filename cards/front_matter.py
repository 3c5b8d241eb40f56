"""The card's YAML front matter: size category, ``configs`` block, Hub metadata."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llm_powertrace_ds import layout
from llm_powertrace_ds.sources.provenance import read_sources
from llm_powertrace_ds.sources.recipes import builtin_recipes

from .analysis import SAMPLER_RECIPES
from .card_text import FILE_SUFFIXES, LICENSE, TAGS, TASK_CATEGORIES, CardOptions
from .summary import FolderSummary, summarize

_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: same text, 4x faster
_SIZE_CATEGORIES = [
    (1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
]


# ---------------------------------------------------------------------------------------------
# YAML metadata
# ---------------------------------------------------------------------------------------------

def size_category(n_rows: int) -> str:
    """The Hub's ``size_categories`` bucket for ``n_rows`` rows."""
    for limit, name in _SIZE_CATEGORIES:
        if n_rows < limit:
            return name
    return "n>1B"


def configs_yaml(root: str | Path, file_format: str = "arrow") -> list[dict[str, Any]]:
    """``layout.configs_metadata`` with the globs' file suffix following ``file_format``."""
    entries = layout.configs_metadata(root)
    suffix = FILE_SUFFIXES[file_format]
    if suffix != layout.SHARD_SUFFIX:
        for entry in entries:
            for files in entry["data_files"]:
                files["path"] = [p[: -len(layout.SHARD_SUFFIX)] + suffix
                                 if p.endswith(layout.SHARD_SUFFIX) else p for p in files["path"]]
    return entries


_HUB_LICENCES = {"cc-by-4.0": "cc-by-4.0", "apache-2.0": "apache-2.0", "mit": "mit",
                 "cc0-1.0": "cc0-1.0", "cc-by-sa-4.0": "cc-by-sa-4.0", "odc-by": "odc-by"}
"""SPDX id (lower case) -> the Hub's licence id, for the licences a recipe may name."""


def data_licence(root: str | Path, summary: FolderSummary) -> str:
    """The Hub licence of the folder's data.

    Ours (``cc-by-4.0``) for runs measured here, each recorded source's own (``sources.json``)
    for its runs; ``other`` when they differ (the card's Sources section says which is which).
    """
    recorded = read_sources(root)
    runs = summary.all_runs
    sourced = {rid for e in recorded for rid in e.get("runs") or []}
    ids = {_HUB_LICENCES.get(str(e.get("licence", "")).lower(), "other") for e in recorded}
    recipes = builtin_recipes() if runs else {}
    licences = {s: recipes[name].licence for s, name in SAMPLER_RECIPES.items() if recipes}
    for r in runs:  # imported without `get`: the licence of the source its sampler names
        if r.get("run_id") not in sourced:
            lic = licences.get(str(r.get("sampler")))
            ids.add(_HUB_LICENCES.get(lic.lower(), "other") if lic else LICENSE)
    if not ids:
        return LICENSE
    return ids.pop() if len(ids) == 1 else "other"


def card_metadata(root: str | Path, options: CardOptions | None = None,
                  summary: FolderSummary | None = None) -> dict[str, Any]:
    """The card's YAML metadata (the form the Hub documents for dataset cards)."""
    options = options or CardOptions()
    summary = summary or summarize(root)
    return {
        "license": data_licence(root, summary),
        "pretty_name": options.pretty_name,
        "task_categories": list(TASK_CATEGORIES),
        "tags": list(TAGS),
        "size_categories": [size_category(summary.base_row_total())],
        "configs": configs_yaml(root, options.file_format),
    }
