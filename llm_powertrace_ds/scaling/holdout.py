"""Holdout split, pre-run baselines and holdout evaluation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

import numpy as np

from ..errors import InputError
from .common import AXES, FAMILY_COLUMN, LAWS, N_BOOT, _num, _tokens, axis_value, mdape
from .intervals import conformal_half_width, extrapolation
from .loglinear import fit_loglinear
from .physics import fit_physics


def _proportional_x(row: Mapping[str, Any], target: str) -> float | None:
    if target == "energy_per_token_j":
        return axis_value(row, "model_params")
    if target == "mean_power_w":
        return _num(row.get("num_gpus"))
    n, tok = axis_value(row, "model_params"), _tokens(row)
    return n * tok if n and tok else None


def baseline_predictions(train: Sequence[Mapping[str, Any]], test: Sequence[Mapping[str, Any]],
                         target: str) -> dict[str, list[tuple[float | None, str]]]:
    """Pre-run baselines: ``constant`` and ``proportional`` (see the module docstring).

    Returns:
        ``{name: [(prediction or None, reason when None)]}``, one per test row.
    """
    ys = [(str(r.get("platform")), float(r[target]), _proportional_x(r, target))
          for r in train if (_num(r.get(target)) or 0) > 0]
    pooled = float(np.median([y for _, y, _ in ys])) if ys else None
    ratios = [y / x for _, y, x in ys if x]
    out: dict[str, list[tuple[float | None, str]]] = {"constant": [], "proportional": []}
    for r in test:
        plat = str(r.get("platform"))
        same = [y for p, y, _ in ys if p == plat]
        if same:
            out["constant"].append((float(np.median(same)), ""))
        elif pooled is not None:
            out["constant"].append((pooled, ""))
        else:
            out["constant"].append((None, "no training run has the target"))
        same_r = [y / x for p, y, x in ys if p == plat and x]
        x = _proportional_x(r, target)
        k = float(np.median(same_r or ratios)) if (same_r or ratios) else None
        if x is None or k is None:
            need = {"energy_per_token_j": "model_params", "mean_power_w": "num_gpus",
                    "energy_j": "model_params and tokens"}[target]
            out["proportional"].append((None, f"needs {need}"))
        else:
            out["proportional"].append((k * x, ""))
    return out


# ---------------------------------------------------------------------------------------------
# Holdout, fit, JSON, predict
# ---------------------------------------------------------------------------------------------

def split_holdout(rows: list[Mapping[str, Any]], spec: str
                  ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Split rows by a holdout spec: ``AXIS=top``, ``family=NAME`` or ``COLUMN=VALUE``.

    ``AXIS`` may be a column (``model_params``) or a symbol (``N``); ``top`` holds out every run
    at the axis's largest value. ``VALUE`` may use ``*`` as a wildcard (``model_name=Mixtral*``).
    """
    key, sep, value = spec.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
        raise InputError(f"holdout {spec!r} is not AXIS=top, family=NAME or COLUMN=VALUE",
                         field="holdout")
    if key == "family":
        key = FAMILY_COLUMN
    symbols = {s: c for c, s in AXES.items()}
    column = symbols.get(key, key)
    if value == "top":
        vals = [axis_value(r, column) if column in AXES else _num(r.get(column)) for r in rows]
        present = [v for v in vals if v is not None]
        if not present:
            raise InputError(f"no run has a numeric {column}", field="holdout")
        top = max(present)
        test = [r for r, v in zip(rows, vals, strict=True) if v == top]
    else:
        test = [r for r in rows if fnmatchcase(str(r.get(column)), value)]
    ids = {id(t) for t in test}
    train = [r for r in rows if id(r) not in ids]
    if not test:
        raise InputError(f"holdout {spec!r} selects no run", field="holdout")
    if not train:
        raise InputError(f"holdout {spec!r} leaves no run to fit", field="holdout")
    return train, test


