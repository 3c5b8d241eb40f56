"""No silent drops: every field a publisher gives is mapped, kept, or dropped with a reason.

Kept means verbatim in a source_* column; checked per importer, on the publishers' real files
where the licence lets us read them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import EXTERNAL

from llm_powertrace_ds import shards
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.importers import field_maps, mlenergy_v2, seed_meta
from llm_powertrace_ds.importers.nvidia_smi import import_nvidia_smi
from llm_powertrace_ds.importers.powertrace_csv import import_powertrace_csv
from llm_powertrace_ds.samples import SAMPLES, load_sample

REPO = Path(__file__).resolve().parents[3]
SEED = EXTERNAL / "powertraces-v6"
CHAT = SAMPLES["mlenergy-v2-chat"].folder


def seed_csv(path: Path, run_id: str = "seed-inf-1", gpus: int = 2, ticks: int = 30) -> Path:
    lines = ["run_id,timestamp,time_relative_s,gpu_id,power_w,sm_clock_mhz,gpu_util_pct,"
             "memory_util_pct,memory_used_mb,memory_total_mb,temperature_c,stage"]
    for k in range(ticks):
        for g in range(gpus):
            ms = k * 100 + g
            lines.append(f"{run_id},2026-05-07T10:00:{ms // 1000:02d}.{ms % 1000:03d}Z,"
                         f"{ms / 1000},{g},{300 + 50 * (k % 3) + g},1410,80,40,50000,81920,55,"
                         "serving")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def their_inference_entry(run_id: str = "seed-inf-1") -> dict:
    """An inference catalog entry with the keys the seed authors' explorer publishes."""
    return {
        "run_id": run_id, "workload_type": "Inference", "source_family": "Example serving run",
        "source_directory": "Illustrative entry written for this test",
        "trace_path": f"raw/{run_id}.csv", "meta_path": f"metadata/{run_id}.json",
        "request_timeline_path": f"requests/{run_id}.csv",
        "model": "meta-llama/Llama-3.1-8B-Instruct", "model_family": "llama31-instruct",
        "model_source_label": "example", "model_metadata_status": "reported",
        "method": "vLLM serving", "inference_engine": "vLLM 0.6 (OpenAI server)",
        "tensor_parallel_size": 2, "kv_cache_quantization": "FP8",
        "model_weight_quantization": "AWQ", "gpu_frequency_mhz": 1410,
        "in_flight_requests": 48, "concurrency": 48, "arrival_pattern": "Poisson arrivals",
        "arrival_rate_rps": 12.5, "arrival_rate_label": "12.5 req/s",
        "prompt_profile": "chat mix", "gpu_type": "H100 SXM", "gpu_count": 2,
        "precision": "FP8", "compute_dtype": "fp8", "quantization_bits": "4-bit weights",
        "parallelism": "DP=1, TP=2, PP=1", "sequence_length": "Request-dependent",
        "microbatch_size": "N/A", "grad_accum_steps": "N/A", "global_batch_size": "N/A",
        "checkpoint_interval": "N/A", "dataset_name": "chat requests",
        "duration_declared_min": 0.05, "duration_observed_s": 2.9,
        "sampling_interval_declared_s": 0.1, "sampling_interval_observed_median_s": 0.1,
        "sampling_interval_observed_p95_s": 0.1, "has_stage_labels": True,
        "has_clock_telemetry": True, "has_utilization_telemetry": True,
        "has_temperature_telemetry": True, "quality_status": "PASS_MAIN",
        "mean_total_power_w": 701.0, "p95_total_power_w": 801.0, "p99_total_power_w": 801.0,
        "max_total_power_w": 801.0, "total_energy_wh": 0.56, "mean_power_per_gpu_w": 350.5,
        "ramp_up_p95_1s_w_per_s": 100.0, "ramp_up_p99_1s_w_per_s": 100.0,
        "ramp_down_p99_1s_w_per_s": 100.0, "ramp_event_frequency_1s": 0.5, "num_samples": 60,
        "num_gpus_observed": 2, "logging_method": "nvidia-smi", "power_aggregation": "per_gpu",
        "quality_flags": [{"code": "example_flag", "severity": "info", "message": "an example"}],
        "missing_fields": [], "timestamp_issues": [], "gpu_count_mismatch": False,
        "duplicate_warning": False, "run_json_path": f"runs/{run_id}.json",
        "raw_csv_path": f"raw/{run_id}.csv", "metadata_json_path": f"metadata/{run_id}.json",
    }


def test_every_key_of_their_entry_is_accounted_for():
    missing = sorted(set(their_inference_entry()) - set(seed_meta.FIELD_MAP))
    assert missing == []


