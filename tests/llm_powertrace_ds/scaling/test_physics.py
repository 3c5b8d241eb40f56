"""The physics law, the fit result and ``predict``'s output.

Each test states a rule a one-line change would break: the physics terms of a row (total
parameters stream the weights, active parameters do the FLOPs), the positive-value guards,
the run-count boundary, the scaled non-negative least squares written out independently,
the bootstrap for a single replicate, the at-bound note, the interval half-width, the error
reasons and fields, the JSON keys of a fit and of a prediction, and the seeds passed on.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import nnls

from llm_powertrace_ds import scaling
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.scaling import common, holdout, physics
from llm_powertrace_ds.scaling.common import _is_inference, _num

from .synthetic import finetune_rows as _rows

TARGET = "energy_per_token_j"


def _served(seed: int = 1) -> list[dict]:
    """Inference runs from the physics law itself (3 positive coefficients) with 3 % noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (npar, b, g) in enumerate(itertools.product([1e9, 7e9, 13e9], [1, 8, 64], [1, 4])):
        y = 1e-12 * 2 * npar / b + 2e-12 * 2 * npar + 5e-3 * g
        y *= math.exp(rng.normal(0, 0.03))
        rows.append({"run_id": f"s{i}", "workload": "inference", "platform": "a",
                     "model_name": f"m{npar:g}", "model_params": npar, "batch_size": b,
                     "num_gpus": g, "tokens_out": 1000.0, TARGET: y})
    return rows


