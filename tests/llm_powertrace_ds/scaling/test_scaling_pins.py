"""Exact pins of the scaling helpers and ``predict``'s edges (from the mutation run's survivors).

Each test states a rule a one-line change would break: the conformal rank, the exp guard,
the FLOPs factor, number formatting, the extrapolation distance and its warning, the error
fields ``predict`` names, the physics law's JSON defaults and the seeds the fits receive.
"""

from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import pytest

from llm_powertrace_ds import scaling
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.scaling import common, holdout, physics
from llm_powertrace_ds.scaling.common import (
    _conformal_q,
    _exp,
    _flops_factor,
    _fmt,
    _level,
    mdape,
    parse_value,
    training_flops,
)


def _rows(n: int = 48, seed: int = 3) -> list[dict]:
    """Fine-tuning runs from e = c · N^0.7 · G^0.1 with 5 % noise, two platforms, four models."""
    rng = np.random.default_rng(seed)
    grid = list(itertools.product([1e8, 3e8, 1e9, 7e9], [1, 2, 4, 8], ["h100_sxm_80gb", "l40s"],
                                  [256, 1024]))
    rows = []
    for i in rng.choice(len(grid), size=n, replace=False):
        npar, g, plat, seq = grid[i]
        y = (2e-7 if plat == "h100_sxm_80gb" else 3e-7) * npar ** 0.7 * g ** 0.1
        y *= math.exp(rng.normal(0, 0.05))
        tokens = 8 * seq * 100
        rows.append({"run_id": f"r{i}", "workload": "finetune", "platform": plat,
                     "model_family": "llama", "model_name": f"m{npar:g}", "model_params": npar,
                     "global_batch_size": 8, "seq_len": seq, "num_gpus": g, "method": "full",
                     "precision": "bf16", "tokens": tokens, "energy_per_token_j": y,
                     "energy_j": y * tokens, "duration_s": 100.0})
    return rows


@pytest.fixture(scope="module")
def fit_json() -> dict:
    return json.loads(json.dumps(scaling.fit(_rows(), n_boot=20).to_json()))


# -- common helpers -------------------------------------------------------------------------------

def test_conformal_q_is_the_ceil_level_n_plus_1_th_smallest_absolute_residual():
    nine = np.array([-9.0, 1.0, -2.0, 3.0, 4.0, -5.0, 6.0, 7.0, 8.0])
    assert _conformal_q(nine) == 9.0  # k = ceil(0.9 * 10) = 9 = n: the largest
    assert _conformal_q(nine[:8]) is None  # k = ceil(0.9 * 9) = 9 > 8
    assert _conformal_q(np.array([5.0, -1.0, 3.0, 2.0, 4.0]), level=0.1) == 1.0  # k = 1
    assert _conformal_q(np.array([5.0, 1.0]), level=0.0) is None  # k = 0: no rank
    assert _conformal_q(np.arange(1.0, 20.0)) == 18.0  # n = 19: k = ceil(18) = 18


def test_exp_refuses_non_finite_and_out_of_range_logs():
    assert _exp(700.0, "x") == math.exp(700.0)  # the bound itself is allowed
    for mu in (701.0, -701.0, float("nan"), float("inf")):
        with pytest.raises(common.Unpredictable) as exc:
            _exp(mu, "N=7e9")
        assert exc.value.field == "settings"
    with pytest.raises(common.Unpredictable) as exc:
        _exp(701.0, "N=7e9")
    assert exc.value.reason == "the prediction is out of range (log value 701): N=7e9"


def test_flops_factor_counts_checkpointing_only_for_true_values():
    assert _flops_factor({}) == 6.0 and _flops_factor({"method": "LoRA"}) == 4.0
    assert _flops_factor({"method": "qlora"}) == 4.0
    for on in (True, "true", "True", 1):
        assert _flops_factor({"gradient_checkpointing": on}) == 8.0, on
    for off in (False, "false", 0, 2, None, "TRUE"):
        assert _flops_factor({"gradient_checkpointing": off}) == 6.0, off


def test_fmt_groups_whole_thousands_and_uses_4_significant_digits_otherwise():
    assert _fmt(1000.0) == "1,000" and _fmt(-2048.0) == "-2,048"
    assert _fmt(999.0) == "999" and _fmt(0.5) == "0.5" and _fmt(1500.5) == "1500"
    assert _fmt(1e15) == "1e+15" and _fmt(999_999_999_999_999.0) == "999,999,999,999,999"


