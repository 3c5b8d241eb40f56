"""The powertrace-csv importer on generated files in the LLM-PowerTrace authors' format.

Exact behaviour: the ``"DP=…, TP=…, PP=…"`` grammar and which layouts are ``single`` or ``tp``;
the ``"Unknown"``-like tokens that mean null; the positive-number check and ms/s scaling of the
declared period and duration; the mapping of the metadata JSON (run id, passed-through columns,
logged and dropped keys); the one-line errors (reason, file, line and field) of a bad header, an
empty file, a cut-off line, a bad ``gpu_id``, a file without a power value and a second run id;
the order of GPUs beyond the int16 sort keys; the run id precedence (CSV, then JSON, then the
file's hash); and the order of stage labels that share a timestamp.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from datasets import load_dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds import schema
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.powertrace_csv import (
    _is_unknown,
    import_powertrace_csv,
    map_meta,
    parse_parallelism,
)

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


LOGGER = "llm_powertrace_ds.importers.powertrace_csv"


MIN_HEADER = "run_id,timestamp,gpu_id,power_w"


PRIVACY = "; refused (nothing is published that could name a person, a machine or a path)"


def columns(data: dict, workload: str, file: Path = Path("m.json")) -> dict:
    """``map_meta`` without ``source_metadata``, after checking that it keeps ``data`` verbatim."""
    out = map_meta(data, workload, file=file)
    assert json.loads(out.pop("source_metadata")) == data
    return out


def where(info: pytest.ExceptionInfo) -> tuple:
    return info.value.reason, info.value.file, info.value.line, info.value.field


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def stamp(s: int) -> str:
    return f"2026-05-01T00:00:{s:02d}Z"


def rows(*cells: tuple) -> str:
    return "".join(",".join(str(c) for c in row) + "\n" for row in cells)


def imp(path: Path, **kw):
    return import_powertrace_csv(path, workload=kw.pop("workload", "finetune"), **kw)


@pytest.mark.parametrize("text,sizes", [
    ("DP=1, TP=4, PP=1", {"dp_size": 1, "tp_size": 4, "pp_size": 1, "parallelism": "tp"}),
    ("DP=1, TP=1, PP=1", {"dp_size": 1, "tp_size": 1, "pp_size": 1, "parallelism": "single"}),
    ("TP=2", {"tp_size": 2, "parallelism": "tp"}),          # absent sizes count as 1
    ("dp = 2", {"dp_size": 2}),                               # data parallel: no label
    ("DP=2, TP=2, PP=1", {"dp_size": 2, "tp_size": 2, "pp_size": 1}),
    ("DP=1, TP=2, PP=2", {"dp_size": 1, "tp_size": 2, "pp_size": 2}),
    ("DP=2, TP=2, PP=2", {"dp_size": 2, "tp_size": 2, "pp_size": 2}),
    ("PP=3", {"pp_size": 3}),
])
def test_parallelism_sizes_and_label(text, sizes):
    assert parse_parallelism(text, file=Path("m.json")) == sizes


def test_parallelism_without_a_size_names_the_value():
    with pytest.raises(InputError) as info:
        parse_parallelism("DP:1 TP:4", file=Path("m.json"))
    assert where(info) == ("value 'DP:1 TP:4' is not like 'DP=1, TP=4, PP=1'", "m.json", None,
                           "parallelism")


@pytest.mark.parametrize("value", [None, "", "   ", "Unknown", " unknown ", "N/A", "n/a", "None",
                                   "none", "NULL", "null"])
def test_unknown_tokens_are_null(value):
    assert _is_unknown(value)
    assert columns({"dataset_name": value, "seed": 3}, "finetune") == {"seed": 3}


@pytest.mark.parametrize("value", ["alpaca", "unknowns", 0, False])
def test_other_values_are_kept(value):
    assert not _is_unknown(value)


def test_mapping_of_every_kind_of_key():
    data = {
        "run_id": "pt-run-1", "model_family": "ds7bchat", "parallelism": "DP=1, TP=4, PP=1",
        "gpu_type": " H100 ", "sampling_interval_declared_s": 0.25,
        "duration_declared_min": "2", "sequence_length": 512, "microbatch_size": 2,
        "grad_accum_steps": 8, "global_batch_size": 16, "precision": " bf16 ",
        "checkpoint_interval": 50, "method": "lora", "gpu_count": 4, "dataset_name": "alpaca",
        "seed": 7, "learning_rate": 0.0002, "model": "Unknown", "logging_method": "nvidia-smi",
    }
    assert columns(data, "finetune") == {
        "model_family": "deepseek", "model_label": "ds7bchat",
        "model_name": "deepseek-llm-7b-chat", "dp_size": 1, "tp_size": 4, "pp_size": 1,
        "parallelism": "tp", "gpu_name": "H100", "sample_period_ms": 250.0,
        "target_duration_s": 120.0, "seq_len": 512, "batch_size": 2, "grad_accum": 8,
        "global_batch_size": 16, "precision": "bf16", "checkpoint_every_steps": 50,
        "method": "lora", "num_gpus": 4, "dataset_name": "alpaca", "seed": 7,
        "learning_rate": 0.0002, "run_id": "pt-run-1",
    }


def test_unmapped_label_keeps_the_label_and_guesses_the_family():
    assert columns({"model_family": "mystery13b"}, "finetune") == {
        "model_family": "other", "model_label": "mystery13b"}


def test_numeric_run_id_becomes_text():
    assert columns({"run_id": 12345}, "finetune") == {"run_id": "12345"}


def test_key_without_a_column_is_logged_and_kept_verbatim(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    assert columns({"operator_note": "x", "seed": 1}, "finetune") == {"seed": 1}
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "m.json: key 'operator_note' has no column (kept in source_metadata)"]


def test_finetune_keys_of_an_inference_run_stay_verbatim_with_a_warning(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    data = {"run_id": "r-1", "sequence_length": 256, "grad_accum_steps": 4, "method": "lora",
            "parallelism": "DP=1, TP=2, PP=1", "precision": "fp16"}
    assert columns(data, "inference") == {
        "tp_size": 2, "pp_size": 1, "precision": "fp16", "run_id": "r-1"}
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER] == [
        (logging.WARNING, "m.json: dp_size, grad_accum, method, parallelism, seq_len are not "
                          "columns of inference (kept in source_metadata)")]


@pytest.mark.parametrize("key", ["sampling_interval_declared_s", "duration_declared_min"])
@pytest.mark.parametrize("value,shown", [
    (0, "0"), (-1, "-1"), (True, "True"), ("abc", "abc"), ("nan", "nan"), ("inf", "inf"),
    (False, "False"), ("x" * 50, "x" * 40),
])
def test_declared_period_and_duration_must_be_positive_numbers(key, value, shown):
    with pytest.raises(InputError) as info:
        map_meta({key: value}, "finetune", file=Path("m.json"))
    assert where(info) == (f"value {shown!r} is not a positive number", "m.json", None, key)


def test_provenance_key_is_refused_naming_file_and_field():
    with pytest.raises(InputError) as info:
        map_meta({"sampler": "nvml"}, "finetune", file=Path("m.json"))
    reason, file, line, field = where(info)
    assert reason.startswith("sampler is provenance the importer sets itself and cannot be "
                             "given; a meta file may set: attn_implementation, batch_size, ")
    assert ", run_id, sample_hold, sample_period_ms, seed, seq_len, " in reason
    assert (file, line, field) == ("m.json", None, "sampler")


def test_private_text_is_refused_naming_the_json():
    with pytest.raises(InputError) as info:
        map_meta({"method": "/home/ann/lora"}, "finetune", file=Path("meta/m.json"))
    assert where(info) == ("value '/home/ann/lora' looks like a file path" + PRIVACY,
                           "meta/m.json", None, "method")


def test_unusable_run_id_in_the_json_is_refused():
    with pytest.raises(InputError) as info:
        map_meta({"run_id": "a b"}, "finetune", file=Path("m.json"))
    assert where(info) == ("value 'a b' is not a usable run id (letters, digits and ._=+- only)",
                           "m.json", None, "run_id")


def test_missing_column_is_named_with_the_header_line(tmp_path):
    path = write(tmp_path, "\n\ntimestamp,gpu_id\n" + rows((stamp(0), 0)))
    with pytest.raises(InputError) as info:
        imp(path)
    assert where(info) == ("no power_w column; the header has 'timestamp', 'gpu_id'", str(path),
                           3, "power_w")


def test_missing_gpu_id_column(tmp_path):
    path = write(tmp_path, "run_id,timestamp,power_w\n" + rows(("r1", stamp(0), 1)))
    with pytest.raises(InputError) as info:
        imp(path)
    assert where(info) == ("no gpu_id column; the header has 'run_id', 'timestamp', 'power_w'",
                           str(path), 1, "gpu_id")


def test_header_only_is_an_error_after_the_header(tmp_path):
    path = write(tmp_path, "\n\n" + MIN_HEADER + "\n")
    with pytest.raises(InputError) as info:
        imp(path)
    assert where(info) == ("no data rows after the header", str(path), 4, "power_w")


def test_cut_off_last_line_is_an_error(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("r1", stamp(0), 0, 1)) + f"r1,{stamp(1)},0")
    with pytest.raises(InputError) as info:
        imp(path)
    assert where(info) == ("the line has 3 fields, the header has 4", str(path), 3, "power_w")


def test_header_names_are_matched_without_case_and_the_first_of_twins_wins(tmp_path):
    path = write(tmp_path, "TimeStamp,GPU_ID,Power_W,power_w,Stage,RUN_ID\n"
                 + rows((stamp(0), 0, 100, 7, "warm", "r-9"), (stamp(1), 0, 101, 8, "warm", "r-9")))
    run = imp(path)
    assert run.run_id == "r-9"
    assert run.devices[0].power_w.tolist() == [100.0, 101.0]
    assert [(e.kind, e.label, e.t_ms) for e in run.events] == [("stage", "warm", 0)]


def test_every_signal_column_is_read(tmp_path):
    path = write(tmp_path, "timestamp,gpu_id,power_w,sm_clock_mhz,gpu_util_pct,memory_util_pct,"
                 "memory_used_mb,memory_total_mb,temperature_c,time_relative_s\n"
                 + rows((stamp(0), 0, 100.5, 1980, 50, 20, 1024, 46068, -3, 0.0)))
    dev = imp(path).devices[0]
    assert {k: v.tolist() for k, v in dev.signals.items()} == {
        "power_w": [100.5], "sm_clock_mhz": [1980.0], "gpu_util_pct": [50.0],
        "mem_util_pct": [20.0], "mem_used_mib": [1024.0], "temp_c": [-3.0]}


@pytest.mark.parametrize("column,value,reason,field", [
    ("timestamp", "yesterday",
     "value 'yesterday' is not a timestamp (YYYY/MM/DD HH:MM:SS.mmm or ISO-8601)", "timestamp"),
    ("gpu_id", "x", "value 'x' is not a number", "gpu_id"),
    ("gpu_id", "0.5", "a gpu_id must be a whole number >= 0", "gpu_id"),
    ("gpu_id", "-1", "a gpu_id must be a whole number >= 0", "gpu_id"),
    ("power_w", "-1", "value '-1' is negative", "power_w"),
    ("power_w", "abc", "value 'abc' is not a number", "power_w"),
    ("sm_clock_mhz", "abc", "value 'abc' is not a number", "sm_clock_mhz"),
    ("sm_clock_mhz", "-1",
     "value -1 of GPU 0 is outside the physical range 0..10000 of sm_clock_mhz", "sm_clock_mhz"),
    ("gpu_util_pct", "-1",
     "value -1 of GPU 0 is outside the physical range 0..100 of gpu_util_pct", "gpu_util_pct"),
    ("memory_util_pct", "abc", "value 'abc' is not a number", "memory_util_pct"),
    ("memory_used_mb", "abc", "value 'abc' is not a number", "memory_used_mb"),
    ("temperature_c", "abc", "value 'abc' is not a number", "temperature_c"),
])
def test_bad_value_is_named_with_file_line_and_column(tmp_path, column, value, reason, field):
    names = ["timestamp", "gpu_id", "power_w", "sm_clock_mhz", "gpu_util_pct",
             "memory_util_pct", "memory_used_mb", "temperature_c"]
    good = {"timestamp": stamp(1), "gpu_id": "0", "power_w": "100", "sm_clock_mhz": "1980",
            "gpu_util_pct": "50", "memory_util_pct": "20", "memory_used_mb": "1024",
            "temperature_c": "45"}
    bad = {**good, "timestamp": stamp(2), column: value}
    path = write(tmp_path, ",".join(names) + "\n" + rows([good[n] for n in names],
                                                         [bad[n] for n in names]))
    with pytest.raises(InputError) as info:
        imp(path)
    assert where(info) == (reason, str(path), 3, field)


def test_zone_less_timestamps_are_read_in_the_given_zone(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("r1", "2026-05-01 00:00:00", 0, 1)))
    run = imp(path, zone=ZoneInfo("America/Phoenix"))
    assert run.meta["start_time"] == dt.datetime(2026, 5, 1, 7, tzinfo=dt.timezone.utc)
    assert imp(path).meta["start_time"] == dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)


def test_no_power_value_at_all(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("r1", stamp(0), 0, ""), ("r1", stamp(1), 0, "")))
    with pytest.raises(InputError) as info:
        imp(path)
    assert where(info) == ("no usable power value: every value is empty", str(path), 2,
                           "power_w")


@pytest.mark.parametrize("big", [32768, 40000])
def test_gpus_beyond_int16_keep_ascending_order(tmp_path, big):
    """Grouped rows are sorted by GPU; the first GPU whose time repeats is GPU 0, not ``big``."""
    path = write(tmp_path, MIN_HEADER + "\n" + rows(
        ("r1", stamp(0), 0, 1), ("r1", stamp(0), 0, 1),
        ("r1", stamp(0), big, 1), ("r1", stamp(0), big, 1)))
    with pytest.raises(InputError) as info:
        imp(path)
    assert where(info) == ("time of GPU 0 repeats 2026-05-01T00:00:00.000Z (line 2); each GPU's "
                           "timestamps must increase", str(path), 3, "timestamp")


def test_rows_cycling_out_of_gpu_order_report_the_lowest_gpu_first(tmp_path):
    """Rows cycle 0, 2, 1, 3 (not ascending): GPUs 2 and 1 repeat a time; GPU 1 is named."""
    cells = []
    for t in range(2):
        for g in (0, 2, 1, 3):
            cells.append(("r1", stamp(0 if g in (1, 2) else t), g, 1))
    path = write(tmp_path, MIN_HEADER + "\n" + rows(*cells))
    with pytest.raises(InputError) as info:
        imp(path)
    assert where(info) == ("time of GPU 1 repeats 2026-05-01T00:00:00.000Z (line 4); each GPU's "
                           "timestamps must increase", str(path), 8, "timestamp")


@pytest.mark.parametrize("order", ["cycled", "grouped", "shuffled", "partial"])
def test_rows_are_split_by_gpu_in_file_order(tmp_path, order):
    table = [(t, g) for t in range(6) for g in (0, 2, 5)]
    if order == "grouped":
        table.sort(key=lambda r: r[1])
    elif order == "shuffled":
        table = [table[i] for i in np.random.default_rng(3).permutation(len(table))]
        table.sort(key=lambda r: r[0] * 10 + (r[1] * 7) % 3)  # each GPU's times still increase
    elif order == "partial":
        table = table[:-1]  # the last cycle is short
    path = write(tmp_path, MIN_HEADER + "\n" + rows(*[("r1", stamp(t), g, 100 + 10 * g + t)
                                                 for t, g in table]))
    run = imp(path)
    assert [d.gpu_index for d in run.devices] == [0, 2, 5]
    ticks = [6, 6, 5 if order == "partial" else 6]
    for dev, n in zip(run.devices, ticks, strict=True):
        assert dev.t_ms.tolist() == [1000 * t for t in range(n)]
        assert dev.power_w.tolist() == [100.0 + 10 * dev.gpu_index + t for t in range(n)]


def test_one_gpu_many_rows(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(*[("r1", stamp(t), 3, t) for t in range(4)]))
    run = imp(path)
    assert [d.gpu_index for d in run.devices] == [3]
    assert run.devices[0].power_w.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_run_id_of_a_single_row(tmp_path):
    assert imp(write(tmp_path, MIN_HEADER + "\n" + rows(("r1", stamp(0), 0, 1)))).run_id == "r1"


def test_second_run_id_names_both(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("", stamp(0), 0, 1), ("r1", stamp(1), 0, 1),
                                                ("r2", stamp(2), 0, 1)))
    with pytest.raises(InputError) as info:
        imp(path)
    assert where(info) == ("a second run id 'r2' (the file starts with 'r1'); import one run per "
                           "file", str(path), 4, "run_id")


def test_unusable_run_id_in_the_csv(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("", stamp(0), 0, 1), ("a b", stamp(1), 0, 1)))
    with pytest.raises(InputError) as info:
        imp(path)
    assert where(info) == ("value 'a b' is not a usable run id (letters, digits and ._=+- only)",
                           str(path), 3, "run_id")


def test_csv_run_id_wins_over_the_json_with_a_warning(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("csv-id", stamp(0), 0, 1)))
    meta = write(tmp_path, json.dumps({"run_id": "json-id"}), "m.json")
    run = imp(path, meta_path=meta)
    assert run.run_id == "csv-id"
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        f"{path}: run id 'csv-id' differs from the metadata's 'json-id'; kept the CSV's"]


def test_json_run_id_without_a_csv_column(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    path = write(tmp_path, "timestamp,gpu_id,power_w\n" + rows((stamp(0), 0, 1)))
    write(tmp_path, json.dumps({"run_id": "json-id"}), "t.json")  # found beside the CSV
    assert imp(path).run_id == "json-id"
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == []


def test_json_run_id_with_an_empty_csv_column(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("", stamp(0), 0, 1)))
    meta = write(tmp_path, json.dumps({"run_id": "json-id"}), "m.json")
    assert imp(path, meta_path=meta).run_id == "json-id"


def test_same_run_id_in_both_is_no_warning(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("same", stamp(0), 0, 1)))
    meta = write(tmp_path, json.dumps({"run_id": "same"}), "m.json")
    assert imp(path, meta_path=meta).run_id == "same"
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == []


def test_without_any_run_id_the_file_hash_names_the_run(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    path = write(tmp_path, "timestamp,gpu_id,power_w\n" + rows((stamp(0), 0, 1)))
    run = imp(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert run.run_id == f"import-powertrace-csv-{digest[:12]}"
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        f"{path}: no metadata JSON beside it; model and settings unknown"]


def test_imported_run_metadata(tmp_path):
    path = write(tmp_path, MIN_HEADER + ",stage\n" + rows(("r1", stamp(0), 0, 1, ""),
                                                      ("r1", stamp(1), 0, 2, "train")))
    meta = write(tmp_path, json.dumps({"model_family": "gptj6b", "gpu_type": "H100",
                                       "gpu_count": 8, "sequence_length": 128}), "m.json")
    run = imp(path, meta_path=meta)
    m = run.meta
    assert (m["power_field"], m["workload"], m["sampler"], m["sweep"]) == (
        "power_usage", "finetune", "import:powertrace-csv", "import:powertrace-csv")
    assert (m["model_family"], m["model_name"], m["seq_len"], m["num_gpus"]) == (
        "gptj", "gpt-j-6b", 128, 8)
    assert run.platform == "h100" and run.devices[0].gpu_name == "H100"
    assert [(e.kind, e.label, e.t_ms, e.rank) for e in run.events] == [
        ("stage", "train", 1000, None)]
    assert "platform_unknown" not in run.flags and "power_is_1s_average" in run.flags


def test_arguments_override_the_json(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("r1", stamp(0), 0, 1), ("r1", stamp(0), 1, 1)))
    meta = write(tmp_path, json.dumps({"gpu_type": "H100", "gpu_count": 8}), "m.json")
    run = imp(path, meta_path=meta, platform="a100", num_gpus=2)
    assert run.platform == "a100" and run.meta["num_gpus"] == 2


def test_num_gpus_below_the_gpus_found_names_the_csv(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("r1", stamp(0), 0, 1), ("r1", stamp(0), 1, 1)))
    with pytest.raises(InputError) as info:
        imp(path, num_gpus=1)
    assert where(info) == ("--num-gpus is 1 but the log holds 2 GPUs", str(path), None,
                           "num_gpus")


def test_json_gpu_count_below_the_gpus_found_is_flagged(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("r1", stamp(0), 0, 1), ("r1", stamp(0), 1, 1)))
    meta = write(tmp_path, json.dumps({"gpu_count": 1}), "m.json")
    run = imp(path, meta_path=meta)
    assert run.meta["num_gpus"] == 2 and "gpu_count_mismatch" in run.flags


def test_inference_workload(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("r1", stamp(0), 0, 1)))
    meta = write(tmp_path, json.dumps({"sequence_length": 128, "precision": "fp16"}), "m.json")
    run = imp(path, meta_path=meta, workload="inference")
    assert run.meta["workload"] == "inference" and run.meta["precision"] == "fp16"
    assert "seq_len" not in run.meta


def test_error_in_the_json_names_the_json(tmp_path):
    path = write(tmp_path, MIN_HEADER + "\n" + rows(("r1", stamp(0), 0, 1)))
    meta = write(tmp_path, json.dumps({"duration_declared_min": -5}), "m.json")
    with pytest.raises(InputError) as info:
        imp(path, meta_path=meta)
    assert where(info) == ("value '-5' is not a positive number", str(meta), None,
                           "duration_declared_min")


def test_stage_labels_sharing_a_timestamp_keep_file_order(tmp_path):
    """Rows grouped by GPU; at 00:00:02 GPU 0 is in ``train`` and GPU 1 still in ``warm``."""
    labels = {0: ["warm", "warm", "train", "train", "train"],
              1: ["warm", "warm", "warm", "train", "train"]}
    path = write(tmp_path, MIN_HEADER + ",stage\n" + rows(*[
        ("r1", stamp(t), g, 100, labels[g][t]) for g in (0, 1) for t in range(5)]))
    run = imp(path)
    assert [(e.label, e.t_ms) for e in run.events] == [
        ("warm", 0), ("train", 2000), ("warm", 2000), ("train", 3000)]


PT_HEADER = ("run_id,timestamp,time_relative_s,gpu_id,power_w,sm_clock_mhz,gpu_util_pct,"
             "memory_util_pct,memory_used_mb,memory_total_mb,temperature_c,stage")


def _pt_csv(path: Path, *, zulu: bool, ticks: int = 10) -> Path:
    t0 = dt.datetime(2026, 5, 1, 12, 0, 0)
    lines = [PT_HEADER]
    for k in range(ticks):
        for g in range(2):
            ms = k * 100 + 2 * g
            t = t0 + dt.timedelta(milliseconds=ms)
            stamp = t.strftime("%Y-%m-%dT%H:%M:%S") + f".{t.microsecond // 1000:03d}"
            lines.append(f"{RUN_ID},{stamp}{'Z' if zulu else ''},{ms / 1000},{g},{40 + g},1980,"
                         f"{k},0,,,,")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _pt_json(path: Path, **over) -> Path:  # noqa: ANN003
    meta = {"run_id": RUN_ID, "gpu_type": "L40s", "gpu_count": 2, "precision": "bf16",
            "sampling_interval_declared_s": 0.1}
    meta.update(over)
    path.write_text(json.dumps(meta), encoding="utf-8")
    return path


def test_powertrace_csv_zone_less_stamps_use_tz(tmp_path):
    csv_path = _pt_csv(tmp_path / "t.csv", zulu=False)
    meta = _pt_json(tmp_path / "m.json")
    paris = import_file("powertrace-csv", csv_path, workload="finetune", meta_path=meta,
                        tz="Europe/Paris")
    utc = import_file("powertrace-csv", csv_path, workload="finetune", meta_path=meta)
    assert utc.meta["start_time"] == dt.datetime(2026, 5, 1, 12, tzinfo=dt.timezone.utc)
    assert paris.meta["start_time"] == dt.datetime(2026, 5, 1, 10, tzinfo=dt.timezone.utc)


def test_declared_sample_period_wins_over_the_median(tmp_path):
    csv_path = _pt_csv(tmp_path / "t.csv", zulu=True)
    run = import_file("powertrace-csv", csv_path, workload="finetune",
                      meta_path=_pt_json(tmp_path / "m.json", sampling_interval_declared_s=0.25))
    assert run.meta["sample_period_ms"] == 250.0
    assert len(run.devices) == 2 and run.devices[0].t_ms.tolist()[:2] == [0, 100]
