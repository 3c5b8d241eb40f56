"""No silent drops: columns of a log that no importer table names are listed, not lost."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

log = logging.getLogger("llm_powertrace_ds.importers")


def not_imported(names: Iterable[str], used: Iterable[str],
                 dropped: Mapping[str, str]) -> list[str]:
    """Columns of a log that were neither read nor deliberately dropped (with a reason)."""
    used_set = set(used)
    return [n for n in names if n not in used_set and n not in dropped]


def record_not_imported(meta: dict[str, Any], columns: list[str], *, file: object) -> None:
    """List ``columns`` in the run's ``source_metadata`` and say so once in the log."""
    if not columns:
        return
    log.warning("%s: %s have no column of ours; not imported (listed in source_metadata)", file,
                ", ".join(columns))
    current = meta.get("source_metadata")
    data = json.loads(current) if isinstance(current, str) else {}
    if not isinstance(data, dict):
        data = {"metadata": data}
    data["columns_not_imported"] = list(columns)
    meta["source_metadata"] = json.dumps(data, sort_keys=True, ensure_ascii=False,
                                         separators=(",", ":"))