def test_level_names_a_missing_value_none():
    assert _level(None) == "none" and _level(3) == "3" and _level("bf16") == "bf16"


def test_mdape_pairs_must_have_one_length():
    with pytest.raises(ValueError):
        mdape([1.0, 2.0], [1.0])


def test_parse_value_keeps_non_numbers_as_text():
    assert parse_value("inf") == "inf" and parse_value("nan") == "nan"
    assert parse_value("7x") == "7x" and parse_value("") == "" and parse_value("k") == "k"
    assert parse_value("7B") == 7e9 and parse_value("2k") == 2000.0


def test_training_flops_needs_positive_parameters_and_tokens():
    base = {"workload": "finetune", "method": "full", "tokens": 10.0}
    assert training_flops({**base, "model_params": 0}) is None
    assert training_flops({**base, "model_params": -3}) is None
    assert training_flops({**base, "model_params": 1}) == 60.0
    assert training_flops({**base, "model_params": 5, "tokens": 0}) is None
    assert training_flops({**base, "model_params": 5, "tokens": 1}) == 30.0
    inference = {"workload": "inference", "model_params": 5, "tokens_out": 3.0}
    assert training_flops(inference) == 30.0  # no tokens_in: 2 N (0 + out)


# -- holdout and physics helpers --------------------------------------------------------------------

def test_proportional_baseline_of_mean_power_is_the_gpu_count():
    assert holdout._proportional_x({"num_gpus": 4, "model_params": 7e9}, "mean_power_w") == 4.0
    assert holdout._proportional_x({"model_params": 7e9}, "mean_power_w") is None


def test_physics_batch_is_the_first_positive_of_batch_concurrency_global():
    assert physics._batch({"concurrency": 16}) == 16.0
    assert physics._batch({"global_batch_size": 64}) == 64.0
    assert physics._batch({"batch_size": 0, "concurrency": 8}) == 8.0
    assert physics._batch({"batch_size": 1, "concurrency": 8}) == 1.0
    assert physics._batch({}) is None


def test_physics_law_json_defaults_and_round_trip():
    law = scaling.fit_physics(_rows(), "energy_per_token_j", n_boot=0)
    law.interval = "in-sample t"
    data = json.loads(json.dumps(law.to_json()))
    assert physics.PhysicsLaw.from_json(data).interval == "in-sample t"
    del data["interval_method"], data["notes"]
    old = physics.PhysicsLaw.from_json(data)
    assert old.interval == "group-wise conformal" and old.notes == []


def test_each_law_gets_the_callers_seed_and_bootstrap_count():
    rows, target = _rows(), "energy_per_token_j"
    ll = holdout._fit_law("loglinear", rows, target, 30, 7, conformal=False)
    same = scaling.fit_loglinear(rows, target, n_boot=30, seed=7)
    assert np.array_equal(ll.ci_lo, same.ci_lo) and np.array_equal(ll.ci_hi, same.ci_hi)
    other = scaling.fit_loglinear(rows, target, n_boot=30, seed=0)
    assert not np.array_equal(ll.ci_lo, other.ci_lo)  # the seed matters: the pin can fail
    ph = holdout._fit_law("physics", rows, target, 30, 7, conformal=False)
    assert np.array_equal(ph.coef_ci, scaling.fit_physics(rows, target, n_boot=30,
                                                          seed=7).coef_ci)
    assert not np.array_equal(ph.coef_ci, scaling.fit_physics(rows, target, n_boot=30,
                                                              seed=0).coef_ci)
    assert not np.array_equal(ph.coef_ci, scaling.fit_physics(rows, target, n_boot=200,
                                                              seed=7).coef_ci)


def test_a_saved_fit_is_indented_json(tmp_path):
    result = scaling.fit(_rows(), n_boot=0)
    result.save(tmp_path / "fit.json")
    text = (tmp_path / "fit.json").read_text()
    assert text == json.dumps(result.to_json(), indent=2)


# -- predict ----------------------------------------------------------------------------------------

SETTING = {"platform": "h100_sxm_80gb", "model_params": 1e9, "num_gpus": 2, "seq_len": 512,
           "method": "full", "precision": "bf16", "global_batch_size": 8}


