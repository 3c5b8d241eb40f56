"""Where a dataset folder's imported sources came from: ``sources.json`` at its root.

``get`` records one entry per source: its name, title, licence (SPDX id) and whether that
licence allows redistribution, the citation, the publisher's page, every file fetched (URL,
size, SHA-256, whether the recipe pinned it), when, and the runs it became. The card builder
prints it (licence, citation and source URL in the card) and ``upload.py`` refuses a folder
holding a source without a redistribution licence unless told otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..atomic import write_json_atomic
from ..errors import InputError

SOURCES_PATH = "sources.json"
"""The record's place in a dataset folder (uploaded with the folder: attribution travels)."""


def read_sources(root: str | Path) -> list[dict[str, Any]]:
    """The folder's recorded sources (``[]`` when none); ``InputError`` on a damaged file."""
    path = Path(root) / SOURCES_PATH
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the sources record ({exc})", file=path) from None
    entries = data.get("sources") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError("expected {\"sources\": [...]}", file=path, field="sources")
    return entries


def record_source(root: str | Path, entry: dict[str, Any]) -> Path:
    """Add or replace (by ``name``) one source's entry; the file is written atomically."""
    entries = [e for e in read_sources(root) if e.get("name") != entry["name"]]
    entries.append(entry)
    entries.sort(key=lambda e: str(e.get("name")))
    path = Path(root) / SOURCES_PATH
    write_json_atomic(path, {"sources": entries}, indent=2, sort_keys=True)
    return path


def unredistributable(root: str | Path) -> list[dict[str, Any]]:
    """The recorded sources whose licence does not allow redistribution."""
    return [e for e in read_sources(root) if e.get("redistributable") is not True]


__all__ = ["SOURCES_PATH", "read_sources", "record_source", "unredistributable"]
