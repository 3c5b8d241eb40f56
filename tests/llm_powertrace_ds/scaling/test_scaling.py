"""The scaling law: exponent recovery, holdout with baselines, physics form, predict intervals.

The helpers' exact rules too: the conformal rank, the exp guard, the FLOPs factor, number
formatting, the extrapolation distance and its warning, the error fields ``predict`` names, the
physics law's JSON defaults and the seeds the fits receive.
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
from llm_powertrace_ds.scaling import common, holdout, intervals, physics
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

from .synthetic import finetune_rows as _rows

TRUE = {"model_params": 0.7, "global_batch_size": -0.3, "seq_len": 0.2, "num_gpus": 0.1}
INTERCEPT = {"h100_sxm_80gb": 2e-7, "l40s": 3.5e-7}
METHOD = {"full": 1.0, "lora": 0.6}
PRECISION = {"bf16": 1.0, "fp32": 1.8}


def loglinear_rows(n: int = 240, noise: float = 0.05, seed: int = 1) -> list[dict]:
    """Runs from a known log-linear law with 5 % multiplicative (log-normal) noise."""
    rng = np.random.default_rng(seed)
    grid = list(itertools.product([1e8, 3e8, 1e9, 3e9, 7e9], [4, 8, 16, 32], [256, 512, 1024, 2048],
                                  [1, 2, 4, 8], list(INTERCEPT), list(METHOD), list(PRECISION)))
    rows = []
    for i in rng.choice(len(grid), size=n, replace=False):
        npar, b, seq, g, plat, method, prec = grid[i]
        y = INTERCEPT[plat] * METHOD[method] * PRECISION[prec]
        for axis, value in zip(TRUE, (npar, b, seq, g), strict=True):
            y *= value ** TRUE[axis]
        y *= math.exp(rng.normal(0, noise))
        tokens = b * seq * 200
        rows.append({"run_id": f"ll-{i}", "workload": "finetune", "platform": plat,
                     "model_family": "llama", "model_params": npar, "global_batch_size": b,
                     "seq_len": seq, "num_gpus": g, "method": method, "precision": prec,
                     "tokens": tokens, "energy_per_token_j": y, "energy_j": y * tokens,
                     "duration_s": 100.0 + rng.uniform(0, 50)})
    return rows


PHYS = {"h100_sxm_80gb": (0.9e-12, 0.004), "l40s": (1.6e-12, 0.009)}


def physics_rows(n: int = 200, noise: float = 0.05, seed: int = 2) -> list[dict]:
    """Runs whose energy per token follows the pre-run physics law e = beta k N + gamma G."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        plat = list(PHYS)[i % 2]
        beta, gamma = PHYS[plat]
        npar = float(rng.choice([1e8, 3e8, 1e9, 3e9, 7e9]))
        b = int(rng.choice([4, 8, 16, 32]))
        seq = int(rng.choice([256, 512, 1024, 2048]))
        g = int(rng.choice([1, 2, 4, 8]))
        method = str(rng.choice(["full", "lora"]))
        steps = int(rng.integers(50, 300))
        tokens = b * seq * steps
        row = {"run_id": f"ph-{i}", "workload": "finetune", "platform": plat,
               "model_family": "llama", "model_name": f"m{npar:g}", "model_params": npar,
               "global_batch_size": b, "seq_len": seq, "num_gpus": g, "method": method,
               "precision": "bf16", "gradient_checkpointing": bool(rng.integers(0, 2)),
               "tokens": tokens}
        flops = scaling.training_flops(row)
        per_token = (beta * flops / tokens + gamma * g) * math.exp(rng.normal(0, noise))
        duration = flops / (g * 1e14 * rng.uniform(0.1, 0.55))  # measured, never a predictor
        row.update(duration_s=duration, energy_j=per_token * tokens,
                   energy_per_token_j=per_token, mean_power_w=per_token * tokens / duration)
        rows.append(row)
    return rows


