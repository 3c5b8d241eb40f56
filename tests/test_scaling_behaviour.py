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
