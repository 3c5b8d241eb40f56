"""The scaling law predicts from pre-run knowledge: holdout report, intervals, refusals, predict.

``scaling.holdout`` and ``scaling.intervals`` exactly: the spec grammar and its errors, which runs
a baseline learns from, the report's keys and counts, the coverage boundaries, the points' keys,
the extrapolation distance and the conformal residual sign.
"""

from __future__ import annotations

import itertools
import json
import math
import types
from pathlib import Path

import numpy as np
import pytest

from llm_powertrace_ds import scaling
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.scaling import common, holdout, intervals
from llm_powertrace_ds.scaling.loglinear import fit_loglinear
from llm_powertrace_ds.scaling.physics import fit_physics

# inference energy per token: alpha * 2 N_total / B + beta * 2 N_active + gamma * G
TRUTH = {"h100_sxm_80gb": (4e-10, 1.6e-12, 0.08), "a100_sxm4_40gb": (6e-10, 3e-12, 0.06)}
MODELS = [("m2b", 2e9, None, 1), ("m7b", 7e9, None, 1), ("m13b", 13e9, None, 2),
          ("m30b", 30e9, None, 4), ("m70b", 70e9, None, 8), ("moe47b", 47e9, 13e9, 4),
          ("m9b", 9e9, None, 1), ("m4b", 4e9, None, 1)]
HOLDOUT_KEYS = {"n_heldout", "n_predicted", "n_unpredictable", "unpredictable", "mdape_pct",
                "coverage_90"}


