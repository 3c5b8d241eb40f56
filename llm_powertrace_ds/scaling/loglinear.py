"""The log-linear law: least squares in log space with a residual bootstrap."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError
from .common import (
    _LOG_MAX,
    AXES,
    BATCH_AXES,
    CATEGORICAL,
    MIN_AXIS_RATIO,
    MIN_EXTRA_RUNS,
    N_BOOT,
    Unpredictable,
    _exp,
    _fmt,
    _level,
    _num,
    axis_value,
)

# ---------------------------------------------------------------------------------------------
# The log-linear law
# ---------------------------------------------------------------------------------------------

@dataclass
class LogLinearLaw:
    """A fitted log-linear law (see the module docstring).

    Attributes:
        target: the fitted column.
        platforms: platforms with an intercept.
        axes: numeric axis columns (log-transformed).
        curved: batch axes with a curvature term, ``{axis: centre (mean log)}``.
        categorical: ``{column: {"reference": level, "levels": [other levels]}}``.
        columns: design column names.
        beta: coefficients (log space).
        ci_lo, ci_hi: bootstrap 95 % interval of each coefficient.
        sigma: residual standard deviation in log space (in-sample).
        dof: n − p.
        n: runs fitted.
        r2: R² in log space.
        q90: group-wise conformal half-width of the 90 % interval (log space).
        axis_stats: ``{axis: [min, geometric median, max]}`` of the training runs.
    """

    target: str
    platforms: list[str]
    axes: list[str]
    categorical: dict[str, dict[str, Any]]
    columns: list[str]
    beta: np.ndarray
    ci_lo: np.ndarray
    ci_hi: np.ndarray
    sigma: float
    dof: int
    n: int
    r2: float
    notes: list[str] = field(default_factory=list)
    axis_stats: dict[str, list[float]] = field(default_factory=dict)
    curved: dict[str, float] = field(default_factory=dict)
    q90: float | None = None
    interval: str = "group-wise conformal"

    def design(self, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """The design matrix (raises :class:`Unpredictable` naming the axis and its need)."""
        x = np.zeros((len(rows), len(self.columns)))
        col = {c: i for i, c in enumerate(self.columns)}
        for r, row in enumerate(rows):
            plat = str(row.get("platform"))
            if f"platform={plat}" not in col:
                raise Unpredictable(f"platform {plat!r} is not in the fit (known: "
                                    f"{', '.join(self.platforms)})", field="platform")
            x[r, col[f"platform={plat}"]] = 1.0
            for axis in self.axes:
                v = axis_value(row, axis)
                if v is None or v <= 0:
                    raise Unpredictable(f"needs a positive {axis} ({AXES.get(axis, axis)}); got "
                                        f"{row.get(axis)!r}", field=axis)
                x[r, col[f"log:{axis}"]] = math.log(v)
                if axis in self.curved:
                    x[r, col[f"log2:{axis}"]] = (math.log(v) - self.curved[axis]) ** 2
            for name, spec in self.categorical.items():
                level = _level(row.get(name))
                if level == spec["reference"]:
                    continue
                if level not in spec["levels"]:
                    raise Unpredictable(f"{name}={level!r} is not in the fit (levels: "
                                        f"{', '.join([spec['reference'], *spec['levels']])})",
                                        field=name)
                x[r, col[f"{name}={level}"]] = 1.0
        return x

    def log_predict(self, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """μ̂ = log ŷ per row."""
        with np.errstate(all="ignore"):
            return self.design(rows) @ self.beta

    def predict_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[float, float, float]]:
        """(value, lo90, hi90) per row (raises :class:`Unpredictable`)."""
        q = self.q90 if self.q90 is not None else 1.645 * self.sigma
        out = []
        for mu in self.log_predict(rows):
            mu = float(mu)
            out.append((_exp(mu, self.target), _exp(mu - q, self.target),
                        _exp(mu + q, self.target)))
        return out

    def exponents(self) -> list[dict[str, Any]]:
        """Exponent of each axis with its bootstrap 95 % interval (and curvature if any)."""
        out = []
        for axis in self.axes:
            i = self.columns.index(f"log:{axis}")
            e: dict[str, Any] = {"axis": axis, "symbol": AXES.get(axis, axis),
                                 "exponent": float(self.beta[i]),
                                 "ci95": [float(self.ci_lo[i]), float(self.ci_hi[i])]}
            if axis in self.curved:
                j = self.columns.index(f"log2:{axis}")
                e["curvature"] = float(self.beta[j])
                e["curvature_ci95"] = [float(self.ci_lo[j]), float(self.ci_hi[j])]
            out.append(e)
        return out

    def params_json(self) -> dict[str, Any]:
        """The fitted parameters (readable part of the JSON)."""
        intercepts = {}
        for p in self.platforms:
            i = self.columns.index(f"platform={p}")
            intercepts[p] = {"a": float(np.exp(np.clip(self.beta[i], -_LOG_MAX, _LOG_MAX))),
                             "log_a": float(self.beta[i])}
        factors: dict[str, Any] = {}
        for name, spec in self.categorical.items():
            levels = {}
            for lv in spec["levels"]:
                i = self.columns.index(f"{name}={lv}")
                levels[lv] = {"factor": float(np.exp(self.beta[i])),
                              "ci95": [float(np.exp(self.ci_lo[i])), float(np.exp(self.ci_hi[i]))]}
            factors[name] = {"reference": spec["reference"], "levels": levels}
        return {"form": "log y = log a_platform + sum beta log x + sum gamma (log B - c)^2 "
                        "+ sum log factor", "platform_intercepts": intercepts,
                "exponents": self.exponents(), "factors": factors, "sigma_log": self.sigma,
                "r2_log": self.r2, "interval_90_half_width_log": self.q90,
                "interval_method": self.interval}

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target, "n_runs": self.n, "dof": self.dof, **self.params_json(),
            "notes": self.notes, "axis_stats": self.axis_stats,
            "_state": {"platforms": self.platforms, "axes": self.axes,
                       "categorical": self.categorical, "columns": self.columns,
                       "curved": self.curved, "beta": self.beta.tolist(),
                       "ci_lo": self.ci_lo.tolist(), "ci_hi": self.ci_hi.tolist()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LogLinearLaw:
        st = data["_state"]
        return cls(target=data["target"], platforms=st["platforms"], axes=st["axes"],
                   categorical=st["categorical"], columns=st["columns"],
                   beta=np.array(st["beta"]), ci_lo=np.array(st["ci_lo"]),
                   ci_hi=np.array(st["ci_hi"]), sigma=float(data["sigma_log"]),
                   dof=int(data["dof"]), n=int(data["n_runs"]), r2=float(data["r2_log"]),
                   notes=list(data.get("notes", [])),
                   axis_stats={k: list(v) for k, v in data.get("axis_stats", {}).items()},
                   curved={k: float(v) for k, v in st.get("curved", {}).items()},
                   q90=data.get("interval_90_half_width_log"),
                   interval=str(data.get("interval_method", "group-wise conformal")))


def _check_axis_span(rows: Sequence[Mapping[str, Any]], axis: str, vals: list[float]) -> None:
    lo, hi = min(vals), max(vals)
    if lo > 0 and hi / lo < MIN_AXIS_RATIO:
        raise InputError(f"refusing to fit: {axis} spans only {_fmt(lo)}-{_fmt(hi)} (x{hi / lo:.4f}"
                         f" < x{MIN_AXIS_RATIO:g}) over {len(rows)} runs, too narrow for an "
                         "exponent; add runs that vary it, or hold it fixed", field=axis)


def fit_loglinear(rows: list[Mapping[str, Any]], target: str, *, n_boot: int = N_BOOT,
                  seed: int = 0) -> LogLinearLaw:
    """Fit the log-linear law by least squares in log space (see the module docstring).

    Raises:
        InputError: degenerate data (too few runs for the parameters + margin, a narrow axis).
    """
    rows = [r for r in rows if (_num(r.get(target)) or 0) > 0]
    if not rows:
        raise InputError(f"no run has a positive {target}", field=target)
    notes: list[str] = []
    platforms = sorted({str(r.get("platform")) for r in rows})
    columns = [f"platform={p}" for p in platforms]
    base = np.array([[1.0 if str(r.get("platform")) == p else 0.0 for p in platforms]
                     for r in rows])
    blocks = [base]
    axes: list[str] = []
    curved: dict[str, float] = {}

    def add(cand: np.ndarray, name: str) -> bool:
        if np.linalg.matrix_rank(np.hstack(blocks + [cand])) <= sum(b.shape[1] for b in blocks):
            notes.append(f"{name}: collinear with the terms before it; not fitted")
            return False
        blocks.append(cand)
        columns.append(name)
        return True

    for axis in AXES:
        vals = [axis_value(r, axis) for r in rows]
        if any(v is None or v <= 0 for v in vals) or len(set(vals)) < 2:
            continue
        fvals = [float(v) for v in vals]  # type: ignore[arg-type]
        _check_axis_span(rows, axis, fvals)
        logs = np.log(np.array(fvals))
        if not add(logs[:, None], f"log:{axis}"):
            continue
        axes.append(axis)
        if axis in BATCH_AXES and len(set(fvals)) >= 3 and max(fvals) / min(fvals) >= 4:
            centre = float(logs.mean())
            if add(((logs - centre) ** 2)[:, None], f"log2:{axis}"):
                curved[axis] = centre
    categorical: dict[str, dict[str, Any]] = {}
    for name in CATEGORICAL:
        if not any(name in r for r in rows):
            continue
        levels = {_level(r.get(name)) for r in rows}
        if len(levels) < 2:
            continue
        ref = sorted(levels)[0]
        kept = [lv for lv in sorted(levels - {ref})
                if add(np.array([[1.0 if _level(r.get(name)) == lv else 0.0] for r in rows]),
                       f"{name}={lv}")]
        if kept:
            categorical[name] = {"reference": ref, "levels": kept}
    x = np.hstack(blocks)
    y = np.log(np.array([float(r[target]) for r in rows]))
    n, p = x.shape
    if n < p + MIN_EXTRA_RUNS:
        raise InputError(f"refusing to fit: {n} runs for {p} parameters ({', '.join(columns)}); "
                         f"the law needs at least {p + MIN_EXTRA_RUNS} (parameters + "
                         f"{MIN_EXTRA_RUNS})", field=target)
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    dof = n - p
    sigma = float(np.sqrt(resid @ resid / dof))
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(resid @ resid) / ss_tot if ss_tot > 0 else 1.0
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        scaled = resid * math.sqrt(n / dof)
        ystar = (x @ beta)[:, None] + scaled[rng.integers(0, n, size=(n, n_boot))]
        lo, hi = np.percentile(np.linalg.pinv(x) @ ystar, [2.5, 97.5], axis=1)
    else:
        lo = hi = beta.copy()
    stats = {}
    for axis in axes:
        v = np.array([float(axis_value(r, axis)) for r in rows])  # type: ignore[arg-type]
        stats[axis] = [float(v.min()), float(np.exp(np.median(np.log(v)))), float(v.max())]
    return LogLinearLaw(target, platforms, axes, categorical, columns, beta, lo, hi, sigma, dof,
                        n, r2, notes, stats, curved)