def test_fit_recovers_exponents_within_005():
    res = scaling.fit(loglinear_rows(), "energy_per_token_j", n_boot=300)
    got = {e["axis"]: e for e in res.loglinear.exponents()}
    assert set(got) == set(TRUE)
    for axis, beta in TRUE.items():
        assert abs(got[axis]["exponent"] - beta) <= 0.05, (axis, got[axis])
        lo, hi = got[axis]["ci95"]
        assert lo <= got[axis]["exponent"] <= hi and hi - lo < 0.1
    js = res.to_json()
    lora = js["loglinear"]["factors"]["method"]["levels"]["lora"]["factor"]
    assert lora == pytest.approx(0.6, rel=0.05)
    assert js["loglinear"]["platform_intercepts"]["l40s"]["a"] == pytest.approx(3.5e-7, rel=0.3)


def _coverage(fit_json: dict, rows: list[dict], model: str) -> float:
    hits = []
    for r in rows:
        p = scaling.predict(fit_json, r, model=model)
        hits.append(p["lo90"] <= r["energy_per_token_j"] <= p["hi90"])
    return float(np.mean(hits))


def test_holdout_loglinear_reports_errors_baselines_and_coverage():
    rows = loglinear_rows()
    res = scaling.fit(rows, "energy_per_token_j", holdout="N=top", n_boot=200)
    ho = res.holdout
    assert ho["n_test"] == sum(r["model_params"] == 7e9 for r in rows)
    m = ho["mdape_pct"]
    for key in ("loglinear", "physics", "baseline_constant", "baseline_proportional"):
        assert key in m
    assert m["baseline_constant"] is not None
    assert m["baseline_proportional"] is not None
    assert m["loglinear"] < 10 < m["baseline_constant"]
    assert ho["coverage90"]["loglinear"] >= 0.8
    # the same through predict() on a fit of the training runs only
    train, test = scaling.split_holdout(rows, "model_params=top")
    train_fit = scaling.fit(train, "energy_per_token_j", n_boot=100).to_json()
    assert _coverage(train_fit, test, "loglinear") >= 0.8


def test_physics_form_wins_on_physics_data_and_covers():
    rows = physics_rows(300)
    res = scaling.fit(rows, "energy_per_token_j", holdout="model_params=top", n_boot=100)
    m = res.holdout["mdape_pct"]
    assert m["physics"] < m["loglinear"], m
    assert res.best_law == "physics"
    assert res.holdout["coverage90"]["physics"] >= 0.8
    p = res.physics
    assert p is not None and p.terms == ["flops_per_token", "gpus"]
    i = p.platforms.index("h100_sxm_80gb")
    assert p.coef[i, 0] == pytest.approx(0.9e-12, rel=0.1)
    assert p.coef[i, 1] == pytest.approx(0.004, rel=0.15)
    train, test = scaling.split_holdout(rows, "N=top")
    train_fit = scaling.fit(train, "energy_per_token_j", n_boot=50).to_json()
    assert _coverage(train_fit, test, "physics") >= 0.8


def test_json_round_trip_and_predict(tmp_path):
    res = scaling.fit(loglinear_rows(120), n_boot=50)
    path = tmp_path / "fit.json"
    res.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == scaling.FORMAT and data["target"] == "energy_per_token_j"
    setting = {"platform": "h100_sxm_80gb", "N": 7e9, "B": 8, "L": 1024, "G": 4,
               "method": "lora", "precision": "bf16"}
    out = scaling.predict(path, setting, model="loglinear")
    truth = 2e-7 * 0.6 * 7e9 ** 0.7 * 8 ** -0.3 * 1024 ** 0.2 * 4 ** 0.1
    assert out["lo90"] < out["value"] < out["hi90"]
    assert out["lo90"] <= truth <= out["hi90"]
    with pytest.raises(InputError, match="platform"):
        scaling.predict(path, {**setting, "platform": "a100"}, model="loglinear")
    with pytest.raises(InputError, match="method"):
        scaling.predict(path, {**setting, "method": "qlora"}, model="loglinear")
    with pytest.raises(InputError, match="seq_len"):
        scaling.predict(path, {k: v for k, v in setting.items() if k != "L"}, model="loglinear")