def test_their_inference_taxonomy_maps_onto_our_columns(tmp_path):
    entry = their_inference_entry()
    meta = tmp_path / "seed-inf-1.json"
    meta.write_text(json.dumps(entry), encoding="utf-8")
    run = import_powertrace_csv(seed_csv(tmp_path / "seed-inf-1.csv"), workload="inference",
                                meta_path=meta)
    m = run.meta
    assert (m["serving_engine"], m["tp_size"], m["kv_cache_quant"], m["weight_quant"],
            m["weight_quant_backend"], m["gpu_clock_mhz"], m["concurrency"],
            m["arrival_pattern"], m["arrival_rate_rps"]) == (
        "vllm", 2, "fp8", "int4", "awq", 1410, 48, "poisson", 12.5)
    assert (m["model_name"], m["model_label"], m["model_family"]) == (
        "Llama-3.1-8B-Instruct", "llama31-instruct", "llama")
    assert m.get("precision") is None  # FP8 is not in our precision vocabulary: kept verbatim
    kept = json.loads(m["source_metadata"])
    assert kept["precision"] == "FP8" and kept["inference_engine"] == "vLLM 0.6 (OpenAI server)"
    assert not set(seed_meta.DROPPED) & set(kept)
    assert {k: kept[k] for k in entry if k not in seed_meta.DROPPED} == {
        k: v for k, v in entry.items() if k not in seed_meta.DROPPED}
    assert m["source_quality_flags"] == ["example_flag"]
    assert m["source_quality_status"] == "PASS_MAIN"
    assert m["source_p99_total_power_w"] == 801.0 and m["source_num_samples"] == 60


@pytest.mark.parametrize(("value", "expected"), [
    ("vLLM (synthetic configuration)", "vllm"), ("SGLang 0.4", "sglang"),
    ("TensorRT-LLM", "tensorrt-llm"), ("HF transformers", "transformers"), ("mystery", None)])
def test_engine_vocabulary(value, expected):
    assert seed_meta.serving_engine(value) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("FP8", ("fp8", None)), ("none", ("none", None)), ("BF16", ("none", None)),
    ("AWQ", ("int4", "awq")), ("GPTQ-Int8", ("int8", "gptq")), ("bnb nf4", ("int4", "bitsandbytes")),
    ("W8A8", ("int8", None)), ("something", (None, None))])
def test_weight_quantisation_vocabulary(value, expected):
    assert seed_meta.weight_quant(value) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("FP8", "fp8"), ("fp8_e5m2", "fp8"), ("auto", "none"), ("INT8", "int8"), ("int4", "int4"),
    ("weird", None)])
def test_kv_cache_vocabulary(value, expected):
    assert seed_meta.kv_cache_quant(value) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("BurstGPT serving window", "replay"), ("Poisson", "poisson"), ("closed-loop", "closed"),
    ("gamma (cv 2)", "gamma"), ("bursty", "gamma"), ("uniform", None)])
def test_arrival_vocabulary(value, expected):
    assert seed_meta.arrival_pattern(value) == expected


def test_a_training_entry_imported_as_inference_is_refused(tmp_path):
    entry = {**their_inference_entry(), "workload_type": "Training"}
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps(entry), encoding="utf-8")
    with pytest.raises(Exception) as exc:
        import_powertrace_csv(seed_csv(tmp_path / "seed-inf-1.csv"), workload="inference",
                              meta_path=meta)
    assert getattr(exc.value, "field", None) == "workload_type"


def test_their_provenance_keys_that_would_overwrite_ours_are_refused(tmp_path):
    entry = {**their_inference_entry(), "sampler": "nvml"}
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps(entry), encoding="utf-8")
    with pytest.raises(Exception) as exc:
        import_powertrace_csv(seed_csv(tmp_path / "seed-inf-1.csv"), workload="inference",
                              meta_path=meta)
    assert getattr(exc.value, "field", None) == "sampler"


def test_a_private_value_in_their_metadata_is_refused_by_the_gate(tmp_path):
    entry = {**their_inference_entry(), "prompt_profile": "/home/ann/runs/x"}
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps(entry), encoding="utf-8")
    with pytest.raises(Exception) as exc:
        import_powertrace_csv(seed_csv(tmp_path / "seed-inf-1.csv"), workload="inference",
                              meta_path=meta)
    assert "prompt_profile" in str(exc.value) and "file path" in str(exc.value)


