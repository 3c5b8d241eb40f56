"""Scaling-law behaviours: MdAPE is a median, held-out rows never reach the training fit."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from llm_powertrace_ds import scaling

from .test_scaling import loglinear_rows


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
    assert 0 < n_test < len(rows)
    assert (ho["n_train"], ho["n_test"]) == (len(rows) - n_test, n_test)
    assert ho["n_train"] + ho["n_test"] == len(rows)
    assert [pt["run_id"] for pt in ho["points"]] == [r["run_id"] for r in rows
                                                     if r["model_params"] == 7e9]
    # Poison the held-out targets: the training fit and every prediction must not move (laws and
    # baselines alike); only the actual values and the errors do.
    poisoned = copy.deepcopy(rows)
    for r in poisoned:
        if r["model_params"] == 7e9:
            r["energy_per_token_j"] *= 100.0
    bad = scaling.fit(poisoned, "energy_per_token_j", holdout="N=top", n_boot=30).holdout
    assert bad["loglinear_train"] == ho["loglinear_train"]
    predicted = ("loglinear", "physics", "baseline_constant", "baseline_proportional")
    for got, ref in zip(bad["points"], ho["points"], strict=True):
        assert {k: got[k] for k in predicted} == {k: ref[k] for k in predicted}
        assert got["actual"] == pytest.approx(100.0 * ref["actual"])
    assert ho["points"][0]["loglinear"]["value"] > 0  # the comparison compares real predictions
    assert bad["mdape_pct"]["loglinear"] > 90 > ho["mdape_pct"]["loglinear"]
    # ... and the training fit is the fit of exactly the training rows, its 90 % interval the
    # conformal half-width over the training rows alone.
    train, _ = scaling.split_holdout(rows, "N=top")
    alone = scaling.fit_loglinear(train, "energy_per_token_j", n_boot=30, seed=0).to_json()
    assert alone["n_runs"] == ho["n_train"]
    assert alone["_state"] == ho["loglinear_train"]["_state"]
    assert alone["exponents"] == ho["loglinear_train"]["exponents"]
    q, _, _ = scaling.conformal_half_width(
        train, "energy_per_token_j",
        lambda r: scaling.fit_loglinear(r, "energy_per_token_j", n_boot=0))
    assert q is not None
    assert ho["loglinear_train"]["interval_90_half_width_log"] == pytest.approx(q)


def test_both_laws_round_trip_through_json_unchanged():
    from .test_scaling import physics_rows

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
    """Inference runs: energy = 1e-10 J per parameter per generated token (``tokens_out``).

    ``tokens`` is a decoy (1): a baseline that counted it instead of ``tokens_out`` would be off.
    """
    rows = []
    for i in range(n):
        npar = [1e8, 1e9, 7e9][i % 3]
        tokens_out = 1000 * (1 + i % 5)
        g = 1 + i % 2
        energy = 1e-10 * npar * tokens_out
        rows.append({"run_id": f"inf-{i}", "workload": "inference", "platform": "l40s",
                     "model_family": "llama", "model_params": npar, "num_gpus": g,
                     "concurrency": 4, "tokens_out": tokens_out, "tokens": 1,
                     "energy_j": energy, "energy_per_token_j": energy / tokens_out,
                     "duration_s": energy / (100.0 * g)})
    return rows


def test_baselines_count_generated_tokens_for_inference_runs():
    rows = inference_rows()
    res = scaling.fit(rows, "energy_j", holdout="N=top", n_boot=10)
    points = res.holdout["points"]
    assert len(points) == sum(r["model_params"] == 7e9 for r in rows) > 0
    # proportional: median energy / (N x tokens_out) over training runs (1e-10), times N x tokens_out
    for pt, row in zip(points, [r for r in rows if r["model_params"] == 7e9], strict=True):
        assert pt["baseline_proportional"] == pytest.approx(1e-10 * 7e9 * row["tokens_out"])
        assert pt["baseline_proportional"] == pytest.approx(pt["actual"])
    assert res.holdout["mdape_pct"]["baseline_proportional"] == pytest.approx(0.0)
    assert res.holdout["baselines"]["proportional"]["n_unpredictable"] == 0
    # constant: the training runs' median energy on the platform, whatever the token count
    train_median = float(np.median([r["energy_j"] for r in rows if r["model_params"] != 7e9]))
    assert [pt["baseline_constant"] for pt in points] == pytest.approx([train_median] * len(points))


def test_tokens_out_counts_when_a_row_has_no_tokens_column():
    rows = inference_rows()
    for r in rows:
        del r["tokens"]
        r["workload"] = "finetune"  # not marked inference: tokens_out is still the count
    res = scaling.fit(rows, "energy_j", holdout="N=top", n_boot=10)
    assert all(pt["baseline_proportional"] == pytest.approx(pt["actual"])
               for pt in res.holdout["points"])
    assert res.holdout["mdape_pct"]["baseline_proportional"] == pytest.approx(0.0)
    # With a tokens column and no inference marker, tokens (1 here) is the count: the baseline
    # then predicts one energy for every held-out run whatever its tokens_out, and misses.
    for r in rows:
        r["tokens"] = 1
    res = scaling.fit(rows, "energy_j", holdout="N=top", n_boot=10)
    values = [pt["baseline_proportional"] for pt in res.holdout["points"]]
    assert values == pytest.approx([values[0]] * len(values))
    assert res.holdout["mdape_pct"]["baseline_proportional"] > 20


def test_a_saved_fit_loads_and_predicts_with_the_preferred_law(tmp_path):
    from .test_scaling import physics_rows

    rows = physics_rows(120)
    res = scaling.fit(rows, "energy_per_token_j", n_boot=20)
    path = tmp_path / "fit.json"
    res.save(path)
    data = scaling.load_fit(path)
    assert data == json.loads(json.dumps(res.to_json()))
    assert scaling.load_fit(data) == data
    row = {k: v for k, v in rows[0].items() if k != "energy_per_token_j"}
    out = scaling.predict(path, row)
    assert out["model"] == res.preferred and out["target"] == "energy_per_token_j"
    law = res.physics if res.preferred == "physics" else res.loglinear
    assert (out["value"], out["lo90"], out["hi90"]) == pytest.approx(law.predict_rows([row])[0])
    assert out["settings"] == row
    loglinear = scaling.predict(path, {**row, "N": row["model_params"]}, model="loglinear")
    assert loglinear["value"] == pytest.approx(res.loglinear.predict_rows([row])[0][0])


def test_load_fit_and_predict_errors_are_one_line_and_exact(tmp_path):
    from llm_powertrace_ds.errors import InputError

    missing = tmp_path / "missing.json"
    with pytest.raises(InputError, match=r"cannot read the fit: no such file") as info:
        scaling.load_fit(missing)
    assert str(missing) in str(info.value) and "\n" not in str(info.value)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match=r"cannot read the fit: not JSON \(Expecting property name"):
        scaling.load_fit(bad)
    with pytest.raises(InputError) as info:
        scaling.load_fit({"format": "x"})
    assert str(info.value) == ("field 'format': not a fit file of this version (format 'x', "
                               f"expected {scaling.FORMAT!r}); fit again")
    data = scaling.fit(loglinear_rows(60), n_boot=10).to_json()
    with pytest.raises(InputError, match="model 'cubic' is not loglinear or physics"):
        scaling.predict(data, {}, model="cubic")
    data = {**data, "physics": None, "physics_note": "no FLOPs"}
    with pytest.raises(InputError, match=r"this fit has no physics law \(no FLOPs\)"):
        scaling.predict(data, {}, model="physics")


def test_holdout_spec_errors():
    from llm_powertrace_ds.errors import InputError

    rows = loglinear_rows(40)
    for spec in ("N", "=top", "N=", " = "):
        with pytest.raises(InputError, match="is not AXIS=top, family=NAME or COLUMN=VALUE"):
            scaling.split_holdout(rows, spec)
    with pytest.raises(InputError, match="no run has a numeric tokens_in"):
        scaling.split_holdout(rows, "tokens_in=top")
    with pytest.raises(InputError, match="holdout 'platform=l40s' leaves no run to fit"):
        scaling.split_holdout([r for r in rows if r["platform"] == "l40s"], "platform=l40s")
    train, test = scaling.split_holdout(rows, "platform=l40s")  # COLUMN=VALUE
    assert {r["platform"] for r in test} == {"l40s"} and len(train) + len(test) == len(rows)
    train, test = scaling.split_holdout(rows, " model_params = top ")
    assert {r["model_params"] for r in test} == {max(r["model_params"] for r in rows)}