def test_holdout_family_and_errors():
    rows = loglinear_rows(120)
    for r in rows[:20]:
        r["model_family"] = "qwen"
    res = scaling.fit(rows, holdout="family=qwen", n_boot=50)
    assert res.holdout["n_test"] == 20
    with pytest.raises(InputError, match="selects no run"):
        scaling.fit(rows, holdout="family=gemma", n_boot=10)
    with pytest.raises(InputError, match="target"):
        scaling.fit(rows, target="tokens")
    with pytest.raises(InputError):
        scaling.fit(rows[:3], n_boot=10)


def test_other_targets_and_parse_value():
    # Mean power from pre-run settings. The generator's power is P = 1e14 U G (beta + gamma G / (k N))
    # (per-token energy over a duration FLOPs / (G 1e14 U)), so d log P / d log G = 1 + s and
    # d log P / d log N = -s with s = gamma G / (beta k N + gamma G) in (0, 1): no pure power law,
    # but the fitted exponents must fall strictly inside those ranges.
    res = scaling.fit(physics_rows(80), "mean_power_w", n_boot=20)
    assert res.loglinear.target == "mean_power_w"
    # mean power needs the measured throughput: the pre-run physics law refuses it
    assert res.physics is None
    assert res.physics_note.startswith("the physics law predicts energy per token; mean power")
    got = {e["axis"]: e["exponent"] for e in res.loglinear.exponents()}
    assert 1.0 < got["num_gpus"] < 2.0, got
    assert -1.0 < got["model_params"] < 0.0, got
    # Energy of a run from the known log-linear law: energy_j = e_tok * tokens, tokens = B L 200,
    # so its exponents are the per-token ones plus 1 on B and on L (N^0.7 B^0.7 L^1.2 G^0.1).
    res = scaling.fit(loglinear_rows(120), "energy_j", n_boot=20)
    assert res.loglinear.target == "energy_j" and res.physics is not None
    got = {e["axis"]: e["exponent"] for e in res.loglinear.exponents()}
    want = {**TRUE, "global_batch_size": TRUE["global_batch_size"] + 1,
            "seq_len": TRUE["seq_len"] + 1}
    assert set(got) == set(want)
    for axis, beta in want.items():
        assert got[axis] == pytest.approx(beta, abs=0.05), (axis, got)
    assert scaling.parse_value("7B") == 7e9
    assert scaling.parse_value("512") == 512.0
    assert scaling.parse_value("true") is True
    assert scaling.parse_value("lora") == "lora"


def test_training_flops_conventions():
    base = {"model_params": 1e9, "tokens": 1000}
    assert scaling.training_flops({**base, "method": "full"}) == 6e12
    assert scaling.training_flops({**base, "method": "lora"}) == 4e12
    assert scaling.training_flops({**base, "method": "qlora", "gradient_checkpointing": True}) == 6e12
    inf = {"workload": "inference", "model_params": 1e9, "tokens_in": 100, "tokens_out": 50}
    assert scaling.training_flops(inf) == 2 * 1e9 * 150
    assert scaling.training_flops({"model_params": 1e9}) is None


def test_fit_uses_the_work_window_by_default():
    # the law lives in the work-window column; the whole-trace column adds each run's idle
    # padding (a random share of the energy), which would blur the exponents
    rng = np.random.default_rng(5)
    rows = []
    for r in loglinear_rows():
        r = dict(r)
        r["work_energy_per_token_j"] = r["energy_per_token_j"]
        r["energy_per_token_j"] *= 1.0 + rng.uniform(0.0, 3.0)  # padding of 0-300 %
        rows.append(r)
    work = scaling.fit(rows, "energy_per_token_j", n_boot=0)
    whole = scaling.fit(rows, "energy_per_token_j", n_boot=0, window="whole")
    got = {e["axis"]: e["exponent"] for e in work.loglinear.exponents()}
    for axis, beta in TRUE.items():
        assert abs(got[axis] - beta) <= 0.05, (axis, got[axis])
    assert whole.loglinear.to_json() != work.loglinear.to_json()
    # a row without the work column (an older schema, a published summary) keeps its own value
    assert scaling.result.window_rows([{"energy_j": 5.0}], "energy_j", "work") == [
        {"energy_j": 5.0}]
    with pytest.raises(InputError, match="--window"):
        scaling.fit(rows, "energy_per_token_j", window="padding")


