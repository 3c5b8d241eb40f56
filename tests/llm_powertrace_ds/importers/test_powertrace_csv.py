"""The powertrace-csv importer on generated files in the LLM-PowerTrace authors' format."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest
from datasets import load_dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds import schema
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file

HEADER = ("run_id,timestamp,time_relative_s,gpu_id,power_w,sm_clock_mhz,gpu_util_pct,"
          "memory_util_pct,memory_used_mb,memory_total_mb,temperature_c,stage")
T0 = dt.datetime(2026, 5, 1, 12, 44, 37, 638000, tzinfo=dt.timezone.utc)
RUN_ID = "powertraces-ptX_r1_1-abc123"


def iso(ms: int) -> str:
    """Their ISO-8601 UTC stamp: trailing zeros of the fraction dropped, none when whole."""
    t = T0 + dt.timedelta(milliseconds=ms)
    frac = f"{t.microsecond // 1000:03d}".rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def trace_csv(path: Path, *, gpus: int = 4, ticks: int = 30, stages: list[str] | None = None,
              run_id: str = RUN_ID) -> Path:
    """A long CSV with ``gpus`` GPUs read 2 ms apart per tick, 100 ms ticks, empty cells."""
    lines = [HEADER]
    for k in range(ticks):
        stage = stages[k] if stages else ""
        for g in range(gpus):
            ms = k * 100 + 2 * g
            lines.append(f"{run_id},{iso(ms)},{ms / 1000},{g},{40 + g + k * 0.25},1980,{k % 100},"
                         f"0,,,,{stage}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def their_json(path: Path, **over) -> Path:
    """Their metadata JSON (the pt220 shape), with overrides."""
    meta = {
        "run_id": RUN_ID, "source_family": "PowerTraces", "model": "Unknown",
        "model_family": "gptj6b", "method": "lora", "gpu_type": "L40s", "gpu_count": 4,
        "precision": "bf16", "compute_dtype": "torch.bfloat16", "quantization_bits": "Unknown",
        "parallelism": "DP=1, TP=4, PP=1", "sequence_length": 256, "microbatch_size": 1,
        "grad_accum_steps": 16, "global_batch_size": 16, "checkpoint_interval": 20,
        "dataset_name": "Unknown", "duration_declared_min": 60.0,
        "sampling_interval_declared_s": 0.1, "logging_method": "nvidia-smi",
        "power_aggregation": "per_gpu",
    }
    meta.update(over)
    path.write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return path


def test_full_mapping(tmp_path):
    csv_path = trace_csv(tmp_path / "t.csv")
    run = import_file("powertrace-csv", csv_path, workload="finetune",
                      meta_path=their_json(tmp_path / "m.json"))
    m = run.meta
    assert run.run_id == RUN_ID and run.platform == "l40s"
    assert {"form_factor_unknown", "power_is_1s_average"} <= set(run.flags)
    assert m["model_family"] == "gptj" and m["model_name"] == "gpt-j-6b"
    assert m["model_label"] == "gptj6b" and m["model_source"] == "import"
    assert (m["dp_size"], m["tp_size"], m["pp_size"]) == (1, 4, 1)
    assert m["seq_len"] == 256 and m["batch_size"] == 1 and m["grad_accum"] == 16
    assert m["global_batch_size"] == 16 and m["checkpoint_every_steps"] == 20
    assert m["precision"] == "bf16" and m["method"] == "lora" and m["num_gpus"] == 4
    assert m["sample_period_ms"] == 100.0 and m["target_duration_s"] == 3600.0
    assert "dataset_name" not in m  # "Unknown" is null
    assert m["sampler"] == m["sweep"] == "import:powertrace-csv"
    assert m["power_field"] == "power_usage" and m["start_time"] == T0
    assert [d.gpu_index for d in run.devices] == [0, 1, 2, 3]
    for g, dev in enumerate(run.devices):
        assert dev.gpu_name == "L40s" and len(dev) == 30
        np.testing.assert_array_equal(dev.t_ms, np.arange(30) * 100 + 2 * g)
        np.testing.assert_allclose(dev.power_w, 40 + g + np.arange(30) * 0.25)
        assert np.isnan(dev.signals["mem_used_mib"]).all()
        assert (dev.signals["sm_clock_mhz"] == 1980).all()


@pytest.mark.parametrize("label,family,name", [
    ("ds7bbase", "deepseek", "deepseek-llm-7b-base"),
    ("ds7bchat", "deepseek", "deepseek-llm-7b-chat"),
    ("gptj6b", "gptj", "gpt-j-6b"),
    ("mystery13b", "other", None),
])
def test_model_labels(tmp_path, label, family, name):
    run = import_file("powertrace-csv", trace_csv(tmp_path / "t.csv", ticks=3),
                      workload="finetune",
                      meta_path=their_json(tmp_path / "m.json", model_family=label,
                                           gpu_type="H200"))
    assert run.meta["model_family"] == family and run.meta["model_label"] == label
    assert run.meta.get("model_name") == name and run.platform == "h200"


def test_json_beside_the_csv_is_found(tmp_path):
    csv_path = trace_csv(tmp_path / "trace.csv", ticks=3)
    their_json(tmp_path / "trace.json", sequence_length=1024)
    run = import_file("powertrace-csv", csv_path, workload="finetune")
    assert run.meta["seq_len"] == 1024


def test_without_metadata(tmp_path):
    run = import_file("powertrace-csv", trace_csv(tmp_path / "t.csv", ticks=3),
                      workload="finetune")
    assert run.run_id == RUN_ID and run.meta["model_family"] == "unknown"
    assert run.platform == "unknown" and "platform_unknown" in run.flags
    assert run.meta["num_gpus"] == 4


def test_stage_labels_become_events(tmp_path):
    stages = ["warmup"] * 3 + ["train"] * 3 + [""] * 2 + ["train"] * 2 + ["eval"] * 2
    run = import_file("powertrace-csv", trace_csv(tmp_path / "t.csv", ticks=12, stages=stages),
                      workload="finetune")
    assert [(e.kind, e.label, e.t_ms, e.rank) for e in run.events if e.kind == "stage"] == [
        ("stage", "warmup", 0, None), ("stage", "train", 300, None),
        ("stage", "eval", 1000, None)]
    # every device row carries the run-level events
    assert all(len(run.device_events(d)) == len(run.events) for d in run.devices)


def test_platform_argument_wins(tmp_path):
    run = import_file("powertrace-csv", trace_csv(tmp_path / "t.csv", ticks=3),
                      workload="finetune", meta_path=their_json(tmp_path / "m.json"),
                      platform="l40s_pcie_48gb", num_gpus=8)
    assert run.platform == "l40s_pcie_48gb" and "form_factor_unknown" not in run.flags
    assert run.meta["num_gpus"] == 8


def test_inference_workload_drops_finetune_keys(tmp_path):
    run = import_file("powertrace-csv", trace_csv(tmp_path / "t.csv", ticks=3),
                      workload="inference", meta_path=their_json(tmp_path / "m.json"))
    assert "seq_len" not in run.meta and run.meta["precision"] == "bf16"


def test_second_run_id_is_an_error(tmp_path):
    path = trace_csv(tmp_path / "t.csv", ticks=3)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"other-run,{iso(900)},0.9,0,1.0,1,1,0,,,,\n")
    with pytest.raises(InputError, match=r"line 14, field 'run_id'"):
        import_file("powertrace-csv", path, workload="finetune")


def test_unsafe_run_id_is_an_error(tmp_path):
    path = trace_csv(tmp_path / "t.csv", ticks=2, run_id="../../etc")
    with pytest.raises(InputError, match=r"line 2, field 'run_id'"):
        import_file("powertrace-csv", path, workload="finetune")


def test_publish_and_load(tmp_path):
    csv_path = trace_csv(tmp_path / "t.csv", stages=["a"] * 10 + ["b"] * 20)
    meta = their_json(tmp_path / "m.json")
    root = tmp_path / "ds"
    for _ in range(2):  # importing twice replaces the run
        assert main(["import", "powertrace-csv", str(csv_path), "--meta", str(meta),
                     "--out", str(root), "--workload", "finetune"]) == 0
    cache = str(tmp_path / "cache")
    ds = load_dataset(str(root), "finetune", split="l40s", cache_dir=cache)
    assert ds.num_rows == 4 and ds.features == schema.FEATURES["finetune"]
    assert set(ds["run_id"]) == {RUN_ID} and [len(p) for p in ds["power_w"]] == [30] * 4
    assert [e["label"] for e in ds[0]["events"]] == ["a", "b"]
    fam = load_dataset(str(root), "finetune-gptj", split="l40s", cache_dir=cache)
    assert fam.num_rows == 4


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=5, unique=True), st.integers(0, 12),
       st.booleans(), st.lists(st.integers(0, 5), max_size=30))
def test_round_robin_split_equals_the_stable_sort(keys, cycles, whole, noise):
    """Rows cycling through ascending GPUs are split without a sort, into the sort's devices."""
    from llm_powertrace_ds.importers.powertrace_csv import _round_robin

    keys = sorted(keys)
    cycled = np.array((keys * (cycles + 1))[: len(keys) * cycles + (0 if whole else 1)], float)
    for gpu in (cycled, np.array(noise, float)):
        found = _round_robin(gpu)
        if gpu is cycled and len(gpu) and whole:
            assert found is not None and found.tolist() == keys  # the fast path is taken
        if found is None:
            continue
        k = len(found)
        split = np.concatenate([np.arange(i, len(gpu), k) for i in range(k)])
        np.testing.assert_array_equal(split, np.argsort(gpu, kind="stable"))


def test_round_robin_and_sorted_logs_import_the_same(tmp_path):
    """A log whose rows cycle through the GPUs and the same rows grouped by GPU: one run."""
    rows = [(t, g, 100.0 + 10 * g + t) for t in range(12) for g in range(3)]
    runs = []
    for name, order in (("cycled", rows), ("grouped", sorted(rows, key=lambda r: r[1]))):
        path = tmp_path / f"{name}.csv"
        path.write_text("run_id,timestamp,gpu_id,power_w\n" + "".join(
            f"r1,2026-05-01T00:00:{t:02d}.000Z,{g},{p}\n" for t, g, p in order), encoding="utf-8")
        runs.append(import_file("powertrace-csv", path, workload="finetune", platform="a100"))
    for a, b in zip(runs[0].devices, runs[1].devices, strict=True):
        assert a.gpu_index == b.gpu_index
        np.testing.assert_array_equal(a.t_ms, b.t_ms)
        np.testing.assert_array_equal(a.power_w, b.power_w)
    assert [d.gpu_index for d in runs[0].devices] == [0, 1, 2]
    assert runs[0].devices[2].power_w.tolist() == [120.0 + t for t in range(12)]
