"""The power and energy scaling law: fit on a runs table, hold out, predict with an interval.

Two laws are fitted to the rows of a runs config (``finetune_runs`` / ``inference_runs``):

**Log-linear law** (least squares in log space)::

    y = a_platform · N^βN · B^βB · L^βL · G^βG · f^βf · … · Π_c φ_c(level)

over the numeric axes present (N ``model_params``, B ``global_batch_size`` or ``concurrency``,
L ``seq_len`` or ``prompt_len``, G ``num_gpus``, f ``gpu_clock_mhz``, …; an axis is used when
every run has a positive value and it takes at least two values) and categorical factors
(``method``, ``precision``, ``weight_quant``, ``kv_cache_quant``; φ = 1 for the alphabetically
first level, e.g. ``full`` and ``bf16``). One intercept per platform, no global one. The 95 % interval of every exponent comes
from a residual bootstrap (rows keep their settings, log residuals are resampled with
replacement, scaled by √(n / (n − p))); a prediction's 95 % interval is
exp(μ̂ ± t_{0.975, n−p} · σ̂ · √(1 + x₀ᵀ(XᵀX)⁻¹x₀)).

**Physics-informed law**::

    energy_j = p_static,platform · G · T + ε_platform · FLOPs

with T the run's ``duration_s``, G its devices, and FLOPs
- full fine-tuning: 6 · N · tokens (forward 2N, backward 4N per token),
- LoRA / QLoRA: 4 · N · tokens (forward 2N, activation gradients 2N; frozen base weights need no
  weight gradients; the adapters' 6 · r · (d_in + d_out) per target matrix and token is
  negligible, QLoRA's dequantisation is not counted),
- + 2 · N · tokens with gradient checkpointing (the recomputed forward),
- inference: 2 · N · (tokens_in + tokens_out) (one forward per token; attention FLOPs that grow
  with the context are not counted).
p_static (W per device) and ε (J/FLOP) are non-negative and fitted by least squares on the
relative error (Σ (1 − Ê/E)²); the target is derived from Ê (energy_per_token_j = Ê / tokens,
mean_power_w = Ê / T). Its interval uses the log residuals the same way.

``holdout`` (``AXIS=top``: the runs at the largest value of an axis; ``family=NAME``: one model
family; ``COLUMN=VALUE``) refits on the rest and reports the median absolute percentage error
(MdAPE) on the held-out runs for both laws and two baselines: a constant J/token (Σ E / Σ tokens
of the training runs × tokens) and mean power × time (Σ E / Σ G·T of the training runs × G·T),
plus the share of held-out runs inside each law's 95 % interval.

Everything serialises to JSON (:meth:`FitResult.to_json`); :func:`predict` reads it back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError

FORMAT = "llm-powertrace-fit/1"
TARGETS = ("energy_per_token_j", "mean_power_w", "energy_j")
AXES: dict[str, str] = {
    "model_params": "N",
    "global_batch_size": "B",
    "batch_size": "b",
    "concurrency": "B",
    "seq_len": "L",
    "prompt_len": "L_in",
    "output_len": "L_out",
    "num_gpus": "G",
    "gpu_clock_mhz": "f",
    "lora_rank": "r",
    "power_limit_setting_w": "P_cap",
    "arrival_rate_rps": "lambda",
}
"""Candidate numeric axes (column -> symbol), in design order."""
CATEGORICAL = ("method", "precision", "weight_quant", "kv_cache_quant")
FAMILY_COLUMN = "model_family"
N_BOOT = 1000
_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _t975(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, max(dof, 1)))


def mdape(pred: Iterable[float | None], actual: Iterable[float]) -> float | None:
    """Median absolute percentage error, 100 · median |ŷ − y| / y (pairs with ŷ null skipped)."""
    errs = [abs(p - a) / abs(a) * 100 for p, a in zip(pred, actual, strict=True)
            if p is not None and a]
    return float(np.median(errs)) if errs else None


def training_flops(row: Mapping[str, Any]) -> float | None:
    """FLOPs of a run for the physics law (see the module docstring), or ``None``."""
    n = _num(row.get("model_params"))
    if n is None or n <= 0:
        return None
    if row.get("workload") == "inference" or ("tokens_out" in row and "tokens" not in row):
        t_in, t_out = _num(row.get("tokens_in")), _num(row.get("tokens_out"))
        if t_out is None:
            return None
        return 2.0 * n * ((t_in or 0.0) + t_out)
    tokens = _num(row.get("tokens"))
    if tokens is None or tokens <= 0:
        return None
    method = str(row.get("method") or "full").lower()
    k = 4.0 if method in ("lora", "qlora") else 6.0
    if row.get("gradient_checkpointing") in (True, "true", "True", 1):
        k += 2.0
    return k * n * tokens


def _tokens(row: Mapping[str, Any]) -> float | None:
    if row.get("workload") == "inference" or ("tokens_out" in row and "tokens" not in row):
        return _num(row.get("tokens_out"))
    return _num(row.get("tokens"))


def _from_energy(target: str, energy: float, row: Mapping[str, Any]) -> float | None:
    """Turn a run's energy (J) into the target's value."""
    if target == "energy_j":
        return energy
    if target == "energy_per_token_j":
        tok = _tokens(row)
        return energy / tok if tok else None
    t = _num(row.get("duration_s"))
    return energy / t if t else None


def parse_value(text: str) -> Any:
    """Parse a ``--set`` value: numbers (``7e9``, ``7B``, ``512``), booleans, else the string."""
    s = text.strip()
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return float(s)
    except ValueError:
        pass
    if len(s) > 1 and low[-1] in _SUFFIX:
        try:
            return float(s[:-1]) * _SUFFIX[low[-1]]
        except ValueError:
            pass
    return s


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
        categorical: ``{column: {"reference": level, "levels": [other levels]}}``.
        columns: design column names.
        beta: coefficients (log space).
        ci_lo, ci_hi: bootstrap 95 % interval of each coefficient.
        xtx_inv: (XᵀX)⁻¹.
        sigma: residual standard deviation in log space.
        dof: n − p.
        n: runs fitted.
        r2: R² in log space.
    """

    target: str
    platforms: list[str]
    axes: list[str]
    categorical: dict[str, dict[str, Any]]
    columns: list[str]
    beta: np.ndarray
    ci_lo: np.ndarray
    ci_hi: np.ndarray
    xtx_inv: np.ndarray
    sigma: float
    dof: int
    n: int
    r2: float
    notes: list[str] = field(default_factory=list)
    axis_stats: dict[str, list[float]] = field(default_factory=dict)

    def design(self, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """The design matrix of rows (raises ``InputError`` on an unknown level or a missing axis)."""
        x = np.zeros((len(rows), len(self.columns)))
        col = {c: i for i, c in enumerate(self.columns)}
        for r, row in enumerate(rows):
            plat = str(row.get("platform"))
            if f"platform={plat}" not in col:
                raise InputError(f"platform {plat!r} is not in the fit (known: "
                                 f"{', '.join(self.platforms)})", field="platform")
            x[r, col[f"platform={plat}"]] = 1.0
            for axis in self.axes:
                v = _num(row.get(axis))
                if v is None or v <= 0:
                    raise InputError(f"needs a positive {axis} ({AXES.get(axis, axis)}); got "
                                     f"{row.get(axis)!r}", field=axis)
                x[r, col[f"log:{axis}"]] = math.log(v)
            for name, spec in self.categorical.items():
                level = _level(row.get(name))
                if level == spec["reference"]:
                    continue
                if level not in spec["levels"]:
                    raise InputError(f"{name}={level!r} is not in the fit (levels: "
                                     f"{', '.join([spec['reference'], *spec['levels']])})",
                                     field=name)
                x[r, col[f"{name}={level}"]] = 1.0
        return x

    def predict_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[float, float, float]]:
        """(value, lo95, hi95) per row."""
        x = self.design(rows)
        mu = x @ self.beta
        h = np.einsum("ij,jk,ik->i", x, self.xtx_inv, x)
        half = _t975(self.dof) * self.sigma * np.sqrt(1.0 + np.clip(h, 0, None))
        return [(float(np.exp(m)), float(np.exp(m - s)), float(np.exp(m + s)))
                for m, s in zip(mu, half, strict=True)]

    def exponents(self) -> list[dict[str, Any]]:
        """Exponent of each axis with its bootstrap 95 % interval."""
        out = []
        for axis in self.axes:
            i = self.columns.index(f"log:{axis}")
            out.append({"axis": axis, "symbol": AXES.get(axis, axis),
                        "exponent": float(self.beta[i]),
                        "ci95": [float(self.ci_lo[i]), float(self.ci_hi[i])]})
        return out

    def to_json(self) -> dict[str, Any]:
        intercepts = {}
        for p in self.platforms:
            i = self.columns.index(f"platform={p}")
            intercepts[p] = {"a": float(np.exp(self.beta[i])),
                             "ci95": [float(np.exp(self.ci_lo[i])), float(np.exp(self.ci_hi[i]))]}
        factors: dict[str, Any] = {}
        for name, spec in self.categorical.items():
            levels = {}
            for lv in spec["levels"]:
                i = self.columns.index(f"{name}={lv}")
                levels[lv] = {"factor": float(np.exp(self.beta[i])),
                              "ci95": [float(np.exp(self.ci_lo[i])), float(np.exp(self.ci_hi[i]))]}
            factors[name] = {"reference": spec["reference"], "levels": levels}
        return {
            "form": "y = a_platform * prod(axis^beta) * prod(factor(level))",
            "target": self.target, "n_runs": self.n, "dof": self.dof,
            "sigma_log": self.sigma, "r2_log": self.r2,
            "platform_intercepts": intercepts, "exponents": self.exponents(),
            "factors": factors, "notes": self.notes,
            "axis_stats": self.axis_stats,
            "_state": {"platforms": self.platforms, "axes": self.axes,
                       "categorical": self.categorical, "columns": self.columns,
                       "beta": self.beta.tolist(), "ci_lo": self.ci_lo.tolist(),
                       "ci_hi": self.ci_hi.tolist(), "xtx_inv": self.xtx_inv.tolist()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LogLinearLaw:
        st = data["_state"]
        return cls(target=data["target"], platforms=st["platforms"], axes=st["axes"],
                   categorical=st["categorical"], columns=st["columns"],
                   beta=np.array(st["beta"]), ci_lo=np.array(st["ci_lo"]),
                   ci_hi=np.array(st["ci_hi"]), xtx_inv=np.array(st["xtx_inv"]),
                   sigma=float(data["sigma_log"]), dof=int(data["dof"]), n=int(data["n_runs"]),
                   r2=float(data["r2_log"]), notes=list(data.get("notes", [])),
                   axis_stats={k: list(v) for k, v in data.get("axis_stats", {}).items()})


def _level(value: Any) -> str:
    return "none" if value is None else str(value)


def fit_loglinear(rows: list[Mapping[str, Any]], target: str, *, n_boot: int = N_BOOT,
                  seed: int = 0) -> LogLinearLaw:
    """Fit the log-linear law by least squares in log space (see the module docstring).

    Raises:
        InputError: fewer usable runs than parameters + 1.
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
    for axis in AXES:
        vals = [_num(r.get(axis)) for r in rows]
        if any(v is None or v <= 0 for v in vals) or len({v for v in vals}) < 2:
            continue
        cand = np.log(np.array(vals, dtype=float))[:, None]
        if np.linalg.matrix_rank(np.hstack(blocks + [cand])) <= sum(b.shape[1] for b in blocks):
            notes.append(f"{axis}: collinear with the axes before it; not fitted")
            continue
        blocks.append(cand)
        axes.append(axis)
        columns.append(f"log:{axis}")
    categorical: dict[str, dict[str, Any]] = {}
    for name in CATEGORICAL:
        if not any(name in r for r in rows):
            continue
        levels = {_level(r.get(name)) for r in rows}
        if len(levels) < 2:
            continue
        ref = sorted(levels)[0]
        others = sorted(lv for lv in levels if lv != ref)
        kept = []
        for lv in others:
            cand = np.array([[1.0 if _level(r.get(name)) == lv else 0.0] for r in rows])
            if np.linalg.matrix_rank(np.hstack(blocks + [cand])) <= sum(b.shape[1] for b in blocks):
                notes.append(f"{name}={lv}: collinear with the terms before it; not fitted")
                continue
            blocks.append(cand)
            kept.append(lv)
            columns.append(f"{name}={lv}")
        if kept:
            categorical[name] = {"reference": ref, "levels": kept}
    x = np.hstack(blocks)
    y = np.log(np.array([float(r[target]) for r in rows]))
    n, p = x.shape
    if n <= p:
        raise InputError(f"{n} runs cannot fit {p} parameters ({', '.join(columns)}); "
                         "add runs or fix axes", field=target)
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    dof = n - p
    sigma = float(np.sqrt(resid @ resid / dof))
    xtx_inv = np.linalg.pinv(x.T @ x)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(resid @ resid) / ss_tot if ss_tot > 0 else 1.0
    rng = np.random.default_rng(seed)
    scaled = resid * math.sqrt(n / dof)
    ystar = (x @ beta)[:, None] + scaled[rng.integers(0, n, size=(n, n_boot))]
    bstar = np.linalg.pinv(x) @ ystar
    lo, hi = np.percentile(bstar, [2.5, 97.5], axis=1)
    stats = {}
    for axis in axes:
        v = np.array([float(r[axis]) for r in rows])
        stats[axis] = [float(v.min()), float(np.exp(np.median(np.log(v)))), float(v.max())]
    return LogLinearLaw(target, platforms, axes, categorical, columns, beta, lo, hi, xtx_inv,
                        sigma, dof, n, r2, notes, stats)


# ---------------------------------------------------------------------------------------------
# The physics-informed law
# ---------------------------------------------------------------------------------------------

@dataclass
class PhysicsLaw:
    """energy_j = p_static,platform · G · T + ε_platform · FLOPs (see the module docstring)."""

    target: str
    platforms: list[str]
    static_w: np.ndarray  # per platform, W per device
    joule_per_flop: np.ndarray  # per platform
    static_ci: np.ndarray  # (platforms, 2)
    flop_ci: np.ndarray
    cov_unscaled: np.ndarray  # (A^T A)^-1 of the relative-error design, in parameter units
    sigma: float
    dof: int
    n: int
    notes: list[str] = field(default_factory=list)

    def _x(self, row: Mapping[str, Any]) -> np.ndarray:
        plat = str(row.get("platform"))
        if plat not in self.platforms:
            raise InputError(f"platform {plat!r} is not in the fit (known: "
                             f"{', '.join(self.platforms)})", field="platform")
        g, t, f = _num(row.get("num_gpus")), _num(row.get("duration_s")), training_flops(row)
        missing = [k for k, v in (("num_gpus", g), ("duration_s", t), ("FLOPs (model_params and "
                                  "tokens, or tokens_in/tokens_out)", f)) if v is None]
        if missing:
            raise InputError(f"the physics law needs {', '.join(missing)}", field=missing[0])
        x = np.zeros(2 * len(self.platforms))
        i = self.platforms.index(plat)
        x[2 * i] = g * t  # type: ignore[operator]
        x[2 * i + 1] = f  # type: ignore[assignment]
        return x

    def energy(self, row: Mapping[str, Any]) -> tuple[float, float, float]:
        """(energy, lo95, hi95) in J."""
        x = self._x(row)
        theta = np.empty(2 * len(self.platforms))
        theta[0::2], theta[1::2] = self.static_w, self.joule_per_flop
        e = float(x @ theta)
        if e <= 0:
            return e, e, e
        xr = x / e
        h = float(xr @ self.cov_unscaled @ xr)
        half = _t975(self.dof) * self.sigma * math.sqrt(1.0 + max(h, 0.0))
        return e, e * math.exp(-half), e * math.exp(half)

    def predict_rows(self, rows: Sequence[Mapping[str, Any]]
                     ) -> list[tuple[float, float, float] | None]:
        out: list[tuple[float, float, float] | None] = []
        for row in rows:
            e, lo, hi = self.energy(row)
            conv = [_from_energy(self.target, v, row) for v in (e, lo, hi)]
            out.append(None if any(c is None for c in conv) else tuple(conv))  # type: ignore[arg-type]
        return out

    def to_json(self) -> dict[str, Any]:
        params = {p: {"static_power_w_per_gpu": float(self.static_w[i]),
                      "static_power_ci95": [float(v) for v in self.static_ci[i]],
                      "energy_per_flop_j": float(self.joule_per_flop[i]),
                      "energy_per_flop_ci95": [float(v) for v in self.flop_ci[i]]}
                  for i, p in enumerate(self.platforms)}
        return {"form": "energy_j = p_static[platform] * num_gpus * duration_s + "
                        "e_flop[platform] * FLOPs",
                "flops": {"full": "6 N tokens", "lora/qlora": "4 N tokens",
                          "gradient_checkpointing": "+ 2 N tokens",
                          "inference": "2 N (tokens_in + tokens_out)"},
                "target": self.target, "n_runs": self.n, "dof": self.dof,
                "sigma_log": self.sigma, "params": params, "notes": self.notes,
                "_state": {"cov_unscaled": self.cov_unscaled.tolist()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PhysicsLaw:
        plats = list(data["params"])
        par = data["params"]
        return cls(target=data["target"], platforms=plats,
                   static_w=np.array([par[p]["static_power_w_per_gpu"] for p in plats]),
                   joule_per_flop=np.array([par[p]["energy_per_flop_j"] for p in plats]),
                   static_ci=np.array([par[p]["static_power_ci95"] for p in plats]),
                   flop_ci=np.array([par[p]["energy_per_flop_ci95"] for p in plats]),
                   cov_unscaled=np.array(data["_state"]["cov_unscaled"]),
                   sigma=float(data["sigma_log"]), dof=int(data["dof"]),
                   n=int(data["n_runs"]), notes=list(data.get("notes", [])))


def _physics_rows(rows: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    out = []
    for r in rows:
        e = _num(r.get("energy_j"))
        if (e and e > 0 and _num(r.get("num_gpus")) and _num(r.get("duration_s"))
                and training_flops(r)):
            out.append(r)
    return out


def fit_physics(rows: list[Mapping[str, Any]], target: str, *, n_boot: int = 200,
                seed: int = 0) -> PhysicsLaw:
    """Fit the physics-informed law (non-negative least squares on the relative error).

    Raises:
        InputError: fewer usable runs (energy_j, num_gpus, duration_s, FLOPs) than parameters + 1.
    """
    from scipy.optimize import nnls

    use = _physics_rows(rows)
    platforms = sorted({str(r.get("platform")) for r in use})
    k = 2 * len(platforms)
    if len(use) <= k:
        raise InputError(f"the physics law needs more than {k} runs with energy_j, num_gpus, "
                         f"duration_s, model_params and tokens; {len(use)} have them",
                         field="energy_j")
    x = np.zeros((len(use), k))
    for j, r in enumerate(use):
        i = platforms.index(str(r.get("platform")))
        x[j, 2 * i] = float(r["num_gpus"]) * float(r["duration_s"])
        x[j, 2 * i + 1] = training_flops(r)  # type: ignore[assignment]
    e = np.array([float(r["energy_j"]) for r in use])
    scale = np.linalg.norm(x, axis=0)
    scale[scale == 0] = 1.0

    def solve(energy: np.ndarray) -> np.ndarray:
        a = x / energy[:, None] / scale
        theta, _ = nnls(a, np.ones(len(energy)))
        return theta / scale

    theta = solve(e)
    pred = x @ theta
    notes = []
    if (pred <= 0).any():
        raise InputError("the physics law predicts no energy for some runs", field="energy_j")
    resid = np.log(e / pred)
    dof = len(use) - k
    sigma = float(np.sqrt(resid @ resid / dof))
    a = x / pred[:, None] / scale  # relative sensitivities, columns scaled for conditioning
    cov = np.linalg.pinv(a.T @ a) / np.outer(scale, scale)
    rng = np.random.default_rng(seed)
    scaled = resid * math.sqrt(len(use) / dof)
    boots = np.array([solve(pred * np.exp(scaled[rng.integers(0, len(use), len(use))]))
                      for _ in range(n_boot)])
    lo, hi = np.percentile(boots, [2.5, 97.5], axis=0)
    if (theta == 0).any():
        notes.append("a parameter sits at its bound 0 (non-negative fit)")
    return PhysicsLaw(target, platforms, theta[0::2], theta[1::2],
                      np.stack([lo[0::2], hi[0::2]], axis=1), np.stack([lo[1::2], hi[1::2]], axis=1),
                      cov, sigma, dof, len(use), notes)


# ---------------------------------------------------------------------------------------------
# Fit with holdout, JSON, predict
# ---------------------------------------------------------------------------------------------

def split_holdout(rows: list[Mapping[str, Any]], spec: str
                  ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Split rows by a holdout spec: ``AXIS=top``, ``family=NAME`` or ``COLUMN=VALUE``.

    ``AXIS`` may be a column (``model_params``) or a symbol (``N``); ``top`` holds out every run
    at the axis's largest value.
    """
    key, sep, value = spec.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
        raise InputError(f"holdout {spec!r} is not AXIS=top, family=NAME or COLUMN=VALUE",
                         field="holdout")
    if key == "family":
        key = FAMILY_COLUMN
    symbols = {s: c for c, s in AXES.items() if any(c in r for r in rows)}
    column = symbols.get(key, key)
    if value == "top":
        vals = [_num(r.get(column)) for r in rows]
        present = [v for v in vals if v is not None]
        if not present:
            raise InputError(f"no run has a numeric {column}", field="holdout")
        top = max(present)
        test = [r for r, v in zip(rows, vals, strict=True) if v == top]
    else:
        test = [r for r in rows if str(r.get(column)) == value]
    train = [r for r in rows if not any(r is t for t in test)]
    if not test:
        raise InputError(f"holdout {spec!r} selects no run", field="holdout")
    if not train:
        raise InputError(f"holdout {spec!r} leaves no run to fit", field="holdout")
    return train, test


def _baselines(train: list[Mapping[str, Any]], test: list[Mapping[str, Any]], target: str
               ) -> dict[str, list[float | None]]:
    energy_sum = tokens_sum = gpu_time_sum = energy_gt_sum = 0.0
    for r in train:
        e, tok = _num(r.get("energy_j")), _tokens(r)
        g, t = _num(r.get("num_gpus")), _num(r.get("duration_s"))
        if e and tok:
            energy_sum += e
            tokens_sum += tok
        if e and g and t:
            energy_gt_sum += e
            gpu_time_sum += g * t
    out: dict[str, list[float | None]] = {}
    if tokens_sum > 0:
        k = energy_sum / tokens_sum  # J per token, pooled over the training runs
        preds: list[float | None] = []
        for r in test:
            tok = _tokens(r)
            preds.append(_from_energy(target, k * tok, r) if tok else None)
        out["constant_j_per_token"] = preds
    if gpu_time_sum > 0:
        p = energy_gt_sum / gpu_time_sum  # W per device, pooled over the training runs
        preds = []
        for r in test:
            g, t = _num(r.get("num_gpus")), _num(r.get("duration_s"))
            preds.append(_from_energy(target, p * g * t, r) if g and t else None)
        out["mean_power_x_time"] = preds
    return out


@dataclass
class FitResult:
    """Both laws fitted on all runs, and the holdout evaluation when asked."""

    target: str
    loglinear: LogLinearLaw
    physics: PhysicsLaw | None
    physics_note: str | None
    holdout: dict[str, Any] | None
    dropped: int

    @property
    def preferred(self) -> str:
        """The law with the lower held-out MdAPE (else the lower in-sample σ_log)."""
        if self.physics is None:
            return "loglinear"
        if self.holdout:
            m = self.holdout["mdape_pct"]
            if m.get("physics") is not None and m.get("loglinear") is not None:
                return "physics" if m["physics"] < m["loglinear"] else "loglinear"
        return "physics" if self.physics.sigma < self.loglinear.sigma else "loglinear"

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "target": self.target, "preferred": self.preferred,
                "runs_dropped": self.dropped, "loglinear": self.loglinear.to_json(),
                "physics": self.physics.to_json() if self.physics else None,
                "physics_note": self.physics_note, "holdout": self.holdout}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2), encoding="utf-8")