def test_a_fit_on_cpu_proxy_runs_says_so_in_its_notes():
    rows = loglinear_rows(n=60)
    for r in rows[:6]:
        r["sampler"] = "cpu_proxy"
    notes = scaling.fit(rows, "energy_per_token_j", n_boot=0).to_json()["loglinear"]["notes"]
    assert notes[0].startswith("cpu_proxy: 6 of 60 fitted runs are the cpu_proxy model")
    assert "not GPU measurements" in notes[0]
    clean = scaling.fit(loglinear_rows(n=60), "energy_per_token_j", n_boot=0).to_json()
    assert not any("cpu_proxy" in n for n in clean["loglinear"]["notes"])


@pytest.fixture(scope="module")
def fit_json() -> dict:
    return json.loads(json.dumps(scaling.fit(_rows(), n_boot=20).to_json()))


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


def _residual_bootstrap_ci(law: physics.PhysicsLaw, rows: list[dict], n_boot: int, seed: int
                           ) -> np.ndarray:
    """The documented bootstrap, written out.

    Resample the log residuals of the fitted law with replacement (all n of them), refit with
    NNLS, take the 2.5th and 97.5th percentiles.
    """
    from scipy.optimize import nnls

    k = len(law.terms)
    x = np.zeros((len(rows), len(law.platforms) * k))
    for j, r in enumerate(rows):
        i = law.platforms.index(r["platform"])
        feats = scaling.physics_features(r)
        x[j, i * k:(i + 1) * k] = [feats[t] for t in law.terms]
    y = np.array([r[law.target] for r in rows])
    pred = x @ law.coef.ravel()
    resid = np.log(y / pred)
    scale = np.linalg.norm(x / y[:, None], axis=0)
    scale[scale == 0] = 1.0

    def solve(values: np.ndarray) -> np.ndarray:
        return nnls(x / values[:, None] / scale, np.ones(len(values)))[0] / scale

    rng = np.random.default_rng(seed)
    n = len(rows)
    boots = np.array([solve(pred * np.exp(resid[rng.integers(0, n, n)])) for _ in range(n_boot)])
    lo, hi = np.percentile(boots, [2.5, 97.5], axis=0)
    return np.stack([lo.reshape(law.coef.shape), hi.reshape(law.coef.shape)], axis=2)


def test_physics_fit_sigma_target_and_bootstrap_are_the_documented_ones():
    rows = _rows()
    law = scaling.fit_physics(rows, "energy_per_token_j", n_boot=40, seed=5)
    assert law.target == "energy_per_token_j" and law.n == len(rows)
    resid = np.log([r["energy_per_token_j"] for r in rows]) - law.log_predict(rows)
    n_coef = len(law.platforms) * len(law.terms)
    assert law.sigma == pytest.approx(math.sqrt(resid @ resid / (len(rows) - n_coef)), rel=1e-12)
    assert np.allclose(law.coef_ci, _residual_bootstrap_ci(law, rows, 40, 5), rtol=1e-9)
    params = law.params_json()["params"]
    for i, plat in enumerate(law.platforms):
        for j, term in enumerate(law.terms):
            assert params[plat][term] == {"value": float(law.coef[i, j]),
                                          "ci95": [float(v) for v in law.coef_ci[i, j]]}
    assert sorted(law.params_json()["terms"]) == ["flops_per_token", "gpus",
                                                 "weight_bytes_per_token"]


def test_physics_fit_skips_runs_without_a_positive_target_or_tokens():
    rows = _rows()
    law = scaling.fit_physics(rows, "energy_per_token_j", n_boot=0)
    noisy = [*rows, {**rows[0], "energy_per_token_j": None}, {**rows[1], "energy_per_token_j": 0}]
    same = scaling.fit_physics(noisy, "energy_per_token_j", n_boot=0)
    assert same.n == law.n and np.array_equal(same.coef, law.coef)
    no_tokens = [*rows, {**rows[0], "tokens": None}]
    assert scaling.fit_physics(no_tokens, "energy_j", n_boot=0).n == len(rows)