def _fit_law(name: str, rows: list[Mapping[str, Any]], target: str, n_boot: int, seed: int,
             conformal: bool = True) -> Any:
    if name == "loglinear":
        def fn(r: list[Mapping[str, Any]]) -> Any:
            return fit_loglinear(r, target, n_boot=0)
        law: Any = fit_loglinear(rows, target, n_boot=n_boot, seed=seed)
    else:
        def fn(r: list[Mapping[str, Any]]) -> Any:
            return fit_physics(r, target, n_boot=0)
        law = fit_physics(rows, target, n_boot=min(n_boot, 200), seed=seed)
    if conformal:
        q, used, skipped = conformal_half_width(rows, target, fn)
        law.q90 = q
        if q is None:
            law.interval = "in-sample t (too few cross-group residuals for conformal)"
            law.notes.append(f"90 % interval from the in-sample sigma: only {used} cross-group "
                             "residuals")
        else:
            law.notes.append(f"90 % interval: group-wise conformal over {used} cross-group "
                             f"residuals ({skipped} runs a fold could not predict)")
    return law


def _report(preds: list[tuple[tuple[float, float, float] | None, str]], test: Sequence[Mapping[str, Any]],
            target: str) -> dict[str, Any]:
    actual = [float(r[target]) for r in test]
    unpred = [{"run_id": r.get("run_id"), "reason": why}
              for (p, why), r in zip(preds, test, strict=True) if p is None]
    vals = [p[0] if p else None for p, _ in preds]
    with_iv = [(p, a) for (p, _), a in zip(preds, actual, strict=True)
               if p is not None and p[1] is not None]
    cover = (float(np.mean([p[1] <= a <= p[2] for p, a in with_iv])) if with_iv else None)
    return {"n_heldout": len(test), "n_predicted": len(test) - len(unpred),
            "n_unpredictable": len(unpred), "unpredictable": unpred,
            "mdape_pct": mdape(vals, actual), "coverage_90": cover}


def evaluate_holdout(train: list[Mapping[str, Any]], test: list[Mapping[str, Any]], target: str,
                     spec: str, n_boot: int = N_BOOT, seed: int = 0) -> dict[str, Any]:
    """Refit every law on ``train`` and report on ``test`` (see the module docstring)."""
    reports: dict[str, dict[str, Any]] = {}
    points = [{"run_id": r.get("run_id"), "platform": r.get("platform"),
               "actual": float(r[target])} for r in test]
    train_ll = None
    for name in LAWS:
        try:
            law = _fit_law(name, train, target, n_boot, seed)
        except InputError as exc:
            preds: list[tuple[Any, str]] = [(None, f"{name} not fitted: {exc.reason}")] * len(test)
            reports[name] = _report(preds, test, target)
            continue
        if name == "loglinear":
            train_ll = law
        preds = []
        for r, pt in zip(test, points, strict=True):
            try:
                value, lo, hi = law.predict_rows([r])[0]
            except InputError as exc:
                preds.append((None, exc.reason))
                pt[name] = None
                continue
            preds.append(((value, lo, hi), ""))
            pt[name] = {"value": value, "lo": lo, "hi": hi}
        reports[name] = _report(preds, test, target)
    base = baseline_predictions(train, test, target)
    base_reports = {}
    for name, vals in base.items():
        preds = [((v, None, None), "") if v is not None else (None, why) for v, why in vals]
        base_reports[name] = _report(preds, test, target)
        for (v, _), pt in zip(vals, points, strict=True):
            pt[f"baseline_{name}"] = v
    for r, pt in zip(test, points, strict=True):
        for axis in AXES:
            v = axis_value(r, axis)
            if v is not None:
                pt[axis] = v
        pt["extrapolation_decades"] = extrapolation(train_ll, train, r)
    return {"spec": spec, "n_train": len(train), "n_test": len(test), "laws": reports,
            "baselines": base_reports, "points": points,
            "loglinear_train": train_ll.to_json() if train_ll is not None else None,
            "mdape_pct": {**{k: v["mdape_pct"] for k, v in reports.items()},
                          **{f"baseline_{k}": v["mdape_pct"] for k, v in base_reports.items()}},
            "coverage90": {k: v["coverage_90"] for k, v in reports.items()}}
