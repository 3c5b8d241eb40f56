"""Where a dataset folder's imported sources came from: ``sources.json`` at its root.

``get`` records one entry per source: its name, title, licence (SPDX id) and whether that
licence allows redistribution, the citation, the publisher's page, every file fetched (URL,
size, SHA-256, whether the recipe pinned it), when, and the runs it became. The card builder
prints it (licence, citation and source URL in the card) and ``upload.py`` refuses a folder
holding a source without a redistribution licence unless told otherwise.

What is written passes the privacy gate (:func:`public_entry`): URLs keep scheme, host and path
only (no signed-URL query, no password) and are dropped when their host is private or loopback;
a title or citation that is not publishable (``privacy.credit_problem``) is left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..atomic import write_json_atomic
from ..errors import InputError
from ..privacy import credit_problem, public_url, strip_control, text_problem

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


def _public_file(item: Any) -> Any:
    if not isinstance(item, dict):
        return None
    out = dict(item)
    if "url" in out:
        out["url"] = public_url(out["url"]) if isinstance(out["url"], str) else None
    if "local" in out:
        name = out["local"]
        out["local"] = name if isinstance(name, str) and text_problem("file", name) is None \
            else None
    return out


def public_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """One source's entry as it may be published (see the module docstring).

    ``source_url`` and each file's ``url`` become :func:`~llm_powertrace_ds.privacy.public_url`
    (``None`` when withheld), a file's ``local`` name is kept only when it passes the text
    gate, a ``title`` or ``citation`` that fails ``credit_problem`` becomes ``None``, and every
    other text loses its control characters.
    """
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "source_url":
            out[key] = public_url(value) if isinstance(value, str) else None
        elif key in ("title", "citation"):
            out[key] = value if isinstance(value, str) and credit_problem(value) is None \
                else None
        elif key == "files":
            out[key] = [_public_file(f) for f in value] if isinstance(value, list) else []
        elif isinstance(value, str):
            out[key] = " ".join(strip_control(value).split())
        else:
            out[key] = value
    return out


def _write(path: Path, entries: list[dict[str, Any]]) -> None:
    write_json_atomic(path, {"sources": [public_entry(e) for e in entries]}, indent=2,
                      sort_keys=True)


def record_source(root: str | Path, entry: dict[str, Any]) -> Path:
    """Add or replace (by ``name``) one source's entry; the file is written atomically.

    Every entry written passes :func:`public_entry` (those recorded before it too).
    """
    entries = [e for e in read_sources(root) if e.get("name") != entry["name"]]
    entries.append(entry)
    entries.sort(key=lambda e: str(e.get("name")))
    path = Path(root) / SOURCES_PATH
    _write(path, entries)
    return path


def copy_public(root: str | Path, dst: str | Path) -> Path | None:
    """Write ``root``'s sources record into ``dst`` through :func:`public_entry` (for uploads).

    Returns:
        The written path, or ``None`` when ``root`` records no source.
    """
    if not (Path(root) / SOURCES_PATH).is_file():
        return None
    entries = read_sources(root)
    Path(dst).mkdir(parents=True, exist_ok=True)
    path = Path(dst) / SOURCES_PATH
    _write(path, entries)
    return path


def unredistributable(root: str | Path) -> list[dict[str, Any]]:
    """The recorded sources whose licence does not allow redistribution."""
    return [e for e in read_sources(root) if e.get("redistributable") is not True]


__all__ = ["SOURCES_PATH", "copy_public", "public_entry", "read_sources", "record_source",
           "unredistributable"]