def test_physics_energy_j_is_energy_per_token_times_tokens():
    rows = _rows()
    per_token = scaling.fit_physics(rows, "energy_per_token_j", n_boot=0)
    total = scaling.fit_physics(rows, "energy_j", n_boot=0)
    assert total.target == "energy_j"
    assert np.allclose(total.coef, per_token.coef, rtol=1e-6)
    row = {**rows[0], "tokens": 1000.0}
    assert total.log_predict([row])[0] == pytest.approx(
        math.log(float(total._x(row) @ total.coef.ravel()) * 1000.0))
    with pytest.raises(common.Unpredictable) as exc:
        total.log_predict([{**rows[0], "tokens": None}])
    assert (exc.value.field, exc.value.reason) == (
        "tokens", "energy_j needs the planned tokens (tokens, or tokens_out for inference)")


def test_physics_fit_refusals_say_why():
    with pytest.raises(InputError) as exc:
        scaling.fit_physics([{"platform": "a"}], "energy_per_token_j")
    assert (exc.value.field, exc.value.reason) == (
        "energy_per_token_j", "no run has energy_per_token_j, model_params, num_gpus (and a batch "
                              "size for inference)")
    rows = _rows()
    served = {**rows[0], "workload": "inference", "batch_size": 8}
    with pytest.raises(InputError) as exc:
        scaling.fit_physics([*rows, served], "energy_per_token_j")
    assert (exc.value.field, exc.value.reason) == (
        "workload", "the physics law fits one workload at a time (fine-tuning and inference runs "
                    "are mixed)")
    few = [r for r in rows if r["platform"] == "l40s"][:2] + [
        r for r in rows if r["platform"] == "h100_sxm_80gb"][:6]
    with pytest.raises(InputError) as exc:
        scaling.fit_physics(few, "energy_per_token_j")
    assert exc.value.reason == ("refusing to fit the physics law: 8 runs for 4 parameters; it "
                                "needs at least 9")
    with pytest.raises(InputError) as exc:  # a single run is refused, not an IndexError
        scaling.fit_physics(rows[:1], "energy_per_token_j")
    assert exc.value.reason.startswith("refusing to fit the physics law: 1 runs")
    default = scaling.fit_physics(rows, "energy_per_token_j", seed=3)
    assert np.array_equal(default.coef_ci, scaling.fit_physics(rows, "energy_per_token_j",
                                                               n_boot=200, seed=3).coef_ci)


def test_physics_predictions_name_the_axis_they_cannot_use():
    law = scaling.fit_physics(_rows(), "energy_per_token_j", n_boot=0)
    with pytest.raises(common.Unpredictable) as exc:
        law.log_predict([{**SETTING, "platform": "tpu"}])
    assert exc.value.field == "platform"
    served = {**SETTING, "workload": "inference", "batch_size": 8}  # a fine-tuning law
    with pytest.raises(common.Unpredictable) as exc:
        law.log_predict([served])
    assert exc.value.field == "workload"
    with pytest.raises(common.Unpredictable) as exc:
        scaling.physics_features({"model_params": 7e9, "num_gpus": 1, "workload": "inference"})
    assert exc.value.field == "batch_size"
    zero = physics.PhysicsLaw("energy_per_token_j", ["flops_per_token", "gpus"], ["a"],
                              np.zeros((1, 2)), np.zeros((1, 2, 2)), 0.1, 10)
    with pytest.raises(common.Unpredictable) as exc:
        zero.log_predict([{**SETTING, "platform": "a"}])
    assert (exc.value.field, exc.value.reason) == (
        "settings", "the physics law predicts no energy for this setting (every fitted "
                    "coefficient of its terms is 0)")


