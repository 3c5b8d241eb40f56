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

Everything serialises to JSON (:meth:`FitResult.to_json`, documented shape in docs/analyst-guide.md);
:func:`predict` reads it back and never crashes: bad input is one :class:`InputError` line.
"""

from __future__ import annotations

from ..errors import InputError
from .common import (
    AXES,
    BASELINES,
    BATCH_AXES,
    CATEGORICAL,
    DATASET_FIT_PATH,
    FAMILY_COLUMN,
    FORMAT,
    GROUP_COLUMNS,
    LAWS,
    LEVEL,
    MAX_EXTRAPOLATION_DECADES,
    MEASURED,
    MIN_AXIS_RATIO,
    MIN_EXTRA_RUNS,
    MIN_GROUPS,
    N_BOOT,
    TARGETS,
    Unpredictable,
    axis_value,
    mdape,
    parse_value,
    training_flops,
)
from .holdout import baseline_predictions, evaluate_holdout, split_holdout
from .intervals import LawFit, conformal_half_width, extrapolation, group_of
from .loglinear import LogLinearLaw, fit_loglinear
from .physics import FINETUNE_TERMS, INFERENCE_TERMS, PhysicsLaw, fit_physics, physics_features
from .prediction import predict
from .result import FitResult, fit, load_fit

__all__ = [
    "AXES", "BASELINES", "BATCH_AXES", "CATEGORICAL", "DATASET_FIT_PATH", "FAMILY_COLUMN",
    "FINETUNE_TERMS", "FORMAT", "FitResult", "GROUP_COLUMNS", "INFERENCE_TERMS", "InputError",
    "LAWS", "LEVEL", "LawFit", "LogLinearLaw", "MAX_EXTRAPOLATION_DECADES", "MEASURED",
    "MIN_AXIS_RATIO", "MIN_EXTRA_RUNS", "MIN_GROUPS", "N_BOOT", "PhysicsLaw", "TARGETS",
    "Unpredictable", "axis_value", "baseline_predictions", "conformal_half_width",
    "evaluate_holdout", "extrapolation", "fit", "fit_loglinear", "fit_physics", "group_of",
    "load_fit", "mdape", "parse_value", "physics_features", "predict", "split_holdout",
    "training_flops",
]
