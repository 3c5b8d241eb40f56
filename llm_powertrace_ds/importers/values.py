"""Column converters: numbers, null tokens, reasons, active flags, factorised strings."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import InputError
from . import arrow_values
from .csv_reader import Converter, _cells
from .meta_files import _short

# ---------------------------------------------------------------------------------------------
# Value parsing
# ---------------------------------------------------------------------------------------------

_NUMBER_RE = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%°]+)?$")
_NULL_WORDS = {"", "n/a", "na", "nan", "none", "null", "unknown"}


def is_null_token(text: str) -> bool:
    """Whether a cell means *not reported*: empty, ``N/A``, or nvidia-smi's ``[...]`` notes."""
    t = text.strip()
    return t.lower() in _NULL_WORDS or (t.startswith("[") and t.endswith("]"))


def _number(text: str, units: frozenset[str] | None) -> tuple[float, str | None]:
    """Parse one cell: (value, None) or (nan, reason)."""
    t = text.strip()
    if is_null_token(t):
        return math.nan, None
    match = _NUMBER_RE.match(t)
    if not match:
        return math.nan, "is not a number"
    unit = match.group(2)
    if unit and units is not None and unit not in units:
        expected = " or ".join(sorted(units)) or "no unit"
        return math.nan, f"has unit {unit!r}, expected {expected}"
    value = float(match.group(1))
    if not math.isfinite(value):
        return math.nan, "is not finite"
    return value, None


def _first_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _by_distinct(values: Any, lines: np.ndarray, parse: Callable[[str], tuple[float, str | None]],
                 *, file: Path, field: str) -> np.ndarray:
    """Parse each distinct string once; raise on the earliest bad row."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        uniq_list, inverse = arrow_values.distinct(values)
    else:
        arr = np.asarray(values, dtype=str)
        uniq_arr, inverse = np.unique(arr, return_inverse=True)
        uniq_list = uniq_arr.tolist()
    out = np.empty(len(uniq_list), dtype=np.float64)
    reasons: dict[int, str] = {}
    for k, text in enumerate(uniq_list):
        out[k], reason = parse(text)
        if reason is not None:
            reasons[k] = reason
    if reasons:
        row = _first_row(np.isin(inverse, list(reasons)))
        k = int(inverse[row])
        raise InputError(f"value {_short(str(uniq_list[k]))} {reasons[k]}", file=file,
                         line=int(lines[row]), field=field)
    return out[inverse.reshape(-1)]


def numeric_converter(*, file: Path, field: str, units: frozenset[str] | None = None,
                      nonnegative: bool = False) -> Converter:
    """A converter of a numeric column to float64 (NaN = not reported).

    Accepts plain numbers, numbers followed by a unit (``34.44 W``; the unit must be one of
    ``units`` when given), and null tokens (``[N/A]``, ``[Not Supported]``, empty).

    Args:
        file: the file, for errors.
        field: the column name, for errors.
        units: accepted unit suffixes (``None``: any).
        nonnegative: a value below 0 is an error.
    """

    def convert(values: Any, lines: np.ndarray) -> np.ndarray:
        out: np.ndarray | None = None
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            out = arrow_values.numbers(values, units)
            if out is None:  # a cell the fast path does not decide: the exact parser names it
                values = _cells(values)
            else:
                return _check_nonnegative(out, values, lines, nonnegative, file=file, field=field)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cells = np.asarray(values, dtype=str)
                out = cells.astype(np.float64)
        except (ValueError, TypeError):
            out = None
        # numpy reads Python's float syntax, which allows "1_000"; the exact parser does not
        if out is None or not np.isfinite(out).all() or (np.char.find(cells, "_") >= 0).any():
            out = _by_distinct(values, lines, lambda t: _number(t, units), file=file, field=field)
        return _check_nonnegative(out, values, lines, nonnegative, file=file, field=field)

    convert.plain_numbers = True  # type: ignore[attr-defined]  # see TYPED_ATTR
    return convert


TYPED_ATTR = "plain_numbers"
"""A converter with this attribute set accepts a column the CSV parser already read as float64
(``ArrowCsvReader``): only columns whose every value is a finite number ≥ 0 or empty are handed
over that way, which is exactly what the string path would have read, so results and errors
stay the same."""


def _check_nonnegative(out: np.ndarray, values: Any, lines: np.ndarray, nonnegative: bool, *,
                       file: Path, field: str) -> np.ndarray:
    if nonnegative and (out < 0).any():
        row = _first_row(out < 0)
        cell = values[row]
        text = cell.as_py() if isinstance(cell, pa.Scalar) else cell
        raise InputError(f"value {_short(str(text).strip())} is negative", file=file,
                         line=int(lines[row]), field=field)
    return out


def _reason_mask(text: str) -> tuple[float, str | None]:
    t = text.strip()
    if is_null_token(t):
        return math.nan, None
    try:
        return float(int(t, 16) if t.lower().startswith("0x") else int(t)), None
    except ValueError:
        return math.nan, "is not a clock-event-reasons bitmask (e.g. 0x0000000000000004)"


def reasons_converter(*, file: Path, field: str) -> Converter:
    """A converter of a ``clocks_event_reasons.active`` column (hex bitmask) to float64."""

    def convert(values: Any, lines: np.ndarray) -> np.ndarray:
        return _by_distinct(values, lines, _reason_mask, file=file, field=field)

    return convert


def _active(text: str) -> tuple[float, str | None]:
    t = text.strip().lower()
    if t == "active":
        return 1.0, None
    if t == "not active":
        return 0.0, None
    if is_null_token(t):
        return math.nan, None
    return math.nan, "is neither 'Active' nor 'Not Active'"


def active_converter(*, file: Path, field: str) -> Converter:
    """A converter of one per-reason column (``Active``/``Not Active``) to 1/0/NaN."""

    def convert(values: Any, lines: np.ndarray) -> np.ndarray:
        return _by_distinct(values, lines, _active, file=file, field=field)

    return convert


class Factorizer:
    """Maps the strings of a text column to integer codes (-1 = null), keeping the levels."""

    def __init__(self) -> None:
        self.levels: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, text: str) -> int:
        t = text.strip()
        if is_null_token(t):
            return -1
        found = self._codes.get(t)
        if found is None:
            found = self._codes[t] = len(self.levels)
            self.levels.append(t)
        return found

    def converter(self) -> Converter:
        """A converter of a text column to int64 codes."""

        def convert(values: Any, lines: np.ndarray) -> np.ndarray:
            if isinstance(values, (pa.Array, pa.ChunkedArray)):
                uniq, inverse = arrow_values.distinct(values)
                codes = np.array([self.code(v) for v in uniq], dtype=np.int64)
                return codes[inverse] if len(uniq) else np.zeros(0, np.int64)
            return np.fromiter((self.code(v) for v in values), dtype=np.int64, count=len(values))

        return convert