def _nnls_fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on the relative error, columns scaled to unit norm."""
    a = x / y[:, None]
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    return nnls(a / scale, np.ones(len(y)))[0] / scale


def _design(law: physics.PhysicsLaw, rows: list[dict]) -> np.ndarray:
    k = len(law.terms)
    x = np.zeros((len(rows), len(law.platforms) * k))
    for j, r in enumerate(rows):
        feats = scaling.physics_features(r)
        i = law.platforms.index(r["platform"])
        x[j, i * k:(i + 1) * k] = [feats[t] for t in law.terms]
    return x


# -- common helpers ------------------------------------------------------------------------------

def test_a_row_is_inference_by_workload_or_by_tokens_out_without_tokens():
    assert _is_inference({"tokens_out": 5})
    assert not _is_inference({"tokens_out": 5, "tokens": 10})
    assert not _is_inference({"tokens": 10})
    assert _is_inference({"workload": "inference", "tokens": 10})


def test_num_refuses_non_finite_values():
    assert _num(float("inf")) is None and _num("nan") is None and _num(-float("inf")) is None
    assert _num("2.5") == 2.5
    with pytest.raises(common.Unpredictable) as exc:
        scaling.physics_features({"model_params": 7e9, "num_gpus": float("inf"), "tokens": 1})
    assert exc.value.field == "num_gpus"


# -- physics_features ---------------------------------------------------------------------------

def test_inference_terms_stream_total_parameters_and_compute_active_ones():
    moe = {"model_params": 48e9, "model_params_active": 12e9, "num_gpus": 2, "batch_size": 4,
           "workload": "inference"}
    assert scaling.physics_features(moe) == {"weight_bytes_per_token": 2.0 * 48e9 / 4,
                                             "flops_per_token": 2.0 * 12e9, "gpus": 2.0}
    dense = {"model_params": 7e9, "num_gpus": 1, "concurrency": 16, "tokens_out": 10}
    assert scaling.physics_features(dense) == {"weight_bytes_per_token": 2.0 * 7e9 / 16,
                                               "flops_per_token": 2.0 * 7e9, "gpus": 1.0}
    # a row with both tokens and tokens_out (and no workload) is a training run
    both = {**dense, "tokens": 100}
    assert scaling.physics_features(both) == {"flops_per_token": 6.0 * 7e9, "gpus": 1.0}


def test_training_terms_are_k_times_active_parameters():
    row = {"model_params": 3e9, "num_gpus": 4, "method": "lora", "tokens": 10}
    assert scaling.physics_features(row) == {"flops_per_token": 4.0 * 3e9, "gpus": 4.0}
    assert scaling.physics_features({**row, "batch_size": 3}, inference=True) == {
        "weight_bytes_per_token": 2.0 * 3e9 / 3, "flops_per_token": 2.0 * 3e9, "gpus": 4.0}
    with pytest.raises(common.Unpredictable) as exc:
        scaling.physics_features(row, inference=True)
    assert (exc.value.field, exc.value.reason) == (
        "batch_size", "the physics law needs a batch size (batch_size or concurrency)")


def test_physics_features_need_positive_parameters_and_gpus():
    base = {"num_gpus": 1, "tokens": 10}
    for bad in (0, -1.0):
        with pytest.raises(common.Unpredictable) as exc:
            scaling.physics_features({**base, "model_params": bad})
        assert exc.value.field == "model_params"
    assert scaling.physics_features({**base, "model_params": 1}) == {"flops_per_token": 6.0,
                                                                      "gpus": 1.0}
    assert scaling.physics_features({**base, "model_params": 0.5})["flops_per_token"] == 3.0
    for bad in (0, -2):
        with pytest.raises(common.Unpredictable) as exc:
            scaling.physics_features({"model_params": 1e9, "tokens": 10, "num_gpus": bad})
        assert exc.value.field == "num_gpus"
    assert scaling.physics_features({"model_params": 1e9, "num_gpus": 0.5})["gpus"] == 0.5


# -- fit_physics ---------------------------------------------------------------------------------

def test_fit_physics_coefficients_are_the_scaled_nnls_solution():
    rows = _rows()
    law = scaling.fit_physics(rows, TARGET, n_boot=0)
    x = _design(law, rows)
    y = np.array([r[TARGET] for r in rows])
    assert np.allclose(law.coef.ravel(), _nnls_fit(x, y), rtol=1e-9, atol=0)
    assert np.array_equal(law.coef_ci[..., 0], law.coef) and np.array_equal(law.coef_ci[..., 1],
                                                                            law.coef)


def test_fit_physics_scales_badly_conditioned_columns():
    """Columns 20 decades apart: the unit-norm column scaling keeps both coefficients."""
    rng = np.random.default_rng(4)
    rows = []
    for i, (npar, g) in enumerate(itertools.product([1e20, 3e20, 1e21, 5e21], [1, 2, 4])):
        y = 1e-30 * 6 * npar + 1e-9 * g * (1 + 0.5 * i)
        y *= math.exp(rng.normal(0, 0.02)) * (10.0 ** (3 * (i % 3)))
        rows.append({"platform": "a", "model_params": npar, "num_gpus": g, "tokens": 1,
                     TARGET: y})
    law = scaling.fit_physics(rows, TARGET, n_boot=0)
    x = _design(law, rows)
    y = np.array([r[TARGET] for r in rows])
    assert np.allclose(law.coef.ravel(), _nnls_fit(x, y), rtol=1e-6, atol=0)


def test_a_platform_whose_terms_underflow_is_refused_with_the_reason():
    rows = _rows()
    tiny = {**rows[0], "platform": "z", "model_params": 1e-300, "num_gpus": 1e-300,
            TARGET: 1e300}
    with pytest.raises(InputError) as exc:
        scaling.fit_physics([*rows, tiny], TARGET, n_boot=0)
    assert (exc.value.field, exc.value.reason) == (
        TARGET, "the physics law predicts no energy for some runs (its terms do not explain "
                "them)")


def test_a_column_that_underflows_gets_a_zero_coefficient_and_a_note():
    rows = _rows()
    tiny = [{**r, "platform": "z", "model_params": 1e-300, TARGET: 1e300 * r["num_gpus"]}
            for r in rows[:4]]
    law = scaling.fit_physics([*rows, *tiny], TARGET, n_boot=0)
    assert law.platforms == ["h100_sxm_80gb", "l40s", "z"]
    z = law.platforms.index("z")
    assert law.coef[z, 0] == 0.0 and law.coef[z, 1] == pytest.approx(1e300, rel=1e-9)
    assert math.isfinite(law.sigma)
    assert law.notes == ["a coefficient sits at its bound 0 (non-negative fit)"]


def test_the_at_bound_note_only_when_a_coefficient_is_zero():
    law = scaling.fit_physics(_rows(), TARGET, n_boot=0)
    assert (law.coef > 0).all() and law.notes == []
    # energy falling with the GPU count: the gpus coefficient sits at 0
    rows = [{**r, TARGET: 1e-9 * r["model_params"] / r["num_gpus"]} for r in _rows()]
    law = scaling.fit_physics(rows, TARGET, n_boot=0)
    assert (law.coef[:, 1] == 0).all() and (law.coef[:, 0] > 0).all()
    assert law.notes == ["a coefficient sits at its bound 0 (non-negative fit)"]


def test_fit_physics_counts_runs_behind_a_skipped_one():
    rows = _rows()
    n = len(rows)
    no_target = {**rows[0], TARGET: None}
    no_gpus = {k: v for k, v in rows[1].items() if k != "num_gpus"}
    assert scaling.fit_physics([no_target, *rows], TARGET, n_boot=0).n == n
    assert scaling.fit_physics([no_gpus, *rows], TARGET, n_boot=0).n == n
    no_tokens = {**rows[2], "tokens": 0}
    assert scaling.fit_physics([no_tokens, *rows], "energy_j", n_boot=0).n == n
    half = {**rows[3], "tokens": 0.5, "energy_j": rows[3][TARGET] * 0.5}
    assert scaling.fit_physics([*rows, half], "energy_j", n_boot=0).n == n + 1


def test_fit_physics_needs_parameters_plus_five_runs():
    rows = [r for r in _rows() if r["platform"] == "l40s"]
    assert scaling.fit_physics(rows[:7], TARGET, n_boot=0).n == 7  # 2 + 5: enough
    with pytest.raises(InputError) as exc:
        scaling.fit_physics(rows[:6], TARGET, n_boot=0)
    assert (exc.value.field, exc.value.reason) == (
        TARGET, "refusing to fit the physics law: 6 runs for 2 parameters; it needs at least 7")


def test_fit_physics_refuses_mean_power_naming_the_target():
    with pytest.raises(InputError) as exc:
        scaling.fit_physics(_rows(), "mean_power_w")
    assert (exc.value.field, exc.value.reason) == (
        "mean_power_w", "the physics law predicts energy per token; mean power needs the run's "
                        "throughput, which is measured, not known before the run")


def test_an_inference_fit_has_the_three_inference_terms():
    rows = _served()
    law = scaling.fit_physics(rows, TARGET, n_boot=0)
    assert law.terms == ["weight_bytes_per_token", "flops_per_token", "gpus"]
    x = _design(law, rows)
    y = np.array([r[TARGET] for r in rows])
    assert np.allclose(law.coef.ravel(), _nnls_fit(x, y), rtol=1e-9, atol=0)
    # a setting without a workload is read as the law's workload
    setting = {"platform": "a", "model_params": 7e9, "batch_size": 8, "num_gpus": 4}
    expected = 1.0 * law.coef[0] @ [2 * 7e9 / 8, 2 * 7e9, 4.0]
    assert law.log_predict([setting])[0] == pytest.approx(math.log(expected), rel=1e-12)
    assert law.params_json()["form"] == (
        "c[weight_bytes_per_token] * weight_bytes_per_token + c[flops_per_token] * "
        "flops_per_token + c[gpus] * gpus (J per token)")


def test_one_bootstrap_replicate_is_its_own_interval():
    rows = _rows()
    law = scaling.fit_physics(rows, TARGET, n_boot=1, seed=9)
    x = _design(law, rows)
    y = np.array([r[TARGET] for r in rows])
    pred = x @ law.coef.ravel()
    resid = np.log(y / pred)
    idx = np.random.default_rng(9).integers(0, len(rows), len(rows))
    boot = _nnls_fit(x, pred * np.exp(resid[idx])).reshape(law.coef.shape)
    assert np.allclose(law.coef_ci[..., 0], boot, rtol=1e-9, atol=0)
    assert np.allclose(law.coef_ci[..., 1], boot, rtol=1e-9, atol=0)
    assert not np.allclose(boot, law.coef, rtol=1e-6, atol=0)


def test_fit_physics_seed_defaults_to_zero():
    rows = _rows()
    default = scaling.fit_physics(rows, TARGET, n_boot=20)
    assert np.array_equal(default.coef_ci, scaling.fit_physics(rows, TARGET, n_boot=20,
                                                               seed=0).coef_ci)
    assert not np.array_equal(default.coef_ci, scaling.fit_physics(rows, TARGET, n_boot=20,
                                                                   seed=1).coef_ci)


# -- PhysicsLaw -----------------------------------------------------------------------------------

def _law(coef: list[float], **kw) -> physics.PhysicsLaw:
    return physics.PhysicsLaw(TARGET, ["flops_per_token", "gpus"], ["a", "b"],
                              np.array([coef, [1.0, 1.0]]), np.zeros((2, 2, 2)), 0.2, 12, **kw)


ROW = {"platform": "a", "model_params": 1.0, "num_gpus": 1, "method": "full", "tokens": 10}


def test_law_errors_name_the_platforms_and_terms():
    law = _law([1.0, 1.0])
    with pytest.raises(common.Unpredictable) as exc:
        law.log_predict([{**ROW, "platform": "tpu"}])
    assert (exc.value.field, exc.value.reason) == (
        "platform", "platform 'tpu' is not in the fit (known: a, b)")
    with pytest.raises(common.Unpredictable) as exc:
        law.log_predict([{**ROW, "workload": "inference", "batch_size": 2}])
    assert (exc.value.field, exc.value.reason) == (
        "workload", "the physics law was fitted on flops_per_token, gpus; this row is another "
                    "workload")


def test_energy_j_needs_positive_planned_tokens():
    law = _law([1.0, 1.0])
    law.target = "energy_j"
    assert law.log_predict([{**ROW, "tokens": 0.5}])[0] == pytest.approx(math.log(7.0 * 0.5))
    for bad in (0, -1):
        with pytest.raises(common.Unpredictable) as exc:
            law.log_predict([{**ROW, "tokens": bad}])
        assert exc.value.field == "tokens"


def test_predict_rows_uses_the_conformal_width_else_1645_sigma():
    law = _law([0.0, 2.0], q90=0.3)  # e = 2 J per token
    (value, lo, hi), = law.predict_rows([ROW])
    assert value == pytest.approx(2.0) and lo == pytest.approx(2.0 * math.exp(-0.3))
    assert hi == pytest.approx(2.0 * math.exp(0.3))
    law.q90 = None
    (value, lo, hi), = law.predict_rows([ROW])
    assert lo == pytest.approx(2.0 * math.exp(-1.645 * 0.2))
    assert hi == pytest.approx(2.0 * math.exp(1.645 * 0.2))


def test_predict_rows_names_the_target_of_an_out_of_range_bound():
    for coef, q, log_value in ((math.exp(701.0), 0.0, "701"), (math.exp(699.0), 2.0, "701"),
                               (math.exp(-699.0), 2.0, "-701")):
        law = _law([0.0, coef], q90=q)
        with pytest.raises(common.Unpredictable) as exc:
            law.predict_rows([ROW])
        assert (exc.value.field, exc.value.reason) == (
            "settings", f"the prediction is out of range (log value {log_value}): "
                        "energy_per_token_j")


def test_params_json_is_published_as_written():
    law = _law([1.5, 0.0], q90=0.25, interval="in-sample t")
    law.coef_ci[0, 0] = [1.0, 2.0]
    assert law.params_json() == {
        "form": "c[flops_per_token] * flops_per_token + c[gpus] * gpus (J per token)",
        "terms": {"weight_bytes_per_token": "2 N_total / B (16-bit weights streamed once per "
                                            "decode step, shared by B tokens); c in J/byte",
                  "flops_per_token": "2 N_active (inference) or k N_active (training: k = 6 "
                                     "full, 4 LoRA/QLoRA, +2 gradient checkpointing); c in "
                                     "J/FLOP",
                  "gpus": "G; c in J per GPU per token"},
        "params": {"a": {"flops_per_token": {"value": 1.5, "ci95": [1.0, 2.0]},
                         "gpus": {"value": 0.0, "ci95": [0.0, 0.0]}},
                   "b": {"flops_per_token": {"value": 1.0, "ci95": [0.0, 0.0]},
                         "gpus": {"value": 1.0, "ci95": [0.0, 0.0]}}},
        "sigma_log": 0.2, "interval_90_half_width_log": 0.25, "interval_method": "in-sample t"}
    back = physics.PhysicsLaw.from_json(json.loads(json.dumps(law.to_json())))
    assert back.q90 == 0.25 and back.interval == "in-sample t" and back.n == 12


# -- fit (FitResult) ------------------------------------------------------------------------------

def test_fit_refuses_an_unknown_target_naming_the_targets():
    with pytest.raises(InputError) as exc:
        scaling.fit(_rows(), target="power")
    assert (exc.value.field, exc.value.reason) == (
        "target", "target 'power' is not one of energy_per_token_j, mean_power_w, energy_j")


def test_fit_drops_runs_without_a_positive_target():
    rows = _rows()
    result = scaling.fit([*rows, {**rows[0], TARGET: None}, {**rows[1], TARGET: 0}], n_boot=0)
    assert result.dropped == 2 and result.to_json()["runs_dropped"] == 2
    assert result.target == TARGET and result.to_json()["target"] == TARGET


def test_fit_keeps_the_physics_refusal_as_its_note():
    rows = [{**r, "mean_power_w": 300.0 * r["num_gpus"]} for r in _rows()]
    result = scaling.fit(rows, target="mean_power_w", n_boot=0)
    assert result.physics is None
    assert result.physics_note == ("the physics law predicts energy per token; mean power needs "
                                   "the run's throughput, which is measured, not known before "
                                   "the run")
    assert result.to_json()["laws"]["physics"] == {"params": None,
                                                   "not_fitted": result.physics_note,
                                                   "holdout": None}


def test_fit_seeds_default_to_zero_and_reach_the_physics_law():
    rows = _rows()
    result = scaling.fit(rows, n_boot=20)
    same = scaling.fit_loglinear(rows, TARGET, n_boot=20, seed=0)
    assert np.array_equal(result.loglinear.ci_lo, same.ci_lo)
    assert not np.array_equal(result.loglinear.ci_lo,
                              scaling.fit_loglinear(rows, TARGET, n_boot=20, seed=1).ci_lo)
    seeded = scaling.fit(rows, n_boot=20, seed=7)
    assert np.array_equal(seeded.physics.coef_ci,
                          scaling.fit_physics(rows, TARGET, n_boot=20, seed=7).coef_ci)


def test_fit_json_laws_and_baselines_carry_the_holdout():
    rows = _rows()
    result = scaling.fit(rows, n_boot=20, seed=7, holdout="platform=l40s")
    train = [r for r in rows if r["platform"] != "l40s"]
    test = [r for r in rows if r["platform"] == "l40s"]
    direct = holdout.evaluate_holdout(train, test, TARGET, "platform=l40s", 20, 7)
    assert json.dumps(result.holdout, sort_keys=True) == json.dumps(direct, sort_keys=True)
    ho = result.holdout
    data = result.to_json()
    assert data["laws"] == {
        "loglinear": {"params": result.loglinear.params_json(),
                      "holdout": ho["laws"]["loglinear"]},
        "physics": {"params": result.physics.params_json(), "not_fitted": None,
                    "holdout": ho["laws"]["physics"]}}
    assert data["baselines"] == {"constant": {"holdout": ho["baselines"]["constant"]},
                                 "proportional": {"holdout": ho["baselines"]["proportional"]}}
    plain = scaling.fit(rows, n_boot=0).to_json()
    assert plain["baselines"] == {"constant": {"holdout": None},
                                  "proportional": {"holdout": None}}
    assert plain["laws"]["loglinear"]["holdout"] is None


def test_load_fit_refuses_another_format_naming_it():
    with pytest.raises(InputError) as exc:
        scaling.load_fit({"format": "llm-powertrace-fit/1"})
    assert (exc.value.field, exc.value.reason) == (
        "format", "not a fit file of this version (format 'llm-powertrace-fit/1', expected "
                  "'llm-powertrace-fit/2'); fit again")


# -- predict --------------------------------------------------------------------------------------

SETTING = {"platform": "h100_sxm_80gb", "model_params": 1e9, "num_gpus": 2, "seq_len": 512,
           "method": "full", "precision": "bf16", "global_batch_size": 8}


@pytest.fixture(scope="module")
def fit_json() -> dict:
    return json.loads(json.dumps(scaling.fit(_rows(), n_boot=0).to_json()))


def test_predict_returns_the_documented_keys(fit_json):
    out = scaling.predict(fit_json, SETTING, model="physics")
    law = physics.PhysicsLaw.from_json(fit_json["physics"])
    value, lo, hi = law.predict_rows([SETTING])[0]
    assert out == {"target": TARGET, "model": "physics", "value": value, "lo90": lo,
                   "hi90": hi, "extrapolation_decades": {}, "warnings": [],
                   "settings": SETTING}


def test_predict_allows_exactly_the_extrapolation_limit(fit_json):
    hi = fit_json["loglinear"]["axis_stats"]["model_params"][2]
    out = scaling.predict(fit_json, {**SETTING, "model_params": hi * 10 ** 3.0})
    assert out["extrapolation_decades"] == {"model_params": 3.0}
    g_hi = fit_json["loglinear"]["axis_stats"]["num_gpus"][2]
    with pytest.raises(InputError) as exc:  # the first axis beyond the limit is named
        scaling.predict(fit_json, {**SETTING, "model_params": hi * 10 ** 3.0,
                                   "num_gpus": g_hi * 10 ** 3.5})
    assert exc.value.field == "num_gpus"


def test_load_fit_reads_utf8_whatever_the_locale(tmp_path):
    """JSON is UTF-8: a fit saved with a non-ASCII note reads back under an ASCII C locale."""
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"format": common.FORMAT, "physics_note": "25 °C"},
                               ensure_ascii=False), encoding="utf-8")
    root = Path(scaling.__file__).resolve().parents[2]
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONCOERCECLOCALE": "0", "PYTHONPATH": str(root)}
    code = ("import sys; from llm_powertrace_ds.scaling import load_fit; "
            "sys.exit(0 if load_fit(sys.argv[1])['physics_note'] == '25 \\u00b0C' else 3)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