def _curved_rows() -> list[dict]:
    """Fine-tuning runs with a curved and a categorical axis.

    The global batch spans exactly x4 over three values; two methods.
    """
    rows = []
    for i, (npar, b, method) in enumerate(itertools.product([1e8, 1e9, 7e9], [2, 4, 8],
                                                            ["full", "lora"])):
        y = 1e-7 * npar ** 0.7 * b ** -0.3 * math.exp(0.2 * math.log(b / 4) ** 2)
        y *= (0.7 if method == "lora" else 1.0) * math.exp(0.002 * math.sin(i))
        rows.append({"run_id": f"c{i}", "platform": "a", "model_params": npar,
                     "global_batch_size": b, "num_gpus": 1, "method": method,
                     "energy_per_token_j": y})
    return rows


def test_loglinear_curvature_dof_r2_and_categorical_errors():
    rows = _curved_rows()
    law = scaling.fit_loglinear(rows, "energy_per_token_j", n_boot=30, seed=1)
    assert "global_batch_size" in law.curved  # x4 over three values is enough for curvature
    (e,) = [e for e in law.exponents() if e["axis"] == "global_batch_size"]
    j = law.columns.index("log2:global_batch_size")
    assert e["curvature"] == float(law.beta[j]) and e["curvature"] == pytest.approx(0.2, abs=0.02)
    assert e["curvature_ci95"] == [float(law.ci_lo[j]), float(law.ci_hi[j])]
    assert law.dof == len(rows) - len(law.columns)
    y = np.log([r["energy_per_token_j"] for r in rows])
    resid = y - law.log_predict(rows)
    assert law.sigma == pytest.approx(math.sqrt(resid @ resid / law.dof), rel=1e-12)
    assert law.r2 == pytest.approx(1 - resid @ resid / ((y - y.mean()) ** 2).sum(), rel=1e-12)
    assert law.r2 < 1.0
    with pytest.raises(common.Unpredictable) as exc:
        law.design([{**rows[0], "method": "dpo"}])
    assert exc.value.field == "method"
    with pytest.raises(InputError) as exc:
        scaling.fit_loglinear(rows[:8], "energy_per_token_j")
    assert exc.value.field == "energy_per_token_j"
    assert exc.value.reason.startswith("refusing to fit: 8 runs for 5 parameters")


def test_conformal_counts_every_run_a_fold_could_not_predict():
    rows = [{"model_name": m, "y": 2.0, "run_id": f"{m}{i}"} for m in "abcd" for i in range(3)]

    class Law:
        def log_predict(self, batch):
            if batch[0]["run_id"] in ("a0", "b1"):
                raise common.Unpredictable("no", field="x")
            return np.array([0.0])

    def fit_fn(train):
        if all(r["model_name"] != "c" for r in train):  # the fold holding out c cannot fit
            raise InputError("too few")
        return Law()

    q, used, skipped = scaling.conformal_half_width(rows, "y", fit_fn)
    assert (used, skipped) == (7, 5)  # c's 3 runs + a0 + b1
    assert q is None  # 7 residuals are too few for a 90 % rank


def test_group_extrapolation_and_holdout_without_a_loglinear_fit():
    assert scaling.group_of({"run_id": "x7"}) == "run:x7"
    train = [{"model_params": 1e9, "num_gpus": 1}, {"model_params": 4e9, "num_gpus": 2}]
    assert scaling.extrapolation(None, train, {"model_params": 1e8, "num_gpus": 1}) == {
        "model_params": 1.0}
    assert scaling.extrapolation(None, train, {"model_params": 4e9 * 10 ** 0.12345}) == {
        "model_params": 0.123}
    rows = _rows()
    test = [rows[0]]
    out = holdout.evaluate_holdout(rows[1:4], test, "energy_per_token_j", "spec", n_boot=0)
    assert out["loglinear_train"] is None
    assert out["laws"]["loglinear"]["n_unpredictable"] == 1
    assert out["laws"]["loglinear"]["unpredictable"][0]["reason"].startswith(
        "loglinear not fitted: refusing to fit")


