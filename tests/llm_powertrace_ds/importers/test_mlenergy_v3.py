"""``import mlenergy-v3``: ML.ENERGY benchmark v3 trees, cross-checked with ``mlenergy-data``.

The trees are built from the writer's source (:mod:`importers.mlenergy_v3_writer` cites the
files and commits); the publisher's own reader, ``mlenergy-data``, reads the same tree and its
figures must equal ours.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from importers.mlenergy_v3_writer import T_START, held_energy_j, write_tree
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.mlenergy_v3 import FIELD_MAP, read_results
from llm_powertrace_ds.shards import read_run

mlenergy_data = pytest.importorskip("mlenergy.data.records.runs",
                                    reason="the mlenergy-data extra (make install-dev)")


def _runs_rows(root):
    import pyarrow.ipc as ipc

    rows = {}
    for path in sorted((root / "data" / "inference_runs").rglob("*.arrow")):
        with ipc.open_stream(path) as reader:
            for row in reader.read_all().to_pylist():
                rows[row["run_id"]] = row
    return rows


@pytest.fixture
def tree(tmp_path):
    return write_tree(tmp_path / "bench")


def test_the_cli_imports_each_results_file_as_one_run_with_one_row_per_gpu(tmp_path, cli):
    root = tmp_path / "bench"
    small = write_tree(root, gpus=2, max_num_seqs=64)
    big = write_tree(root, gpus=1, max_num_seqs=128, sku="B200")
    out = tmp_path / "ds"
    res = cli(["import", "mlenergy-v3", str(root / "llm"), "--out", str(out), "--format",
               "json"])
    assert res.returncode == 0, res.stderr
    printed = json.loads(res.stdout)
    assert [r["num_gpus"] for r in printed] == [1, 2]  # sorted by path: b200 before h100
    assert cli(["validate", str(out)]).returncode == 0
    rows = _runs_rows(out)
    assert len(rows) == 2
    for tree in (small, big):
        row = next(r for r in rows.values() if r["batch_size"] == tree.data["max_num_seqs"])
        run = read_run(out, row["run_id"])
        assert len(run.devices) == tree.data["num_gpus"]
        assert run.meta["sample_hold"] == "previous"
        assert run.meta["power_field"] == "instant"
        # the steady window is the writer's, and its energy is the writer's within 0.1 %
        assert row["steady_energy_j"] == pytest.approx(tree.data["steady_state_energy"],
                                                       rel=1e-3)
        assert [(e.kind, e.t_ms) for e in run.events] == [
            ("steady_begin", 12_000), ("steady_end", 38_000)]
        assert row["ttft_p99_ms"] == pytest.approx(tree.data["p99_ttft_ms"])
        assert row["latency_p50_ms"] == pytest.approx(tree.data["median_e2el_ms"])
        assert row["tokens_out"] == tree.data["total_output_tokens"]
        source = json.loads(row["source_metadata"])
        assert source["steady_state_energy"] == tree.data["steady_state_energy"]
        assert source["p90_itl_ms"] == tree.data["p90_itl_ms"]
        assert "results" not in source


def test_every_reading_is_kept_as_written_and_held_until_the_next(tree):
    run = read_results(tree.results)
    instant = tree.data["timeline"]["power"]["device_instant"]
    average = tree.data["timeline"]["power"]["device_average"]
    t0 = round(T_START * 1000)
    for dev in run.devices:
        t = dev.t_ms + t0
        for series, col in ((instant, "power_w"), (average, "power_avg_w")):
            readings = series[str(dev.gpu_index)]
            at = np.searchsorted(t, [round(r[0] * 1000) for r in readings])
            assert np.array_equal(dev.signals[col][at], [r[1] for r in readings])
            # between two readings the value is the earlier reading's (previous hold)
            own = np.array([round(r[0] * 1000) for r in readings])
            idx = np.searchsorted(own, t, side="right") - 1
            held = np.where(idx >= 0, np.array([r[1] for r in readings])[np.maximum(idx, 0)],
                            np.nan)
            assert np.array_equal(dev.signals[col], held, equal_nan=True)


def test_the_change_only_energy_is_the_held_energy_not_the_interpolated_one(tree):
    from llm_powertrace_ds.metrics import compute_run_metrics

    run = read_results(tree.results)
    metrics = compute_run_metrics(run)
    a, b = T_START + 12.0, T_START + 38.0
    held = sum(held_energy_j(p, a, b) for p in tree.polled.values())
    assert metrics["steady_energy_j"] == pytest.approx(held, rel=1e-3)
    # the same readings read as a linear (interpolated) log give a different energy
    interpolated = 0.0
    for points in tree.data["timeline"]["power"]["device_instant"].values():
        arr = np.array(points)
        grid = np.linspace(a, b, 26_001)
        interpolated += float(np.trapezoid(np.interp(grid, arr[:, 0], arr[:, 1]), grid))
    assert abs(interpolated - held) / held > 1e-2


def test_mlenergy_data_figures_equal_the_imported_ones(tmp_path, cli):
    from mlenergy.data.records.runs import LLMRuns

    root = tmp_path / "bench"
    write_tree(root, gpus=2)
    out = tmp_path / "ds"
    assert cli(["import", "mlenergy-v3", str(root), "--out", str(out)]).returncode == 0
    (row,) = _runs_rows(out).values()
    (theirs,) = LLMRuns.from_raw_results(root, stable_only=False, n_workers=1)
    duration_s = (38_000 - 12_000) / 1000
    assert row["steady_energy_j"] == pytest.approx(theirs.steady_state_energy_joules, rel=1e-3)
    assert row["steady_energy_j"] / duration_s == pytest.approx(theirs.avg_power_watts, rel=1e-3)
    assert theirs.steady_state_duration_seconds == pytest.approx(duration_s)
    assert row["tokens_out"] == theirs.total_output_tokens
    assert row["requests_completed"] == theirs.completed_requests
    assert row["num_gpus"] == theirs.num_gpus and row["batch_size"] == theirs.max_num_seqs
    assert row["model_label"] == theirs.model_id
    source = json.loads(row["source_metadata"])
    assert source["steady_state_energy_per_token"] == theirs.energy_per_token_joules
    # their steady-window timeline (each GPU carried forward onto GPU 0's reading times) is our
    # node total at those times
    run = read_run(out, row["run_id"])
    t0 = round(T_START * 1000)
    for metric, col in (("power.device_instant", "power_w"),
                        ("power.device_average", "power_avg_w")):
        frame = theirs.timelines(metric=metric)
        t = np.round(frame["timestamp"].to_numpy() * 1000).astype(np.int64) - t0
        total = np.zeros(len(t))
        for dev in run.devices:
            idx = np.searchsorted(dev.t_ms, t, side="right") - 1
            total += np.nan_to_num(dev.signals[col][idx])
        assert np.allclose(total, frame["value"].to_numpy(), rtol=1e-6), metric


def test_every_field_of_a_results_file_is_mapped(tree):
    top = set(tree.data)
    mapped = " ".join(FIELD_MAP)
    latency = {k for k in top if k.endswith("_ms")}
    for key in sorted(top - latency):
        assert key in mapped, key
    assert "{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms" in FIELD_MAP


@pytest.mark.parametrize("change,field,reason", [
    (lambda d: d.update(num_gpus=4), "num_gpus",
     "value 4 differs from the 2 GPUs of the power timeline"),
    (lambda d: d["timeline"]["power"]["device_instant"]["0"].append([1.0, "x"]),
     "timeline.power.device_instant", "GPU 0: reading [1.0, 'x'] is not [unix_s, value]"),
    (lambda d: d["timeline"]["power"]["device_instant"]["1"].insert(3, [1.0, 5.0]),
     "timeline.power.device_instant", "GPU 1: time goes back at reading 3"),
    (lambda d: d["timeline"]["power"].pop("device_instant"),
     "timeline.power.device_instant", "no power timeline (timeline.power.device_instant)"),
    (lambda d: d.update(steady_state_energy="lots"), "steady_state_energy",
     "value 'lots' is not a number"),
    (lambda d: d["timeline"].update(steady_state_end_time=T_START),
     "timeline.steady_state_end_time", "the steady state ends"),
], ids=["num-gpus", "reading", "time-back", "no-instant", "energy", "steady"])
def test_a_bad_field_is_one_line_naming_the_publishers_field(tree, change, field, reason):
    data = json.loads(tree.results.read_text(encoding="utf-8"))
    change(data)
    tree.results.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_results(tree.results)
    assert info.value.field == field and info.value.file == str(tree.results)
    assert info.value.reason.startswith(reason), info.value.reason


def test_a_file_outside_the_writers_layout_or_nested_too_deep_is_refused(tmp_path, tree):
    stray = tmp_path / "results.json"
    stray.write_text(tree.results.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(InputError, match="ML.ENERGY v3 layout"):
        read_results(stray)
    tree.results.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(InputError, match="nested deeper than 64 levels"):
        read_results(tree.results)


def test_a_v3_tree_given_to_mlenergy_v2_names_the_right_importer(tmp_path, cli):
    write_tree(tmp_path / "bench")
    res = cli(["import", "mlenergy-v2", tmp_path / "bench", "--out", tmp_path / "ds"])
    assert res.returncode == 1
    assert "ML.ENERGY benchmark v3 tree" in res.stderr and "import mlenergy-v3" in res.stderr


def test_options_that_do_not_apply_are_refused_by_name(tmp_path, cli):
    write_tree(tmp_path / "bench")
    meta = tmp_path / "m.json"
    meta.write_text("{}", encoding="utf-8")
    res = cli(["import", "mlenergy-v3", tmp_path / "bench", "--meta", meta, "--out",
               tmp_path / "ds"])
    assert res.returncode == 2 and "--meta" in res.stderr
    res = cli(["import", "mlenergy-v3", tmp_path / "bench", "--workload", "finetune", "--out",
               tmp_path / "ds"])
    assert res.returncode == 2 and "--workload finetune" in res.stderr
    assert not (tmp_path / "ds" / "data").exists()
