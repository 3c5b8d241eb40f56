"""Exact pins of the holdout split, the pre-run baselines, the holdout report and the interval helpers.

These pins were found unpinned by mutation testing: each test states a rule of
``scaling.holdout`` / ``scaling.intervals`` (the spec grammar and its errors, which runs a
baseline learns from, the report's keys and counts, the coverage boundaries, the points' keys,
the extrapolation distance and the conformal residual sign) that a one-line change would break.
"""

from __future__ import annotations

import itertools
import math
import types

import numpy as np
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.scaling import common, holdout, intervals
from llm_powertrace_ds.scaling.loglinear import fit_loglinear
from llm_powertrace_ds.scaling.physics import fit_physics

TARGET = "energy_per_token_j"


def _rows() -> list[dict]:
    """Fine-tuning runs, e = c · N^0.7 · G^0.1 · L^0.05 with a small deterministic wiggle."""
    out = []
    for npar, g, plat, seq in itertools.product([1e8, 3e8, 1e9, 7e9], [1, 2, 4], ["h100", "l40s"],
                                                [256, 1024, 4096]):
        y = (2e-7 if plat == "h100" else 3e-7) * npar ** 0.7 * g ** 0.1 * seq ** 0.05
        y *= 1 + 0.03 * math.sin(npar / 1e8 + g + seq)
        out.append({"run_id": f"{plat}-{npar:g}-{g}-{seq}", "workload": "finetune",
                    "platform": plat, "model_family": "llama", "model_name": f"m{npar:g}",
                    "model_params": npar, "global_batch_size": 8, "seq_len": seq, "num_gpus": g,
                    "method": "full", "precision": "bf16", "tokens": 8 * seq * 100,
                    TARGET: y})
    return out


# -- split_holdout ------------------------------------------------------------------------------

def _ids(rows: list[dict]) -> list[str]:
    return [r["run_id"] for r in rows]


def test_split_top_of_a_symbol_uses_active_parameters_and_keeps_order():
    rows = [{"run_id": "a", "model_params": 7e9}, {"run_id": "b", "model_params": 47e9,
                                                   "model_params_active": 13e9},
            {"run_id": "c", "model_params": 13e9}, {"run_id": "d", "model_params": 1e9}]
    for spec in ("N=top", "model_params=top", " N = top "):
        train, test = holdout.split_holdout(rows, spec)
        assert _ids(test) == ["b", "c"] and _ids(train) == ["a", "d"]


def test_split_top_of_a_plain_column_and_family_and_wildcards():
    rows = [{"run_id": "a", "duration_s": 5, "model_family": "llama", "model_name": "x=1"},
            {"run_id": "b", "duration_s": 9, "model_family": "qwen", "model_name": "Mixtral-8x7B"},
            {"run_id": "c", "duration_s": "9", "model_family": "llama", "model_name": "y"}]
    train, test = holdout.split_holdout(rows, "duration_s=top")
    assert _ids(test) == ["b", "c"] and _ids(train) == ["a"]
    train, test = holdout.split_holdout(rows, "family=qwen")
    assert _ids(test) == ["b"] and _ids(train) == ["a", "c"]
    train, test = holdout.split_holdout(rows, "model_name=x=1")  # the first '=' splits
    assert _ids(test) == ["a"] and _ids(train) == ["b", "c"]
    train, test = holdout.split_holdout(rows, "model_name=Mixtral*")
    assert _ids(test) == ["b"] and _ids(train) == ["a", "c"]


@pytest.mark.parametrize(("spec", "reason"), [
    ("=llama", "holdout '=llama' is not AXIS=top, family=NAME or COLUMN=VALUE"),
    ("family=", "holdout 'family=' is not AXIS=top, family=NAME or COLUMN=VALUE"),
    ("family", "holdout 'family' is not AXIS=top, family=NAME or COLUMN=VALUE"),
    ("family=gpt", "holdout 'family=gpt' selects no run"),
    ("model_family=llama", "holdout 'model_family=llama' leaves no run to fit"),
    ("duration_s=top", "no run has a numeric duration_s"),
])
def test_split_errors_are_exact(spec, reason):
    rows = [{"run_id": "a", "model_family": "llama"}, {"run_id": "b", "model_family": "llama"}]
    with pytest.raises(InputError) as exc:
        holdout.split_holdout(rows, spec)
    assert (exc.value.field, exc.value.reason) == ("holdout", reason)


# -- baselines ------------------------------------------------------------------------------------

def test_proportional_x_of_energy_needs_parameters_and_tokens():
    row = {"model_params": 2e9, "model_params_active": 5e8, "tokens": 300.0}
    assert holdout._proportional_x(row, "energy_j") == 5e8 * 300.0
    assert holdout._proportional_x({"model_params": 2e9, "tokens": 3.0}, "energy_j") == 6e9
    assert holdout._proportional_x({"tokens": 300.0}, "energy_j") is None
    assert holdout._proportional_x({"model_params": 2e9}, "energy_j") is None
    assert holdout._proportional_x({"model_params": 2e9, "tokens": 0}, "energy_j") is None


