"""The power and energy scaling law: fit on a runs table, hold out, predict with an interval.

Every law predicts from **pre-run knowledge only**: the settings a user fixes before a run
(model size N — active parameters for mixture-of-experts models —, batch B, sequence length L,
GPUs G, platform, method, precision, quantisation, planned tokens, ...). Nothing measured
during the run (``duration_s``, ``tokens_per_s``, power) enters a prediction.

**Log-linear law** (least squares in log space)::

    log y = log a_platform + Σ_axis β_axis log x_axis + Σ_batch γ (log B − log B̄)² + Σ_c log φ_c

over the numeric axes present (N ``model_params_active`` else ``model_params``, B
``global_batch_size`` / ``batch_size`` / ``concurrency``, L ``seq_len`` / ``prompt_len``, G
``num_gpus``, f ``gpu_clock_mhz``, ...; an axis is used when every run has a positive value and
it takes at least two values) and categorical factors (``method``, ``precision``,
``weight_quant``, ``kv_cache_quant``, ``task``; φ = 1 for the alphabetically first level). A batch axis
that takes ≥ 3 values over ≥ 4× also gets a curvature term γ (energy per token falls with the
batch until the device is saturated). One intercept per platform. The 95 % interval of every
coefficient comes from a residual bootstrap.

**Physics-informed law** (energy per token from first principles, non-negative coefficients
per platform, fitted by least squares on the relative error)::

    inference:  e_tok = α_p · 2 N_total / B  +  β_p · 2 N_active  +  γ_p · G
    fine-tuning: e_tok = β_p · k N_active  +  γ_p · G

A decode step of B sequences streams every weight once (2 N_total bytes in 16-bit, shared by B
tokens: α in J/byte), computes 2 N_active FLOPs per token (β in J/FLOP; k = 6 full, 4 LoRA /
QLoRA, + 2 with gradient checkpointing), and keeps G devices powered for the token's share of
the step (γ in J per GPU per token: static power ÷ per-device throughput, itself fitted per
platform rather than measured). ``energy_j`` = e_tok × planned tokens. ``mean_power_w`` needs
the run's throughput, which only the run measures: the physics law does not predict it.

**Intervals: group-wise conformal.** A law's 90 % prediction interval is exp(μ̂ ± q), q the
⌈0.9 (n + 1)⌉-th smallest |log residual| of *cross-group* predictions: each model (``model_name``;
each run when fewer than 3 models) is left out in turn, the law is refitted on the others and
predicts it. The residuals therefore include the between-model error that a new model meets,
which a within-fit σ misses (the reason the earlier t-interval covered 0 % of held-out runs).

**Refusals.** A fit is refused with a one-line reason when the data are degenerate: fewer runs
than parameters + :data:`MIN_EXTRA_RUNS`, or a numeric axis that varies over less than
:data:`MIN_AXIS_RATIO` (an exponent fitted over a 0.2 % span is noise).

**Holdout** (``AXIS=top``: the runs at an axis's largest value; ``family=NAME``;
``COLUMN=VALUE``, ``*`` as a wildcard) refits on the rest and reports, for every law and two
pre-run baselines (``constant``: the training runs' median target on the same platform;
``proportional``: the median of y / x times x, x = N for energy per token, G for mean power,
N × tokens for energy): n held out, n predicted, n unpredictable (each with its reason — a
platform absent from the fit, a missing axis), MdAPE, the coverage of the 90 % interval, and per
prediction how far it extrapolates beyond the training range (decades of each axis).

Everything serialises to JSON (:meth:`FitResult.to_json`, documented shape in the README);
:func:`predict` reads it back and never crashes: bad input is one :class:`InputError` line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError

FORMAT = "llm-powertrace-fit/2"
TARGETS = ("energy_per_token_j", "mean_power_w", "energy_j")
AXES: dict[str, str] = {
    "model_params": "N",
    "global_batch_size": "B",
    "batch_size": "b",
    "concurrency": "B_c",
    "seq_len": "L",
    "prompt_len": "L_in",
    "output_len": "L_out",
    "num_gpus": "G",
    "gpu_clock_mhz": "f",
    "lora_rank": "r",
    "power_limit_setting_w": "P_cap",
    "arrival_rate_rps": "lambda",
}
"""Candidate numeric axes (column -> symbol), in design order. ``model_params`` reads
``model_params_active`` when a row has it (mixture-of-experts)."""
BATCH_AXES = ("global_batch_size", "batch_size", "concurrency")
CATEGORICAL = ("method", "precision", "weight_quant", "kv_cache_quant", "task")
FAMILY_COLUMN = "model_family"
GROUP_COLUMNS = ("model_name", "model_label")
N_BOOT = 1000
LEVEL = 0.9
"""Nominal coverage of the prediction intervals."""
MIN_EXTRA_RUNS = 5
"""A fit needs at least (parameters + this many) runs."""
MIN_AXIS_RATIO = 1.1
"""A numeric axis that varies must span at least this ratio (max / min)."""
MAX_EXTRAPOLATION_DECADES = 3.0
"""``predict`` refuses a setting further than this beyond the training range (log10 units)."""
MIN_GROUPS = 3
"""Fewer models than this: the conformal residuals leave out single runs instead."""
DATASET_FIT_PATH = "scaling/fit.json"
"""Where ``fit --save`` keeps the last fit inside a dataset folder (the card shows it)."""
LAWS = ("loglinear", "physics")
MEASURED = frozenset({"duration_s", "tokens_per_s", "energy_j", "mean_power_w",
                      "energy_per_token_j", "requests_completed", "steps"})
"""Columns a run measures: ``predict`` ignores them (with a warning)."""
BASELINES = ("constant", "proportional")
_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_LOG_MAX = 700.0  # exp() overflows above ~709


class Unpredictable(InputError):
    """A row the law cannot predict (the reason names the axis and what it needs)."""


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def axis_value(row: Mapping[str, Any], axis: str) -> float | None:
    """A row's value on a numeric axis (``model_params``: active parameters when present)."""
    if axis == "model_params":
        active = _num(row.get("model_params_active"))
        if active is not None and active > 0:
            return active
    return _num(row.get(axis))


