"""The column contract: one ``datasets.Features`` per config, every column described.

This module is the single source of truth for the on-disk schema (``arrow_schema``: the fields
and types of ``Features.arrow_schema``), for the card's data dictionary (``COLUMNS``
descriptions and units) and for the vocabularies (platform slugs, model families, event kinds,
quality flags).

Categorical values are plain strings, never ``ClassLabel``, so a new value never changes the
schema. A value the source does not report is null, never 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .platforms import PlatformInfo as PlatformInfo  # re-exported: part of the contract
from .platforms import platform_from_name as platform_from_name
from .platforms import power_usage_is_1s_average as power_usage_is_1s_average

if TYPE_CHECKING:  # `datasets` is imported when a Features object is first asked for
    from datasets import Features

SCHEMA_VERSION = "1.5.0"
"""Bumped whenever a column is added, renamed or retyped; the card's changelog says why."""

SCHEMA_CHANGELOG: list[tuple[str, str]] = [
    ("1.0.0", "First column contract: trace, runs and requests configs; core run metrics."),
    ("1.1.0", "Runs configs: the power-grid metric set (energy per token and steady-state "
     "energy, percentiles, window peaks, PAR, load factor, ramps at 0.1/1/5/10 s in W/s and % of "
     "the limit, the seed authors' ramp definitions, swings, spectrum and bands, coincidence and "
     "synchrony, idle/near-limit/step/checkpoint states) and gpu_energy_counter_j."),
    ("1.2.0", "Model facts (model_params_active, model_facts_source); inference axes task, "
     "batch_size and pp_size (ML.ENERGY summaries); the seed authors' quality vocabulary "
     "(sampling_interval_observed_median_s / _p95_s, ramps at 5 s and 10 s; flags "
     "zero_power_samples, duplicate_samples, gpu_count_mismatch, precision_unknown, "
     "power_limit_from_spec, summary_only). ramp_up_*_1s / ramp_event_frequency_1s now follow "
     "the seed's definitions exactly (see the metric formulas). Also (issue 11, what actually "
     "ran): weights_dtype, compute_dtype, "
     "attn_implementation, tf32, gpu_persistence_mode on every workload; cb_attn_implementation, "
     "cb_use_cuda_graph, cb_use_async_batching (the resolved continuous-batching configuration) "
     "on inference; event kind prepare_end; quality flags power_limit_not_default and "
     "stale_power; runs metric idle_power_w. Also (issue 16): `program` and "
     "`exit_code` of runs recorded with `llm-powertrace record` (null for sweeps and imports)."),
    ("1.3.0", "Runs metrics over the work window (the workload without its idle padding): "
     "work_window_start_s, work_window_end_s, work_window_source and a work_<metric> twin of "
     "every energy-per-token, level, ramp, swing and spectral metric; checkpoint_dip_count; "
     "flags work_window_detected, checkpoint_dips_detected, step_period_detected (found from "
     "power alone). Level metrics (percentiles, peak, PAR, swing, coincidence) are now taken at "
     "the sampling instants instead of the interpolated 0.1 s grid. "
     "Also (issue 35, nothing a publisher says is lost): source_metadata (every field of the "
     "publisher's metadata, verbatim JSON), source_quality_status, source_quality_flags and the "
     "publisher's own aggregates as source_* columns (mean/p95/p99/max total power, energy, "
     "ramps, duration, samples, sampling interval); inference results tpot_mean_s, "
     "energy_per_request_j, batch_size_mean, batch_size_observed_max, output_tokens_mean "
     "(ML.ENERGY summaries); kv_cache_quant gains `fp8` and `int8`. Also (issue 35, WattAMeter "
     "and plain series): clock_alignment (how the clocks of a multi-node run's nodes were "
     "put on one time line, and the error known of it); samplers import:wattameter and "
     "import:series; flag aggregate_series (power_w is a node or cluster total, per-device "
     "metrics null). "
     "Also (issue 38, serving engines): serving_engine `vllm`, `sglang`, `openai`; inference "
     "columns served_by, engine_version, engine_args, engine_kv_cache_dtype, engine_block_size, "
     "engine_quantization, engine_cuda_graphs, engine_prefix_caching, engine_chunked_prefill, "
     "serving_api, request_timeout_s, drain_timeout_s, requests_unfinished, "
     "arrival_rate_capacity_fraction, capacity_rps, capacity_tokens_per_s, "
     "calibration_requests, calibration_s; inference_requests chunk_ms and the status "
     "`unfinished`; transformers rows label weight_quant and kv_cache_quant by the kernels "
     "that ran (e.g. `fp8_w8a16`, `int4_dequant_per_step`). "
     "Also (issue 37, the campaign): random_weights, model_revision, weights_dtype_on_disk "
     "on every workload; finetune dataset_revision, sharding_strategy, checkpoint_storage, "
     "checkpoints_written, checkpoint_bytes, checkpoint_write_s; clock_alignment_error_ms "
     "and num_nodes (multi-node runs); parallel_runs and parallel_slot (runs side by side). "
     "Also (issue 36, the sampler on real NVML): trace columns device_kind (`gpu`, or the RAPL "
     "zones `cpu_package` and `dram`, never in GPU totals), driver_power_t_us and "
     "driver_power_w (the driver's own power samples, their own time base); "
     "driver_power_period_ms; flag gpu_lost (one GPU's series ended, the others went on)."),
    ("1.4.0", "sample_hold: how a device's reading holds between two samples (`linear`, the "
     "default, and what a null in rows written before 1.4.0 means; or `previous` for "
     "change-only sources such as Zeus' PowerMonitor, whose energy, means, levels and windows "
     "are integrated as steps). Flag power_field_unknown (the log does not say which NVML "
     "power reading it holds: power_field null)."),
    ("1.5.0", "Served latencies from tokens, not chunks: inference_requests chunk_tokens (the "
     "tokens each streamed chunk carried, as the server counted them; a chunk may carry several "
     "tokens, or one with no text); inference runs itl_p50_ms and itl_p99_ms (inter-token "
     "latency from per-chunk counts, null where the server gives none), tpot_mean_s filled for "
     "served runs as (finish - first token) / (output tokens - 1); flag chunk_tokens_unknown."),
]

TRACE_CONFIGS = ("finetune", "inference")
RUNS_CONFIGS = ("finetune_runs", "inference_runs")
REQUESTS_CONFIG = "inference_requests"
ALL_CONFIGS = TRACE_CONFIGS + RUNS_CONFIGS + (REQUESTS_CONFIG,)
WORKLOADS = ("finetune", "inference")

MODEL_FAMILIES = (
    "llama", "qwen", "mistral", "gpt2", "gptj", "deepseek", "phi", "gemma", "other", "unknown",
)
MODEL_SOURCES = ("zoo", "hub", "import")
SAMPLERS = ("nvml", "cpu_proxy", "import:nvidia-smi", "import:powertrace-csv",
            "import:mlenergy-v2", "import:dcgm", "import:wattameter", "import:series",
            "import:zeus")
