"""A plain per-request CSV, for any client or engine.

Header (required columns first; order free)::

    arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens[,request_id][,status]
    [,requested_output_tokens]

Times are **UNIX epoch seconds** (``time.time()``, wall clock), put on the run clock through the
sampler's (monotonic, UTC) anchor (see :mod:`.requests_common`); an empty cell is null (a
failed request has no first token). ``status`` is ``ok`` (default), ``error`` or
``cancelled``; ``request_id`` defaults to the row's index.

The rows are parsed one at a time into blocks of :data:`BLOCK_ROWS` rows of columns
(:func:`iter_csv_blocks`, which ``import requests-csv`` streams through
:mod:`.requests_stream` in memory independent of the file's length); :func:`read_csv_requests`
keeps every block as one table (a :class:`~.requests_common.RequestColumns`, ≈ 60 bytes a
request), never a Python object per request.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from .. import bounded
from ..errors import InputError
from .requests_common import LOG_TYPES, RequestColumns, RequestLog, check_count, log_table

FORMAT = "csv"
BLOCK_ROWS = 16_384
"""Rows parsed into Python values before they become one block of columns (≈ 5 MB of Python
objects; a multiple of the shard's 1,024-row batches)."""
REQUIRED = ("arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens")
OPTIONAL = ("request_id", "status", "requested_output_tokens")
STATUSES = ("ok", "error", "cancelled")


@dataclass(frozen=True)
class CsvBlock:
    """Consecutive rows of a request CSV.

    Attributes:
        table: their columns (:data:`~.requests_common.LOG_TYPES`).
        lines: the file line (1-based, the header is line 1) each row ends on, as the
            errors name it.
    """

    table: pa.Table
    lines: np.ndarray


def _float(row: dict[str, str], key: str, *, file: Path, line: int) -> float | None:
    text = (row.get(key) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"value {text[:40]!r} is not a number", file=file, line=line,
                         field=key) from None
    if not math.isfinite(value):
        raise InputError(f"value {text[:40]!r} is not a finite number", file=file, line=line,
                         field=key)
    return value


def _count(row: dict[str, str], key: str, *, file: Path, line: int) -> int | None:
    value = _float(row, key, file=file, line=line)
    if value is None:
        return None
    return check_count(value, shown=repr(row[key].strip()[:40]), file=file, field_name=key,
                       where="", line=line)


def iter_csv_blocks(path: str | Path) -> Iterator[CsvBlock]:
    """The rows of a plain request CSV, :data:`BLOCK_ROWS` at a time, checked as they are read.

    Each block holds the next rows' columns (:data:`LOG_TYPES`) and the file line each row
    starts on; memory is one block's, whatever the file's length.

    Raises:
        InputError: unreadable file, a missing or unknown column, a bad value (file, line, field).
    """
    path = Path(path)
    bounded.check_regular(path)
    values: dict[str, list] = {k: [] for k in LOG_TYPES}
    lines: list[int] = []
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise InputError(f"missing column(s) {', '.join(missing)}; the header must have "
                                 f"{', '.join(REQUIRED)}", file=path, line=1, field=missing[0])
            unknown = [c for c in header if c not in REQUIRED + OPTIONAL]
            if unknown:
                raise InputError(f"unknown column(s) {', '.join(unknown)}", file=path, line=1,
                                 field=unknown[0])
            for index, raw in enumerate(reader):
                line = reader.line_num
                row = {k.strip(): v for k, v in raw.items() if k is not None}
                status = (row.get("status") or "ok").strip() or "ok"
                if status not in STATUSES:
                    raise InputError(f"value {status!r} is not one of {', '.join(STATUSES)}",
                                     file=path, line=line, field="status")
                values["request_id"].append((row.get("request_id") or "").strip() or str(index))
                values["status"].append(status)
                for key in ("arrival_s", "first_token_s", "finish_s"):
                    values[key].append(_float(row, key, file=path, line=line))
                for key in ("prompt_tokens", "output_tokens", "requested_output_tokens"):
                    values[key].append(_count(row, key, file=path, line=line))
                lines.append(line)
                if len(lines) >= BLOCK_ROWS:
                    yield CsvBlock(log_table(values), np.array(lines, dtype=np.int64))
                    values = {k: [] for k in LOG_TYPES}
                    lines = []
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"Failed to read: {type(exc).__name__}: {exc}", file=path) from None
    if lines:
        yield CsvBlock(log_table(values), np.array(lines, dtype=np.int64))


def read_csv_requests(path: str | Path) -> RequestLog:
    """Read a plain request CSV (see the module docstring) into memory, as one table.

    Raises:
        InputError: unreadable file, a missing or unknown column, a bad value (file, line, field).
    """
    path = Path(path)
    tables = [block.table for block in iter_csv_blocks(path)]
    if not tables:
        tables.append(log_table({k: [] for k in LOG_TYPES}))
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return RequestLog(file=path, fmt=FORMAT, clock="unix", requests=RequestColumns(table))


__all__ = ["BLOCK_ROWS", "FORMAT", "CsvBlock", "iter_csv_blocks", "read_csv_requests"]
