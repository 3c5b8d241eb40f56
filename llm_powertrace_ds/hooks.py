"""Hooks through which the layers above the library finish a command (the full dataset card).

The library never imports ``cards`` (docs/design.md, "Layers": it is the ground floor). A package above it
registers its card writer here when its CLI module registers (``cards/cli.py`` does, through
the ``llm_powertrace.commands`` entry points); a command that changed a dataset folder then calls
:func:`rebuild_card` **once**, at its end. Without a registered writer the folder still gets its
YAML ``configs:`` block (:func:`llm_powertrace_ds.shards.write_configs_block`), so it loads.

Example:
    >>> from llm_powertrace_ds import hooks  # doctest: +SKIP
    >>> hooks.rebuild_card("llm-powertrace")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

CardWriter = Callable[[Path], Any]
"""Rebuilds a folder's whole ``README.md`` (under the folder lock)."""

_card_writers: dict[str, CardWriter] = {}


def register_card_writer(name: str, writer: CardWriter) -> None:
    """Register (or replace) the card writer called ``name``."""
    _card_writers[name] = writer


def card_writers() -> dict[str, CardWriter]:
    """The registered card writers, by name."""
    return dict(_card_writers)


def rebuild_card(root: str | Path) -> Path:
    """Rebuild the card of ``root`` once: every registered writer, else the configs block only.

    First, under the folder lock, a runs folder's one-run files are merged into a runs-table
    segment when it holds enough (``shards.segments.compact``: bytes per run).

    Returns:
        The path of ``README.md``.
    """
    from .shards import folder_lock, write_configs_block
    from .shards.segments import compact

    root = Path(root)
    if not _card_writers:
        return write_configs_block(root)  # merges loose runs files into segments too
    with folder_lock(root):
        compact(root)  # loose runs files into segments before the card lists the files
    try:
        for writer in _card_writers.values():
            writer(root)
    except BaseException:
        write_configs_block(root)  # whatever failed, the folder's YAML lists what is in data/
        raise
    return root / "README.md"