POWER_FIELDS = {
    "instant": "NVML field 186 (NVML_FI_DEV_POWER_INSTANT) or nvidia-smi power.draw.instant",
    "average": "NVML field 185 (1 s average) or nvidia-smi power.draw.average",
    "power_usage": "nvmlDeviceGetPowerUsage or nvidia-smi power.draw: a 1 s average on "
    "Ampere (except GA100) and newer, instantaneous before",
    "cpu_proxy_model": "not a GPU measurement: a documented linear model of the workload "
    "process tree's real CPU utilisation (idle_w + (max_w - idle_w) * u)",
}
SAMPLE_HOLDS = {
    "linear": "the power between two readings is their linear interpolation (trapezoid "
    "energy); the default, and the meaning of a null",
    "previous": "each reading holds until the next one (a source that logs a reading only when "
    "it changes): energy, means and the time-weighted levels integrate steps",
}
DEFAULT_SAMPLE_HOLD = "linear"
EVENT_KINDS = (
    "idle_begin", "idle_end", "warmup_begin", "warmup_end", "step_begin", "step_end",
    "checkpoint_begin", "checkpoint_end", "eval_begin", "eval_end", "prefill_begin",
    "prefill_end", "decode_begin", "decode_end", "steady_begin", "steady_end",
    "request_arrival", "request_finish", "stage", "prepare_end",
)
ERROR_FLAGS = ("empty", "nonmonotonic_time", "unequal_lengths", "negative_power")
WARNING_FLAGS = (
    "gap", "stall", "irregular_sampling", "implausible_power", "stuck_sensor", "missing_gpu",
    "energy_mismatch", "incomplete", "power_is_1s_average", "platform_unknown",
    "form_factor_unknown", "cpu_proxy", "zero_power_samples", "duplicate_samples",
    "gpu_count_mismatch", "precision_unknown", "power_limit_from_spec", "summary_only",
    "power_limit_not_default", "stale_power", "implausible_value", "work_window_detected",
    "checkpoint_dips_detected", "step_period_detected", "aggregate_series", "gpu_lost",
    "children_outlived", "chunk_tokens_unknown", "power_field_unknown",
)
QUALITY_FLAGS = ERROR_FLAGS + WARNING_FLAGS

GAP_PERIODS = 3.0
"""``gap``: an interval between two samples longer than this many sample periods; the period is
max(declared ``sample_period_ms``, median interval), in ``validate``, the metrics and the
explorer alike."""
ENERGY_MISMATCH_PCT = 5.0
"""``energy_mismatch``: the energy counter and integrated power differ by more than this (%)."""

FLAG_DESCRIPTIONS = {
    "empty": "error: a device has no samples",
    "nonmonotonic_time": "error: t_ms does not increase strictly",
    "unequal_lengths": "error: signal lists of one device differ in length",
    "negative_power": "error: a power reading below 0 W",
    "gap": f"an interval longer than {GAP_PERIODS:g} sample periods",
    "stall": "an interval longer than 1 s",
    "irregular_sampling": "the interval's coefficient of variation exceeds 0.25",
    "implausible_power": "a power reading above 2x the power limit",
    "stuck_sensor": "power identical for more than 10 s of consecutive samples",
    "missing_gpu": "fewer device series than num_gpus",
    "energy_mismatch": "energy counter and integrated power disagree by more than "
                       f"{ENERGY_MISMATCH_PCT:g} %",
    "incomplete": "the run was killed; what was measured up to then is published",
    "power_is_1s_average": "power_w is a 1 s moving average (power.draw on Ampere-non-GA100 "
    "and newer), so fast transients are smoothed",
    "platform_unknown": "the source names no GPU; the split is `unknown`",
    "form_factor_unknown": "the source names a GPU family only (e.g. `A100`), not its form factor",
    "cpu_proxy": "not a GPU measurement: modelled from real CPU activity",
    "zero_power_samples": "a device reports exactly 0 W (a reading no powered GPU gives; the "
    "seed authors' `zero_power_samples`)",
    "duplicate_samples": "a device repeats a timestamp (the seed authors' `duplicate_samples`)",
    "gpu_count_mismatch": "the devices in the log differ from the declared num_gpus, in either "
    "direction (the seed authors' `gpu_count_mismatch`)",
    "precision_unknown": "the source does not state the compute precision",
    "power_limit_from_spec": "the log reports no power limit; default_power_limit_w is the "
    "platform's datasheet value (llm_powertrace_ds/specs.py)",
    "summary_only": "no power trace: the run is a published summary (e.g. ML.ENERGY), only its "
    "runs-table row exists",
    "power_limit_not_default": "a GPU's power limit at the run's start differed from its "
    "default limit although the run asked for no cap (a leftover setting, or the machine's)",
    "stale_power": "some power readings repeated the previous tick's NVML timestamp (the "
    "driver had no newer value)",
    "implausible_value": "a sample outside its physical range (power 0-5000 W, utilisation "
    "0-100 %, temperature -40-150 C, ...; `llm_powertrace_ds/checks.py`)",
    "work_window_detected": "the run has no steady, step, idle or stage events: its work window "
    "(the work_* metrics) is the active window detected from power "
    "(`llm_powertrace_ds/metrics/window.py`)",
    "checkpoint_dips_detected": "the run has no checkpoint events: checkpoint_dip_* describe "
    "dips detected from power (`llm_powertrace_ds/metrics/detect.py`)",
    "step_period_detected": "the run has no step events: step_freq_hz is the step period "
    "detected from the autocorrelation of power (`llm_powertrace_ds/metrics/detect.py`)",
    "children_outlived": "the command recorded by `record` exited while processes it started "
    "still ran; the run ends 10 s later and what they did after is not measured",
    "gpu_lost": "a GPU fell off the bus during the run: its series ends at its last row (fault "
    "`gpu_lost`, the time of the loss); the other devices went on",
    "chunk_tokens_unknown": "the server streamed output without a per-chunk token count: "
    "chunk_tokens and itl_* are null, the first token is the first chunk with text",
    "aggregate_series": "power_w is one published total of num_gpus devices (a node or a "
    "cluster, `import series`), not a device: per-device metrics are null",
    "power_field_unknown": "the source does not say which NVML power reading power_w holds "
    "(e.g. WattAMeter 0.8 to 0.9.1 read the 1 s average, 0.9.2 on the instant field, in one "
    "log format): power_field is null",
}

SPLIT_NAME_RE = re.compile(r"^\w+(\.\w+)*$")


@dataclass(frozen=True)
class _Value:
    """A scalar column type (``datasets.Value(dtype)``), without importing ``datasets``."""

    dtype: str


@dataclass(frozen=True)
class _List:
    """A list column type (``datasets.List(inner)``); ``inner`` a :class:`_Value` or struct."""

    inner: _Value | tuple[tuple[str, _Value], ...]


def _feature(spec: _Value | _List | tuple[tuple[str, _Value], ...]) -> Any:
    """The ``datasets`` feature type of a spec (a struct is a tuple of (name, spec) pairs)."""
    from datasets import List, Value

    if isinstance(spec, _Value):
        return Value(spec.dtype)
    if isinstance(spec, _List):
        return List(_feature(spec.inner))
    return {name: _feature(inner) for name, inner in spec}


def _type_name(spec: _Value | _List | tuple[tuple[str, _Value], ...]) -> str:
    if isinstance(spec, _Value):
        return spec.dtype
    if isinstance(spec, _List):
        return "list<struct>" if isinstance(spec.inner, tuple) else f"list<{_type_name(spec.inner)}>"
    return "dict"


