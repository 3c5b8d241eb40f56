"""The PowerTrace catalog's request timeline: binned request counts of an inference run.

Their newest explorer build (``scripts/build_source_verified_inference_package.mjs`` of
Leo-hxu/training-power-trace-explorer at commit b35ddab7f937f523bb82b153b7ef3f249398d88b)
writes, per inference run, ``requests/<run_id>.csv`` and the ``inference_timeline`` list of its
compact run file, with the columns::

    time_relative_s,window_s,requests_arrived,active_requests,mean_prompt_tokens,
    mean_output_tokens,mean_request_tokens

one row per window (5 s bins of vLLM's Prometheus counters, or the source's own time-aligned
telemetry; their ``request_timeline_method`` says which). ``requests_arrived`` is *derived* by
them (completed-counter change plus the change in active requests), not a per-request event,
so no row of our per-request ``inference_requests`` table can be made from it. The timeline is
kept, checked and column by column, in the run's ``source_metadata`` under
``inference_timeline`` (``{column: [values...]}``; null where they wrote none).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import bounded
from ..errors import InputError

COLUMNS = ("time_relative_s", "window_s", "requests_arrived", "active_requests",
           "mean_prompt_tokens", "mean_output_tokens", "mean_request_tokens")
COUNTS = ("requests_arrived", "active_requests")
MAX_ROWS = 1_000_000
"""Most windows of one run (58 days of 5 s bins)."""
MAX_BYTES = 64 << 20
"""Largest request-timeline CSV read."""
MAX_VALUE = 1e12

FIELD_MAP: dict[str, str] = {
    "time_relative_s": "source_metadata.inference_timeline (s after their first sample)",
    "window_s": "source_metadata.inference_timeline (the bin width, s)",
    "requests_arrived": "source_metadata.inference_timeline (derived by the publisher from "
    "counters, not per-request events: no inference_requests rows)",
    "active_requests": "source_metadata.inference_timeline (running + waiting requests)",
    "mean_prompt_tokens": "source_metadata.inference_timeline",
    "mean_output_tokens": "source_metadata.inference_timeline",
    "mean_request_tokens": "source_metadata.inference_timeline",
}
"""Where each column of their request timeline goes (docs/importers.md renders it)."""


def _value(raw: Any, column: str, where: str, *, file: Path, line: int | None) -> float | None:
    if raw is None or (isinstance(raw, str) and raw.strip() == ""):
        return None
    if isinstance(raw, bool):
        raise InputError(f"{where}: value {raw!r} is not a number", file=file, line=line,
                         field=column)
    try:
        x = float(raw)
    except (TypeError, ValueError):
        raise InputError(f"{where}: value {str(raw)[:40]!r} is not a number", file=file,
                         line=line, field=column) from None
    if not math.isfinite(x) or x < 0 or x > MAX_VALUE:
        raise InputError(f"{where}: value {str(raw)[:40]!r} is not a finite number >= 0",
                         file=file, line=line, field=column)
    if column in COUNTS and x != int(x):
        raise InputError(f"{where}: value {str(raw)[:40]!r} is not a whole number of requests",
                         file=file, line=line, field=column)
    return int(x) if column in COUNTS else x


def timeline_columns(rows: Sequence[Any], *, file: Path, lines: Sequence[int] | None = None,
                     what: str = "inference_timeline") -> dict[str, list[Any]]:
    """Their timeline rows (dicts) checked and turned into ``{column: [values]}``.

    Raises:
        InputError: a row that is not an object, a value that is not a number >= 0 (counts
            whole), times that do not increase, or too many rows; naming file, row and column.
    """
    if len(rows) > MAX_ROWS:
        raise InputError(f"{len(rows)} windows; at most {MAX_ROWS} are read", file=file,
                         field=what)
    out: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    previous = -1.0
    for i, row in enumerate(rows):
        line = lines[i] if lines is not None else None
        where = f"row {i + 1}" if lines is None else "row"
        if not isinstance(row, dict):
            raise InputError(f"{where}: expected an object", file=file, line=line, field=what)
        for column in COLUMNS:
            out[column].append(_value(row.get(column), column, where, file=file, line=line))
        t = out["time_relative_s"][-1]
        if t is None:
            raise InputError(f"{where}: no time", file=file, line=line,
                             field="time_relative_s")
        if t <= previous:
            raise InputError(f"{where}: time {t!r} does not increase (after {previous!r})",
                             file=file, line=line, field="time_relative_s")
        previous = t
    return out


def read_timeline_csv(path: str | Path) -> dict[str, list[Any]]:
    """Read ``requests/<run_id>.csv`` (bounded reader; header must hold ``time_relative_s``).

    Raises:
        InputError: as :func:`timeline_columns`, or a header without ``time_relative_s``.
    """
    path = Path(path)
    text = bounded.read_text(path, max_bytes=MAX_BYTES)
    lines = text.splitlines()
    if not lines:
        raise InputError("empty file: expected a header line", file=path)
    header = [h.strip() for h in lines[0].split(",")]
    if "time_relative_s" not in header:
        raise InputError("the header has no time_relative_s", file=path, line=1,
                         field="time_relative_s")
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise InputError(f"unknown column {unknown[0]!r} (known: {', '.join(COLUMNS)})",
                         file=path, line=1, field=unknown[0])
    rows, numbers = [], []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split(",")
        if len(cells) != len(header):
            raise InputError(f"{len(cells)} cells for {len(header)} columns", file=path,
                             line=lineno)
        rows.append(dict(zip(header, cells, strict=True)))
        numbers.append(lineno)
    return timeline_columns(rows, file=path, lines=numbers)


def with_timeline(source_metadata: str | None, columns: dict[str, list[Any]], *,
                  file: Path) -> str:
    """``source_metadata`` (JSON text) with the request timeline under ``inference_timeline``.

    Raises:
        InputError: the result does not pass the text gate (``scrub_meta``).
    """
    from .meta_files import scrub_meta

    kept = json.loads(source_metadata) if source_metadata else {}
    kept["inference_timeline"] = columns
    text = json.dumps(kept, sort_keys=True, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":"))
    scrub_meta({"source_metadata": text}, source=str(file))
    return text


def export_companion(path: Path, folder: str, suffix: str) -> Path | None:
    """The file of ``path``'s run in another folder of their export, if it is there.

    Their export lays ``raw/``, ``metadata/`` and ``requests/`` side by side:
    ``requests/<run_id>.csv`` belongs to ``raw/<run_id>.csv``.
    """
    if path.parent.name != "raw":
        return None
    candidate = path.parent.parent / folder / (path.stem + suffix)
    return candidate if candidate.is_file() else None


__all__ = ["COLUMNS", "FIELD_MAP", "export_companion", "read_timeline_csv", "timeline_columns",
           "with_timeline"]