def test_constant_baseline_is_the_platform_median_else_the_pooled_median():
    train = [{"platform": "a", TARGET: 1.0}, {"platform": "a", TARGET: 3.0},
             {"platform": "a", TARGET: 0.0}, {"platform": "a"}, {"platform": "a", TARGET: None},
             {"platform": "b", TARGET: 10.0}, {"platform": "b", TARGET: 20.0},
             {"platform": "b", TARGET: 30.0}]
    test = [{"platform": "a"}, {"platform": "b"}, {"platform": "c"}]
    out = holdout.baseline_predictions(train, test, TARGET)
    # zero and missing targets are not learned from: a -> median(1, 3), pooled -> median of 5
    assert out["constant"] == [(2.0, ""), (20.0, ""), (10.0, "")]
    assert out["proportional"] == [(None, "needs model_params")] * 3


def test_baselines_without_any_target_say_so():
    train = [{"platform": "a", "model_params": 1e9}, {"platform": "a", TARGET: 0}]
    test = [{"platform": "a", "model_params": 1e9}, {"platform": "b"}]
    out = holdout.baseline_predictions(train, test, TARGET)
    assert out == {"constant": [(None, "no training run has the target")] * 2,
                   "proportional": [(None, "needs model_params")] * 2}


def test_proportional_baseline_without_any_ratio_needs_its_axis():
    train = [{"platform": "a", TARGET: 2.0}]  # a target but no model_params: no ratio
    test = [{"platform": "a", "model_params": 1e9}]
    out = holdout.baseline_predictions(train, test, TARGET)
    assert out == {"constant": [(2.0, "")], "proportional": [(None, "needs model_params")]}


# -- _report --------------------------------------------------------------------------------------

def test_report_counts_keys_and_coverage_boundaries():
    test = [{"run_id": "lo", TARGET: 1.0}, {"run_id": "hi", TARGET: 2.0},
            {"run_id": "out", TARGET: 4.0}, {"run_id": "none", TARGET: 8.0},
            {"run_id": "in", TARGET: 5.0}]
    preds = [((1.1, 1.0, 3.0), ""), ((2.2, 1.0, 2.0), ""), ((5.0, 4.5, 6.0), ""),
             (None, "why not"), ((4.0, 3.0, 6.0), "")]
    rep = holdout._report(preds, test, TARGET)
    assert rep == {"n_heldout": 5, "n_predicted": 4, "n_unpredictable": 1,
                   "unpredictable": [{"run_id": "none", "reason": "why not"}],
                   "mdape_pct": common.mdape([1.1, 2.2, 5.0, None, 4.0], [1.0, 2.0, 4.0, 8.0, 5.0]),
                   "coverage_90": 0.75}
    assert rep["mdape_pct"] == pytest.approx(np.median([10.0, 10.0, 25.0, 20.0]))
    # an actual exactly at lo or exactly at hi is covered
    assert holdout._report([((1.5, 1.0, 3.0), "")], test[:1], TARGET)["coverage_90"] == 1.0
    assert holdout._report([((1.5, 0.5, 1.0), "")], test[:1], TARGET)["coverage_90"] == 1.0
    # no interval (a baseline): no coverage
    rep = holdout._report([((1.5, None, None), ""), (None, "x")], test[:2], TARGET)
    assert rep["coverage_90"] is None and rep["mdape_pct"] == pytest.approx(50.0)


# -- evaluate_holdout -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def evaluated() -> tuple[list[dict], list[dict], dict]:
    train, test = holdout.split_holdout(_rows(), "seq_len=top")
    test = [*test[:3], {"run_id": "bare", "platform": "h100", "seq_len": 4096, TARGET: 1.0}]
    return train, test, holdout.evaluate_holdout(train, test, TARGET, "seq_len=top", n_boot=20)


def test_evaluate_holdout_points_are_every_law_baseline_axis_and_distance(evaluated):
    train, test, res = evaluated
    laws = {name: holdout._fit_law(name, train, TARGET, 20, 0) for name in common.LAWS}
    base = holdout.baseline_predictions(train, test, TARGET)
    expected = []
    for i, r in enumerate(test):
        pt = {"run_id": r["run_id"], "platform": r["platform"], "actual": r[TARGET]}
        for name, law in laws.items():
            try:
                (value, lo, hi), = law.predict_rows([r])
            except InputError:
                pt[name] = None
            else:
                pt[name] = {"value": value, "lo": lo, "hi": hi}
        pt["baseline_constant"] = base["constant"][i][0]
        pt["baseline_proportional"] = base["proportional"][i][0]
        pt.update({a: float(r[a]) for a in common.AXES if a in r})
        pt["extrapolation_decades"] = {"seq_len": round(math.log10(4), 3)}
        expected.append(pt)
    assert res["points"] == expected
    assert res["points"][-1]["loglinear"] is None and "model_params" not in res["points"][-1]
    assert res["points"][0]["extrapolation_decades"] == {"seq_len": 0.602}