@dataclass(frozen=True)
class Column:
    """One column of the contract.

    ``datasets`` costs about 0.6 s to import, so a column holds its type as a small spec and
    builds the ``datasets`` feature type on first use (:attr:`feature`); :attr:`dtype` answers
    the common question (a scalar column's dtype) without it.

    Attributes:
        name: column name (units in the name).
        spec: the column's type (``_Value(dtype)`` or ``_List(...)``).
        description: one line for the card's data dictionary.
        unit: physical unit, or ``""``.
    """

    name: str
    spec: _Value | _List
    description: str
    unit: str = ""

    @cached_property
    def feature(self) -> Any:
        """The ``datasets`` feature type (``Value`` or ``List``)."""
        return _feature(self.spec)

    @property
    def dtype(self) -> str | None:
        """A scalar column's dtype (``"float32"``, ``"string"``, ...); ``None`` for a list."""
        return self.spec.dtype if isinstance(self.spec, _Value) else None

    @property
    def type_name(self) -> str:
        """The type as the card's data dictionary writes it (``float32``, ``list<struct>``)."""
        return _type_name(self.spec)

    @property
    def struct_fields(self) -> list[tuple[str, str]]:
        """A list-of-structs column's fields: (name, type name) pairs; ``[]`` otherwise."""
        if isinstance(self.spec, _List) and isinstance(self.spec.inner, tuple):
            return [(name, _type_name(sub)) for name, sub in self.spec.inner]
        return []

    @property
    def item_dtype(self) -> str | None:
        """A list-of-scalars column's item dtype; ``None`` otherwise."""
        if isinstance(self.spec, _List) and isinstance(self.spec.inner, _Value):
            return self.spec.inner.dtype
        return None


def _c(name: str, dtype: str, description: str, unit: str = "") -> Column:
    return Column(name, _Value(dtype), description, unit)


IDENTITY = [
    _c("run_id", "string", "Run identifier: readable slug + hash of the resolved settings, "
       "or the source's own id for imports"),
    _c("sweep", "string", "Sweep name, or `import:<format>` for imported traces"),
    _c("repeat", "int16", "Repeat index within the sweep (0-based)"),
    _c("workload", "string", "`finetune` or `inference`"),
    _c("platform", "string", "Platform slug (the split), e.g. `h100_sxm_80gb`, `cpu_proxy`"),
]
DEVICE_IDENTITY = [
    _c("node_index", "int16", "Index of the node (machine) in a multi-node run"),
    _c("gpu_index", "int16", "NVML device index on its node; the rank for `cpu_proxy`"),
]
NUM_GPUS = [_c("num_gpus", "int16", "Devices in the run, all nodes")]
DEVICE = [
    _c("gpu_name", "string", "Device name as reported (`cpu_proxy` for the CPU proxy)"),
    _c("gpu_uuid_hash", "string", "Salted SHA-256 of the device UUID (never the UUID)"),
    _c("power_limit_w", "float32", "Enforced power limit during the run "
       "(for `cpu_proxy`, the model's max_w)", "W"),
    _c("default_power_limit_w", "float32", "Default power limit of the device", "W"),
    _c("device_kind", "string", "What the row measures: `gpu` (null in rows written before "
       "schema 1.3.0 means `gpu`), or a RAPL powercap zone of the node's CPUs, `cpu_package` "
       "or `dram` (energy counter from /sys/class/powercap, power = its increase per tick). "
       "Only `gpu` rows count in the runs metrics (GPU power totals)"),
]
MODEL = [
    _c("model_family", "string", "Model family (fixed vocabulary: " + ", ".join(MODEL_FAMILIES) + ")"),
    _c("model_name", "string", "Model name, e.g. `Llama-3.2-1B`"),
    _c("model_label", "string", "The source's own model label, e.g. `ds7bbase`"),
    _c("model_source", "string", "`zoo` (random-init architecture), `hub` (cached weights) or `import`"),
    _c("random_weights", "bool", "The model ran with random (untrained) weights: `zoo` "
       "architectures of the demo, tests and cpu_proxy (power depends on the operands: never "
       "pool these with trained weights); null for imports"),
    _c("model_revision", "string", "Commit hash of the checkpoint loaded (`local:<hash>` for a "
       "local folder); null for random weights"),
    _c("weights_dtype_on_disk", "string", "dtype the checkpoint's weights were saved in "
       "(its config.json), before the run cast them"),
    _c("model_params", "int64", "Parameter count of the instantiated model", "parameters"),
    _c("model_params_active", "int64", "Parameters used per token (mixture-of-experts models; "
       "null for dense ones)", "parameters"),
    _c("model_facts_source", "string", "Where model_params / model_params_active come from "
       "when the log does not say (llm_powertrace_ds/specs.py)"),
]
PROVENANCE = [
    Column("start_time", _Value("timestamp[ms, tz=UTC]"), "UTC wall-clock time of the run's first tick"),
    _c("target_duration_s", "float32", "Requested duration of the workload", "s"),
    _c("sampler", "string", "How power was read: " + ", ".join(f"`{s}`" for s in SAMPLERS)),
    _c("power_field", "string", "Which power reading `power_w` holds: "
       + "; ".join(f"`{k}` = {v}" for k, v in POWER_FIELDS.items())),
    _c("sample_period_ms", "float32", "Configured (or declared) sampling period", "ms"),
    _c("sample_hold", "string", "How each reading holds until the next one: "
       + "; ".join(f"`{k}` = {v}" for k, v in SAMPLE_HOLDS.items())),
    _c("driver_power_period_ms", "float32", "Median interval of the driver's own power samples "
       "(driver_power_w), all GPUs; null when no GPU's driver keeps a power buffer", "ms"),
    _c("driver_version", "string", "GPU driver version"),
    _c("nvml_version", "string", "NVML library version"),
    _c("cuda_version", "string", "CUDA driver version"),
    _c("package_version", "string", "llm-powertrace version that wrote the row"),
    _c("torch_version", "string", "torch version of the workload"),
    _c("transformers_version", "string", "transformers version of the workload"),
    _c("peft_version", "string", "peft version of the workload"),
    _c("trl_version", "string", "trl version of the workload"),
    _c("host_hash", "string", "Salted hash of the host (never the host name)"),
    _c("clock_alignment", "string", "How the clocks of a run's nodes were put on one time "
       "line, and what is known of the error (null for a single node)"),
    _c("clock_alignment_error_ms", "float32", "Worst cross-node alignment error of a "
       "multi-node run: max over nodes of |change of the node's wall-clock minus monotonic "
       "offset from start to end| + the NTP/chrony estimated error when readable (null for a "
       "single node)", "ms"),
    _c("num_nodes", "int16", "Nodes (machines) of the run", "nodes"),
    _c("parallel_runs", "int16", "Runs measured side by side on the node "
       "(`generate --parallel-runs`: they share CPU, PCIe and power supply); null = alone",
       "runs"),
    _c("parallel_slot", "int16", "This run's slot among the parallel runs (its own GPUs)"),
    _c("seed", "int64", "Random seed of the workload"),
    _c("grid_region", "string", "Optional user-given electricity-grid zone (no carbon figure baked in)"),
    _c("program", "string", "File name of the program run under `llm-powertrace record` (never "
       "its command line); null otherwise"),
    _c("exit_code", "int32", "Exit status of the recorded program (128 + N when killed by signal "
       "N); null when not recorded with `record`"),
    Column("quality_flags", _List(_Value("string")), "Quality flags of the run: "
           + ", ".join(f"`{f}`" for f in QUALITY_FLAGS)),
    _c("schema_version", "string", "SCHEMA_VERSION of the writer"),
]
SOURCE = [
    _c("source_metadata", "string", "Imported runs: every field of the publisher's own metadata, "
       "verbatim, as a JSON object (file locations in the publisher's export excepted); null "
       "for runs measured here"),
    _c("source_quality_status", "string", "Imported runs: the publisher's own quality verdict "
       "(e.g. the seed catalog's `PASS_MAIN`)"),
    Column("source_quality_flags", _List(_Value("string")), "Imported runs: the publisher's own "
           "quality flag codes (their vocabulary, not ours; messages in source_metadata)"),
    _c("source_duration_s", "float64", "Publisher's observed duration of the run", "s"),
    _c("source_num_samples", "int64", "Publisher's count of samples (rows) of the run",
       "samples"),
    _c("source_sampling_interval_median_s", "float64", "Publisher's median sampling interval",
       "s"),
    _c("source_sampling_interval_p95_s", "float64", "Publisher's 95th percentile sampling "
       "interval", "s"),
    _c("source_mean_total_power_w", "float64", "Publisher's mean node power (compare with "
       "mean_power_w)", "W"),
    _c("source_p95_total_power_w", "float64", "Publisher's 95th percentile node power (compare "
       "with p95_power_w)", "W"),
    _c("source_p99_total_power_w", "float64", "Publisher's 99th percentile node power (compare "
       "with p99_power_w)", "W"),
    _c("source_max_total_power_w", "float64", "Publisher's maximum node power (compare with "
       "peak_power_w)", "W"),
    _c("source_mean_power_per_gpu_w", "float64", "Publisher's mean power per GPU", "W"),
    _c("source_total_energy_wh", "float64", "Publisher's energy of the run (compare with "
       "energy_j / 3600)", "Wh"),
    _c("source_ramp_up_p95_1s_w_per_s", "float64", "Publisher's 95th percentile 1 s up-ramp",
       "W/s"),
    _c("source_ramp_up_p99_1s_w_per_s", "float64", "Publisher's 99th percentile 1 s up-ramp",
       "W/s"),
    _c("source_ramp_down_p99_1s_w_per_s", "float64", "Publisher's 99th percentile 1 s "
       "down-ramp", "W/s"),
    _c("source_ramp_event_frequency_1s", "float64", "Publisher's ramp-event frequency at 1 s",
       "1/s"),
]
SOURCE_COLUMN_NAMES = tuple(c.name for c in SOURCE)

