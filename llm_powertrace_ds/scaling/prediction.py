"""Predict from a saved fit: never crashes, bad input is one InputError line."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InputError
from .common import AXES, LAWS, MAX_EXTRAPOLATION_DECADES, MEASURED, _fmt, axis_value
from .loglinear import LogLinearLaw
from .physics import PhysicsLaw
from .result import load_fit


def _known_columns() -> set[str]:
    from .. import schema

    return {c.name for cols in schema.COLUMNS.values() for c in cols} | set(AXES.values())


def predict(fit_data: str | Path | Mapping[str, Any], settings: Mapping[str, Any], *,
            model: str | None = None) -> dict[str, Any]:
    """Predict the fit's target for one setting, with its 90 % interval and extrapolation.

    Args:
        fit_data: a fit JSON path or object (:meth:`FitResult.to_json`).
        settings: column (or symbol) -> value, e.g. ``{"platform": "h100_sxm_80gb", "N": 7e9}``.
        model: ``loglinear`` or ``physics`` (default: the fit's best law).

    Returns:
        ``{"target", "model", "value", "lo90", "hi90", "extrapolation_decades", "warnings",
        "settings"}``.

    Raises:
        InputError: one line naming the axis and what it needs (unknown name, missing axis,
            out-of-range result) — never a traceback.
    """
    data = load_fit(fit_data)
    model = model or data.get("best_law") or "loglinear"
    if model not in LAWS:
        raise InputError(f"model {model!r} is not loglinear or physics", field="model")
    known = _known_columns()
    unknown = [k for k in settings if k not in known]
    if unknown:
        raise InputError(f"unknown setting {unknown[0]!r}: use a column (e.g. model_params, "
                         f"num_gpus, batch_size) or a symbol ({', '.join(sorted(set(AXES.values())))})",
                         field=unknown[0])
    row = dict(settings)
    for column, symbol in AXES.items():
        if symbol in row and column not in row:
            row[column] = row.pop(symbol)
    if model == "physics":
        if not data.get("physics"):
            raise InputError(f"this fit has no physics law ({data.get('physics_note')})",
                             field="model")
        law: Any = PhysicsLaw.from_json(data["physics"])
        ll_for_range = LogLinearLaw.from_json(data["loglinear"])
    else:
        law = ll_for_range = LogLinearLaw.from_json(data["loglinear"])
    extra = {}
    for axis, (a_lo, _, a_hi) in ll_for_range.axis_stats.items():
        v = axis_value(row, axis)
        if v is not None and v > 0:
            d = math.log10(v / a_hi) if v > a_hi else (math.log10(a_lo / v) if v < a_lo else 0.0)
            if d > 1e-9:
                extra[axis] = round(d, 3)
    warnings = [f"{axis}={_fmt(axis_value(row, axis) or 0)} is {d:.2f} decades beyond the "
                f"training range {_fmt(ll_for_range.axis_stats[axis][0])}-"
                f"{_fmt(ll_for_range.axis_stats[axis][2])}" for axis, d in extra.items()]
    too_far = [w for w, d in zip(warnings, extra.values(), strict=True)
               if d > MAX_EXTRAPOLATION_DECADES]
    if too_far:
        raise InputError(f"refusing to extrapolate: {too_far[0]} (the limit is "
                         f"{MAX_EXTRAPOLATION_DECADES:g} decades)", field=next(
                             a for a, d in extra.items() if d > MAX_EXTRAPOLATION_DECADES))
    value, lo, hi = law.predict_rows([row])[0]
    measured = [k for k in settings if k in MEASURED]
    if measured:
        warnings.append(f"ignored {', '.join(measured)}: measured during a run, not known before "
                        "it (the laws predict from pre-run settings only)")
    return {"target": data["target"], "model": model, "value": value, "lo90": lo, "hi90": hi,
            "extrapolation_decades": extra, "warnings": warnings, "settings": dict(settings)}
