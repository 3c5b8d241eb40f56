"""Matched comparisons (``Runs.compare``): like with like, checked against a pandas pivot."""

from __future__ import annotations

import pyarrow as pa
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.matched import compare_matched
from llm_powertrace_ds.names import UnknownName
from llm_powertrace_ds.query import Runs
from llm_powertrace_ds.samples import load_sample

MATCH = ["model_name", "batch_size", "num_gpus"]


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory):
    """The shipped ML.ENERGY v2 chat summaries (real published runs on A100 and H100)."""
    root = load_sample("mlenergy-v2-chat", tmp_path_factory.mktemp("s") / "mlenergy-v2-chat")
    return Runs.load(root, workload="inference")


def test_compare_equals_an_independent_pivot_on_the_real_sample(sample_runs):
    fast = sample_runs.where(lambda r: r.tpot_mean_s <= 0.1)
    c = fast.compare(by="platform", metric="energy_per_token_j", match=MATCH)
    df = fast.to_pandas()
    pivot = df.pivot_table(index=MATCH, columns="platform", values="energy_per_token_j",
                           aggfunc="mean").dropna()
    ratio = pivot["h100_sxm_80gb"] / pivot["a100_sxm4_40gb"]
    (s,) = c.summary
    assert c.baseline == "a100_sxm4_40gb" and s["platform"] == "h100_sxm_80gb"
    assert s["configurations"] == len(pivot) == c.table.num_rows
    assert s["lower"] == int((ratio < 1).sum()) and s["higher"] == int((ratio > 1).sum())
    assert s["median_ratio"] == pytest.approx(float(ratio.median()))
    assert s["min_ratio"] == pytest.approx(float(ratio.min()))
    got = c.to_pandas().set_index(MATCH)["ratio_h100_sxm_80gb"].sort_index()
    assert got.to_numpy() == pytest.approx(ratio.sort_index().to_numpy())
    # every run of a matched configuration is counted, the others are not
    assert c.runs_total == len(df)
    assert c.runs_matched == int(df.set_index(MATCH).index.isin(pivot.index).sum())
    text = str(c)
    assert f"{s['configurations']} matched configurations, lower in {s['lower']}" in text


def test_compare_with_the_other_baseline_inverts_the_ratios(sample_runs):
    a = sample_runs.compare(by="platform", metric="energy_per_token_j", match=MATCH)
    b = sample_runs.compare(by="platform", metric="energy_per_token_j", match=MATCH,
                            baseline="h100_sxm_80gb")
    assert a.summary[0]["configurations"] == b.summary[0]["configurations"]
    assert a.summary[0]["lower"] == b.summary[0]["higher"]
    assert a.summary[0]["median_ratio"] == pytest.approx(1 / b.summary[0]["median_ratio"])


def _table(rows):
    return pa.Table.from_pylist(rows)


def test_unmatched_runs_are_left_out_and_nulls_skipped():
    t = _table([
        {"platform": "a", "model_name": "m1", "e": 1.0}, {"platform": "a", "model_name": "m1", "e": 3.0},
        {"platform": "b", "model_name": "m1", "e": 1.0},
        {"platform": "a", "model_name": "m2", "e": 5.0},           # only under a: left out
        {"platform": "b", "model_name": "m3", "e": 9.0},           # only under b: left out
        {"platform": "b", "model_name": "m2", "e": None},          # no value: not a match
    ])
    c = compare_matched(t, "platform", "e", ["model_name"])
    assert c.table.to_pylist() == [{"model_name": "m1", "a": 2.0, "b": 1.0, "ratio_b": 0.5}]
    assert (c.runs_total, c.runs_matched) == (5, 3)
    assert c.summary[0] == {"platform": "b", "configurations": 1, "lower": 1, "higher": 0,
                            "median_ratio": 0.5, "min_ratio": 0.5, "max_ratio": 0.5}


@pytest.mark.parametrize("kwargs, error, text", [
    ({"by": "platform", "metric": "e", "match": []}, InputError, "match names no column"),
    ({"by": "platform", "metric": "e", "match": ["platform"]}, InputError, "both compared"),
    ({"by": "platform", "metric": "model_name", "match": ["x"]}, UnknownName, "x"),
    ({"by": "platform", "metric": "model_name", "match": ["e"]}, InputError, "not numeric"),
    ({"by": "platform", "metric": "e", "match": ["model_name"], "baseline": "z"}, InputError,
     "baseline 'z'"),
])
def test_bad_requests_are_one_clear_error(kwargs, error, text):
    t = _table([{"platform": "a", "model_name": "m", "e": 1.0},
                {"platform": "b", "model_name": "m", "e": 2.0}])
    with pytest.raises(error, match=text):
        compare_matched(t, **kwargs)


def test_one_value_only_is_refused():
    t = _table([{"platform": "a", "model_name": "m", "e": 1.0}])
    with pytest.raises(InputError, match="a comparison needs two"):
        compare_matched(t, "platform", "e", ["model_name"])