SIGNALS = [
    Column("t_ms", _List(_Value("int64")), "Per tick: ms since the run's first tick on CLOCK_MONOTONIC "
           "(end of the interval for averaged readings)", "ms"),
    Column("power_w", _List(_Value("float32")), "Per tick: power reading (`power_field` says which)", "W"),
    Column("power_avg_w", _List(_Value("float32")), "Per tick: NVML 1 s-average power", "W"),
    Column("energy_mj", _List(_Value("int64")), "Per tick: energy counter since t0", "mJ"),
    Column("gpu_util_pct", _List(_Value("int16")), "Per tick: GPU utilisation", "%"),
    Column("mem_util_pct", _List(_Value("int16")), "Per tick: memory-controller utilisation", "%"),
    Column("mem_used_mib", _List(_Value("int32")), "Per tick: device memory used", "MiB"),
    Column("sm_clock_mhz", _List(_Value("int32")), "Per tick: SM clock", "MHz"),
    Column("mem_clock_mhz", _List(_Value("int32")), "Per tick: memory clock", "MHz"),
    Column("temp_c", _List(_Value("int16")), "Per tick: GPU temperature", "degC"),
    Column("clock_event_reasons", _List(_Value("int64")), "Per tick: NVML clock-event reasons bitmask"),
]
SIGNAL_NAMES = tuple(c.name for c in SIGNALS)
DRIVER_SERIES = [
    Column("driver_power_t_us", _List(_Value("int64")), "The driver's own power samples "
           "(NVML's buffer, nvmlDeviceGetSamples with NVML_TOTAL_POWER_SAMPLES), on their own time "
           "base: µs since the run's t0, from the driver's CPU-clock timestamps placed on the run "
           "clock by the start anchor (UTC vs CLOCK_MONOTONIC); finer than the tick where the "
           "driver samples faster (driver_power_period_ms). What the power sensor reported, not "
           "a continuous measurement: on A100/H100 the sensor covers about a quarter of the "
           "runtime (arXiv 2312.02741), so spikes between its windows are absent. Null where the "
           "driver keeps no buffer", "us"),
    Column("driver_power_w", _List(_Value("float32")), "Power of each driver sample "
           "(driver_power_t_us)", "W"),
]
DRIVER_SERIES_NAMES = tuple(c.name for c in DRIVER_SERIES)
EVENT_FEATURE = (
    ("t_ms", _Value("int64")),
    ("kind", _Value("string")),
    ("step", _Value("int64")),
    ("rank", _Value("int16")),
    ("request_id", _Value("string")),
    ("label", _Value("string")),
)
EVENTS = [
    Column("events", _List(EVENT_FEATURE), "Workload events on the run clock: "
           "struct{t_ms, kind, step, rank, request_id, label}; kinds: "
           + ", ".join(f"`{k}`" for k in EVENT_KINDS), "ms"),
]

