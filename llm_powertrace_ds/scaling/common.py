"""Scaling-law constants, value parsing and small helpers shared by the laws."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import InputError

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
