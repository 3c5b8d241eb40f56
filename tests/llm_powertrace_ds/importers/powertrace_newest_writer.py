"""The PowerTrace catalog's newest export, built as their explorer's build script builds it.

The writer is ``scripts/build_source_verified_inference_package.mjs`` of
Leo-hxu/training-power-trace-explorer at commit b35ddab7f937f523bb82b153b7ef3f249398d88b (a
Node.js script run on their own DCGM and vLLM files, which are not public): ``build`` writes
``raw/<id>.csv`` (their canonical long CSV), ``metadata/<id>.json`` (the catalog entry ``run``)
and ``requests/<id>.csv`` (the request timeline), or with ``--compact true`` the one file
``runs/<id>.json`` (``{run, samples, inference_timeline}``); ``finalize --compact true`` sets
``source_directory``, ``trace_path``, ``meta_path``, ``storage`` and ``run_json_file_id``. The
entry below has the fields of its ``run`` object in its order, with the values it writes for a
run without a source timeline (``"Not reported"``, ``"Not applicable"``, derived arrivals).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np

RUN_ID = "llm-power-runs-main-cell-0042"
T0_MS = 1_778_148_152_000  # 2026-05-07T10:02:32Z
CANONICAL_COLUMNS = ["run_id", "timestamp", "time_relative_s", "gpu_id", "power_w",
                     "sm_clock_mhz", "gpu_util_pct", "memory_util_pct", "memory_used_mb",
                     "memory_total_mb", "temperature_c", "stage"]
TIMELINE_COLUMNS = ["time_relative_s", "window_s", "requests_arrived", "active_requests",
                    "mean_prompt_tokens", "mean_output_tokens", "mean_request_tokens"]


def iso(ms: int) -> str:
    """JavaScript's ``new Date(ms).toISOString()``."""
    return np.datetime_as_string(np.datetime64(ms, "ms"), unit="ms") + "Z"


