"""A plain per-request CSV, for any client or engine.

Header (required columns first; order free)::

    arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens[,request_id][,status]
    [,requested_output_tokens]

Times are **UNIX epoch seconds** (``time.time()``, wall clock), put on the run clock through the
sampler's (monotonic, UTC) anchor (see :mod:`.requests_common`); an empty cell is null (a
failed request has no first token). ``status`` is ``ok`` (default), ``error`` or
``cancelled``; ``request_id`` defaults to the row's index.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from ..errors import InputError
from .requests_common import Request, RequestLog, check_count

FORMAT = "csv"
REQUIRED = ("arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens")
OPTIONAL = ("request_id", "status", "requested_output_tokens")
STATUSES = ("ok", "error", "cancelled")


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


def read_csv_requests(path: str | Path) -> RequestLog:
    """Read a plain request CSV (see the module docstring).

    Raises:
        InputError: unreadable file, a missing or unknown column, a bad value (file, line, field).
    """
    path = Path(path)
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
            log = RequestLog(file=path, fmt=FORMAT, clock="unix")
            for index, raw in enumerate(reader):
                line = reader.line_num
                row = {k.strip(): v for k, v in raw.items() if k is not None}
                status = (row.get("status") or "ok").strip() or "ok"
                if status not in STATUSES:
                    raise InputError(f"value {status!r} is not one of {', '.join(STATUSES)}",
                                     file=path, line=line, field="status")
                rid = (row.get("request_id") or "").strip() or str(index)
                log.requests.append(Request(
                    request_id=rid, status=status,
                    arrival_s=_float(row, "arrival_s", file=path, line=line),
                    first_token_s=_float(row, "first_token_s", file=path, line=line),
                    finish_s=_float(row, "finish_s", file=path, line=line),
                    prompt_tokens=_count(row, "prompt_tokens", file=path, line=line),
                    output_tokens=_count(row, "output_tokens", file=path, line=line),
                    requested_output_tokens=_count(row, "requested_output_tokens", file=path,
                                                   line=line)))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"Failed to read: {type(exc).__name__}: {exc}", file=path) from None
    return log


__all__ = ["FORMAT", "read_csv_requests"]
