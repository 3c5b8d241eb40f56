"""``metrics.rows``: the per-run metric rows ``llm-powertrace metrics`` prints, from a real folder."""

from __future__ import annotations

import pytest

from llm_powertrace_ds import metrics
from llm_powertrace_ds.errors import RunNotFound
from llm_powertrace_ds.metrics import rows
from llm_powertrace_ds.names import UnknownName
from llm_powertrace_ds.shards import publish_run, read_run


def test_runs_configs_maps_every_config_name_to_its_runs_config():
    assert rows.runs_configs(None) == ["finetune_runs", "inference_runs"]
    assert rows.runs_configs("finetune_runs") == ["finetune_runs"]
    assert rows.runs_configs("inference") == ["inference_runs"]
    assert rows.runs_configs("finetune-llama") == ["finetune_runs"]
    for bad in ("inference_requests", "finetune_rows"):
        with pytest.raises(UnknownName, match="--config") as err:
            rows.runs_configs(bad)
        assert bad in str(err.value) and "finetune_runs" in str(err.value)
    with pytest.raises(UnknownName) as err:
        rows.runs_configs("zzz")
    assert str(err.value).startswith("field '--config': unknown config 'zzz'; valid: finetune, ")
    assert "inference_requests" not in str(err.value)


@pytest.fixture
def folder(tmp_path, make_run):
    publish_run(tmp_path, make_run("run-b", n=400, seed=1))
    publish_run(tmp_path, make_run("run-a", n=300, seed=2))
    publish_run(tmp_path, make_run("inf-a", workload="inference", platform="h100_sxm_80gb",
                                   n=300, seed=3))
    return tmp_path


def test_iter_run_rows_reads_each_runs_config_and_split(folder):
    assert sorted(r["run_id"] for r in rows.iter_run_rows(folder)) == ["inf-a", "run-a", "run-b"]
    assert sorted(r["run_id"] for r in rows.iter_run_rows(folder, "finetune")) == ["run-a",
                                                                                    "run-b"]
    assert [r["run_id"] for r in rows.iter_run_rows(folder, None, "h100_sxm_80gb")] == ["inf-a"]
    with pytest.raises(UnknownName, match="split"):
        list(rows.iter_run_rows(folder, "finetune", "h100_sxm_80gb"))


def test_run_metrics_rows_are_the_stored_metrics_sorted_by_run(folder):
    out = rows.run_metrics_rows(folder)
    assert [r["run_id"] for r in out] == ["inf-a", "run-a", "run-b"]
    stored = {r["run_id"]: r for r in rows.iter_run_rows(folder)}
    for r in out:
        assert list(r)[:4] == ["run_id", "workload", "platform", "num_gpus"]
        assert list(r)[4:] == list(metrics.METRIC_NAMES) + ["metric_notes"]
        assert r["workload"] == stored[r["run_id"]]["workload"]
        assert r["platform"] == stored[r["run_id"]]["platform"]
        assert r["num_gpus"] == 2
        for name in metrics.METRIC_NAMES:
            assert r[name] == stored[r["run_id"]][name], name
        assert r["metric_notes"] == list(stored[r["run_id"]]["metric_notes"] or [])
    only = rows.run_metrics_rows(folder, run_id="run-a")
    assert [r["run_id"] for r in only] == ["run-a"]
    assert rows.run_metrics_rows(folder, config="finetune", split="l40s")[0]["run_id"] == "run-a"


def test_recompute_gives_the_metrics_of_the_trace(folder):
    again = rows.run_metrics_rows(folder, run_id="run-b", recompute=True)[0]
    fresh = metrics.compute_run_metrics(read_run(folder, "run-b"))
    for name in metrics.METRIC_NAMES:
        assert again[name] == pytest.approx(fresh[name], nan_ok=True), name
    assert again["metric_notes"] == list(fresh.get("metric_notes") or [])


def test_config_and_split_both_select(tmp_path, make_run):
    publish_run(tmp_path, make_run("ft", n=300, seed=4))
    publish_run(tmp_path, make_run("inf", workload="inference", n=300, seed=5))
    publish_run(tmp_path, make_run("ft-h", platform="h100_sxm_80gb", n=300, seed=6))
    picked = rows.run_metrics_rows(tmp_path, config="inference_runs", split="l40s")
    assert [r["run_id"] for r in picked] == ["inf"]
    picked = rows.run_metrics_rows(tmp_path, config="finetune", split="h100_sxm_80gb")
    assert [r["run_id"] for r in picked] == ["ft-h"]


def test_an_unknown_run_is_an_error_naming_the_run_and_the_selection(folder):
    with pytest.raises(RunNotFound) as err:
        rows.run_metrics_rows(folder, run_id="nope")
    assert str(err.value) == f"run 'nope' is not in {folder}"
    with pytest.raises(RunNotFound) as err:
        rows.run_metrics_rows(folder, config="finetune", split="l40s", run_id="inf-a")
    assert str(err.value) == f"run 'inf-a' is not in {folder} (config finetune, split l40s)"
    with pytest.raises(RunNotFound) as err:
        rows.run_metrics_rows(folder, config="finetune", run_id="inf-a")
    assert str(err.value) == f"run 'inf-a' is not in {folder} (config finetune, split None)"