def samples(gpus: int = 2, seconds: float = 30.0) -> list[dict[str, Any]]:
    """Canonical rows at 0.1 s, sorted by time then GPU (as ``build`` sorts them)."""
    rows = []
    for k in range(int(seconds * 10)):
        for g in range(gpus):
            ms = T0_MS + k * 100 + g
            power = 90.0 + g if k < 50 else 420.0 + 30 * np.sin(k / 7) + g
            rows.append({"run_id": RUN_ID, "timestamp": iso(ms),
                         "time_relative_s": round((ms - T0_MS) / 1000, 6), "gpu_id": str(g),
                         "power_w": round(power, 3), "sm_clock_mhz": 1980,
                         "gpu_util_pct": 0 if k < 50 else 97, "memory_util_pct": 61.2,
                         "memory_used_mb": 49_000, "memory_total_mb": 81_559,
                         "temperature_c": 40 + k // 30, "stage": None})
    return rows


def timeline(seconds: float = 30.0) -> list[dict[str, Any]]:
    """5 s windows of vLLM counters (``buildTimeline``)."""
    return [{"time_relative_s": float(t), "window_s": 5, "requests_arrived": 16 if t else 0,
             "active_requests": 64 if t else 0, "mean_prompt_tokens": 512.0 if t else None,
             "mean_output_tokens": 255.5 if t else None,
             "mean_request_tokens": 767.5 if t else None}
            for t in range(0, int(seconds), 5)]


def run_entry(gpus: int = 2, **overrides: Any) -> dict[str, Any]:
    """The catalog entry ``build`` writes (then ``finalize --compact true`` changes)."""
    entry: dict[str, Any] = {
        "run_id": RUN_ID, "workload_type": "Inference", "source_family": "LLM-Power-Runs-Main",
        "source_directory": "LLM-Power-Runs-Main / Runs/h100x2/cell-0042",
        "trace_path": f"raw/{RUN_ID}.csv", "stdout_path": None, "stderr_path": None,
        "plot_path": None, "meta_path": f"metadata/{RUN_ID}.json",
        "model": "meta-llama/Llama-3.1-8B-Instruct", "model_family": "Llama-3.1",
        "model_source_label": "vLLM server configuration", "model_metadata_status": "reported",
        "method": "vLLM serving", "inference_engine": "vLLM 0.11.0",
        "tensor_parallel_size": gpus, "kv_cache_quantization": "auto",
        "model_weight_quantization": "None", "gpu_frequency_mhz": None,
        "in_flight_requests": 64, "concurrency": 64, "arrival_pattern": "Not reported",
        "arrival_rate_rps": 3.2,
        "arrival_rate_label": "Derived from vLLM request-token counters \u00b7 3.2 req/s",
        "prompt_profile": "Not reported; cumulative vLLM token counters are available",
        "gpu_type": "H100 80GB HBM3", "gpu_model_reported": "NVIDIA H100 80GB HBM3",
        "gpu_count": gpus, "precision": "BF16", "compute_dtype": "bfloat16",
        "quantization_bits": "None", "parallelism": f"DP=1, TP={gpus}, PP=1",
        "sequence_length": "Max 8,192 tokens", "microbatch_size": "Not applicable",
        "grad_accum_steps": "Not applicable", "global_batch_size": "Not applicable",
        "checkpoint_interval": "Not applicable", "dataset_name": "LLM-Power-Runs-Main",
        "duration_declared_min": "Not reported", "duration_observed_s": 29.901,
        "sampling_interval_declared_s": "Not reported",
        "sampling_interval_observed_median_s": 0.1, "sampling_interval_observed_p95_s": 0.1,
        "has_stage_labels": False, "has_clock_telemetry": True,
        "has_utilization_telemetry": True, "has_temperature_telemetry": True,
        "quality_status": "PASS_MAIN", "mean_total_power_w": 718.35,
        "p95_total_power_w": 901.2, "p99_total_power_w": 902.9, "max_total_power_w": 903.0,
        "total_energy_wh": 5.966, "ramp_up_p95_1s_w_per_s": 85.1,
        "ramp_up_p99_1s_w_per_s": 88.4, "ramp_down_p99_1s_w_per_s": 88.2,
        "ramp_event_frequency_1s": 4.2, "mean_power_per_gpu_w": 359.175, "num_samples": 600,
        "num_gpus_observed": gpus,
        "logging_method": "DCGM per-GPU telemetry with vLLM metrics snapshots",
        "power_aggregation": "per_gpu",
        "quality_flags": [
            {"code": "source_checksums_verified", "severity": "info",
             "message": "The selected DCGM, instance-facts, vLLM metrics, and server-log files "
                        "match the source SHA-256 manifest."},
            {"code": "arrivals_derived_from_vllm_counters", "severity": "info",
             "message": "Requests-arrived values are derived from changes in vLLM active "
                        "requests and the vLLM request-token histogram count."}],
        "missing_fields": ["Raw per-request arrival events", "Configured GPU frequency"],
        "timestamp_issues": [], "gpu_count_mismatch": False, "duplicate_warning": False,
        "run_json_path": f"runs/{RUN_ID}.json", "raw_csv_path": f"raw/{RUN_ID}.csv",
        "metadata_json_path": f"metadata/{RUN_ID}.json",
        "request_timeline_path": f"requests/{RUN_ID}.csv",
        "source_integrity": {
            "manifest_file": "checksums.json",
            "verified_files": [{"local_name": f"dcgm_gpu{g}.csv",
                                "manifest_name": f"dcgm_{RUN_ID}_gpu{g}.csv", "bytes": 123456,
                                "sha256": "ab" * 32} for g in range(gpus)],
            "incomplete_manifest_entries": []},
        "request_timeline_method": "5-second bins derived from vLLM Prometheus cumulative "
                                   "counters",
        "requests_completed": 90, "requests_arrived_derived": 96,
    }
    entry.update(overrides)
    return entry


def compact_finalized(entry: dict[str, Any]) -> dict[str, Any]:
    """``finalize --compact true``'s public run entry."""
    return {**entry,
            "source_directory": "Google Drive public data store / compact display payload",
            "trace_path": "Embedded in compact public display payload",
            "meta_path": "Embedded in compact public display payload",
            "storage": {"provider": "google-drive", "format": "compact-run-json"},
            "run_json_file_id": "1AbCdEfGhIjKlMnOpQrStUvWxYz0123456"}


def csv_text(columns: list[str], rows: list[dict[str, Any]]) -> str:
    """Their ``csvText``: header, rows, null as an empty cell, a final newline."""
    def cell(value: Any) -> str:
        return "" if value is None else str(value)

    return ",".join(columns) + "\n" + "\n".join(
        ",".join(cell(row.get(c)) for c in columns) for row in rows) + "\n"


def write_compact(folder: Path, *, gz: bool = True, **overrides: Any) -> Path:
    """``runs/<id>.json`` (gzip-compressed as ``.json.gz`` when ``gz``)."""
    detail = {"run": compact_finalized(run_entry(**overrides)), "samples": samples(),
              "inference_timeline": timeline()}
    runs = folder / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    text = json.dumps(detail, separators=(",", ":"))
    if gz:
        path = runs / f"{RUN_ID}.json.gz"
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path = runs / f"{RUN_ID}.json"
        path.write_text(text, encoding="utf-8")
    return path


def write_export(folder: Path, **overrides: Any) -> Path:
    """``raw/``, ``metadata/`` and ``requests/`` of ``build`` (not compact); the raw CSV."""
    for sub in ("raw", "metadata", "requests"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    raw = folder / "raw" / f"{RUN_ID}.csv"
    raw.write_text(csv_text(CANONICAL_COLUMNS, samples()), encoding="utf-8")
    (folder / "metadata" / f"{RUN_ID}.json").write_text(
        json.dumps(run_entry(**overrides), indent=2) + "\n", encoding="utf-8")
    (folder / "requests" / f"{RUN_ID}.csv").write_text(csv_text(TIMELINE_COLUMNS, timeline()),
                                                        encoding="utf-8")
    return raw
