"""The one number gate: every published scalar is finite and inside its column's range.

Floats must be finite and at most :data:`MAX_ABS` in magnitude in the column's own unit (no
quantity this dataset describes — watts of a site, joules of a campaign, tokens, seconds — comes
near 10¹⁵; a larger value is a unit mistake or a hostile file); ``float32`` columns also fit
float32. Integers must be whole numbers inside their column's integer type, checked **before**
any conversion, so nothing wraps. Used by the shard writer on every row it writes (importers,
generator, merge, record) and by ``validate`` on what a folder already holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from . import schema
from .errors import InputError

MAX_ABS = 1e15
"""Largest magnitude of a published float, in its column's unit."""
INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
}
FLOAT32_MAX = 3.4028234663852886e38


def _dtypes(config: str) -> dict[str, str]:
    return {c.name: c.dtype for c in schema.COLUMNS[schema.base_config(config)]
            if c.dtype is not None}


def problem(dtype: str, value: Any) -> str | None:
    """Why ``value`` cannot be published in a column of ``dtype`` (None when it can).

    Only the range is judged here: a value that is not a number at all (a wrong type) is the
    encoder's to refuse, with its own message.
    """
    if value is None or isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        return None
    if not (dtype in INT_RANGES or dtype.startswith("float")):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return "is not a finite number"
    if not math.isfinite(x):
        return "is not finite"
    if dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        whole = int(value) if isinstance(value, int) else x
        if not lo <= whole <= hi:
            return f"is outside the {dtype} range [{lo}, {hi}]"
        return None
    if abs(x) > MAX_ABS:
        return f"is beyond ±{MAX_ABS:g} (a unit mistake?)"
    return None


def check_row(config: str, row: Mapping[str, Any], *, where: str | None = None) -> None:
    """Raise ``InputError`` for the first scalar of ``row`` that fails :func:`problem`."""
    dtypes = _dtypes(config)
    for name, value in row.items():
        dtype = dtypes.get(name)
        if dtype is None:
            continue
        why = problem(dtype, value)
        if why is not None:
            raise InputError(f"value {value!r} {why}; refused (nothing is published that is not "
                             "a finite number in its column's range)", file=where, field=name)


def row_problems(config: str, rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per bad scalar in already written rows (``validate``'s view)."""
    dtypes = _dtypes(config)
    out = []
    for row in rows:
        for name, value in row.items():
            dtype = dtypes.get(name)
            why = problem(dtype, value) if dtype is not None else None
            if why is not None:
                out.append(f"run {row.get('run_id')!s}: {config} field '{name}' value {value!r} "
                           f"{why}")
    return out
