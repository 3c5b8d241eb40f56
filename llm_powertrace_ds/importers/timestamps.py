"""Timestamp parsing: local or explicit-offset text to UTC milliseconds."""

from __future__ import annotations

import datetime as dt
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import InputError
from . import arrow_values
from .csv_reader import Converter, _cells
from .meta_files import _MS_PER_S, _short

_TS_RE = re.compile(
    r"\d{4}[-/]\d{1,2}[-/]\d{1,2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?")
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_OFFSET_BUCKET_MS = 15 * 60 * _MS_PER_S


def _offset_ms(local_ms: int, zone: dt.tzinfo) -> int:
    naive = _EPOCH_NAIVE + dt.timedelta(milliseconds=local_ms)
    offset = naive.replace(tzinfo=zone).utcoffset() or dt.timedelta(0)
    return int(offset.total_seconds() * _MS_PER_S)


def local_to_utc_ms(local_ms: np.ndarray, zone: dt.tzinfo) -> np.ndarray:
    """Convert naive local wall-clock ms (since the naive epoch) to UTC epoch ms.

    The zone's offset is looked up once per 15-minute bucket (DST changes fall on those);
    ambiguous wall times (the repeated hour when clocks go back) take the first occurrence.
    """
    if zone is dt.timezone.utc or len(local_ms) == 0:
        return local_ms
    buckets = local_ms // _OFFSET_BUCKET_MS
    uniq, inverse = np.unique(buckets, return_inverse=True)
    offsets = np.array([_offset_ms(int(b) * _OFFSET_BUCKET_MS, zone) for b in uniq], np.int64)
    return local_ms - offsets[inverse.reshape(-1)]


def _explicit_utc_ms(text: str) -> int:
    stamp = dt.datetime.fromisoformat(text.replace("/", "-").replace("Z", "+00:00"))
    return int(round(stamp.timestamp() * _MS_PER_S))


def timestamp_converter(*, file: Path, field: str, zone: dt.tzinfo) -> Converter:
    """A converter of a timestamp column to int64 UTC epoch milliseconds.

    Accepts ``YYYY/MM/DD HH:MM:SS.mmm`` (nvidia-smi) and ISO-8601 (``T`` or space, any number of
    fraction digits, truncated to ms). Zone-less stamps are local time in ``zone``; a trailing
    ``Z`` or ``+HH:MM`` is honoured.
    """

    def convert(values: Any, lines: np.ndarray) -> np.ndarray:
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            fixed = arrow_values.fixed_width_ms(values)
            if fixed is not None:
                return fixed[0] if fixed[1] else local_to_utc_ms(fixed[0], zone)
            utc = arrow_values.utc_z_ms(values)
            if utc is not None:
                return utc
            local = arrow_values.naive_ms(values)
            if local is not None:
                return local_to_utc_ms(local, zone)
            values = _cells(values)  # offsets, mixed zones or a bad cell: the exact path
        texts = [v.strip() for v in values]
        zones: list[str | None] = []
        for row, text in enumerate(texts):
            match = _TS_RE.fullmatch(text)
            if match is None:
                raise InputError(f"value {_short(text)} is not a timestamp "
                                 "(YYYY/MM/DD HH:MM:SS.mmm or ISO-8601)", file=file,
                                 line=int(lines[row]), field=field)
            zones.append(match.group(1))
        return _to_utc_ms(texts, zones, lines, file=file, field=field, zone=zone)

    return convert


def _to_utc_ms(texts: list[str], zones: list[str | None], lines: np.ndarray, *, file: Path,
               field: str, zone: dt.tzinfo) -> np.ndarray:
    has_offset = np.array([z is not None and z != "Z" for z in zones], dtype=bool)
    is_z = np.array([z == "Z" for z in zones], dtype=bool)
    plain = [t[:-1] if z == "Z" else (t if z is None else "1970-01-01") for t, z in zip(texts, zones, strict=True)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            naive = np.array([p.replace("/", "-") for p in plain]).astype("datetime64[ms]")
    except ValueError:
        naive = None
    if naive is None:
        for row, text in enumerate(plain):
            try:
                np.datetime64(text.replace("/", "-"), "ms")
            except ValueError:
                raise InputError(f"value {_short(texts[row])} is not a valid date and time",
                                 file=file, line=int(lines[row]), field=field) from None
        raise InputError("unparsable timestamps", file=file, line=int(lines[0]), field=field)
    ms = naive.astype(np.int64)
    local = ~(is_z | has_offset)
    if local.any():
        ms[local] = local_to_utc_ms(ms[local], zone)
    for offset_row in np.flatnonzero(has_offset):
        try:
            ms[offset_row] = _explicit_utc_ms(texts[offset_row])
        except ValueError:
            raise InputError(f"value {_short(texts[offset_row])} is not a valid date and time",
                             file=file, line=int(lines[offset_row]), field=field) from None
    return ms


def format_utc_ms(ms: int) -> str:
    """``2024-04-03T10:55:35.013Z`` for an epoch-ms value (for messages)."""
    stamp = dt.datetime.fromtimestamp(ms / _MS_PER_S, tz=dt.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % _MS_PER_S:03d}Z"
