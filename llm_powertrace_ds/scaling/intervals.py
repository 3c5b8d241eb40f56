"""Group-wise conformal intervals and extrapolation distance."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from .common import BATCH_AXES, GROUP_COLUMNS, MIN_GROUPS, _conformal_q, _num, axis_value
from .loglinear import LogLinearLaw

# ---------------------------------------------------------------------------------------------
# Group-wise conformal intervals, extrapolation, baselines
# ---------------------------------------------------------------------------------------------

def group_of(row: Mapping[str, Any]) -> str:
    """The conformal group of a run: its model (``model_name``, else ``model_label``)."""
    for col in GROUP_COLUMNS:
        if row.get(col):
            return str(row[col])
    return f"run:{row.get('run_id')}"


def _groups(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    keys = [group_of(r) for r in rows]
    if len(set(keys)) < MIN_GROUPS:
        return [f"run:{i}" for i in range(len(rows))]
    return keys


LawFit = Callable[[list[Mapping[str, Any]]], Any]


def conformal_half_width(rows: list[Mapping[str, Any]], target: str, fit_fn: LawFit
                         ) -> tuple[float | None, int, int]:
    """Q of the 90 % interval from leave-one-group-out log residuals.

    Returns:
        (q or ``None``, residuals used, runs a fold could not predict).
    """
    use = [r for r in rows if (_num(r.get(target)) or 0) > 0]
    keys = _groups(use)
    resid: list[float] = []
    skipped = 0
    for g in sorted(set(keys)):
        train = [r for r, k in zip(use, keys, strict=True) if k != g]
        test = [r for r, k in zip(use, keys, strict=True) if k == g]
        try:
            law = fit_fn(train)
        except InputError:
            skipped += len(test)
            continue
        for r in test:
            try:
                mu = float(law.log_predict([r])[0])
            except InputError:
                skipped += 1
                continue
            resid.append(math.log(float(r[target])) - mu)
    return _conformal_q(np.array(resid)), len(resid), skipped


def extrapolation(law: LogLinearLaw | None, train: Sequence[Mapping[str, Any]],
                  row: Mapping[str, Any]) -> dict[str, float]:
    """How far a row lies beyond the training range, in decades (log₁₀) of each axis."""
    out = {}
    axes = list(law.axes) if law is not None else []
    for axis in dict.fromkeys([*axes, "model_params", "num_gpus", *BATCH_AXES]):
        v = axis_value(row, axis)
        vals = [axis_value(r, axis) for r in train]
        vals_ok = [x for x in vals if x is not None and x > 0]
        if v is None or v <= 0 or not vals_ok:
            continue
        lo, hi = min(vals_ok), max(vals_ok)
        d = math.log10(v / hi) if v > hi else (math.log10(lo / v) if v < lo else 0.0)
        if d > 1e-9:
            out[axis] = round(d, 3)
    return out