def test_predict_defaults_to_loglinear_without_a_best_law(fit_json):
    data = {k: v for k, v in fit_json.items() if k != "best_law"}
    assert scaling.predict(data, SETTING)["model"] == "loglinear"


def test_predict_errors_name_their_field(fit_json):
    with pytest.raises(InputError) as exc:
        scaling.predict(fit_json, SETTING, model="cubic")
    assert (exc.value.field, exc.value.reason) == ("model", "model 'cubic' is not loglinear or "
                                                            "physics")
    with pytest.raises(InputError) as exc:
        scaling.predict(fit_json, {**SETTING, "colour": "red"})
    assert exc.value.field == "colour"
    assert exc.value.reason == ("unknown setting 'colour': use a column (e.g. model_params, "
                                "num_gpus, batch_size) or a symbol (B, B_c, G, L, L_in, L_out, "
                                "N, P_cap, b, f, lambda, r)")
    no_physics = {**fit_json, "physics": None, "physics_note": "too few runs"}
    with pytest.raises(InputError) as exc:
        scaling.predict(no_physics, SETTING, model="physics")
    assert (exc.value.field, exc.value.reason) == ("model", "this fit has no physics law (too "
                                                            "few runs)")


def test_predict_measures_extrapolation_below_and_above_the_range(fit_json):
    lo, _, hi = fit_json["loglinear"]["axis_stats"]["model_params"]
    inside = scaling.predict(fit_json, {**SETTING, "model_params": math.sqrt(lo * hi)})
    assert inside["extrapolation_decades"] == {} and inside["warnings"] == []
    edge = scaling.predict(fit_json, {**SETTING, "model_params": lo})
    assert edge["extrapolation_decades"] == {}
    below = scaling.predict(fit_json, {**SETTING, "model_params": lo / 10 ** 0.5})
    assert below["extrapolation_decades"] == {"model_params": 0.5}
    above = scaling.predict(fit_json, {**SETTING, "model_params": hi * 10 ** 0.12345})
    assert above["extrapolation_decades"] == {"model_params": 0.123}
    assert above["warnings"] == [f"model_params={_fmt(hi * 10 ** 0.12345)} is 0.12 decades "
                                 f"beyond the training range {_fmt(lo)}-{_fmt(hi)}"]
    g_lo = fit_json["loglinear"]["axis_stats"]["num_gpus"][0]
    half = scaling.predict(fit_json, {**SETTING, "num_gpus": g_lo / 2})
    assert half["extrapolation_decades"] == {"num_gpus": round(math.log10(2), 3)}


def test_predict_refuses_a_zero_setting_with_an_input_error(fit_json):
    with pytest.raises(InputError):
        scaling.predict(fit_json, {**SETTING, "model_params": 0})


def test_axis_values_ignore_booleans_and_use_positive_active_parameters():
    assert common.axis_value({"num_gpus": True}, "num_gpus") is None
    moe = {"model_params": 47e9, "model_params_active": 0.5}
    assert common.axis_value(moe, "model_params") == 0.5
    assert common.axis_value({**moe, "model_params_active": 0}, "model_params") == 47e9
    assert holdout._proportional_x({**moe, "model_params_active": 13e9},
                                   "energy_per_token_j") == 13e9


def test_physics_bootstrap_is_capped_at_200():
    rows, target = _rows(), "energy_per_token_j"
    ph = holdout._fit_law("physics", rows, target, 500, 7, conformal=False)
    assert np.array_equal(ph.coef_ci, scaling.fit_physics(rows, target, n_boot=200,
                                                          seed=7).coef_ci)


def test_the_interval_note_says_which_interval_a_law_carries(monkeypatch):
    rows, target = _rows(), "energy_per_token_j"
    law = holdout._fit_law("loglinear", rows, target, 0, 0)
    assert law.interval == "group-wise conformal" and law.q90 is not None
    assert re.fullmatch(r"90 % interval: group-wise conformal over \d+ cross-group residuals "
                        r"\(\d+ runs a fold could not predict\)", law.notes[-1]), law.notes
    monkeypatch.setattr(holdout, "conformal_half_width", lambda *a: (None, 4, 0))
    law = holdout._fit_law("loglinear", rows, target, 0, 0)
    assert law.interval == "in-sample t (too few cross-group residuals for conformal)"
    assert law.notes[-1] == "90 % interval from the in-sample sigma: only 4 cross-group residuals"


