"""Scaling-law behaviours: MdAPE is a median, held-out rows never reach the training fit."""

from __future__ import annotations

import copy

import pytest
from test_scaling import loglinear_rows

from llm_powertrace_ds import scaling


def test_mdape_is_the_median_of_absolute_percentage_errors():
    assert scaling.mdape([110, 100, 50], [100] * 3) == pytest.approx(10.0)  # mean would be 20
    assert scaling.mdape([90, 100, 150, 100], [100] * 4) == pytest.approx(5.0)  # even count
    assert scaling.mdape([None, 110, 130, 95], [100] * 4) == pytest.approx(10.0)  # null skipped
    assert scaling.mdape([5.0, 2.0], [0.0, 4.0]) == pytest.approx(50.0)  # y = 0 has no %
    assert scaling.mdape([None], [1.0]) is None


def test_split_holdout_partitions_the_rows():
    rows = loglinear_rows(120)
    train, test = scaling.split_holdout(rows, "N=top")
    assert len(train) + len(test) == len(rows)
    assert {r["run_id"] for r in train}.isdisjoint({r["run_id"] for r in test})
    assert {r["model_params"] for r in test} == {7e9}
    assert 7e9 not in {r["model_params"] for r in train}


def test_held_out_rows_never_reach_the_training_fit():
    rows = loglinear_rows(160)
    res = scaling.fit(rows, "energy_per_token_j", holdout="N=top", n_boot=30)
    ho = res.holdout
    n_test = sum(r["model_params"] == 7e9 for r in rows)
    assert (ho["n_train"], ho["n_test"]) == (len(rows) - n_test, n_test)
    # Poison the held-out targets: the training fit must not move, only the errors.
    poisoned = copy.deepcopy(rows)
    for r in poisoned:
        if r["model_params"] == 7e9:
            r["energy_per_token_j"] *= 100.0
    bad = scaling.fit(poisoned, "energy_per_token_j", holdout="N=top", n_boot=30).holdout
    assert bad["train_exponents"] == ho["train_exponents"]
    assert bad["loglinear_train"] == ho["loglinear_train"]
    assert bad["mdape_pct"]["loglinear"] > 90 > ho["mdape_pct"]["loglinear"]
    # ... and the training fit is the fit of exactly the training rows.
    train, _ = scaling.split_holdout(rows, "N=top")
    alone = scaling.fit_loglinear(train, "energy_per_token_j", n_boot=30, seed=0)
    assert alone.to_json() == ho["loglinear_train"]


def test_both_laws_round_trip_through_json_unchanged():
    from test_scaling import physics_rows

    res = scaling.fit(physics_rows(120), "energy_per_token_j", n_boot=20)
    ll = res.loglinear.to_json()
    ll["notes"] = ["a note that must survive"]
    back = scaling.LogLinearLaw.from_json(ll)
    assert back.to_json() == ll
    assert isinstance(back.r2, float) and isinstance(back.n, int)
    ph = res.physics.to_json()
    assert scaling.PhysicsLaw.from_json(ph).to_json() == ph
    row = physics_rows(1, seed=9)[0]
    assert back.predict_rows([row]) == res.loglinear.predict_rows([row])


def test_an_old_fit_without_notes_or_axis_stats_still_loads():
    res = scaling.fit(loglinear_rows(120), n_boot=20)
    data = res.loglinear.to_json()
    del data["notes"], data["axis_stats"]
    back = scaling.LogLinearLaw.from_json(data)
    assert back.notes == [] and back.axis_stats == {}


@pytest.mark.parametrize(("text", "value"), [
    ("7B", 7e9), ("7b", 7e9), ("1.5k", 1500.0), (" 512 ", 512.0), ("2e3", 2000.0),
    ("true", True), ("False", False), ("lora", "lora"), ("k", "k"), ("B7", "B7"),
    ("xB", "xB")])
def test_parse_value(text, value):
    got = scaling.parse_value(text)
    assert got == value and type(got) is type(value)


def inference_rows(n: int = 40) -> list[dict]:
    """Inference runs: energy = 0.5 J per generated token (``tokens_out``), 100 W per GPU."""
    rows = []
    for i in range(n):
        npar = [1e8, 1e9, 7e9][i % 3]
        tokens_out = 1000 * (1 + i % 5)
        g = 1 + i % 2
        energy = 0.5 * tokens_out
        rows.append({"run_id": f"inf-{i}", "workload": "inference", "platform": "l40s",
                     "model_family": "llama", "model_params": npar, "num_gpus": g,
                     "concurrency": 4, "tokens_out": tokens_out, "tokens": 1,
                     "energy_j": energy, "energy_per_token_j": 0.5,
                     "duration_s": energy / (100.0 * g)})
    return rows


def test_baselines_count_generated_tokens_for_inference_runs():
    res = scaling.fit(inference_rows(), "energy_per_token_j", holdout="N=top", n_boot=10)
    points = res.holdout["points"]
    assert points
    for pt in points:  # 0.5 J/token pooled over training runs, times tokens_out, per token
        assert pt["constant_j_per_token"] == pytest.approx(0.5)
        assert pt["mean_power_x_time"] == pytest.approx(0.5)
    assert res.holdout["mdape_pct"]["baseline_constant_j_per_token"] == pytest.approx(0.0)


def test_tokens_out_counts_when_a_row_has_no_tokens_column():
    rows = inference_rows()
    for r in rows:
        del r["tokens"]
        r["workload"] = "finetune"  # not marked inference: tokens_out is still the count
    res = scaling.fit(rows, "energy_per_token_j", holdout="N=top", n_boot=10)
    assert all(pt["constant_j_per_token"] == pytest.approx(0.5) for pt in res.holdout["points"])