def _evaluate(train: list[Mapping[str, Any]], test: list[Mapping[str, Any]], target: str,
              spec: str, n_boot: int, seed: int) -> dict[str, Any]:
    actual = [float(r[target]) for r in test]
    ll = fit_loglinear(train, target, n_boot=n_boot, seed=seed)
    notes = []
    ll_pred: list[tuple[float, float, float] | None] = []
    for r in test:
        try:
            ll_pred.append(ll.predict_rows([r])[0])
        except InputError as exc:
            ll_pred.append(None)
            notes.append(f"{r.get('run_id')}: loglinear: {exc.reason}")
    try:
        ph: PhysicsLaw | None = fit_physics(train, target, seed=seed)
    except InputError as exc:
        ph = None
        notes.append(f"physics: {exc.reason}")
    ph_pred: list[tuple[float, float, float] | None] = []
    for r in test:
        if ph is None:
            ph_pred.append(None)
            continue
        try:
            ph_pred.append(ph.predict_rows([r])[0])
        except InputError as exc:
            ph_pred.append(None)
            notes.append(f"{r.get('run_id')}: physics: {exc.reason}")
    base = _baselines(train, test, target)

    def cover(pred: list[tuple[float, float, float] | None]) -> float | None:
        hits = [lo <= a <= hi for p, a in zip(pred, actual, strict=True) if p is not None
                for _, lo, hi in [p]]
        return float(np.mean(hits)) if hits else None

    points = []
    for i, r in enumerate(test):
        pt: dict[str, Any] = {"run_id": r.get("run_id"), "platform": r.get("platform"),
                              "actual": actual[i]}
        for name, pred in (("loglinear", ll_pred), ("physics", ph_pred)):
            p = pred[i]
            pt[name] = None if p is None else {"value": p[0], "lo": p[1], "hi": p[2]}
        for name, vals in base.items():
            pt[name] = vals[i]
        for axis in ll.axes:
            pt[axis] = _num(r.get(axis))
        points.append(pt)
    return {
        "spec": spec, "n_train": len(train), "n_test": len(test),
        "mdape_pct": {
            "loglinear": mdape([p[0] if p else None for p in ll_pred], actual),
            "physics": mdape([p[0] if p else None for p in ph_pred], actual),
            "baseline_constant_j_per_token": mdape(base.get("constant_j_per_token",
                                                            [None] * len(test)), actual),
            "baseline_mean_power_x_time": mdape(base.get("mean_power_x_time",
                                                         [None] * len(test)), actual),
        },
        "coverage95": {"loglinear": cover(ll_pred), "physics": cover(ph_pred)},
        "train_exponents": ll.exponents(),
        "loglinear_train": ll.to_json(),
        "points": points, "notes": notes,
    }