# -- from the random sample's survivors ------------------------------------------------------------

def test_error_fields_of_load_fit_split_holdout_and_far_predictions(tmp_path, fit_json):
    bad = tmp_path / "fit.json"
    bad.write_text("{not json")
    with pytest.raises(InputError) as exc:
        scaling.load_fit(bad)
    assert exc.value.file == str(bad) and exc.value.reason.startswith("cannot read the fit: ")
    with pytest.raises(InputError) as exc:
        scaling.split_holdout(_rows(), "nothing")
    assert exc.value.field == "holdout"
    with pytest.raises(InputError) as exc:
        scaling.split_holdout([{"run_id": "a"}], "model_params=top")
    assert (exc.value.field, exc.value.reason) == ("holdout", "no run has a numeric model_params")
    hi = fit_json["loglinear"]["axis_stats"]["model_params"][2]
    with pytest.raises(InputError) as exc:
        scaling.predict(fit_json, {**SETTING, "model_params": hi * 1e4})
    assert exc.value.field == "model_params"


def test_predict_says_which_measured_settings_it_ignored(fit_json):
    out = scaling.predict(fit_json, {**SETTING, "duration_s": 60.0})
    assert out["warnings"] == ["ignored duration_s: measured during a run, not known before it "
                               "(the laws predict from pre-run settings only)"]


def test_physics_features_name_the_missing_axis():
    for row, field, reason in (({"num_gpus": 1, "tokens": 10}, "model_params",
                                "the physics law needs model_params (N)"),
                               ({"model_params": 7e9, "tokens": 10}, "num_gpus",
                                "the physics law needs num_gpus (G)")):
        with pytest.raises(common.Unpredictable) as exc:
            scaling.physics_features(row)
        assert (exc.value.field, exc.value.reason) == (field, reason)


def test_baselines_say_what_they_need_and_pool_ratios_across_platforms():
    train = [{"platform": "a", "model_params": 1e9, "num_gpus": 2, "tokens": 10.0,
              "energy_per_token_j": 0.5, "mean_power_w": 600.0, "energy_j": 5.0}]
    bare = [{"platform": "a"}]
    assert holdout.baseline_predictions(train, bare, "mean_power_w")["proportional"] == [
        (None, "needs num_gpus")]
    assert holdout.baseline_predictions(train, bare, "energy_j")["proportional"] == [
        (None, "needs model_params and tokens")]
    other = [{"platform": "b", "model_params": 4e9}]  # no run of its platform: pooled y / x
    (value, why), = holdout.baseline_predictions(train, other, "energy_per_token_j")[
        "proportional"]
    assert why == "" and value == pytest.approx(0.5 / 1e9 * 4e9)


def test_loglinear_interval_defaults(fit_json):
    law = scaling.LogLinearLaw.from_json(fit_json["loglinear"])
    assert law.interval == fit_json["loglinear"]["interval_method"]
    data = {k: v for k, v in fit_json["loglinear"].items() if k != "interval_method"}
    assert scaling.LogLinearLaw.from_json(data).interval == "group-wise conformal"
    law.q90 = None  # no conformal width: the in-sample 1.645 sigma
    value, lo, hi = law.predict_rows([SETTING])[0]
    assert hi / value == pytest.approx(math.exp(1.645 * law.sigma))
    assert value / lo == pytest.approx(math.exp(1.645 * law.sigma))


def test_law_descriptions_are_published_as_written():
    ll = scaling.fit_loglinear(_rows(), "energy_per_token_j", n_boot=0)
    assert ll.params_json()["form"] == ("log y = log a_platform + sum beta log x + sum gamma "
                                        "(log B - c)^2 + sum log factor")
    ph = scaling.fit_physics(_rows(), "energy_per_token_j", n_boot=0).params_json()
    assert ph["terms"]["weight_bytes_per_token"] == (
        "2 N_total / B (16-bit weights streamed once per decode step, shared by B tokens); c in "
        "J/byte")


def test_a_fit_without_a_physics_law_serialises_it_as_null():
    rows = [{**r, "mean_power_w": 300.0 * r["num_gpus"]} for r in _rows()]
    result = scaling.fit(rows, target="mean_power_w", n_boot=0)
    assert result.physics is None and result.to_json()["physics"] is None