def test_baselines_prefer_their_platforms_ratio_and_report_what_they_cannot_predict():
    train = [{"platform": "a", "model_params": 1e9, "energy_per_token_j": 1.0},
             {"platform": "b", "model_params": 1e9, "energy_per_token_j": 9.0},
             {"platform": "b", "model_params": 1e9, "energy_per_token_j": 11.0}]
    (value, _), = holdout.baseline_predictions(train, [{"platform": "a", "model_params": 2e9}],
                                               "energy_per_token_j")["proportional"]
    assert value == pytest.approx(2.0)  # a's own ratio 1e-9, not the pooled median 9e-9
    test = [{"platform": "a", "run_id": "t", "energy_per_token_j": 1.0}]  # no model_params
    out = holdout.evaluate_holdout(train, test, "energy_per_token_j", "spec", n_boot=0)
    assert out["baselines"]["proportional"]["n_unpredictable"] == 1
    assert out["baselines"]["proportional"]["unpredictable"] == [
        {"run_id": "t", "reason": "needs model_params"}]
    assert out["baselines"]["constant"]["n_unpredictable"] == 0


def test_fit_passes_its_seed_and_holdout_spec_and_names_every_json_key():
    rows = _rows()
    result = scaling.fit(rows, n_boot=30, seed=7, holdout="model_params=top")
    same = scaling.fit_loglinear(rows, "energy_per_token_j", n_boot=30, seed=7)
    assert np.array_equal(result.loglinear.ci_lo, same.ci_lo)
    assert result.holdout["spec"] == "model_params=top"
    data = result.to_json()
    assert data["holdout_spec"] == "model_params=top" and data["runs_dropped"] == 0
    assert data["laws"]["physics"]["not_fitted"] is None
    assert set(data["laws"]["physics"]) == {"params", "not_fitted", "holdout"}
    assert set(data) == {"format", "target", "n_runs", "laws", "baselines", "best_law",
                         "preferred", "runs_dropped", "holdout_spec", "loglinear", "physics",
                         "physics_note", "holdout"}
    assert set(data["physics"]) >= {"params", "terms", "form", "sigma_log"}


def test_predict_lists_every_ignored_measured_setting(fit_json):
    out = scaling.predict(fit_json, {**SETTING, "duration_s": 60.0, "steps": 10})
    assert out["warnings"][-1].startswith("ignored duration_s, steps: measured during a run")


def test_curvature_only_for_batch_axes_and_narrow_axes_below_one_are_refused():
    assert scaling.fit_loglinear(_rows(), "energy_per_token_j", n_boot=0).curved == {}
    rows = [{**r, "arrival_rate_rps": 0.5 + 0.01 * (i % 2)} for i, r in enumerate(_rows())]
    with pytest.raises(InputError) as exc:
        scaling.fit_loglinear(rows, "energy_per_token_j", n_boot=0)
    assert exc.value.field == "arrival_rate_rps"


def test_conformal_groups_by_model_from_three_models_and_ignores_unusable_targets():
    three = [{"model_name": m} for m in "abc"]
    assert intervals._groups(three) == ["a", "b", "c"]
    assert intervals._groups(three[:2]) == ["run:0", "run:1"]
    rows = [{"model_name": m, "y": 2.0} for m in "abcd"]
    fold_sizes = []

    class Law:
        def log_predict(self, batch):
            return np.array([math.log(2.0)])

    def fit_fn(train):
        fold_sizes.append(len(train))
        return Law()

    junk = [{"model_name": "e", "y": 0}, {"model_name": "f", "y": None}]
    assert scaling.conformal_half_width(rows + junk, "y", fit_fn) == (None, 4, 0)
    assert fold_sizes == [3, 3, 3, 3]


def test_holdout_points_and_intervals_read_back():
    rows = _rows()
    out = scaling.fit(rows, n_boot=0, holdout="platform=l40s").holdout
    assert {pt["platform"] for pt in out["points"]} == {"l40s"}
    data = scaling.fit(rows, n_boot=0).to_json()["loglinear"]
    data["interval_method"] = "in-sample t"
    assert scaling.LogLinearLaw.from_json(data).interval == "in-sample t"