def fit(rows: Iterable[Mapping[str, Any]], target: str = "energy_per_token_j", *,
        holdout: str | None = None, n_boot: int = N_BOOT, seed: int = 0) -> FitResult:
    """Fit both laws on a runs table (rows as dicts) and optionally evaluate a holdout.

    Args:
        rows: runs-config rows (``finetune_runs`` / ``inference_runs``).
        target: ``energy_per_token_j``, ``mean_power_w`` or ``energy_j``.
        holdout: ``AXIS=top``, ``family=NAME`` or ``COLUMN=VALUE`` (see :func:`split_holdout`).
        n_boot: bootstrap replicates of the exponent intervals.
        seed: bootstrap seed.

    Raises:
        InputError: unknown target, too few runs, a holdout that selects nothing.
    """
    if target not in TARGETS:
        raise InputError(f"target {target!r} is not one of {', '.join(TARGETS)}", field="target")
    all_rows = list(rows)
    use = [r for r in all_rows if (_num(r.get(target)) or 0) > 0]
    ll = fit_loglinear(use, target, n_boot=n_boot, seed=seed)
    try:
        ph: PhysicsLaw | None = fit_physics(use, target, seed=seed)
        note = None
    except InputError as exc:
        ph, note = None, exc.reason
    evaluation = None
    if holdout:
        train, test = split_holdout(use, holdout)
        evaluation = _evaluate(train, test, target, holdout, n_boot, seed)
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
        raise InputError(f"not a fit file (format {data.get('format')!r}, expected {FORMAT!r})",
                         field="format")
    return data


