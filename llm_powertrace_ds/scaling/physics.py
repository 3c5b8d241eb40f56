"""The physics-informed law: energy per token from first principles, per platform."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError
from .common import (
    MIN_EXTRA_RUNS,
    Unpredictable,
    _exp,
    _flops_factor,
    _is_inference,
    _num,
    _tokens,
    axis_value,
)

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