EXECUTION = [
    _c("weights_dtype", "string", "dtypes of the parameters the model held when the workload "
       "started, comma-separated, most parameters first (e.g. `bfloat16,float32` for a bf16 "
       "LoRA base with fp32 adapters; `nf4` for 4-bit bitsandbytes weights); observed, not "
       "requested"),
    _c("compute_dtype", "string", "dtype of the first decoder linear layer's output in the "
       "first forward pass of the workload (observed: autocast and bitsandbytes compute dtype "
       "included)"),
    _c("attn_implementation", "string", "Attention kernel the model used "
       "(`config._attn_implementation`: `eager`, `sdpa`, `flash_attention_2`, ...)"),
    _c("tf32", "bool", "TF32 matmuls allowed on CUDA (`torch.backends.cuda.matmul.allow_tf32`) "
       "during the workload; null on CPU"),
    _c("gpu_persistence_mode", "bool", "NVML persistence mode on every GPU of the run at its "
       "start (null: cpu_proxy or unreadable)"),
]
FINETUNE_AXES = [
    _c("method", "string", "Fine-tuning method: `full`, `lora` or `qlora`"),
    _c("lora_rank", "int16", "LoRA rank r"),
    _c("lora_alpha", "float32", "LoRA alpha"),
    _c("lora_targets", "string", "LoRA target modules, comma-separated"),
    _c("batch_size", "int32", "Micro-batch size per device", "sequences"),
    _c("grad_accum", "int32", "Gradient-accumulation steps"),
    _c("global_batch_size", "int32", "batch_size x grad_accum x dp_size", "sequences"),
    _c("seq_len", "int32", "Sequence length", "tokens"),
    _c("precision", "string", "Compute precision: `fp32`, `bf16` or `fp16`"),
    _c("gradient_checkpointing", "bool", "Activation (gradient) checkpointing on"),
    _c("parallelism", "string", "`single`, `ddp`, `fsdp` or `tp`"),
    _c("dp_size", "int16", "Data-parallel degree"),
    _c("tp_size", "int16", "Tensor-parallel degree"),
    _c("pp_size", "int16", "Pipeline-parallel degree"),
    _c("checkpoint_every_steps", "int32", "Checkpoint (save) interval", "steps"),
    _c("max_steps", "int32", "Requested optimiser steps", "steps"),
    _c("optimizer", "string", "Optimiser name"),
    _c("learning_rate", "float32", "Learning rate"),
    _c("dataset_name", "string", "Training data: a Hub dataset id (instruction text, chat "
       "template of the model, packed to seq_len), `local:<name>` or `synthetic` (random token "
       "ids: demo and tests)"),
    _c("dataset_revision", "string", "Commit hash of the training dataset (`local:<hash>` for a "
       "local folder); null for synthetic data"),
    _c("sharding_strategy", "string", "How parameters, gradients and optimiser states are "
       "spread over the data-parallel ranks: `none` (single), `replicated` (DDP), "
       "`fsdp2_full_shard` (FSDP2, sharded at load, resharded after forward)"),
    _c("checkpoint_storage", "string", "Where checkpoints were written: `node_local` (the "
       "default, a temporary folder of the node) or `configured` (the sweep's checkpoint_dir)"),
    _c("power_limit_setting_w", "float32", "Requested power cap (null = default)", "W"),
]
FINETUNE_RESULTS = [
    _c("steps", "int32", "Optimiser steps completed", "steps"),
    _c("tokens", "int64", "Training tokens processed (all ranks)", "tokens"),
    _c("tokens_per_s", "float32", "Training throughput", "tokens/s"),
    _c("final_loss", "float32", "Training loss at the last step"),
    _c("checkpoints_written", "int32", "Checkpoints saved during the run", "checkpoints"),
    _c("checkpoint_bytes", "int64", "Bytes of the last checkpoint written (all ranks' files)",
       "bytes"),
    _c("checkpoint_write_s", "float32", "Seconds spent writing checkpoints: Σ over checkpoints "
       "of checkpoint_end − checkpoint_begin (rank 0's clock)", "s"),
]
INFERENCE_AXES = [
    _c("serving_engine", "string", "`transformers` (in-process reference engine), `vllm` or "
       "`sglang` (the engine's server, started by the run), `openai` (an OpenAI-compatible "
       "server already running; `served_by` says what it claims to be), or an imported "
       "source's engine"),
    _c("concurrency", "int32", "Maximum requests in flight", "requests"),
    _c("batching", "string", "`static` or `continuous`"),
    _c("arrival_pattern", "string", "`closed`, `poisson`, `gamma` or `replay`"),
    _c("arrival_rate_rps", "float32", "Mean arrival rate", "requests/s"),
    _c("arrival_cv", "float32", "Coefficient of variation of inter-arrival times (gamma)"),
    _c("prompt_len", "int32", "Prompt length when fixed (else null)", "tokens"),
    _c("output_len", "int32", "Forced output length when fixed (else null)", "tokens"),
    _c("length_distribution", "string", "`fixed`, `uniform`, `list` or `replay`"),
    _c("length_params", "string", "JSON: the range, the list, or the replay file's name and hash"),
    _c("num_requests", "int32", "Requests in the stream", "requests"),
    _c("precision", "string", "Compute precision: `fp32`, `bf16` or `fp16`"),
    _c("weight_quant", "string", "Weight quantisation: `none`, `int8`, `int4`, `fp8` (an "
       "engine's own FP8 weights or an import's label); transformers runs name the kernel: "
       "`int8_w8a16`, `int4_w4a16`, `fp8_w8a16` (optimum-quanto, weight-only: no FP8 tensor "
       "cores), `int8_llm_int8`, `nf4_w4a16` (bitsandbytes)"),
    _c("weight_quant_backend", "string", "Library used for weight quantisation"),
    _c("kv_cache_quant", "string", "KV-cache quantisation: `none`, `fp8`, `int8`, `int4`, "
       "`int2`; transformers' quantised cache is `int4_dequant_per_step` / "
       "`int2_dequant_per_step` (the whole cache is dequantised at every decode step)"),
    _c("kv_cache_backend", "string", "KV-cache quantisation backend"),
    _c("gpu_clock_mhz", "int32", "Requested locked GPU clock (null = default)", "MHz"),
    _c("power_limit_setting_w", "float32", "Requested power cap (null = default)", "W"),
    _c("tp_size", "int16", "Tensor-parallel degree"),
    _c("pp_size", "int16", "Pipeline-parallel degree"),
    _c("batch_size", "int32", "Maximum batch size of the serving engine (e.g. vLLM "
       "max_num_seqs)", "requests"),
    _c("task", "string", "Benchmark task of a published summary (e.g. ML.ENERGY `chat`)"),
]
CONTINUOUS_BATCHING = [
    _c("cb_attn_implementation", "string", "Continuous batching: the paged attention kernel "
       "used (set explicitly, never switched automatically)"),
    _c("cb_use_cuda_graph", "bool", "Continuous batching: CUDA graphs captured and replayed"),
    _c("cb_use_async_batching", "bool", "Continuous batching: asynchronous (double-buffered) "
       "batch preparation"),
]
SERVING = [
    _c("served_by", "string", "What the server says it is: `owned_by` of the model in "
       "/v1/models and the `Server` header (a label, never trusted for the platform)"),
    _c("engine_version", "string", "The serving engine's version as its server reports it "
       "(/version)"),
    _c("engine_args", "string", "JSON list: the launched engine's command-line arguments "
       "(the model, address and every knob passed)"),
    _c("engine_kv_cache_dtype", "string", "The engine's KV-cache dtype (`auto`, `fp8`, "
       "`fp8_e4m3`, ...)"),
    _c("engine_block_size", "int32", "The engine's KV-cache block (page) size; null when not "
       "set and not reported", "tokens"),
    _c("engine_quantization", "string", "The engine's quantisation method (`none`, `fp8`, ...)"),
    _c("engine_cuda_graphs", "bool", "The engine captured CUDA graphs"),
    _c("engine_prefix_caching", "bool", "The engine reused cached prompt prefixes"),
    _c("engine_chunked_prefill", "bool", "The engine split long prefills into chunks"),
    _c("serving_api", "string", "`completions` (token-id prompts) or `chat` (text prompts)"),
    _c("request_timeout_s", "float32", "Client timeout of one request", "s"),
    _c("drain_timeout_s", "float32", "Bounded draining: requests still in flight this long "
       "after the last arrival were given up (`unfinished`); null = unbounded", "s"),
    _c("arrival_rate_capacity_fraction", "float32", "The arrival rate asked for as a fraction "
       "of the measured capacity (`arrival_rate: 0.5x`); arrival_rate_rps is the absolute "
       "rate used"),
    _c("capacity_rps", "float32", "Saturation throughput measured before the run (closed "
       "loop, outside the measured window): completed requests / (last finish - first "
       "arrival)", "requests/s"),
    _c("capacity_tokens_per_s", "float32", "Generated tokens per second of the capacity "
       "calibration", "tokens/s"),
    _c("calibration_requests", "int32", "Requests sent by the capacity calibration",
       "requests"),
    _c("calibration_s", "float32", "Wall time of the capacity calibration", "s"),
]
INFERENCE_RESULTS = [
    _c("requests_completed", "int32", "Requests completed", "requests"),
    _c("requests_unfinished", "int32", "Requests still in flight (or waiting) when the bounded "
       "drain ended", "requests"),
    _c("tokens_in", "int64", "Prompt tokens processed", "tokens"),
    _c("tokens_out", "int64", "Tokens generated", "tokens"),
    _c("tokens_per_s", "float32", "Generated tokens per second", "tokens/s"),
    _c("ttft_p50_ms", "float32", "Median time to first token", "ms"),
    _c("ttft_p99_ms", "float32", "99th percentile time to first token", "ms"),
    _c("latency_p50_ms", "float32", "Median request latency", "ms"),
    _c("latency_p99_ms", "float32", "99th percentile request latency", "ms"),
    _c("tpot_mean_s", "float64", "Mean time per output token of the completed requests, "
       "each (finish - first token) / (output tokens - 1), from tokens, never chunks "
       "(ML.ENERGY `Avg TPOT (s)` for imports); null where the source does not report it", "s"),
    _c("itl_p50_ms", "float64", "Median inter-token latency of the completed streamed "
       "requests: a chunk carrying k tokens after a gap g counts k latencies of g / k; null "
       "where the server gives no per-chunk token count (flag chunk_tokens_unknown)", "ms"),
    _c("itl_p99_ms", "float64", "99th percentile inter-token latency (as itl_p50_ms)", "ms"),
    _c("energy_per_request_j", "float64", "Energy per request, all GPUs of the run (ML.ENERGY "
       "`Energy/req (J)`)", "J"),
    _c("batch_size_mean", "float64", "Mean number of requests the engine batched together "
       "(ML.ENERGY `Avg BS (reqs)`)", "requests"),
    _c("batch_size_observed_max", "int32", "Largest batch the engine formed (ML.ENERGY "
       "`Max BS (reqs)`); batch_size is the configured maximum", "requests"),
    _c("output_tokens_mean", "float64", "Mean output tokens per request (ML.ENERGY `Avg Output "
       "Tokens`)", "tokens"),
]