def _is_inference(row: Mapping[str, Any]) -> bool:
    return row.get("workload") == "inference" or ("tokens_out" in row and "tokens" not in row)


def _tokens(row: Mapping[str, Any]) -> float | None:
    return _num(row.get("tokens_out") if _is_inference(row) else row.get("tokens"))


def mdape(pred: Iterable[float | None], actual: Iterable[float]) -> float | None:
    """Median absolute percentage error, 100 · median |ŷ − y| / y (pairs with ŷ null skipped)."""
    errs = [abs(p - a) / abs(a) * 100 for p, a in zip(pred, actual, strict=True)
            if p is not None and a]
    return float(np.median(errs)) if errs else None


def training_flops(row: Mapping[str, Any]) -> float | None:
    """FLOPs of a run from its settings.

    6 N tokens (full), 4 N tokens (LoRA/QLoRA), + 2 N tokens with gradient checkpointing;
    inference 2 N (tokens_in + tokens_out). N as :func:`axis_value`.
    """
    n = axis_value(row, "model_params")
    if n is None or n <= 0:
        return None
    if _is_inference(row):
        t_in, t_out = _num(row.get("tokens_in")), _num(row.get("tokens_out"))
        if t_out is None:
            return None
        return 2.0 * n * ((t_in or 0.0) + t_out)
    tokens = _num(row.get("tokens"))
    if tokens is None or tokens <= 0:
        return None
    return _flops_factor(row) * n * tokens


def _flops_factor(row: Mapping[str, Any]) -> float:
    method = str(row.get("method") or "full").lower()
    k = 4.0 if method in ("lora", "qlora") else 6.0
    if row.get("gradient_checkpointing") in (True, "true", "True", 1):
        k += 2.0
    return k


def parse_value(text: str) -> Any:
    """Parse a ``--set`` value: numbers (``7e9``, ``7B``, ``512``), booleans, else the string."""
    s = text.strip()
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        x = float(s)
        return x if math.isfinite(x) else s
    except (ValueError, OverflowError):
        pass
    if len(s) > 1 and low[-1] in _SUFFIX:
        try:
            return float(s[:-1]) * _SUFFIX[low[-1]]
        except (ValueError, OverflowError):
            pass
    return s


def _level(value: Any) -> str:
    return "none" if value is None else str(value)


def _conformal_q(resid: np.ndarray, level: float = LEVEL) -> float | None:
    """The ⌈level (n + 1)⌉-th smallest |residual| (``None`` when n is too small)."""
    r = np.sort(np.abs(resid))
    k = math.ceil(level * (len(r) + 1))
    return float(r[k - 1]) if 0 < k <= len(r) else None


def _exp(mu: float, what: str) -> float:
    if not math.isfinite(mu) or abs(mu) > _LOG_MAX:
        raise Unpredictable(f"the prediction is out of range (log value {mu:.3g}): {what}",
                            field="settings")
    return math.exp(mu)


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if 1000 <= abs(x) < 1e15 and float(x).is_integer() else f"{x:.4g}"


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


