"""The LLM-PowerTrace authors' metadata JSON mapped onto our columns, with nothing lost.

Their metadata is a configuration file or a full catalog entry, as published.

Every key of their JSON lands in one of three places (:data:`FIELD_MAP` says where; a test holds
every key of their published files to it):

* **a column of ours** — configuration (``sequence_length`` -> ``seq_len``, ``"DP=1, TP=4, PP=1"``
  -> ``dp_size``/``tp_size``/``pp_size``, their model label -> our family vocabulary, …) and their
  inference taxonomy (``inference_engine``, ``tensor_parallel_size``, ``kv_cache_quantization``,
  ``model_weight_quantization``, ``gpu_frequency_mhz``, ``in_flight_requests``/``concurrency``,
  ``arrival_pattern``, ``arrival_rate_rps``, ``model``), normalised to our vocabularies;
* **a ``source_*`` column** — their own computed aggregates and verdicts, kept as *their*
  numbers (``mean_total_power_w`` -> ``source_mean_total_power_w``, …, ``quality_flags`` ->
  ``source_quality_flags``), so ours and theirs can be compared column by column;
* **``source_metadata``** — every key, verbatim, as one JSON object (originals of normalised
  values included), except :data:`DROPPED`: file locations inside their export, meaningless here.

Only keys that would overwrite our provenance (``sampler``, ``schema_version``, ``host_hash``, …)
are refused; ``run_id`` is theirs to give. ``"Unknown"``/``"N/A"`` is null.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

from .. import checks, schema
from ..errors import InputError
from ..run import coerce_meta
from . import common

log = logging.getLogger("llm_powertrace_ds.importers.powertrace_csv")

MODEL_LABELS: dict[str, tuple[str, str]] = {
    "ds7bbase": ("deepseek", "deepseek-llm-7b-base"),
    "ds7bchat": ("deepseek", "deepseek-llm-7b-chat"),
    "gptj6b": ("gptj", "gpt-j-6b"),
}
"""Their ``model_family`` labels -> (our family, model name)."""

DIRECT_KEYS: dict[str, str] = {
    "run_id": "run_id",
    "sequence_length": "seq_len",
    "global_batch_size": "global_batch_size",
    "grad_accum_steps": "grad_accum",
    "microbatch_size": "batch_size",
    "checkpoint_interval": "checkpoint_every_steps",
    "method": "method",
    "gpu_count": "num_gpus",
    "dataset_name": "dataset_name",
    "tensor_parallel_size": "tp_size",
    "gpu_frequency_mhz": "gpu_clock_mhz",
    "arrival_rate_rps": "arrival_rate_rps",
}
SOURCE_NUMBERS: dict[str, str] = {
    "duration_observed_s": "source_duration_s",
    "num_samples": "source_num_samples",
    "sampling_interval_observed_median_s": "source_sampling_interval_median_s",
    "sampling_interval_observed_p95_s": "source_sampling_interval_p95_s",
    "mean_total_power_w": "source_mean_total_power_w",
    "p95_total_power_w": "source_p95_total_power_w",
    "p99_total_power_w": "source_p99_total_power_w",
    "max_total_power_w": "source_max_total_power_w",
    "mean_power_per_gpu_w": "source_mean_power_per_gpu_w",
    "total_energy_wh": "source_total_energy_wh",
    "ramp_up_p95_1s_w_per_s": "source_ramp_up_p95_1s_w_per_s",
    "ramp_up_p99_1s_w_per_s": "source_ramp_up_p99_1s_w_per_s",
    "ramp_down_p99_1s_w_per_s": "source_ramp_down_p99_1s_w_per_s",
    "ramp_event_frequency_1s": "source_ramp_event_frequency_1s",
}
"""Their computed aggregates -> the ``source_*`` columns that keep their numbers."""
DROPPED: dict[str, str] = {
    **{key: "a file location inside the publisher's export, meaningless outside it"
       for key in ("trace_path", "stdout_path", "stderr_path", "plot_path", "meta_path",
                   "run_json_path", "raw_csv_path", "metadata_json_path",
                   "request_timeline_path")},
    "source_directory": "where the publisher keeps the run (a folder of their archive or "
    "drive, e.g. 'LLM-Power-Runs-Main / Runs/...'), not a property of the run",
    **{key: "a storage identifier of the publisher's drive (opaque, meaningless outside it)"
       for key in ("run_json_file_id", "raw_csv_file_id", "metadata_json_file_id",
                   "request_timeline_file_id")},
    "source_integrity": "the publisher's checksum manifest of its own source files (their "
    "names, sizes and SHA-256), which are not part of the import; its verdict is kept in "
    "source_quality_flags (`source_checksums_verified`)",
}
"""Keys deliberately not kept anywhere, with the reason (also in docs/importers.md)."""
VERBATIM_ONLY = frozenset({
    "source_family", "source_directory", "model_source_label", "model_metadata_status",
    "quantization_bits", "logging_method", "power_aggregation", "has_stage_labels",
    "has_clock_telemetry", "has_utilization_telemetry", "has_temperature_telemetry",
    "missing_fields", "timestamp_issues", "gpu_count_mismatch", "duplicate_warning",
    "num_gpus_observed", "arrival_rate_label", "prompt_profile", "workload_type",
    "compute_dtype", "request_timeline_method", "requests_arrived_derived", "storage",
})
"""Keys with no column of ours: kept in ``source_metadata`` only (``workload_type`` is also
checked against ``--workload``; ``gpu_count_mismatch`` is recomputed as our flag;
``compute_dtype`` is their declared dtype, while our column holds the dtype observed in the
first forward pass)."""

FIELD_MAP: dict[str, str] = {
    **{k: v for k, v in DIRECT_KEYS.items()},
    "model_family": "model_family, model_label, model_name",
    "model": "model_name (when it is a model id), model_family (when model_family is absent)",
    "parallelism": "dp_size, tp_size, pp_size, parallelism",
    "gpu_type": "gpu_name (and the platform) when gpu_model_reported is absent",
    "gpu_model_reported": "gpu_name (and the platform): the vendor's name as reported",
    "requests_completed": "requests_completed",
    "sampling_interval_declared_s": "sample_period_ms",
    "duration_declared_min": "target_duration_s",
    "precision": "precision (bf16/fp16/fp32; others only in source_metadata)",
    "inference_engine": "serving_engine",
    "kv_cache_quantization": "kv_cache_quant",
    "model_weight_quantization": "weight_quant, weight_quant_backend",
    "in_flight_requests": "concurrency",
    "concurrency": "concurrency (when in_flight_requests is absent)",
    "arrival_pattern": "arrival_pattern",
    "quality_flags": "source_quality_flags",
    "quality_status": "source_quality_status",
    **SOURCE_NUMBERS,
    **{k: "source_metadata" for k in sorted(VERBATIM_ONLY)},
    **{k: f"dropped: {why}" for k, why in DROPPED.items()},
    "*_file_id": "dropped: any other storage identifier of the publisher's drive",
    "inference_timeline (compact run file), requests/<run_id>.csv": "source_metadata."
    "inference_timeline, column by column (see the request timeline table)",
}
"""Where each key of their metadata goes (every key also lands in ``source_metadata`` unless
dropped); docs/importers.md renders this table."""

_PARALLEL_RE = re.compile(r"\b(DP|TP|PP)\s*=\s*(\d+)", re.I)
_PRECISIONS = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16",
               "half": "fp16", "fp32": "fp32", "float32": "fp32", "float": "fp32"}
_NONE_WORDS = ("none", "no", "off", "false", "fp16", "bf16", "float16", "bfloat16", "auto",
               "16-bit", "16bit", "full", "unquantized", "unquantised")


UNKNOWN_WORDS = ("", "unknown", "n/a", "none", "null", "not reported", "not applicable")
"""Their words for a value they do not have (null in our columns; kept in ``source_metadata``)."""


def is_unknown(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in UNKNOWN_WORDS)


def parse_parallelism(text: str, *, file: Path) -> dict[str, Any]:
    """``"DP=1, TP=4, PP=1"`` -> ``dp_size``/``tp_size``/``pp_size`` (and ``parallelism``)."""
    sizes: dict[str, Any] = {f"{name.lower()}_size": int(n)
                             for name, n in _PARALLEL_RE.findall(str(text))}
    if not sizes:
        raise InputError(f"value {str(text)!r} is not like 'DP=1, TP=4, PP=1'", file=file,
                         field="parallelism")
    dp, tp, pp = (sizes.get(k, 1) for k in ("dp_size", "tp_size", "pp_size"))
    if dp == tp == pp == 1:
        sizes["parallelism"] = "single"
    elif tp > 1 and dp == 1 and pp == 1:
        sizes["parallelism"] = "tp"
    return sizes


def serving_engine(value: Any) -> str | None:
    """Their engine string -> our vocabulary (``"vLLM (…)"`` -> ``vllm``); None if unknown."""
    text = str(value).strip().lower()
    for token, name in (("vllm", "vllm"), ("sglang", "sglang"), ("tensorrt", "tensorrt-llm"),
                        ("trt-llm", "tensorrt-llm"), ("text-generation-inference", "tgi"),
                        ("tgi", "tgi"), ("llama.cpp", "llama.cpp"),
                        ("transformers", "transformers"), ("hugging face", "transformers"),
                        ("huggingface", "transformers")):
        if token in text:
            return name
    return None


def kv_cache_quant(value: Any) -> str | None:
    """``"FP8"`` -> ``fp8``; 16-bit or none -> ``none``; int8/int4/int2; else None."""
    text = str(value).strip().lower()
    if text in _NONE_WORDS:
        return "none"
    if "fp8" in text or "e4m3" in text or "e5m2" in text:
        return "fp8"
    for bits in ("8", "4", "2"):
        if f"int{bits}" in text or text in (f"{bits}bit", f"{bits}-bit"):
            return f"int{bits}"
    return None


def weight_quant(value: Any) -> tuple[str | None, str | None]:
    """Their weight quantisation -> (our ``weight_quant``, ``weight_quant_backend``)."""
    text = str(value).strip().lower()
    if text in _NONE_WORDS:
        return "none", None
    if "fp8" in text:
        return "fp8", None
    for method in ("awq", "gptq", "bitsandbytes", "bnb", "nf4"):
        if method in text:
            backend = "bitsandbytes" if method in ("bnb", "nf4") else method
            return ("int8" if "8" in text and "nf4" not in text else "int4"), backend
    if "int8" in text or "w8a8" in text or text in ("8bit", "8-bit"):
        return "int8", None
    if "int4" in text or "w4a16" in text or text in ("4bit", "4-bit"):
        return "int4", None
    return None, None


def arrival_pattern(value: Any) -> str | None:
    """Their arrival pattern -> ``closed``/``poisson``/``gamma``/``replay`` (None if unknown).

    BurstGPT and other named traces are replays of recorded arrivals.
    """
    text = str(value).strip().lower()
    if "poisson" in text:
        return "poisson"
    if "closed" in text:
        return "closed"
    if "burstgpt" in text or "replay" in text or "trace" in text:
        return "replay"
    if "gamma" in text or "burst" in text:
        return "gamma"
    return None


def _model(label: Any) -> dict[str, Any]:
    text = str(label).strip()
    family, name = MODEL_LABELS.get(text.lower(), (common.family_from_name(text), None))
    return {"model_family": family, "model_label": text, "model_name": name}


def _scaled(value: Any, factor: float, key: str, file: Path) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not math.isfinite(number) or number <= 0 or isinstance(value, bool):
        raise InputError(f"value {str(value)[:40]!r} is not a positive number", file=file,
                         field=key)
    return number * factor


def _source_number(value: Any, key: str, file: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"value {str(value)[:40]!r} is not a number", file=file, field=key)
    if not math.isfinite(float(value)) or abs(float(value)) > 1e15:
        raise InputError(f"value {value!r} is not a finite number of plausible size", file=file,
                         field=key)
    return float(value)


def _flag_codes(value: Any, file: Path) -> list[str]:
    if not isinstance(value, list):
        raise InputError("expected a list of flags", file=file, field="quality_flags")
    codes = []
    for i, item in enumerate(value):
        code = item.get("code") if isinstance(item, dict) else item
        if not isinstance(code, str) or not code.strip():
            raise InputError(f"flag {i} has no code", file=file, field="quality_flags")
        codes.append(code.strip())
    return codes


def _workload_of(value: Any) -> str | None:
    text = str(value).strip().lower()
    if text.startswith("infer") or text in ("serving", "generation"):
        return "inference"
    if text.startswith(("train", "fine", "finetun")):
        return "finetune"
    return None


def is_dropped(key: str) -> bool:
    """A key kept nowhere: :data:`DROPPED`, or any ``*_file_id`` (a drive storage identifier)."""
    return key in DROPPED or key.endswith("_file_id")


def source_metadata(data: dict[str, Any]) -> str:
    """Their metadata, verbatim, as one JSON object (without the :func:`is_dropped` keys)."""
    kept = {k: v for k, v in data.items() if not is_dropped(k)}
    return json.dumps(kept, sort_keys=True, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":"))


def map_meta(data: dict[str, Any], workload: str, *, file: Path) -> dict[str, Any]:
    """Map their metadata JSON onto our columns (see the module docstring)."""
    meta: dict[str, Any] = {}
    fields = schema.RUN_LEVEL_FIELDS[workload]
    checks.check_meta_keys({k: v for k, v in data.items() if k != "quality_flags"}, workload,
                           file=file, allowed_provenance=("run_id",))
    declared = data.get("workload_type")
    if declared is not None and not is_unknown(declared):
        theirs = _workload_of(declared)
        if theirs is not None and theirs != workload:
            raise InputError(f"value {str(declared)[:40]!r} is a {theirs} run, imported as "
                             f"{workload} (--workload)", file=file, field="workload_type")
    taxonomy: dict[str, Any] = {}
    origin: dict[str, str] = {}  # our column -> their key, which an error names
    for key, value in data.items():
        if is_dropped(key) or key in VERBATIM_ONLY:
            continue
        if key == "quality_flags":
            meta["source_quality_flags"] = _flag_codes(value, file)
            continue
        if is_unknown(value):
            continue
        if key in SOURCE_NUMBERS:
            meta[SOURCE_NUMBERS[key]] = _source_number(value, key, file)
        elif key == "quality_status":
            meta["source_quality_status"] = str(value).strip()
        elif key in DIRECT_KEYS:
            meta[DIRECT_KEYS[key]] = value
            origin[DIRECT_KEYS[key]] = key
        elif key == "model_family":
            meta.update(_model(value))
        elif key == "model":
            taxonomy["model"] = value
        elif key == "parallelism":
            meta.update(parse_parallelism(value, file=file))
        elif key == "gpu_type":
            meta.setdefault("gpu_name", str(value).strip())
        elif key == "gpu_model_reported":
            meta["gpu_name"] = str(value).strip()
        elif key == "requests_completed":
            meta["requests_completed"] = value
            origin["requests_completed"] = key
        elif key == "sampling_interval_declared_s":
            meta["sample_period_ms"] = _scaled(value, 1000.0, key, file)
        elif key == "duration_declared_min":
            meta["target_duration_s"] = _scaled(value, 60.0, key, file)
        elif key == "precision":
            norm = _PRECISIONS.get(str(value).strip().lower())
            if norm is None:
                log.info("%s: precision %r has no column value (kept in source_metadata)",
                         file, value)
            meta["precision"] = norm
        elif key in ("inference_engine", "kv_cache_quantization", "model_weight_quantization",
                     "in_flight_requests", "concurrency", "arrival_pattern"):
            taxonomy[key] = value
        elif key in fields:
            meta[key] = value
        else:
            log.info("%s: key %r has no column (kept in source_metadata)", file, key)
    meta.update(_map_taxonomy(taxonomy, meta, file))
    dropped = sorted(k for k, v in meta.items()
                     if k not in fields and k != "run_id" and v is not None)
    if dropped:
        log.warning("%s: %s are not columns of %s (kept in source_metadata)", file,
                    ", ".join(dropped), workload)
    meta = {k: v for k, v in meta.items() if (k in fields or k == "run_id") and v is not None}
    meta = common.scrub_meta(meta, source=str(file))
    run_id = meta.pop("run_id", None)
    origin.setdefault("concurrency", "in_flight_requests" if "in_flight_requests" in taxonomy
                      else "concurrency")
    try:
        out = coerce_meta(meta, workload, file=file)
    except InputError as exc:  # name their field, not our column
        theirs = origin.get(exc.field or "")
        if theirs is None:
            raise
        raise InputError(exc.reason, file=file, line=exc.line, field=theirs) from None
    if run_id is not None:
        out["run_id"] = common.check_run_id(str(run_id), file=file)
    text = source_metadata(data)
    common.scrub_meta({"source_metadata": text}, source=str(file))
    out["source_metadata"] = text
    return out


def _map_taxonomy(tax: dict[str, Any], meta: dict[str, Any], file: Path) -> dict[str, Any]:
    """Their inference serving settings -> our columns (originals stay in source_metadata)."""
    out: dict[str, Any] = {}
    if "inference_engine" in tax:
        out["serving_engine"] = serving_engine(tax["inference_engine"])
    if "kv_cache_quantization" in tax:
        out["kv_cache_quant"] = kv_cache_quant(tax["kv_cache_quantization"])
    if "model_weight_quantization" in tax:
        out["weight_quant"], backend = weight_quant(tax["model_weight_quantization"])
        if backend is not None:
            out["weight_quant_backend"] = backend
    in_flight = tax.get("in_flight_requests", tax.get("concurrency"))  # named in errors below
    if in_flight is not None:
        out["concurrency"] = in_flight
    if "arrival_pattern" in tax:
        out["arrival_pattern"] = arrival_pattern(tax["arrival_pattern"])
    model = tax.get("model")
    if model is not None:
        text = str(model).strip()
        if "/" in text or re.search(r"\d", text):  # a model id or name, not a variant word
            out["model_name"] = text.rsplit("/", 1)[-1]
            if "model_family" not in meta:
                out["model_family"] = common.family_from_name(text)
                out["model_label"] = text
    for key, value in out.items():
        if value is None:
            original = {"serving_engine": "inference_engine", "kv_cache_quant":
                        "kv_cache_quantization", "weight_quant": "model_weight_quantization",
                        "arrival_pattern": "arrival_pattern"}.get(key, key)
            log.info("%s: %s %r is not in our vocabulary (kept in source_metadata)", file,
                     original, tax.get(original))
    return out