# Node-total run metrics (filled by ``metrics.compute_run_metrics``; the formulas are in its
# docstrings, ``metrics.metric_formulas()``). P(t) is the node total on the common 0.1 s grid
# (every device interpolated onto it over the span where all are present), C = sum of the
# devices' power limits (N x limit). Shape metrics use gap-free segments only.
_RAMP_HORIZONS = (("100ms", "0.1 s"), ("1s", "1 s"), ("5s", "5 s"), ("10s", "10 s"))


def _ramp_columns() -> list[Column]:
    cols = []
    for unit, scale, suffix in (("w_per_s", "", "W/s"), ("pct_per_s", " as % of C per s "
                                                        "(null when a limit is unknown)", "%/s")):
        for tag, text in _RAMP_HORIZONS:
            r = f"r = (P(t + {text}) - P(t)) / {text} inside gap-free segments"
            cols += [
                _c(f"ramp_up_max_{tag}_{unit}", "float64", f"Largest up-ramp over {text}{scale}: "
                   f"max(0, max r), {r}", suffix),
                _c(f"ramp_down_max_{tag}_{unit}", "float64", f"Largest down-ramp over {text}"
                   f"{scale}: max(0, max -r) (a positive magnitude), {r}", suffix),
                _c(f"ramp_abs_p95_{tag}_{unit}", "float64", f"95th percentile of |r| over {text}"
                   f"{scale}, {r}", suffix),
                _c(f"ramp_abs_p99_{tag}_{unit}", "float64", f"99th percentile of |r| over {text}"
                   f"{scale}, {r}", suffix),
            ]
    return cols


RUN_METRICS = [
    # energy
    _c("energy_j", "float64", "Sum over the GPUs (device_kind `gpu`: RAPL CPU/DRAM rows are "
       "never in this or any node total) of each device's trapezoid integral of power_w on its "
       "own timestamps (bridges gaps; steps when sample_hold is `previous`)", "J"),
    _c("energy_counter_j", "float64", "Sum over devices of the energy-counter increase "
       "(null when a device has no counter)", "J"),
    _c("energy_mismatch_pct", "float64", "100 * (energy_j - energy_counter_j) / energy_counter_j",
       "%"),
    _c("energy_per_token_j", "float64", "energy_j / tokens (training tokens; for inference "
       "generated tokens, the ML.ENERGY convention)", "J/token"),
    _c("steady_energy_j", "float64", "Energy between the steady_begin and steady_end events "
       "(inference steady state)", "J"),
    _c("steady_energy_per_token_j", "float64", "steady_energy_j / tokens generated in the steady "
       "window (per request: first token at first_token_ms, the rest spread uniformly until "
       "finish_ms)", "J/token"),
    _c("idle_power_w", "float64", "Node-total mean power in the idle padding before the "
       "workload (first idle_begin to the next idle_end): the run's own idle baseline, to "
       "compare runs made in one process", "W"),
    # level
    _c("duration_s", "float64", "Span of the run's power readings, first to last over all "
       "devices", "s"),
    _c("mean_power_w", "float64", "Time-weighted mean of the node total: energy_j / duration_s",
       "W"),
    _c("p5_power_w", "float64", "5th percentile of the node total at the sampling "
       "instants (per common tick, else sample-and-hold; never interpolated)", "W"),
    _c("p50_power_w", "float64", "Median of the node total at the sampling "
       "instants (per common tick, else sample-and-hold; never interpolated)", "W"),
    _c("p95_power_w", "float64", "95th percentile of the node total at the sampling "
       "instants (per common tick, else sample-and-hold; never interpolated)", "W"),
    _c("p99_power_w", "float64", "99th percentile of the node total at the sampling "
       "instants (per common tick, else sample-and-hold; never interpolated)", "W"),
    _c("peak_power_w", "float64", "Maximum of the node total at the sampling instants (per "
       "common tick, else sample-and-hold; never interpolated)", "W"),
    _c("peak_power_1s_w", "float64", "Largest mean of P over non-overlapping 1 s windows", "W"),
    _c("peak_power_60s_w", "float64", "Largest mean of P over non-overlapping 60 s windows", "W"),
    _c("par", "float64", "Peak-to-average ratio: peak_power_w / mean_power_w"),
    _c("par_1s", "float64", "peak_power_1s_w / mean_power_w"),
    _c("par_60s", "float64", "peak_power_60s_w / mean_power_w"),
    _c("load_factor", "float64", "mean_power_w / peak_power_w"),
    _c("limit_utilisation", "float64", "mean_power_w / C, C = N x power limit (null when the "
       "limit is unknown)"),
    # ramps
    *_ramp_columns(),
    _c("ramp_up_p95_1s_w_per_s", "float64", "Seed-compatible: 95th percentile of the up-ramps "
       "r > 0, r(t) = (P(t) - P(t - 1 s)) / 1 s, P(t - 1 s) by linear interpolation, on the "
       "per-tick total (each device's last reading carried forward, 0.1 s grid)", "W/s"),
    _c("ramp_up_p99_1s_w_per_s", "float64", "Seed-compatible: 99th percentile of the up-ramps "
       "r > 0 (as ramp_up_p95_1s_w_per_s)", "W/s"),
    _c("ramp_down_p99_1s_w_per_s", "float64", "Seed-compatible: 99th percentile of -r over the "
       "down-ramps r < 0 (a positive magnitude), on the total at every device timestamp", "W/s"),
    _c("ramp_event_frequency_1s", "float64", "Seed-compatible: ramps r >= theta per minute of "
       "duration, among U = {r >= 0} (flat stretches count as upward), theta = p95 of U",
       "1/min"),
    *[_c(f"ramp_{kind}_{tag}_w_per_s", "float64", f"Seed authors' definition at {tag}: "
         f"{text} (as the 1 s one, horizon {tag})", "W/s")
      for tag in ("5s", "10s")
      for kind, text in (("up_p95", "95th percentile of the up-ramps r > 0"),
                         ("up_p99", "99th percentile of the up-ramps r > 0"),
                         ("down_p99", "99th percentile of -r over the down-ramps r < 0"))],
    # swings and oscillations
    _c("swing_w", "float64", "p95_power_w - p5_power_w", "W"),
    _c("dynamic_range_1s_w", "float64", "Largest max - min of P within a sliding 1 s window",
       "W"),
    _c("dynamic_range_10s_w", "float64", "Largest max - min of P within a sliding 10 s window",
       "W"),
    _c("dominant_freq_hz", "float64", "Frequency of the largest Welch-spectrum peak of the "
       "detrended total in 0.05-5 Hz that stands out of its local background with >= 5 cycles "
       "per window (null when none does: a trend is not an oscillation)", "Hz"),
    _c("dominant_amplitude_w", "float64", "Amplitude of the sinusoid at dominant_freq_hz "
       "(sqrt(2 x power in the spectral peak))", "W"),
    _c("band_rms_low_w", "float64", "RMS of the total's oscillation in 0.1-1 Hz", "W"),
    _c("band_rms_mid_w", "float64", "RMS of the total's oscillation in 1-2.5 Hz", "W"),
    _c("band_rms_high_w", "float64", "RMS of the total's oscillation in 2.5-5 Hz", "W"),
    _c("band_fraction_low", "float64", "Share of the 0.05-5 Hz oscillation power in 0.1-1 Hz"),
    _c("band_fraction_mid", "float64", "Share of the 0.05-5 Hz oscillation power in 1-2.5 Hz"),
    _c("band_fraction_high", "float64", "Share of the 0.05-5 Hz oscillation power in 2.5-5 Hz"),
    _c("step_freq_hz", "float64", "Training-step frequency from step events: 1 / median "
       "interval between step_begin events; without step events, detected from power (flag "
       "step_period_detected)", "Hz"),
    # across devices
    _c("coincidence_factor", "float64", "Peak of the sum / sum of the per-device peaks (1 when "
       "all peaks coincide)"),
    _c("diversity_factor", "float64", "1 / coincidence_factor"),
    _c("synchrony_index", "float64", "Mean pairwise correlation of per-device power, high-passed "
       "at 0.05 Hz (1 = in phase, -1 = antiphase)"),
    _c("projected_swing_1000_w", "float64", "Swing of 1,000 such devices: mean per-device swing "
       "x sqrt(M (1 + (M - 1) max(synchrony_index, 0))), M = 1000", "W"),
    # states
    _c("idle_fraction", "float64", "Share of time with P < 0.2 C"),
    _c("near_limit_fraction", "float64", "Share of time with P >= 0.9 C"),
    _c("step_count", "int32", "Power steps: runs of |P(t + 1 s) - P(t)| > 0.1 C of one sign"),
    _c("checkpoint_dip_pct", "float64", "Mean depth of the power dip during checkpoints as % of "
       "the median over the 10 s before checkpoint_begin", "%"),
    _c("checkpoint_dip_s", "float64", "Mean width of the checkpoint dips at half depth", "s"),
    _c("checkpoint_dip_count", "int32", "Checkpoints measured: with checkpoint events, those "
       "with gap-free power around them; without, the dips detected from power "
       "(flag checkpoint_dips_detected)"),
    # gaps
    _c("gap_count", "int32", "Gaps (intervals longer than 3 sample periods) on the run clock, "
       "overlapping gaps of several devices merged"),
    _c("gap_s", "float64", "Total length of those gaps: how much of energy_j rests on "
       "interpolation", "s"),
    _c("sampling_interval_observed_median_s", "float64", "Median interval between consecutive "
       "readings of a device, over all devices (the seed authors' name)", "s"),
    _c("sampling_interval_observed_p95_s", "float64", "95th percentile of those intervals",
       "s"),
]
_WORK_BASE = ("energy_j", "energy_per_token_j", "duration_s", "mean_power_w", "p5_power_w",
              "p50_power_w", "p95_power_w", "p99_power_w", "peak_power_w", "peak_power_1s_w",
              "peak_power_60s_w", "par", "par_1s", "par_60s", "load_factor",
              "limit_utilisation")