def test_evaluate_holdout_top_level_keys_and_default_seed(evaluated):
    train, test, res = evaluated
    assert (res["spec"], res["n_train"], res["n_test"]) == ("seq_len=top", 48, 4)
    ll = holdout._fit_law("loglinear", train, TARGET, 20, 0)
    assert res["loglinear_train"] == ll.to_json()  # the default seed is 0
    assert set(res["laws"]) == {"loglinear", "physics"}
    assert set(res["baselines"]) == {"constant", "proportional"}
    assert res["mdape_pct"] == {**{k: v["mdape_pct"] for k, v in res["laws"].items()},
                                **{f"baseline_{k}": v["mdape_pct"]
                                   for k, v in res["baselines"].items()}}
    assert res["coverage90"] == {k: v["coverage_90"] for k, v in res["laws"].items()}
    rep = res["laws"]["loglinear"]
    assert (rep["n_heldout"], rep["n_predicted"], rep["n_unpredictable"]) == (4, 3, 1)
    assert rep["unpredictable"] == [{"run_id": "bare",
                                     "reason": "needs a positive model_params (N); got None"}]
    assert res["baselines"]["constant"]["n_unpredictable"] == 0
    assert res["baselines"]["constant"]["coverage_90"] is None
    vals = [p["loglinear"]["value"] if p["loglinear"] else None for p in res["points"]]
    assert rep["mdape_pct"] == common.mdape(vals, [p["actual"] for p in res["points"]])
    cover = [p["loglinear"]["lo"] <= p["actual"] <= p["loglinear"]["hi"]
             for p in res["points"] if p["loglinear"]]
    assert rep["coverage_90"] == float(np.mean(cover))


def test_evaluate_holdout_reports_every_law_that_cannot_be_fitted():
    train = _rows()[:3]
    test = [_rows()[5]]
    reasons = {}
    for name, fit in (("loglinear", fit_loglinear), ("physics", fit_physics)):
        with pytest.raises(InputError) as exc:
            fit(train, TARGET, n_boot=0)
        reasons[name] = f"{name} not fitted: {exc.value.reason}"
    res = holdout.evaluate_holdout(train, test, TARGET, "x=y", n_boot=5, seed=1)
    assert res["loglinear_train"] is None and res["coverage90"] == {"loglinear": None,
                                                                   "physics": None}
    for name, why in reasons.items():
        assert res["laws"][name]["unpredictable"] == [{"run_id": test[0]["run_id"],
                                                       "reason": why}]
        assert "loglinear" not in res["points"][0]
    assert res["points"][0]["extrapolation_decades"] == {}


# -- intervals ------------------------------------------------------------------------------------

def test_extrapolation_reads_the_law_axes_and_the_fixed_ones():
    train = [{"model_params": 1e9, "num_gpus": 2, "seq_len": 256, "batch_size": 0},
             {"model_params": 1e10, "num_gpus": 8, "seq_len": 1024, "batch_size": 10},
             {"model_params": 2e9, "num_gpus": 4, "seq_len": 512, "batch_size": 100}]
    law = types.SimpleNamespace(axes=["seq_len"])
    row = {"num_gpus": 1, "seq_len": 4096, "batch_size": 5, "lora_rank": 8}
    assert intervals.extrapolation(law, train, row) == {
        "seq_len": 0.602, "num_gpus": 0.301, "batch_size": 0.301}  # zeros are no range
    assert intervals.extrapolation(None, train, row) == {"num_gpus": 0.301, "batch_size": 0.301}
    # at the edges, a zero, a missing axis: nothing
    edge = {"model_params": 1e10, "num_gpus": 2, "seq_len": 0, "batch_size": 10}
    assert intervals.extrapolation(law, train, edge) == {}
    assert intervals.extrapolation(law, [{"model_params": 1e9}], {"num_gpus": 64}) == {}
    assert intervals.extrapolation(None, [{"num_gpus": 2}], {"num_gpus": 0}) == {}


def test_conformal_residuals_are_log_actual_minus_log_prediction():
    class Half:
        def log_predict(self, rows):
            return np.array([math.log(r["y"] / 2) for r in rows])

    rows = [{"run_id": f"r{i}", "y": y} for i, y in enumerate([0.5, 0.25, 3.0, 4.0, 5.0, 6.0, 7.0,
                                                                8.0, 9.0])]
    rows.append({"run_id": "zero", "y": 0.0})
    q, used, skipped = intervals.conformal_half_width(rows, "y", lambda train: Half())
    assert (used, skipped) == (9, 0)  # targets below 1 count, a zero does not
    assert q == pytest.approx(math.log(2))
