"""The scaling law: exponent recovery, holdout with baselines, physics form, predict intervals."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from llm_powertrace_ds import scaling
from llm_powertrace_ds.errors import InputError

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
