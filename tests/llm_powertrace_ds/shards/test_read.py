"""A published run reads back whole: every device attribute, every event, both read paths.

A GPU's name, limits and node and every event survive the round trip, not only the samples and
the metadata.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds import shards
from llm_powertrace_ds.run import DeviceSeries, Event, Run


def _run() -> Run:
    t = np.arange(0, 3000, 100, dtype=np.int64)
    power = np.linspace(100.0, 300.0, len(t))
    power[5] = np.nan  # a missing reading stays missing
    devices = [
        DeviceSeries(0, t, {"power_w": power, "gpu_util_pct": np.full(len(t), 50.0)},
                     node_index=0, gpu_name="NVIDIA L40S", gpu_uuid_hash="h-a",
                     power_limit_w=300.0, default_power_limit_w=350.0),
        DeviceSeries(3, t + 7, {"power_w": power + 1.0, "gpu_util_pct": np.full(len(t), np.nan)},
                     node_index=1, gpu_name="NVIDIA L40S (b)", gpu_uuid_hash="h-b",
                     power_limit_w=None, default_power_limit_w=400.0, rank=1),
    ]
    events = [Event(0, "idle_begin"), Event(500, "idle_end"),
              Event(700, "step_begin", step=1, rank=0), Event(700, "step_begin", step=1, rank=1),
              Event(1500, "checkpoint_begin", rank=0), Event(1900, "checkpoint_end", rank=0),
              Event(2000, "stage", label="CKPT")]
    meta = {"run_id": "pins-read", "workload": "finetune", "platform": "l40s",
            "model_family": "llama", "num_gpus": 2, "sample_period_ms": 100.0,
            "tokens": 1000}
    return Run(meta, devices, events)


def _same(back: Run, run: Run) -> None:
    assert [d.gpu_index for d in back.devices] == [0, 3]
    for got, want in zip(back.devices, run.devices, strict=True):
        assert got.node_index == want.node_index
        assert got.gpu_name == want.gpu_name
        assert got.gpu_uuid_hash == want.gpu_uuid_hash
        assert got.power_limit_w == want.power_limit_w
        assert got.default_power_limit_w == want.default_power_limit_w
        assert got.t_ms.dtype == np.int64 and np.array_equal(got.t_ms, want.t_ms)
        # float32 on disk (the column contract); NaN where NaN
        np.testing.assert_array_equal(got.power_w, want.power_w.astype(np.float32))
    assert "gpu_util_pct" in back.devices[0].signals
    assert "gpu_util_pct" not in back.devices[1].signals  # never reported: not a NaN column
    key = [(e.t_ms, e.kind, e.step, e.rank, e.label) for e in run.events]
    assert [(e.t_ms, e.kind, e.step, e.rank, e.label) for e in back.events] == key
    assert back.meta["run_id"] == "pins-read" and back.meta["tokens"] == 1000


def test_read_run_gives_back_devices_and_events(tmp_path):
    run = _run()
    shards.publish_run(tmp_path, run)
    _same(shards.read_run(tmp_path, "pins-read"), run)
    (back,) = list(shards.iter_runs(tmp_path))
    _same(back, run)


def test_run_from_rows_gives_back_devices_and_events(tmp_path):
    from datasets import load_dataset

    run = _run()
    shards.publish_run(tmp_path, run)
    rows = list(load_dataset(str(tmp_path), "finetune", split="l40s"))
    _same(shards.run_from_rows(rows, root=tmp_path), run)
    with pytest.raises(IndexError):
        shards.run_from_rows([])


def test_list_runs_is_one_row_per_run_sorted(tmp_path, make_run):
    for run_id, workload in (("b-ft", "finetune"), ("a-inf", "inference"), ("c-ft", "finetune")):
        shards.publish_run(tmp_path, make_run(run_id, workload=workload, n=120))
    listed = shards.list_runs(tmp_path)
    assert [r["run_id"] for r in listed] == ["a-inf", "b-ft", "c-ft"]
    assert [r["workload"] for r in listed] == ["inference", "finetune", "finetune"]
    assert shards.list_runs(tmp_path / "empty") == []


def test_repair_removes_dead_writers_temp_files_and_rows_without_a_trace(tmp_path, make_run):
    from filelock import FileLock

    from llm_powertrace_ds import layout

    for run_id in ("keep", "orphan", "busy"):
        shards.publish_run(tmp_path, make_run(run_id, n=120))
    data = layout.data_root(tmp_path)
    dead = data / "finetune_runs" / "l40s" / ".x.arrow.999999999.tmp"  # no such process
    dead.write_bytes(b"half")
    alive = data / "finetune_runs" / "l40s" / f".y.arrow.{__import__('os').getpid()}.tmp"
    alive.write_bytes(b"writing")
    files = {rid: shards.existing_run_files(tmp_path, rid) for rid in ("orphan", "busy")}
    for rid in ("orphan", "busy"):
        for p in files[rid]:
            if p.relative_to(data).parts[0] == "finetune":
                p.unlink()  # the trace is gone: the runs row is an orphan
    with FileLock(str(layout.lock_path(tmp_path, "busy"))):  # being published now
        removed = shards.repair_folder(tmp_path)
    orphan_rows = [p.relative_to(tmp_path).as_posix()
                   for p in files["orphan"] if p.relative_to(data).parts[0] != "finetune"]
    assert orphan_rows and sorted(removed) == sorted([dead.relative_to(tmp_path).as_posix()]
                                                     + orphan_rows)
    assert not dead.exists() and alive.exists()
    assert shards.existing_run_files(tmp_path, "orphan") == []
    assert shards.existing_run_files(tmp_path, "busy")  # its lock is held: left alone
    assert [r["run_id"] for r in shards.list_runs(tmp_path)] == ["busy", "keep"]
    busy_rows = [p.relative_to(tmp_path).as_posix()
                 for p in files["busy"] if p.relative_to(data).parts[0] != "finetune"]
    assert sorted(shards.repair_folder(tmp_path)) == sorted(busy_rows)  # the lock is free now
    assert [r["run_id"] for r in shards.list_runs(tmp_path)] == ["keep"]


def test_the_configs_block_keeps_the_rest_of_the_card_as_written(tmp_path, make_run):
    from llm_powertrace_ds.shards.publish import CARD_PENDING

    fresh = tmp_path / "fresh"
    shards.publish_run(fresh, make_run("r0", n=120))
    text = (fresh / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\nconfigs:\n- config_name: finetune\n")
    assert text.endswith("\n---\n\n" + CARD_PENDING + "\n")  # an empty body gets the notice
    readme = tmp_path / "README.md"
    long = "a long description " * 8  # wider than YAML's default 80 columns
    readme.write_text("---\nlicense: cc-by-4.0\npretty_name: Énergie — traces\ndescription: "
                      f"{long.strip()}\n---\n\n# My card\n", encoding="utf-8")
    shards.publish_run(tmp_path, make_run("r1", n=120))
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("---\nlicense: cc-by-4.0\npretty_name: Énergie — traces\n"
                           f"description: {long.strip()}\nconfigs:\n")  # order, unicode, width
    assert text.endswith("\n---\n\n# My card\n") and "\n\n---\n" not in text


def test_prepare_run_returns_its_metrics_and_writes_requests_for_inference_only(tmp_path,
                                                                                 make_run):
    from llm_powertrace_ds import layout, metrics
    from llm_powertrace_ds.shards.publish import prepare_run

    run = make_run("ft-req", n=120, with_requests=True)
    prepared = prepare_run(tmp_path, run)
    assert layout.requests_path(tmp_path, "l40s", "ft-req") not in prepared.files
    fresh = metrics.compute_run_metrics(make_run("ft-req", n=120, with_requests=True))
    assert prepared.metrics["energy_j"] == pytest.approx(fresh["energy_j"])
    inf = prepare_run(tmp_path, make_run("inf-req", workload="inference", n=120,
                                         with_requests=True))
    assert layout.requests_path(tmp_path, "l40s", "inf-req") in inf.files


def test_a_packed_destination_is_refused_with_its_reason(tmp_path, make_run):
    from llm_powertrace_ds.errors import ShardError

    shards.publish_run(tmp_path, make_run("r1", n=120))
    folder = tmp_path / "data" / "finetune_runs" / "l40s"
    (folder / "l40s-00000-of-00001.arrow").write_bytes(b"")
    with pytest.raises(ShardError) as err:
        shards.publish_run(tmp_path, make_run("r2", n=120))
    assert str(err.value) == ("'data/finetune_runs/l40s' holds packed shards: a packed folder is "
                              "for reading and publishing; add runs to the unpacked folder and "
                              "pack again")
