"""The log-linear law (``scaling/loglinear.py``): design, fit, bootstrap, JSON and intervals.

Each test states a rule a one-line change would break: the design columns the fit keeps or
skips, the coefficients against an independent least-squares solve, the residual bootstrap
written out step by step, the error reasons and fields, the JSON keys of ``params_json`` and
``to_json``, the ``from_json`` round trip and its defaults, and the prediction interval edges.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import warnings

import numpy as np
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.scaling.common import Unpredictable
from llm_powertrace_ds.scaling.loglinear import LogLinearLaw, _check_axis_span, fit_loglinear

TARGET = "energy_per_token_j"
COLUMNS = ["platform=a100", "platform=h100", "log:model_params", "log:global_batch_size",
           "log2:global_batch_size", "log:num_gpus", "method=lora", "method=qlora", "task=code"]


def _rows(n: int = 60, seed: int = 7) -> list[dict]:
    """Runs from y = c · N^0.7 · B^-0.2 · e^{0.05 (log B - c)^2} · G^0.1 · factors, 5 % noise.

    ``batch_size`` is absent (a skipped axis before ``num_gpus``), ``precision`` is constant
    (a skipped categorical before ``task``).
    """
    rng = np.random.default_rng(seed)
    grid = list(itertools.product(["a100", "h100"], [1e8, 1e9, 1e10], [1, 2, 4, 8], [1, 2, 4, 8],
                                  ["full", "lora", "qlora"], ["chat", "code"]))
    rows = []
    for i in rng.choice(len(grid), size=n, replace=False):
        plat, npar, b, g, method, task = grid[i]
        y = (2e-7 if plat == "a100" else 3e-7) * npar ** 0.7 * b ** -0.2 * g ** 0.1
        y *= math.exp(0.05 * math.log(b) ** 2)
        y *= {"full": 1.0, "lora": 0.6, "qlora": 0.5}[method] * (1.3 if task == "code" else 1.0)
        y *= math.exp(rng.normal(0, 0.05))
        rows.append({"platform": plat, "model_params": npar, "global_batch_size": b,
                     "num_gpus": g, "method": method, "precision": "bf16", "task": task,
                     TARGET: y})
    return rows


def _design(rows: list[dict]) -> np.ndarray:
    """The design matrix of :data:`COLUMNS`, built independently of the package."""
    centre = float(np.mean([math.log(r["global_batch_size"]) for r in rows]))
    x = []
    for r in rows:
        lb = math.log(r["global_batch_size"])
        x.append([float(r["platform"] == "a100"), float(r["platform"] == "h100"),
                  math.log(r["model_params"]), lb, (lb - centre) ** 2, math.log(r["num_gpus"]),
                  float(r["method"] == "lora"), float(r["method"] == "qlora"),
                  float(r["task"] == "code")])
    return np.array(x)


def _bootstrap(x: np.ndarray, y: np.ndarray, n_boot: int, seed: int) -> tuple:
    """The residual bootstrap written out: resample scaled residuals, refit, 2.5/97.5 %."""
    n, p = x.shape
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    resid = y - x @ beta
    scaled = resid * math.sqrt(n / (n - p))
    idx = np.random.default_rng(seed).integers(0, n, size=(n, n_boot))
    ystar = (x @ beta)[:, None] + scaled[idx]
    coefs = np.linalg.pinv(x) @ ystar
    return np.percentile(coefs, 2.5, axis=1), np.percentile(coefs, 97.5, axis=1)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return _rows()


@pytest.fixture(scope="module")
def law(rows) -> LogLinearLaw:
    return fit_loglinear(rows, TARGET, n_boot=40, seed=11)


def _small_law(**kw) -> LogLinearLaw:
    """A hand-built law: one platform, one axis (``model_params``), q90 = 10."""
    args = dict(target=TARGET, platforms=["a100"], axes=["model_params"], categorical={},
                columns=["platform=a100", "log:model_params"], beta=np.array([0.0, 1.0]),
                ci_lo=np.array([0.0, 1.0]), ci_hi=np.array([0.0, 1.0]), sigma=0.1, dof=5, n=7,
                r2=0.9, q90=10.0)
    args.update(kw)
    return LogLinearLaw(**args)


# -- the fit -------------------------------------------------------------------------------------

def test_fit_columns_axes_curvature_and_categoricals(law, rows):
    assert law.columns == COLUMNS
    assert law.platforms == ["a100", "h100"]
    assert law.axes == ["model_params", "global_batch_size", "num_gpus"]
    centre = float(np.mean([math.log(r["global_batch_size"]) for r in rows]))
    assert list(law.curved) == ["global_batch_size"]
    assert law.curved["global_batch_size"] == pytest.approx(centre, rel=1e-12)
    assert law.categorical == {"method": {"reference": "full", "levels": ["lora", "qlora"]},
                               "task": {"reference": "chat", "levels": ["code"]}}
    assert law.notes == []
    assert (law.n, law.dof, law.target) == (60, 60 - 9, TARGET)


def test_fit_coefficients_sigma_r2_match_an_independent_least_squares(law, rows):
    x = _design(rows)
    y = np.log([r[TARGET] for r in rows])
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    np.testing.assert_allclose(law.beta, beta, rtol=1e-9, atol=1e-12)
    resid = y - x @ beta
    assert law.sigma == pytest.approx(math.sqrt(resid @ resid / (60 - 9)), rel=1e-9)
    ss_tot = ((y - y.mean()) ** 2).sum()
    assert law.r2 == pytest.approx(1 - (resid @ resid) / ss_tot, rel=1e-9)
    assert law.beta[2] == pytest.approx(0.7, abs=0.05)


def test_fit_bootstrap_interval_is_the_scaled_residual_bootstrap(law, rows):
    x = _design(rows)
    y = np.log([r[TARGET] for r in rows])
    lo, hi = _bootstrap(x, y, 40, 11)
    np.testing.assert_allclose(law.ci_lo, lo, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(law.ci_hi, hi, rtol=1e-9, atol=1e-12)


def test_fit_single_bootstrap_draw_is_still_a_bootstrap(rows):
    one = fit_loglinear(rows, TARGET, n_boot=1, seed=3)
    lo, hi = _bootstrap(_design(rows), np.log([r[TARGET] for r in rows]), 1, 3)
    np.testing.assert_allclose(one.ci_lo, lo, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(one.ci_hi, hi, rtol=1e-9, atol=1e-12)
    assert not np.allclose(one.ci_lo, one.beta)
    zero = fit_loglinear(rows, TARGET, n_boot=0)
    assert np.array_equal(zero.ci_lo, zero.beta) and np.array_equal(zero.ci_hi, zero.beta)


def test_fit_default_seed_is_zero(rows):
    a = fit_loglinear(rows, TARGET, n_boot=10)
    b = fit_loglinear(rows, TARGET, n_boot=10, seed=0)
    assert np.array_equal(a.ci_lo, b.ci_lo) and np.array_equal(a.ci_hi, b.ci_hi)
    lo, hi = _bootstrap(_design(rows), np.log([r[TARGET] for r in rows]), 10, 0)
    np.testing.assert_allclose(a.ci_lo, lo, rtol=1e-9, atol=1e-12)


def test_fit_axis_stats_are_min_geometric_median_max(law, rows):
    g = [float(r["num_gpus"]) for r in rows]
    assert law.axis_stats["num_gpus"] == [min(g), pytest.approx(float(np.exp(np.median(
        np.log(g))))), max(g)]
    assert list(law.axis_stats) == ["model_params", "global_batch_size", "num_gpus"]


def test_fit_skips_an_axis_with_a_zero_value(rows):
    zeroed = [dict(r) for r in rows]
    zeroed[0]["num_gpus"] = 0
    fit = fit_loglinear(zeroed, TARGET, n_boot=0)
    assert fit.axes == ["model_params", "global_batch_size"]
    assert "log:num_gpus" not in fit.columns
    assert fit.notes == []  # skipped before the collinearity check, not noted as collinear


def test_batch_axis_curvature_needs_three_values_and_a_ratio_of_four():
    rng = np.random.default_rng(1)
    rows = [{"platform": "a", "model_params": n, "global_batch_size": b,
             TARGET: 1e-7 * n ** 0.5 * b ** 0.3 * math.exp(rng.normal(0, 0.05))}
            for n in (1e8, 1e9, 1e10) for b in (2, 3, 4) for _ in range(2)]
    fit = fit_loglinear(rows, TARGET, n_boot=0)  # ratio 2 < 4 (but 2 * 4 = 8): no curvature
    assert fit.curved == {}
    assert fit.columns == ["platform=a", "log:model_params", "log:global_batch_size"]


def test_collinear_axis_is_noted_and_not_fitted():
    rng = np.random.default_rng(2)
    rows = [{"platform": "a", "model_params": n, "seq_len": n / 1e6, "num_gpus": g,
             TARGET: 1e-7 * n ** 0.5 * g ** 0.2 * math.exp(rng.normal(0, 0.05))}
            for n in (1e8, 1e9, 1e10) for g in (1, 2, 4) for _ in range(2)]
    fit = fit_loglinear(rows, TARGET, n_boot=0)
    assert fit.notes == ["log:seq_len: collinear with the terms before it; not fitted"]
    assert fit.axes == ["model_params", "num_gpus"]
    assert fit.columns == ["platform=a", "log:model_params", "log:num_gpus"]


def test_r2_is_one_when_the_target_is_constant():
    rows = [{"platform": "a", "model_params": n, TARGET: 1.0} for n in (1e8, 1e9, 1e10) * 3]
    fit = fit_loglinear(rows, TARGET, n_boot=0)
    assert fit.r2 == 1.0


def test_r2_with_a_total_sum_of_squares_below_one():
    rng = np.random.default_rng(4)
    ns = [1e8, 2e8, 4e8, 8e8] * 3
    rows = [{"platform": "a", "model_params": n,
             TARGET: n ** 0.01 * math.exp(rng.normal(0, 0.02))} for n in ns]
    fit = fit_loglinear(rows, TARGET, n_boot=0)
    x = np.array([[1.0, math.log(n)] for n in ns])
    y = np.log([r[TARGET] for r in rows])
    resid = y - x @ np.linalg.lstsq(x, y, rcond=None)[0]
    ss_tot = ((y - y.mean()) ** 2).sum()
    assert 0 < ss_tot < 1
    assert fit.r2 == pytest.approx(1 - resid @ resid / ss_tot, rel=1e-9)
    assert fit.r2 < 1.0


@pytest.mark.parametrize("value", [None, 0.0, -1.0])
def test_no_positive_target_is_refused(value):
    rows = [{"platform": "a", "model_params": n, TARGET: value} for n in (1e8, 1e9) * 5]
    with pytest.raises(InputError) as exc:
        fit_loglinear(rows, TARGET, n_boot=0)
    assert exc.value.reason == f"no run has a positive {TARGET}"
    assert exc.value.field == TARGET


def test_too_few_runs_boundary_is_parameters_plus_five():
    rng = np.random.default_rng(5)

    def rows(n: int) -> list[dict]:
        return [{"platform": "a", "model_params": 10.0 ** (8 + i % 3),
                 TARGET: 1e-7 * 10.0 ** (0.5 * (i % 3)) * math.exp(rng.normal(0, 0.05))}
                for i in range(n)]

    assert fit_loglinear(rows(7), TARGET, n_boot=0).n == 7  # p = 2: exactly p + 5 runs
    with pytest.raises(InputError) as exc:
        fit_loglinear(rows(6), TARGET, n_boot=0)
    assert exc.value.reason == ("refusing to fit: 6 runs for 2 parameters (platform=a, "
                                "log:model_params); the law needs at least 7 (parameters + 5)")
    assert exc.value.field == TARGET


# -- the axis span --------------------------------------------------------------------------------

def test_axis_span_exactly_the_minimum_ratio_is_accepted():
    assert _check_axis_span([{}, {}], "num_gpus", [10.0, 11.0]) is None  # 11 / 10 == 1.1
    assert _check_axis_span([{}, {}], "num_gpus", [0.0, 1.0]) is None  # lo = 0: no ratio


def test_axis_span_below_the_minimum_ratio_is_refused_with_its_reason():
    with pytest.raises(InputError) as exc:
        _check_axis_span([{}, {}, {}], "num_gpus", [10.0, 10.5, 10.2])
    assert exc.value.reason == ("refusing to fit: num_gpus spans only 10-10.5 (x1.0500 < x1.1) "
                                "over 3 runs, too narrow for an exponent; add runs that vary it, "
                                "or hold it fixed")
    assert exc.value.field == "num_gpus"


# -- design / prediction ---------------------------------------------------------------------------

def test_design_row_sets_every_categorical_after_a_reference_level(law):
    row = {"platform": "h100", "model_params": 1e9, "global_batch_size": 4, "num_gpus": 2,
           "method": "full", "task": "code"}
    centre = law.curved["global_batch_size"]
    expect = [0.0, 1.0, math.log(1e9), math.log(4), (math.log(4) - centre) ** 2, math.log(2),
              0.0, 0.0, 1.0]
    np.testing.assert_allclose(law.design([row])[0], expect, rtol=1e-12)


def test_design_errors_name_the_field_and_the_fit(law):
    row = {"platform": "h100", "model_params": 1e9, "global_batch_size": 4, "num_gpus": 2,
           "method": "full", "task": "code"}
    with pytest.raises(Unpredictable) as exc:
        law.design([{**row, "platform": "l40s"}])
    assert exc.value.reason == "platform 'l40s' is not in the fit (known: a100, h100)"
    assert exc.value.field == "platform"
    with pytest.raises(Unpredictable) as exc:
        law.design([{**row, "num_gpus": 0}])
    assert exc.value.reason == "needs a positive num_gpus (G); got 0"
    assert exc.value.field == "num_gpus"
    with pytest.raises(Unpredictable) as exc:
        law.design([{**row, "method": "dora"}])
    assert exc.value.reason == "method='dora' is not in the fit (levels: full, lora, qlora)"
    assert exc.value.field == "method"


def test_axis_without_a_symbol_falls_back_to_its_name():
    law = _small_law(axes=["my_axis"], columns=["platform=a100", "log:my_axis"])
    with pytest.raises(Unpredictable) as exc:
        law.design([{"platform": "a100"}])
    assert exc.value.reason == "needs a positive my_axis (my_axis); got None"
    assert exc.value.field == "my_axis"
    assert law.exponents() == [{"axis": "my_axis", "symbol": "my_axis", "exponent": 1.0,
                                "ci95": [1.0, 1.0]}]


def test_predict_rows_uses_q90_and_falls_back_to_1_645_sigma():
    row = {"platform": "a100", "model_params": math.e ** 2}
    (v, lo, hi), = _small_law(q90=0.5).predict_rows([row])
    assert (v, lo, hi) == pytest.approx((math.exp(2), math.exp(1.5), math.exp(2.5)), rel=1e-12)
    (v, lo, hi), = _small_law(q90=None, sigma=0.2).predict_rows([row])
    assert (lo, hi) == pytest.approx((math.exp(2 - 0.329), math.exp(2 + 0.329)), rel=1e-12)


@pytest.mark.parametrize("mu", [701.0, -695.0, 695.0])  # mu, mu - q, mu + q out of range
def test_predict_rows_out_of_range_names_the_target(mu):
    law = _small_law(beta=np.array([mu, 0.0]))
    with pytest.raises(Unpredictable) as exc:
        law.predict_rows([{"platform": "a100", "model_params": 5.0}])
    assert exc.value.reason.endswith(f"): {TARGET}")
    assert exc.value.field == "settings"


def test_log_predict_silences_floating_point_warnings():
    law = _small_law(beta=np.array([1e308, 1e308]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mu = law.log_predict([{"platform": "a100", "model_params": 1e300}])
    assert mu[0] == math.inf


# -- JSON ---------------------------------------------------------------------------------------

def test_params_json_exact(law):
    b, lo, hi = law.beta, law.ci_lo, law.ci_hi
    got = law.params_json()
    assert got == {
        "form": "log y = log a_platform + sum beta log x + sum gamma (log B - c)^2 "
                "+ sum log factor",
        "platform_intercepts": {"a100": {"a": float(np.exp(b[0])), "log_a": float(b[0])},
                                "h100": {"a": float(np.exp(b[1])), "log_a": float(b[1])}},
        "exponents": [
            {"axis": "model_params", "symbol": "N", "exponent": float(b[2]),
             "ci95": [float(lo[2]), float(hi[2])]},
            {"axis": "global_batch_size", "symbol": "B", "exponent": float(b[3]),
             "ci95": [float(lo[3]), float(hi[3])], "curvature": float(b[4]),
             "curvature_ci95": [float(lo[4]), float(hi[4])]},
            {"axis": "num_gpus", "symbol": "G", "exponent": float(b[5]),
             "ci95": [float(lo[5]), float(hi[5])]}],
        "factors": {
            "method": {"reference": "full", "levels": {
                "lora": {"factor": float(np.exp(b[6])),
                         "ci95": [float(np.exp(lo[6])), float(np.exp(hi[6]))]},
                "qlora": {"factor": float(np.exp(b[7])),
                          "ci95": [float(np.exp(lo[7])), float(np.exp(hi[7]))]}}},
            "task": {"reference": "chat", "levels": {
                "code": {"factor": float(np.exp(b[8])),
                         "ci95": [float(np.exp(lo[8])), float(np.exp(hi[8]))]}}}},
        "sigma_log": law.sigma, "r2_log": law.r2, "interval_90_half_width_log": None,
        "interval_method": "group-wise conformal"}
    assert got["factors"]["method"]["levels"]["lora"]["factor"] == pytest.approx(0.6, rel=0.1)


def test_params_json_intercept_a_is_clipped_to_the_log_range():
    low = _small_law(beta=np.array([-800.0, 1.0])).params_json()["platform_intercepts"]
    assert low == {"a100": {"a": math.exp(-700.0), "log_a": -800.0}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        high = _small_law(beta=np.array([800.0, 1.0])).params_json()["platform_intercepts"]
    assert high == {"a100": {"a": math.exp(700.0), "log_a": 800.0}}


def test_to_json_keys_and_state(law):
    law2 = dataclasses.replace(law, notes=["a note"], q90=0.25)
    js = law2.to_json()
    assert list(js) == ["target", "n_runs", "dof", "form", "platform_intercepts", "exponents",
                        "factors", "sigma_log", "r2_log", "interval_90_half_width_log",
                        "interval_method", "notes", "axis_stats", "_state"]
    assert js["notes"] == ["a note"] and js["interval_90_half_width_log"] == 0.25
    assert js["axis_stats"] == law.axis_stats
    assert js["_state"] == {"platforms": law.platforms, "axes": law.axes,
                            "categorical": law.categorical, "columns": law.columns,
                            "curved": law.curved, "beta": law.beta.tolist(),
                            "ci_lo": law.ci_lo.tolist(), "ci_hi": law.ci_hi.tolist()}


def test_from_json_round_trips_every_field(law):
    law2 = dataclasses.replace(law, notes=["a note"], q90=0.25, interval="leave-one-out")
    back = LogLinearLaw.from_json(json.loads(json.dumps(law2.to_json())))
    for f in dataclasses.fields(LogLinearLaw):
        a, b = getattr(back, f.name), getattr(law2, f.name)
        if isinstance(b, np.ndarray):
            assert isinstance(a, np.ndarray) and np.array_equal(a, b), f.name
        else:
            assert a == b, f.name
    assert back.curved == {"global_batch_size": law.curved["global_batch_size"]}


def test_from_json_defaults_for_absent_optional_keys():
    data = {"target": "mean_power_w", "sigma_log": 0.1, "dof": 5, "n_runs": 7, "r2_log": 0.9,
            "_state": {"platforms": ["a100"], "axes": ["model_params"], "categorical": {},
                       "columns": ["platform=a100", "log:model_params"], "beta": [0.0, 1.0],
                       "ci_lo": [0.0, 1.0], "ci_hi": [0.0, 1.0]}}
    law = LogLinearLaw.from_json(data)
    assert (law.notes, law.axis_stats, law.curved, law.q90) == ([], {}, {}, None)
    assert law.interval == "group-wise conformal"
    assert (law.target, law.n, law.dof, law.r2, law.sigma) == ("mean_power_w", 7, 5, 0.9, 0.1)