# ---------------------------------------------------------------------------------------------
# The physics-informed law
# ---------------------------------------------------------------------------------------------

INFERENCE_TERMS = ("weight_bytes_per_token", "flops_per_token", "gpus")
FINETUNE_TERMS = ("flops_per_token", "gpus")


def _batch(row: Mapping[str, Any]) -> float | None:
    for axis in ("batch_size", "concurrency", "global_batch_size"):
        v = _num(row.get(axis))
        if v is not None and v > 0:
            return v
    return None


def physics_features(row: Mapping[str, Any], inference: bool | None = None) -> dict[str, float]:
    """The physics law's per-token terms of a row (raises :class:`Unpredictable`).

    ``inference`` overrides the row's workload (a ``predict`` setting rarely names it).
    """
    n_act = axis_value(row, "model_params")
    n_tot = _num(row.get("model_params"))
    g = _num(row.get("num_gpus"))
    if n_act is None or n_act <= 0:
        raise Unpredictable("the physics law needs model_params (N)", field="model_params")
    if g is None or g <= 0:
        raise Unpredictable("the physics law needs num_gpus (G)", field="num_gpus")
    if _is_inference(row) if inference is None else inference:
        b = _batch(row)
        if b is None:
            raise Unpredictable("the physics law needs a batch size (batch_size or concurrency)",
                                field="batch_size")
        return {"weight_bytes_per_token": 2.0 * (n_tot or n_act) / b,
                "flops_per_token": 2.0 * n_act, "gpus": g}
    return {"flops_per_token": _flops_factor(row) * n_act, "gpus": g}