_WORK_OSC = ("swing_w", "dynamic_range_1s_w", "dynamic_range_10s_w", "dominant_freq_hz",
             "dominant_amplitude_w", "band_rms_low_w", "band_rms_mid_w", "band_rms_high_w",
             "band_fraction_low", "band_fraction_mid", "band_fraction_high", "step_freq_hz")


def _work_columns() -> list[Column]:
    """The work-window twins (``work_<metric>``) and the window itself; see metrics/window.py."""
    by_name = {c.name: c for c in RUN_METRICS}
    ramps = [c.name for c in _ramp_columns()]
    cols = [
        _c("work_window_start_s", "float64", "Start w0 of the work window W on the run clock: "
           "the workload without its idle padding (steady window, first step_begin to last "
           "step_end, between the idle paddings, non-idle stage labels, or detected from power)",
           "s"),
        _c("work_window_end_s", "float64", "End w1 of the work window W on the run clock", "s"),
        _c("work_window_source", "string", "How W was found: `steady`, `steps`, "
           "`idle_events`, `stage`, `detected` (from power; flag work_window_detected) or "
           "`whole`"),
    ]
    for name in (*_WORK_BASE, *ramps, *_WORK_OSC):
        base = by_name[name]
        text = base.description
        if name == "energy_per_token_j":
            text = ("work_energy_j / tokens in W (training tokens; for inference the tokens "
                    "generated in W)")
        cols.append(Column(f"work_{name}", base.spec, f"Over the work window W only: {text}",
                           base.unit))
    return cols


RUN_METRICS += _work_columns()
PER_DEVICE_METRICS = [
    Column("gpu_energy_j", _List(_Value("float64")), "Per device: trapezoid energy on its own "
           "timestamps (steps when sample_hold is `previous`)", "J"),
    Column("gpu_energy_counter_j", _List(_Value("float64")), "Per device: energy-counter increase "
           "(null without a counter)", "J"),
    Column("gpu_mean_power_w", _List(_Value("float64")), "Per device: time-weighted mean power",
           "W"),
    Column("gpu_peak_power_w", _List(_Value("float64")), "Per device: peak power reading", "W"),
]
METRIC_NOTES = [
    Column("metric_notes", _List(_Value("string")),
           "Why a metric is null, as `metric: reason`; also how a metric was formed where "
           "the run decides it (`peak_power_w:` the level sampling; `work_window_source:`, "
           "`checkpoint_dip_count:`, `step_freq_hz:` what was detected from power)"),
]
RUNS_DEVICE = [
    _c("gpu_name", "string", "Device name as reported (`cpu_proxy` for the CPU proxy)"),
    _c("power_limit_w", "float32", "Enforced per-device power limit (null if devices differ)", "W"),
    _c("default_power_limit_w", "float32", "Default per-device power limit", "W"),
]

REQUEST_COLUMNS = [
    _c("run_id", "string", "Run identifier"),
    _c("platform", "string", "Platform slug (the split)"),
    _c("request_id", "string", "Request identifier within the run"),
    _c("arrival_ms", "int64", "Arrival time on the run clock", "ms"),
    _c("start_ms", "int64", "Admission time on the run clock", "ms"),
    _c("first_token_ms", "int64", "First-token time on the run clock", "ms"),
    _c("finish_ms", "int64", "Finish time on the run clock", "ms"),
    _c("prompt_tokens", "int32", "Prompt length", "tokens"),
    _c("requested_output_tokens", "int32", "Requested (forced) output length", "tokens"),
    _c("output_tokens", "int32", "Tokens generated", "tokens"),
    _c("status", "string", "`ok`, `error`, `cancelled` (never admitted) or `unfinished` "
       "(given up when the bounded drain ended)"),
    Column("chunk_ms", _List(_Value("int64")), "Per streamed chunk that carried output "
           "(a chunk may carry several tokens, or one token with no text yet): arrival time on "
           "the run clock; null where the engine does not stream. Chunk gaps are not token "
           "gaps: see chunk_tokens", "ms"),
    Column("chunk_tokens", _List(_Value("int32")), "Per streamed chunk (as chunk_ms): the "
           "tokens it carried, from the server's running usage count; null where the server "
           "gives no per-chunk count", "tokens"),
]


