"""The inference workload's settings, their validation and the request stream they describe.

:data:`SETTINGS` are the ``inference`` axes of ``llm_powertrace_ds.schema`` plus ``model``,
``model_source``, ``seed``, ``target_duration_s``, ``replay_file``, ``replay_time_scale`` and the
continuous-batching knobs (:data:`CB_SETTINGS`). :func:`validate_settings` rejects what the
machine cannot honour before any run starts, naming the setting and the reason.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from llm_powertrace_ds import schema
from llm_powertrace_ds.errors import InputError

from .. import MachineInfo, Setting, models, quant, settings_from_columns
from .. import arrivals as arr
from .engine_settings import (
    DRAIN_SETTING,
    ENGINE_SETTINGS,
    HTTP_ENGINES,
    engine_problems,
)

log = logging.getLogger(__name__)


SERVING_ENGINES = ("transformers", *HTTP_ENGINES)
BATCHING = ("static", "continuous")
PRECISIONS = ("fp32", "bf16", "fp16")
CONTINUOUS_BATCHING_ARCHS = frozenset({"llama", "qwen2", "qwen3", "mistral", "gpt2"})
"""Architectures whose continuous batching (paged attention) is verified by the test suite."""
TENSOR_PARALLEL_ARCHS = frozenset({"llama", "qwen2", "qwen3", "mistral"})
"""Architectures with a ``transformers`` ``base_model_tp_plan`` (``tp_plan="auto"``)."""
DEFAULT_NUM_REQUESTS = 64


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JsonSetting(Setting):
    """A setting given as a YAML mapping (or JSON text), stored as canonical JSON text."""

    def check(self, value: Any) -> tuple[Any, str | None]:
        if value is None:
            return None, None
        parsed = value
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except ValueError:
                return value, f"{value!r} is not a mapping (YAML or JSON)"
        if not isinstance(parsed, dict):
            return value, f"{value!r} is not a mapping (e.g. {{prompt_len: [64, 512], output_len: 128}})"
        return json.dumps(parsed, sort_keys=True), None


_AXES = settings_from_columns(
    schema.INFERENCE_AXES,
    serving_engine={"default": "transformers", "choices": SERVING_ENGINES},
    concurrency={"default": 4, "minimum": 1},
    batching={"default": "continuous", "choices": BATCHING},
    arrival_pattern={"default": "closed", "choices": arr.ARRIVAL_PATTERNS},
    arrival_rate_rps={"minimum": 1e-9},
    arrival_cv={"minimum": 1e-9},
    prompt_len={"default": 128, "minimum": 1},
    output_len={"default": 64, "minimum": 1},
    length_distribution={"default": "fixed", "choices": arr.LENGTH_DISTRIBUTIONS},
    num_requests={"minimum": 1},
    precision={"choices": PRECISIONS},
    weight_quant={"default": "none", "choices": quant.WEIGHT_QUANT},
    weight_quant_backend={"choices": quant.WEIGHT_QUANT_BACKENDS},
    kv_cache_quant={"default": "none", "choices": (*quant.KV_CACHE_QUANT, "fp8")},
    kv_cache_backend={"choices": quant.KV_CACHE_BACKENDS},
    gpu_clock_mhz={"minimum": 1},
    power_limit_setting_w={"minimum": 1.0},
    tp_size={"default": 1, "minimum": 1},
)
_AXES["length_params"] = JsonSetting("length_params", "string",
                                     doc=_AXES["length_params"].doc)
CB_ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2", "flash_attention_3")
CB_GPU_ATTN = "flash_attention_2"
"""The continuous-batching kernel on a GPU by default: transformers' paged, mask-free varlen
path. With ``sdpa`` (or ``eager``) transformers builds a dense block-diagonal mask of
``max_batch_tokens x (tokens read + max_batch_tokens)`` every step, so attention cost grows as
(sum of query lengths) x (sum of key lengths): a reference path, not serving."""
CB_SETTINGS: dict[str, Setting] = {
    # Continuous batching is configured explicitly (issue 11, item 4): transformers would
    # otherwise switch the attention on its own (possibly fetching a kernel from the Hub
    # through `kernels` mid-run) and decide CUDA graphs and async batching itself. Null
    # defaults resolve per machine (``resolve_cb``): on a GPU the paged flash kernel with CUDA
    # graphs; on a CPU sdpa without graphs (the only path there). Only continuous-batching runs
    # carry them (static runs keep their run ids and rows null).
    "cb_attn_implementation": Setting("cb_attn_implementation", "string",
                                      choices=CB_ATTN_IMPLEMENTATIONS,
                                      doc="Continuous batching: attention kernel (never "
                                      "switched automatically; null: flash_attention_2 on a "
                                      "GPU, sdpa on a CPU)"),
    "cb_use_cuda_graph": Setting("cb_use_cuda_graph", "bool",
                                 doc="Continuous batching: capture CUDA graphs (CUDA only; "
                                 "null: on with a GPU)"),
    "cb_use_async_batching": Setting("cb_use_async_batching", "bool", default=False,
                                     doc="Continuous batching: async double-buffered batches"),
}
SETTINGS: dict[str, Setting] = {
    **models.model_settings(),
    "seed": Setting("seed", "int64", default=0,
                    doc="Random seed (model init, arrivals, lengths, prompts)"),
    "target_duration_s": Setting("target_duration_s", "float32", minimum=0.1,
                                 doc="Stop releasing requests after this many seconds"),
    "replay_file": Setting("replay_file", "string", column=False,
                           doc="CSV of arrival offsets and token lengths (replay)"),
    "replay_time_scale": Setting("replay_time_scale", "float64", default=1.0, minimum=1e-9,
                                 column=False,
                                 doc="Multiplies replayed arrival offsets (0.5 = twice as fast)"),
    **_AXES,
    **CB_SETTINGS,
    **ENGINE_SETTINGS,
    "drain_timeout_s": DRAIN_SETTING,
}


def resolve_cb(r: dict[str, Any], machine: MachineInfo) -> None:
    """Fill null ``cb_*`` settings for ``machine`` in place (see :data:`CB_SETTINGS`)."""
    if r.get("cb_attn_implementation") is None:
        r["cb_attn_implementation"] = CB_GPU_ATTN if machine.cuda else "sdpa"
    if r.get("cb_use_cuda_graph") is None:
        r["cb_use_cuda_graph"] = bool(machine.cuda)


def _replay_path(r: dict[str, Any]) -> str | None:
    return r.get("_replay_path") or r.get("replay_file")


def _length_params(r: dict[str, Any]) -> dict[str, Any]:
    text = r.get("length_params")
    if not text:
        return {}
    params = json.loads(text)
    for key in ("replay_file", "replay_sha256", "replay_time_scale"):
        params.pop(key, None)
    return params


def build_stream(r: dict[str, Any]) -> arr.RequestStream:
    """The request stream of resolved settings ``r``.

    Raises:
        InputError: inconsistent arrival or length settings (names the setting).
    """
    replay = None
    path = _replay_path(r)
    if path and (r["arrival_pattern"] == "replay" or r["length_distribution"] == "replay"):
        replay = arr.read_replay(path)
    process = arr.ArrivalProcess(
        r["arrival_pattern"], rate_rps=r.get("arrival_rate_rps"), cv=r.get("arrival_cv"),
        replay=replay, time_scale=float(r.get("replay_time_scale") or 1.0))
    params = _length_params(r)
    if r["length_distribution"] == "fixed":
        lengths = arr.Lengths("fixed", r.get("prompt_len"), r.get("output_len"))
    else:
        lengths = arr.Lengths(r["length_distribution"], params=params, replay=replay)
    return arr.RequestStream(process, lengths, num_requests=r.get("num_requests"),
                             target_duration_s=r.get("target_duration_s"),
                             seed=int(r.get("seed") or 0))


def stream_problems(r: dict[str, Any], max_positions: int | None,
                    model_name: str) -> list[tuple[str, str]]:
    """Arrival and length problems of one resolved run (``max_positions``: the model's)."""
    problems: list[tuple[str, str]] = []
    pattern, dist = r["arrival_pattern"], r["length_distribution"]
    fraction = r.get("arrival_rate_capacity_fraction")
    if pattern in ("poisson", "gamma") and r["arrival_rate_rps"] is None and fraction is None:
        problems.append(("arrival_rate_rps", f"arrival_pattern {pattern} needs arrival_rate_rps"))
    if pattern == "gamma" and r["arrival_cv"] is None:
        problems.append(("arrival_cv", "arrival_pattern gamma needs arrival_cv (1 = Poisson, "
                         "> 1 bursty)"))
    if (pattern == "replay" or dist == "replay") and not r["replay_file"]:
        key = "arrival_pattern" if pattern == "replay" else "length_distribution"
        problems.append((key, f"{key} replay needs replay_file (a CSV of arrival offsets and "
                         "token lengths)"))
    if dist == "fixed":
        for key in ("prompt_len", "output_len"):
            if r[key] is None:
                problems.append((key, f"length_distribution fixed needs {key}"))
    elif dist in ("uniform", "list") and not r["length_params"]:
        problems.append(("length_params", f"length_distribution {dist} needs length_params "
                         "(prompt_len and output_len ranges or lists)"))
    stream = None
    if not any(k in ("arrival_rate_rps", "arrival_cv", "prompt_len", "output_len",
                     "length_params", "arrival_pattern", "length_distribution")
               for k, _ in problems):
        try:
            # a rate given as a fraction of capacity is known only when measured: check the
            # stream with a stand-in rate
            stream = build_stream({**r, "arrival_rate_rps": r["arrival_rate_rps"] or 1.0})
        except InputError as exc:
            key = exc.field if exc.field in SETTINGS else (
                "replay_file" if exc.file is not None else "length_params")
            problems.append((key, exc.reason))
    if stream is not None:
        max_prompt, max_output = stream.lengths.max_lengths()
        if max_positions is not None and max_prompt + max_output > max_positions:
            key = "length_params" if dist != "fixed" else "prompt_len"
            problems.append((key, f"prompt {max_prompt} + output {max_output} tokens exceed "
                             f"{model_name}'s {max_positions} positions"))
    if (pattern == "closed" and r["num_requests"] is not None
            and r["num_requests"] < r["concurrency"]):
        problems.append(("num_requests", f"a closed loop of {r['concurrency']} clients needs "
                         f"num_requests >= concurrency (got {r['num_requests']}), or the "
                         "concurrency is never reached"))
    return problems


def http_settings_problems(r: dict[str, Any], machine: MachineInfo) -> list[tuple[str, str]]:
    """Impossible settings of a run served over HTTP (``vllm``, ``sglang``, ``openai``)."""
    max_positions = None
    try:
        max_positions = models.get_spec(r["model"]).max_positions
    except InputError:
        pass  # a Hub id or a served name: the server checks the lengths
    problems = stream_problems(r, max_positions, str(r["model"]))
    if r["precision"] == "bf16" and machine.cuda and not machine.bf16:
        problems.append(("precision", "bf16 is not supported by this GPU (needs compute "
                         "capability >= 8.0)"))
    return problems + engine_problems(r, machine)


def validate_settings(r: dict[str, Any], machine: MachineInfo) -> list[tuple[str, str]]:
    """Impossible settings of one resolved inference run on ``machine``.

    Returns:
        ``(setting name, reason)`` pairs; empty when the run can go ahead.
    """
    if r["serving_engine"] in HTTP_ENGINES:
        return http_settings_problems(r, machine)
    spec, problems = models.check_model(r)
    if spec is None:
        return problems
    problems.extend(stream_problems(r, spec.max_positions, spec.name))
    # serving engine
    if r["batching"] == "continuous" and spec.arch not in CONTINUOUS_BATCHING_ARCHS:
        problems.append(("batching", f"continuous batching is not verified for the {spec.arch} "
                         f"architecture of {spec.name} (verified: "
                         f"{', '.join(sorted(CONTINUOUS_BATCHING_ARCHS))}); use static"))
    # precision
    if r["precision"] == "bf16" and machine.cuda and not machine.bf16:
        problems.append(("precision", "bf16 is not supported by this GPU (needs compute "
                         "capability >= 8.0)"))
    if r["kv_cache_quant"] == "fp8":
        problems.append(("kv_cache_quant", "an fp8 KV cache is an engine's own (serving_engine "
                         "vllm or sglang); transformers' quantised cache takes int4 or int2"))
    else:
        problems.extend(quant.quant_problems(r, machine))
    problems.extend(_tensor_parallel_problems(r, machine, spec))
    if r.get("arrival_rate_capacity_fraction") is not None:
        problems.append(("arrival_rate", "a rate as a fraction of capacity is calibrated over "
                         "HTTP: use serving_engine vllm, sglang or openai"))
    problems.extend(_cb_kernel_problems(r, machine))
    return problems


def _cb_kernel_problems(r: dict[str, Any], machine: MachineInfo) -> list[tuple[str, str]]:
    """Why the continuous-batching kernel cannot run here (the flash package is missing).

    ``machine.extra["flash_attn"]`` / ``["flash_attn_3"]`` are set by the sweep's machine
    detection on a GPU machine; unknown (an assumed or hand-made machine) is not a problem.
    """
    if r["batching"] != "continuous" or not machine.cuda:
        return []
    impl = r.get("cb_attn_implementation")
    if impl in ("flash_attention_2", "flash_attention_3"):
        module = "flash_attn" if impl == "flash_attention_2" else "flash_attn_interface"
        key = "flash_attn" if impl == "flash_attention_2" else "flash_attn_3"
        if machine.extra.get(key) is False:
            return [("cb_attn_implementation", f"{impl} (transformers' paged varlen kernel) "
                     f"needs the {module} package, which is not installed; nothing is fetched "
                     "from the Hub mid-run. Install it, or set cb_attn_implementation: sdpa "
                     "for the masked reference path (attention cost grows as the product of "
                     "the batch's query and key lengths)")]
    return []


def _tensor_parallel_problems(r: dict[str, Any], machine: MachineInfo,
                              spec: models.ModelSpec) -> list[tuple[str, str]]:
    """Why ``tp_size`` cannot be honoured (empty when it is 1 or can)."""
    problems: list[tuple[str, str]] = []
    tp = int(r["tp_size"])
    if tp > 1:
        if r["batching"] != "continuous":
            problems.append(("tp_size", "tensor parallelism needs batching continuous (the "
                             "static engine does not drive several ranks)"))
        if spec.arch not in TENSOR_PARALLEL_ARCHS:
            problems.append(("tp_size", f"the {spec.arch} architecture of {spec.name} has no "
                             "transformers tensor-parallel plan"))
        heads = spec.shape.get("num_attention_heads", spec.shape.get("n_head", 0))
        kv_heads = spec.shape.get("num_key_value_heads", heads)
        if heads % tp or kv_heads % tp:
            problems.append(("tp_size", f"tp_size {tp} does not divide {spec.name}'s {heads} "
                             f"attention and {kv_heads} key-value heads"))
        if r["weight_quant"] != "none":
            problems.append(("tp_size", "tensor parallelism with quantised weights is not "
                             "supported"))
        if tp > machine.num_devices:
            unit = "GPUs" if machine.source == "nvml" else "CPU cores"
            problems.append(("tp_size", f"tp_size {tp} exceeds the {machine.num_devices} {unit} "
                             "of this machine"))
    return problems