@dataclass
class PhysicsLaw:
    """Energy per token from first principles (see the module docstring).

    Attributes:
        target: the fitted column (``energy_per_token_j`` or ``energy_j``).
        terms: the per-token terms, in order.
        platforms: platforms fitted.
        coef: (platforms, terms) non-negative coefficients.
        coef_ci: (platforms, terms, 2) bootstrap 95 % intervals.
        sigma: in-sample standard deviation of the log residuals.
        n: runs fitted.
        q90: group-wise conformal half-width of the 90 % interval (log space).
    """

    target: str
    terms: list[str]
    platforms: list[str]
    coef: np.ndarray
    coef_ci: np.ndarray
    sigma: float
    n: int
    notes: list[str] = field(default_factory=list)
    q90: float | None = None
    interval: str = "group-wise conformal"

    def _x(self, row: Mapping[str, Any]) -> np.ndarray:
        plat = str(row.get("platform"))
        if plat not in self.platforms:
            raise Unpredictable(f"platform {plat!r} is not in the fit (known: "
                                f"{', '.join(self.platforms)})", field="platform")
        inference = None if row.get("workload") else "weight_bytes_per_token" in self.terms
        feats = physics_features(row, inference)
        if set(feats) != set(self.terms):
            raise Unpredictable(f"the physics law was fitted on {', '.join(self.terms)}; this "
                                "row is another workload", field="workload")
        x = np.zeros((len(self.platforms), len(self.terms)))
        x[self.platforms.index(plat)] = [feats[t] for t in self.terms]
        return x.ravel()

    def log_predict(self, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        out = []
        for row in rows:
            e_tok = float(self._x(row) @ self.coef.ravel())
            if e_tok <= 0:
                raise Unpredictable("the physics law predicts no energy for this setting "
                                    "(every fitted coefficient of its terms is 0)", field="settings")
            value = e_tok
            if self.target == "energy_j":
                tok = _tokens(row)
                if tok is None or tok <= 0:
                    raise Unpredictable("energy_j needs the planned tokens (tokens, or tokens_out "
                                        "for inference)", field="tokens")
                value = e_tok * tok
            out.append(math.log(value))
        return np.array(out)

    def predict_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[float, float, float]]:
        """(value, lo90, hi90) per row (raises :class:`Unpredictable`)."""
        q = self.q90 if self.q90 is not None else 1.645 * self.sigma
        return [(_exp(m, self.target), _exp(m - q, self.target), _exp(m + q, self.target))
                for m in map(float, self.log_predict(rows))]

    def params_json(self) -> dict[str, Any]:
        params = {p: {t: {"value": float(self.coef[i, j]),
                          "ci95": [float(v) for v in self.coef_ci[i, j]]}
                      for j, t in enumerate(self.terms)} for i, p in enumerate(self.platforms)}
        return {"form": " + ".join(f"c[{t}] * {t}" for t in self.terms) + " (J per token)",
                "terms": {"weight_bytes_per_token": "2 N_total / B (16-bit weights streamed "
                          "once per decode step, shared by B tokens); c in J/byte",
                          "flops_per_token": "2 N_active (inference) or k N_active (training: "
                          "k = 6 full, 4 LoRA/QLoRA, +2 gradient checkpointing); c in J/FLOP",
                          "gpus": "G; c in J per GPU per token"},
                "params": params, "sigma_log": self.sigma,
                "interval_90_half_width_log": self.q90, "interval_method": self.interval}

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "n_runs": self.n, **self.params_json(),
                "notes": self.notes,
                "_state": {"terms": self.terms, "platforms": self.platforms,
                           "coef": self.coef.tolist(), "coef_ci": self.coef_ci.tolist()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PhysicsLaw:
        st = data["_state"]
        return cls(target=data["target"], terms=list(st["terms"]), platforms=list(st["platforms"]),
                   coef=np.array(st["coef"]), coef_ci=np.array(st["coef_ci"]),
                   sigma=float(data["sigma_log"]), n=int(data["n_runs"]),
                   notes=list(data.get("notes", [])), q90=data.get("interval_90_half_width_log"),
                   interval=str(data.get("interval_method", "group-wise conformal")))


def fit_physics(rows: list[Mapping[str, Any]], target: str, *, n_boot: int = 200,
                seed: int = 0) -> PhysicsLaw:
    """Fit the physics-informed law (non-negative least squares on the relative error).

    Raises:
        InputError: a target it does not predict, or too few usable runs.
    """
    from scipy.optimize import nnls

    if target == "mean_power_w":
        raise InputError("the physics law predicts energy per token; mean power needs the run's "
                         "throughput, which is measured, not known before the run", field=target)
    use, feats = [], []
    for r in rows:
        value = _num(r.get(target))
        if value is None or value <= 0:
            continue
        try:
            f = physics_features(r)
        except Unpredictable:
            continue
        if target == "energy_j" and not (_tokens(r) or 0) > 0:
            continue
        use.append(r)
        feats.append(f)
    if not use:
        raise InputError(f"no run has {target}, model_params, num_gpus (and a batch size for "
                         "inference)", field=target)
    kinds = {tuple(sorted(f)) for f in feats}
    if len(kinds) > 1:
        raise InputError("the physics law fits one workload at a time (fine-tuning and inference "
                         "runs are mixed)", field="workload")
    terms = list(INFERENCE_TERMS if "weight_bytes_per_token" in feats[0] else FINETUNE_TERMS)
    platforms = sorted({str(r.get("platform")) for r in use})
    k = len(terms)
    n = len(use)
    if n < k * len(platforms) + MIN_EXTRA_RUNS:
        raise InputError(f"refusing to fit the physics law: {n} runs for {k * len(platforms)} "
                         f"parameters; it needs at least {k * len(platforms) + MIN_EXTRA_RUNS}",
                         field=target)
    x = np.zeros((n, len(platforms) * k))
    for j, (r, f) in enumerate(zip(use, feats, strict=True)):
        i = platforms.index(str(r.get("platform")))
        x[j, i * k:(i + 1) * k] = [f[t] for t in terms]
        if target == "energy_j":
            x[j] *= _tokens(r)  # type: ignore[operator]
    y = np.array([float(r[target]) for r in use])
    scale = np.linalg.norm(x / y[:, None], axis=0)
    scale[scale == 0] = 1.0

    def solve(values: np.ndarray) -> np.ndarray:
        theta, _ = nnls(x / values[:, None] / scale, np.ones(len(values)))
        return theta / scale

    theta = solve(y)
    pred = x @ theta
    if (pred <= 0).any():
        raise InputError("the physics law predicts no energy for some runs (its terms do not "
                         "explain them)", field=target)
    resid = np.log(y / pred)
    sigma = float(np.sqrt(resid @ resid / max(n - len(theta), 1)))
    notes = []
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        boots = np.array([solve(pred * np.exp(resid[rng.integers(0, n, n)]))
                          for _ in range(n_boot)])
        lo, hi = np.percentile(boots, [2.5, 97.5], axis=0)
    else:
        lo = hi = theta
    if (theta == 0).any():
        notes.append("a coefficient sits at its bound 0 (non-negative fit)")
    shape = (len(platforms), k)
    return PhysicsLaw(target, terms, platforms, theta.reshape(shape),
                      np.stack([lo.reshape(shape), hi.reshape(shape)], axis=2), sigma, n, notes)


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
    laws: dict[str, Any] = {}
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
        laws[name] = law
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


@dataclass
class FitResult:
    """Every law fitted on all runs, and the holdout evaluation when asked."""

    target: str
    loglinear: LogLinearLaw
    physics: PhysicsLaw | None
    physics_note: str | None
    holdout: dict[str, Any] | None
    dropped: int

    @property
    def best_law(self) -> str:
        """The law with the lower held-out MdAPE, else the narrower conformal interval."""
        if self.physics is None:
            return "loglinear"
        if self.holdout:
            m = self.holdout["mdape_pct"]
            if m.get("physics") is not None and m.get("loglinear") is not None:
                return "physics" if m["physics"] < m["loglinear"] else "loglinear"
            if m.get("physics") is not None and m.get("loglinear") is None:
                return "physics"
        qp, ql = self.physics.q90, self.loglinear.q90
        if qp is not None and ql is not None:
            return "physics" if qp < ql else "loglinear"
        return "physics" if self.physics.sigma < self.loglinear.sigma else "loglinear"

    preferred = best_law

    def to_json(self) -> dict[str, Any]:
        """The documented, stable shape (README "Scaling law").

        ``target``, ``n_runs``, ``laws`` ``{name: {"params", "holdout"}}``, ``baselines``
        ``{name: {"holdout"}}``, ``best_law``; plus ``format``, the laws' states for
        :func:`predict` and the holdout points.
        """
        ho = self.holdout
        laws: dict[str, Any] = {
            "loglinear": {"params": self.loglinear.params_json(),
                          "holdout": ho["laws"].get("loglinear") if ho else None},
            "physics": {"params": self.physics.params_json() if self.physics else None,
                        "not_fitted": self.physics_note,
                        "holdout": ho["laws"].get("physics") if ho else None},
        }
        baselines = {name: {"holdout": ho["baselines"].get(name) if ho else None}
                     for name in BASELINES}
        return {"format": FORMAT, "target": self.target, "n_runs": self.loglinear.n,
                "laws": laws, "baselines": baselines, "best_law": self.best_law,
                "preferred": self.best_law, "runs_dropped": self.dropped,
                "holdout_spec": ho["spec"] if ho else None,
                "loglinear": self.loglinear.to_json(),
                "physics": self.physics.to_json() if self.physics else None,
                "physics_note": self.physics_note, "holdout": ho}

    def save(self, path: str | Path) -> None:
        """Write the JSON (temporary name, then rename)."""
        from .shards import write_text_atomic

        write_text_atomic(Path(path), json.dumps(self.to_json(), indent=2))


def fit(rows: Iterable[Mapping[str, Any]], target: str = "energy_per_token_j", *,
        holdout: str | None = None, n_boot: int = N_BOOT, seed: int = 0) -> FitResult:
    """Fit every law on a runs table (rows as dicts) and optionally evaluate a holdout.

    Args:
        rows: runs-config rows (``finetune_runs`` / ``inference_runs``).
        target: ``energy_per_token_j``, ``mean_power_w`` or ``energy_j``.
        holdout: ``AXIS=top``, ``family=NAME`` or ``COLUMN=VALUE`` (see :func:`split_holdout`).
        n_boot: bootstrap replicates of the coefficient intervals.
        seed: bootstrap seed.

    Raises:
        InputError: unknown target, degenerate data (the one-line reason), a holdout that
            selects nothing.
    """
    if target not in TARGETS:
        raise InputError(f"target {target!r} is not one of {', '.join(TARGETS)}", field="target")
    all_rows = list(rows)
    use = [r for r in all_rows if (_num(r.get(target)) or 0) > 0]
    if holdout:
        train, test = split_holdout(use, holdout)
        fit_loglinear(train, target, n_boot=0)  # refuse degenerate training data up front
    ll = _fit_law("loglinear", use, target, n_boot, seed)
    try:
        ph: PhysicsLaw | None = _fit_law("physics", use, target, n_boot, seed)
        note = None
    except InputError as exc:
        ph, note = None, exc.reason
    evaluation = evaluate_holdout(train, test, target, holdout, n_boot, seed) if holdout else None
    return FitResult(target, ll, ph, note, evaluation, len(all_rows) - len(use))


def load_fit(path_or_data: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Read a fit's JSON (a path or the parsed object); checks its format."""
    if isinstance(path_or_data, Mapping):
        data = dict(path_or_data)
    else:
        path = Path(path_or_data)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read the fit: {exc}", file=path) from None
    if data.get("format") != FORMAT:
        raise InputError(f"not a fit file of this version (format {data.get('format')!r}, "
                         f"expected {FORMAT!r}); fit again", field="format")
    return data


def _known_columns() -> set[str]:
    from . import schema

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