def _dedupe(columns: list[Column]) -> list[Column]:
    seen: dict[str, Column] = {}
    for col in columns:
        seen.setdefault(col.name, col)
    return list(seen.values())


def _workload_columns(workload: str) -> list[Column]:
    if workload == "finetune":
        return FINETUNE_AXES + FINETUNE_RESULTS + EXECUTION
    return INFERENCE_AXES + INFERENCE_RESULTS + EXECUTION + CONTINUOUS_BATCHING + SERVING


def trace_columns(workload: str) -> list[Column]:
    """Columns of the trace config of ``workload`` (one row per run and device)."""
    return _dedupe(IDENTITY + DEVICE_IDENTITY + NUM_GPUS + DEVICE + MODEL + PROVENANCE
                   + _workload_columns(workload) + SOURCE + SIGNALS + DRIVER_SERIES + EVENTS)


def runs_columns(workload: str) -> list[Column]:
    """Columns of the runs config of ``workload`` (one row per run)."""
    return _dedupe(IDENTITY + NUM_GPUS + RUNS_DEVICE + MODEL + PROVENANCE
                   + _workload_columns(workload) + SOURCE + RUN_METRICS + PER_DEVICE_METRICS + METRIC_NOTES)


COLUMNS: dict[str, list[Column]] = {
    "finetune": trace_columns("finetune"),
    "inference": trace_columns("inference"),
    "finetune_runs": runs_columns("finetune"),
    "inference_runs": runs_columns("inference"),
    "inference_requests": REQUEST_COLUMNS,
}
class _Features(Mapping[str, "Features"]):
    """``config -> datasets.Features``, each built (and ``datasets`` imported) on first use."""

    def __init__(self) -> None:
        self._built: dict[str, Features] = {}

    def __getitem__(self, name: str) -> Features:
        if name not in self._built:
            from datasets import Features

            self._built[name] = Features({c.name: c.feature for c in COLUMNS[name]})
        return self._built[name]

    def __contains__(self, name: object) -> bool:
        return name in COLUMNS

    def __iter__(self) -> Iterator[str]:
        return iter(COLUMNS)

    def __len__(self) -> int:
        return len(COLUMNS)


FEATURES: Mapping[str, Features] = _Features()
"""The ``datasets.Features`` of each config (built on first use)."""

RUN_LEVEL_FIELDS: dict[str, frozenset[str]] = {
    wl: frozenset(
        c.name for c in COLUMNS[wl]
        if c.name not in SIGNAL_NAMES and c.name not in DRIVER_SERIES_NAMES
        and c.name not in ("events", "node_index", "gpu_index", "gpu_uuid_hash", "device_kind")
    )
    for wl in WORKLOADS
}
"""Scalar fields a ``Run``'s metadata may carry, per workload."""


def base_config(config_name: str) -> str:
    """Map any config name (``finetune-llama``) to the schema config it uses (``finetune``)."""
    if config_name in FEATURES:
        return config_name
    workload, sep, family = config_name.partition("-")
    if sep and workload in TRACE_CONFIGS and family in MODEL_FAMILIES:
        return workload
    raise KeyError(f"unknown config {config_name!r}; known: {', '.join(ALL_CONFIGS)} "
                   "and <finetune|inference>-<family>")


def features_for(config_name: str) -> Features:
    """Return the ``Features`` of a config (family trace configs share their workload's)."""
    return FEATURES[base_config(config_name)]


# ---------------------------------------------------------------------------------------------
# Arrow types without ``datasets``
# ---------------------------------------------------------------------------------------------

_TIMESTAMP_RE = re.compile(r"^timestamp\[(s|ms|us|ns)(?:, tz=([^\]]+))?\]$")


def _arrow_type(spec: _Value | _List | tuple[tuple[str, _Value], ...]) -> Any:
    """The Arrow type ``datasets`` gives a spec.

    ``Value``: its ``pa_type``; ``List``: a ``pa.list_``; a struct: a ``pa.struct`` in order.
    """
    import pyarrow as pa

    if isinstance(spec, _List):
        return pa.list_(_arrow_type(spec.inner))
    if not isinstance(spec, _Value):
        return pa.struct([(name, _arrow_type(inner)) for name, inner in spec])
    stamp = _TIMESTAMP_RE.match(spec.dtype)
    if stamp:
        return pa.timestamp(stamp.group(1), tz=stamp.group(2))
    if spec.dtype == "bool":
        return pa.bool_()
    if spec.dtype in ("string", "float32", "float64", "int16", "int32", "int64"):
        return getattr(pa, spec.dtype)()
    raise KeyError(f"no Arrow type for dtype {spec.dtype!r}")


_ARROW_SCHEMAS: dict[str, Any] = {}


def arrow_schema(config_name: str) -> Any:
    """The config's on-disk schema (a ``pyarrow.Schema``), built without ``datasets``.

    The same fields and types as ``features_for(config_name).arrow_schema``, without its
    ``huggingface`` metadata: ``datasets`` (>= 4.0) derives exactly the config's ``Features``
    from these Arrow types alone (``Features.from_arrow_schema``; a test checks every config),
    so neither a file nor the card repeats the feature list. Every shard of a per-run folder
    carried it: 16 KB of a runs file's 52 KB (issue 40), 2,200 lines of the card (issue 34).
    The import path writes shards without importing ``datasets`` (about 0.5 s a CLI call).
    """
    config = base_config(config_name)
    if config not in _ARROW_SCHEMAS:
        import pyarrow as pa

        _ARROW_SCHEMAS[config] = pa.schema(
            [pa.field(c.name, _arrow_type(c.spec)) for c in COLUMNS[config]])
    return _ARROW_SCHEMAS[config]


def column_doc(config_name: str) -> list[Column]:
    """Columns (with descriptions) of a config, for the card's data dictionary."""
    return COLUMNS[base_config(config_name)]


# ---------------------------------------------------------------------------------------------
# Platform slugs: in platforms.py (re-exported here)
# ---------------------------------------------------------------------------------------------

def check_split_name(split: str) -> str:
    """Raise ``ValueError`` unless ``split`` is a valid ``datasets`` split name."""
    if not SPLIT_NAME_RE.match(split):
        raise ValueError(f"platform {split!r} is not a valid split name (must match "
                         f"{SPLIT_NAME_RE.pattern})")
    return split


def is_cpu_proxy(meta: Mapping[str, Any]) -> bool:
    """Whether a run (its metadata or runs row) is ``cpu_proxy`` data, not a GPU measurement.

    The one rule: the platform, the sampler, the power field, the flag or the device name
    (a trace row's ``gpu_name``) says so.
    """
    return (meta.get("platform") == "cpu_proxy" or meta.get("sampler") == "cpu_proxy"
            or meta.get("power_field") == "cpu_proxy_model"
            or "cpu_proxy" in (meta.get("quality_flags") or [])
            or meta.get("gpu_name") == "cpu_proxy")