def inference_rows(noise: float = 0.08, seed: int = 5, platforms=tuple(TRUTH)) -> list[dict]:
    """Runs of several models whose energy per token follows the physics law.

    With model-level (between-group) and run-level noise.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for name, n_tot, n_act, g in MODELS:
        model_effect = math.exp(rng.normal(0, noise))
        for plat in platforms:
            alpha, beta, gamma = TRUTH[plat]
            for b in (32, 64, 128, 256, 512):
                e = (alpha * 2 * n_tot / b + beta * 2 * (n_act or n_tot) + gamma * g)
                e *= model_effect * math.exp(rng.normal(0, noise / 2))
                rows.append({"run_id": f"{name}-{plat}-{b}", "workload": "inference",
                             "platform": plat, "model_name": name, "model_family": "other",
                             "model_params": n_tot, "model_params_active": n_act,
                             "num_gpus": g, "batch_size": b, "energy_per_token_j": e,
                             "duration_s": 600.0, "tokens_per_s": 1000.0 * rng.uniform(1, 2)})
    return rows


def test_holdout_reports_every_law_and_baseline_with_the_documented_shape():
    rows = inference_rows()
    res = scaling.fit(rows, "energy_per_token_j", holdout="model_params=top", n_boot=50)
    data = res.to_json()
    assert set(data) >= {"target", "n_runs", "laws", "baselines", "best_law"}
    assert data["n_runs"] == len(rows) and data["best_law"] in ("loglinear", "physics")
    assert set(data["laws"]) == {"loglinear", "physics"}
    assert set(data["baselines"]) == {"constant", "proportional"}
    for entry in [*data["laws"].values(), *data["baselines"].values()]:
        assert set(entry["holdout"]) == HOLDOUT_KEYS
    for entry in data["laws"].values():
        assert entry["params"]
    ph = data["laws"]["physics"]["holdout"]
    assert ph["n_heldout"] == 10 and ph["n_predicted"] == 10 and ph["n_unpredictable"] == 0
    assert ph["mdape_pct"] < 15
    assert ph["mdape_pct"] < data["baselines"]["constant"]["holdout"]["mdape_pct"]
    assert data["baselines"]["constant"]["holdout"]["coverage_90"] is None
    json.dumps(data)  # serialisable
    # every held-out 70 B run extrapolates beyond the training maximum by log10(70/30): the
    # 47 B mixture-of-experts model counts with its 13 B active parameters
    pts = data["holdout"]["points"]
    assert all(p["extrapolation_decades"]["model_params"] == pytest.approx(
        math.log10(70 / 30), abs=1e-3) for p in pts)


def test_unpredictable_runs_are_listed_with_reasons_never_dropped():
    rows = inference_rows()
    for r in rows:
        if r["model_name"] == "m70b" and r["platform"] == "a100_sxm4_40gb":
            r["platform"] = "l40s"  # a platform the training runs never saw
    res = scaling.fit(rows, "energy_per_token_j", holdout="model_name=m70b", n_boot=20)
    for name, entry in res.to_json()["laws"].items():
        h = entry["holdout"]
        assert h["n_heldout"] == 10 and h["n_predicted"] == 5 and h["n_unpredictable"] == 5
        assert all("platform 'l40s' is not in the fit" in u["reason"] for u in h["unpredictable"])
        assert {u["run_id"] for u in h["unpredictable"]} == {
            f"m70b-a100_sxm4_40gb-{b}" for b in (32, 64, 128, 256, 512)}, name


def test_group_conformal_interval_is_calibrated_across_models():
    rows = inference_rows(noise=0.15, seed=11)
    hits = []
    for name, *_ in MODELS:
        train = [r for r in rows if r["model_name"] != name]
        test = [r for r in rows if r["model_name"] == name]
        ev = scaling.evaluate_holdout(train, test, "energy_per_token_j", name, n_boot=0)
        hits += [p["physics"]["lo"] <= p["actual"] <= p["physics"]["hi"] for p in ev["points"]]
    assert 0.75 <= np.mean(hits) <= 1.0


def test_moe_uses_active_parameters():
    rows = inference_rows()
    law = scaling.fit_loglinear(rows, "energy_per_token_j", n_boot=0)
    assert law.axis_stats["model_params"][0] == 2e9
    moe = next(r for r in rows if r["model_name"] == "moe47b")
    assert scaling.axis_value(moe, "model_params") == 13e9
    feats = scaling.physics_features(moe)
    assert feats["flops_per_token"] == 2 * 13e9 and feats["weight_bytes_per_token"] == 2 * 47e9 / 32


def test_refuses_degenerate_data_with_one_line():
    rows = inference_rows()[:6]
    with pytest.raises(InputError, match="refusing to fit: 6 runs") as err:
        scaling.fit(rows, "energy_per_token_j", n_boot=10)
    assert "\n" not in str(err.value)
    narrow = inference_rows()
    for r in narrow:
        r["model_params"] = 631_424 + (r["batch_size"] % 3)  # a 0.0003 % span
        r["model_params_active"] = None
    with pytest.raises(InputError, match=r"model_params spans only 631,42\d-631,42\d \(x1.0000 < x1.1\)"):
        scaling.fit(narrow, "energy_per_token_j", n_boot=10)


def test_physics_law_never_sees_measured_throughput():
    rows = inference_rows()
    fast = [dict(r, tokens_per_s=1e9, duration_s=1e-3) for r in rows]
    a = scaling.fit(rows, "energy_per_token_j", n_boot=0).physics
    b = scaling.fit(fast, "energy_per_token_j", n_boot=0).physics
    assert a is not None and b is not None
    assert np.allclose(a.coef, b.coef)
    with pytest.raises(InputError, match="throughput"):
        scaling.fit_physics(rows, "mean_power_w")


@pytest.fixture
def fit_file(tmp_path) -> Path:
    path = tmp_path / "fit.json"
    scaling.fit(inference_rows(), "energy_per_token_j", n_boot=20).save(path)
    return path


def test_predict_never_crashes(fit_file):
    ok = {"platform": "h100_sxm_80gb", "model_params": 7e9, "num_gpus": 1, "batch_size": 256}
    for model in ("loglinear", "physics"):
        out = scaling.predict(fit_file, ok, model=model)
        assert out["lo90"] < out["value"] < out["hi90"] and out["warnings"] == []
    far = scaling.predict(fit_file, {**ok, "model_params": 7e12}, model="physics")
    assert far["extrapolation_decades"]["model_params"] == pytest.approx(math.log10(7e12 / 70e9))
    assert "decades beyond the training range" in far["warnings"][0]
    measured = scaling.predict(fit_file, {**ok, "duration_s": 1.0}, model="physics")
    assert measured["value"] == scaling.predict(fit_file, ok, model="physics")["value"]
    assert "ignored duration_s" in measured["warnings"][0]
    cases = [({**ok, "model_params": 1e300}, "refusing to extrapolate"),
             ({k: v for k, v in ok.items() if k != "num_gpus"}, "num_gpus"),
             ({**ok, "foo": 1}, "unknown setting 'foo'"),
             ({**ok, "platform": "tpu_v5"}, "platform 'tpu_v5' is not in the fit"),
             ({**ok, "batch_size": "many"}, "batch_size")]
    for settings, message in cases:
        for model in ("loglinear", "physics"):
            with pytest.raises(InputError, match=message) as err:
                scaling.predict(fit_file, settings, model=model)
            assert "\n" not in str(err.value)


def test_cli_fit_csv_json_and_predict_help_example(tmp_path, capsys, fit_file):
    from importers.test_mlenergy_v2 import RUNS, task_folder

    task = task_folder(tmp_path / "src", RUNS)
    out = tmp_path / "ds"
    assert main(["import", "mlenergy-v2", str(task), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["fit", str(out), "--holdout", "model_params=top"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "refusing to fit" in err.splitlines()[0]
    # the predict help's first example, as written, on a fit of inference runs
    assert main(["predict", str(fit_file), "--set", "platform=h100_sxm_80gb",
                 "model_params=7e9", "num_gpus=1", "batch_size=256"]) == 0
    assert "energy_per_token_j" in capsys.readouterr().out
    assert main(["predict", str(fit_file), "--model", "physics", "--set",
                 "platform=h100_sxm_80gb", "duration_s=3600", "model_params=7e9",
                 "tokens=2e7", "method=lora"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[0].startswith("error: ")


@pytest.fixture(scope="module")
def mlenergy_rows(tmp_path_factory) -> list[dict]:
    from conftest import EXTERNAL

    from llm_powertrace_ds.importers import import_summaries
    from llm_powertrace_ds.importers.mlenergy_v2 import publish_summaries
    from llm_powertrace_ds.metrics.rows import iter_run_rows

    task = EXTERNAL / "mlenergy-v2" / "chat"
    if not task.is_dir():
        pytest.skip(f"external data not present at {task}")
    out = tmp_path_factory.mktemp("mlenergy")
    publish_summaries(out, import_summaries("mlenergy-v2", task))
    return list(iter_run_rows(out, "inference_runs"))


@pytest.mark.external
def test_mlenergy_405b_held_out(mlenergy_rows):
    data = scaling.fit(mlenergy_rows, "energy_per_token_j", holdout="model_params=top",
                       n_boot=50).to_json()
    best = data["laws"][data["best_law"]]["holdout"]
    assert best["n_heldout"] == 6 and best["n_unpredictable"] == 0
    assert best["mdape_pct"] <= 10
    # 6 runs: a calibrated 90 % interval covers all six with probability 0.9^6 = 53 %
    assert best["coverage_90"] >= 0.8


@pytest.mark.external
@pytest.mark.parametrize("family", ["llama", "gemma", "phi", "mistral"])
def test_mlenergy_family_holdouts_beat_both_baselines(mlenergy_rows, family):
    data = scaling.fit(mlenergy_rows, "energy_per_token_j", holdout=f"family={family}",
                       n_boot=0).to_json()
    best = data["laws"][data["best_law"]]["holdout"]
    assert best["n_unpredictable"] == 0 and best["mdape_pct"] <= 20
    for base in data["baselines"].values():
        assert best["mdape_pct"] < base["holdout"]["mdape_pct"]


@pytest.mark.external
def test_mlenergy_intervals_are_calibrated_leaving_each_model_out(mlenergy_rows):
    hits = {"loglinear": [], "physics": []}
    for model in sorted({r["model_name"] for r in mlenergy_rows}):
        train = [r for r in mlenergy_rows if r["model_name"] != model]
        test = [r for r in mlenergy_rows if r["model_name"] == model]
        ev = scaling.evaluate_holdout(train, test, "energy_per_token_j", model, n_boot=0)
        for p in ev["points"]:
            for law in hits:
                hits[law].append(p[law]["lo"] <= p["actual"] <= p[law]["hi"])
    for law, h in hits.items():
        assert len(h) == 191 and 0.8 <= np.mean(h) <= 0.98, law


def test_task_is_a_factor_when_several_tasks_are_fitted():
    rows = inference_rows()
    for r in rows:
        if r["batch_size"] in (64, 256):
            r["task"], r["energy_per_token_j"] = "code", r["energy_per_token_j"] * 1.5
        else:
            r["task"] = "chat"
    law = scaling.fit_loglinear(rows, "energy_per_token_j", n_boot=0)
    factor = law.params_json()["factors"]["task"]
    assert factor["reference"] == "chat"
    assert factor["levels"]["code"]["factor"] == pytest.approx(1.5, rel=0.05)


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
