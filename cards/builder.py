"""The dataset card builder: the one writer of a dataset folder's ``README.md``.

The card is regenerated from the data and the schema alone, so nothing hand-edited survives;
customisation goes through :class:`CardOptions`. It is called once per command (under the
folder lock, by :func:`refresh_card`, through ``llm_powertrace_ds.hooks``) and by
``llm-powertrace card DIR``; publishing a run only keeps the YAML ``configs:`` block current:
it uses base dependencies only (matplotlib, when installed, draws the figures), reads the small
runs tables and only a few scalar columns of the trace shards, and is idempotent — the card holds
no timestamp, and a second run rewrites nothing.

Sections: YAML metadata (licence, tags, size, ``configs`` with globs; ``datasets`` reads the
features from the files), configs and splits, how to use, figures, platforms, model families,
every sweep axis with its values and run counts per platform, measurement method (with a
prominent warning when ``cpu_proxy`` rows are present), quality summary, metric definitions
(from ``metrics.py`` docstrings), the data dictionary (from ``schema.py``), licence, citation
and changelog.

Example:
    >>> from cards.builder import write_card  # doctest: +SKIP
    >>> write_card("llm-powertrace")  # doctest: +SKIP
    PosixPath('llm-powertrace/README.md')
"""

from __future__ import annotations

from .card_text import (
    EXTRA_AXES,
    FILE_SUFFIXES,
    LICENSE,
    PAPER_TITLE,
    REPO_PLACEHOLDER,
    TAGS,
    TASK_CATEGORIES,
    CardOptions,
    flags_sentence,
    fmt_value,
    human_count,
    plural,
)
from .front_matter import card_metadata, configs_yaml, size_category
from .render import refresh_card, render_card, write_card
from .sections_data import _axis_columns
from .sections_method import PAPER_BIBTEX, dataset_bibtex

__all__ = [
    "CardOptions", "EXTRA_AXES", "FILE_SUFFIXES", "LICENSE", "PAPER_BIBTEX", "PAPER_TITLE",
    "REPO_PLACEHOLDER", "TAGS", "TASK_CATEGORIES", "_axis_columns", "card_metadata",
    "configs_yaml", "dataset_bibtex", "flags_sentence", "fmt_value", "human_count", "plural",
    "refresh_card", "render_card", "size_category", "write_card",
]
