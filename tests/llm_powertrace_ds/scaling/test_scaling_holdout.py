"""The scaling law predicts from pre-run knowledge: holdout report, intervals, refusals, predict."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from llm_powertrace_ds import scaling
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError

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