def test_an_unknown_csv_column_is_listed_not_dropped_silently(tmp_path, caplog):
    path = tmp_path / "gpu.csv"
    path.write_text("timestamp, index, power.draw [W], fan.speed [%], encoder.stats.sessionCount\n"
                    + "".join(f"2026/01/01 00:00:{s:02d}.000, 0, {100 + s} W, 30 %, 0\n"
                              for s in range(20)), encoding="utf-8")
    run = import_nvidia_smi(path, workload="inference")
    assert json.loads(run.meta["source_metadata"]) == {
        "columns_not_imported": ["encoder.stats.sessioncount"]}  # fan.speed: dropped, documented
    assert any("not imported" in r.getMessage() for r in caplog.records)


def test_docs_importers_page_is_fresh():
    assert (REPO / "docs" / "importers.md").read_text(encoding="utf-8") == field_maps.markdown()


# ---- ML.ENERGY v2: the shipped chat task (Apache-2.0) ----------------------------------------

def test_every_field_of_every_shipped_ml_energy_file_is_accounted_for():
    keys: set[str] = set()
    for path in CHAT.rglob("*.json"):
        if path.name != "models.json":
            keys |= set(json.loads(path.read_text(encoding="utf-8")))
    models = json.loads((CHAT / "models.json").read_text(encoding="utf-8"))
    keys |= {f"models.json {k}" for info in models.values() for k in info}
    assert sorted(keys - set(mlenergy_v2.FIELD_MAP)) == []


def test_tpot_query_on_the_shipped_sample_returns_the_right_runs(tmp_path):
    from llm_powertrace_ds.query import Runs

    root = load_sample("mlenergy-v2-chat", tmp_path / "chat")
    runs = Runs.load(root, workload="inference")
    got = sorted(runs.where(lambda r: r.tpot_mean_s <= 0.1).to_arrow()
                 .column("run_id").to_pylist())
    expected = []
    for (run, _), path in zip(mlenergy_v2.summary_runs(CHAT),
                              sorted(p for p in CHAT.rglob("*.json") if p.name != "models.json"),
                              strict=True):
        if json.loads(path.read_text(encoding="utf-8"))["Avg TPOT (s)"] <= 0.1:
            expected.append(run.run_id)
    assert len(runs) == 191 and got == sorted(expected) and 0 < len(got) < 191
    row = next(r for r in shards.iter_rows(root, "inference_runs"))
    assert row["energy_per_request_j"] > 0 and row["output_tokens_mean"] > 0
    assert math.isclose(row["energy_per_token_j"],
                        row["energy_per_request_j"] / row["output_tokens_mean"], rel_tol=1e-9)


# ---- the seed authors' three published traces with their catalog JSON, as published ----------

CATALOG_TRACES = ["powertraces-pt100array_pt017_r1_7536307_1-50f3a1a4a0",
                  "powertraces-pt100array_pt019_r1_7536307_11-89ffb37037",
                  "powertraces-pt200array_pt220_r4_7536323_9-486809b730"]


@pytest.mark.external
@pytest.mark.skipif(not SEED.is_dir(), reason=f"external traces not present at {SEED}")
@pytest.mark.parametrize("stem", CATALOG_TRACES, ids=["pt017", "pt019", "pt220"])
def test_their_full_catalog_json_imports_as_published(tmp_path, capsys, stem):
    catalog = SEED / "catalog" / f"{stem}.json"
    entry = json.loads(catalog.read_text(encoding="utf-8"))
    assert sorted(set(entry) - set(seed_meta.FIELD_MAP)) == []
    root = tmp_path / "ds"
    assert main(["import", "powertrace-csv", str(SEED / f"{stem}.csv"), "--meta", str(catalog),
                 "--out", str(root), "--workload", "finetune"]) == 0
    capsys.readouterr()
    row = next(iter(shards.iter_rows(root, "finetune_runs")))
    for theirs, ours in seed_meta.SOURCE_NUMBERS.items():
        assert row[ours] == pytest.approx(entry[theirs], rel=1e-12), ours
    assert row["source_quality_status"] == entry["quality_status"]
    assert row["source_quality_flags"] == [f["code"] for f in entry["quality_flags"]]
    kept = json.loads(row["source_metadata"])
    assert kept == {k: v for k, v in entry.items() if k not in seed_meta.DROPPED}
    # ours beside theirs, column by column
    assert row["peak_power_w"] == pytest.approx(row["source_max_total_power_w"], rel=0.01)
    assert row["p99_power_w"] == pytest.approx(row["source_p99_total_power_w"], rel=0.01)
    assert row["energy_j"] / 3600 == pytest.approx(row["source_total_energy_wh"], rel=1e-3)