def predict(fit_data: str | Path | Mapping[str, Any], settings: Mapping[str, Any], *,
            model: str | None = None) -> dict[str, Any]:
    """Predict the fit's target for one setting, with its 95 % interval.

    Args:
        fit_data: a fit JSON path or object (:meth:`FitResult.to_json`).
        settings: column (or symbol) -> value, e.g. ``{"platform": "h100_sxm_80gb", "N": 7e9}``;
            the physics law also needs ``num_gpus``, ``duration_s``, ``model_params``,
            ``tokens`` (or ``tokens_in``/``tokens_out``) and ``method``.
        model: ``loglinear`` or ``physics`` (default: the fit's preferred law).

    Returns:
        ``{"target", "model", "value", "lo95", "hi95", "settings"}``.
    """
    data = load_fit(fit_data)
    model = model or data.get("preferred") or "loglinear"
    if model not in ("loglinear", "physics"):
        raise InputError(f"model {model!r} is not loglinear or physics", field="model")
    row = dict(settings)
    for column, symbol in AXES.items():
        if symbol in row and column not in row:
            row[column] = row.pop(symbol)
    if model == "physics":
        if not data.get("physics"):
            raise InputError(f"this fit has no physics law ({data.get('physics_note')})",
                             field="model")
        res = PhysicsLaw.from_json(data["physics"]).predict_rows([row])[0]
        if res is None:
            raise InputError("the target needs tokens (energy_per_token_j) or duration_s "
                             "(mean_power_w)", field="tokens")
    else:
        res = LogLinearLaw.from_json(data["loglinear"]).predict_rows([row])[0]
    return {"target": data["target"], "model": model, "value": res[0], "lo95": res[1],
            "hi95": res[2], "settings": dict(settings)}
