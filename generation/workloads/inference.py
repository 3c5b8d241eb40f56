"""The inference workload: a ``transformers`` serving loop under arrival processes.

Settings (the ``inference`` axes of ``llm_powertrace_ds.schema`` plus ``model``,
``model_source``, ``seed``, ``target_duration_s``, ``replay_file`` and ``replay_time_scale``)
are declared in :data:`SPEC`. :meth:`InferenceSpec.check` (:func:`validate_settings`) rejects
what the machine cannot honour before any run starts, naming the setting and the reason:
continuous batching on an architecture it was not verified on, a quantised KV cache with
continuous batching (its paged cache has no quantised form) or without its backend installed,
weight quantisation without its backend (``quant.py``), clocks and power caps on ``cpu_proxy``
or without NVML permission, lengths beyond the model's positions, impossible tensor
parallelism, missing arrival or length parameters.

**The serving loop** (:class:`ServingLoop`) admits requests as they arrive, up to
``concurrency`` in flight, into one of two engines:

* ``static`` (:class:`StaticEngine`): when the engine is idle, a batch forms from the waiting
  requests (at most ``concurrency``) and runs ``model.generate`` to completion (left-padded
  prompts; every row stops at its own forced length; results are delivered when the batch
  returns);
* ``continuous`` (:class:`ContinuousEngine`): ``transformers``' own continuous batching
  (``model.init_continuous_batching`` -> ``ContinuousBatchingManager``; requests are added with
  ``add_request`` as they are admitted and their per-token timestamps are recorded).

Both engines generate in a thread of their own (the static worker, the manager's generation
thread); the loop thread only waits for completions with a timeout that ends when the next
arrival is due, so recorded arrival times are not held up by a running batch.
Output lengths are forced: EOS is ignored (``min_new_tokens = max_new_tokens`` with
``generate``; ``eos_token_id = -1`` with continuous batching) so every request generates exactly
``requested_output_tokens``.

**Tensor parallelism** (``tp_size > 1``, continuous batching): the runner launches ``tp_size``
ranks through ``torchrun``; every rank loads its shard (``tp_plan="auto"``), rank 0 drives the
manager and runs the loop, the other ranks follow its generation loop (:func:`follow_tp`).

**Clock.** Every time is ``time.monotonic_ns()`` (CLOCK_MONOTONIC, the sampler's clock; the
continuous-batching manager's ``perf_counter`` stamps are the same clock on Linux and are
converted with a measured offset). Run-level events go through
:class:`generation.events.EventRecorder` at their exact times (:class:`EventSink`):
``request_arrival``/``request_finish`` with ``request_id``;
``prefill_begin``/``prefill_end``/``decode_begin``/``decode_end`` per static batch (label
``batch-<k>``) or per request with continuous batching; ``steady_begin``/``steady_end``. The
rank's ``warmup_begin``/``warmup_end`` (labels ``model``: loading, ``setup``: engine start and
warm-up requests) go through the runner's ``ctx.mark``. The request log is written to
``<staging>/requests.jsonl`` in monotonic ns and returned as ``_requests`` on the run clock
(:func:`load_requests`, t0 = the sampler's first tick, read from its spool).

**Steady state** (:func:`steady_window`, the ML.ENERGY benchmark's definition): from the moment
the number of in-flight requests first reaches the target (the configured ``concurrency``, or
the peak when an open loop never reaches it — the ``steady_begin`` label says so) to the last
moment it drops below the target (in-flight requests start draining).

**Results**: ``requests_completed``, ``tokens_in``, ``tokens_out`` (completed requests),
``tokens_per_s`` (``tokens_out`` over the span from the first arrival to the last finish),
``ttft_p50_ms``/``ttft_p99_ms`` (first token - arrival) and ``latency_p50_ms``/
``latency_p99_ms`` (finish - arrival), plus ``num_requests`` (the requests that arrived),
``model_params`` and the library versions.

**Locked clocks and power caps**: :class:`GpuSettings` (``SPEC.device_settings``) sets and
restores them through ``generation.sampler.device_settings``; the runner enters it around the
sampler.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import queue
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_powertrace_ds import schema
from llm_powertrace_ds.atomic import write_text_atomic
from llm_powertrace_ds.errors import InputError

from . import MachineInfo, RunContext, Setting, WorkloadSpec, models, quant, settings_from_columns
from . import arrivals as arr

log = logging.getLogger(__name__)

SERVING_ENGINES = ("transformers",)
BATCHING = ("static", "continuous")
PRECISIONS = ("fp32", "bf16", "fp16")
CONTINUOUS_BATCHING_ARCHS = frozenset({"llama", "qwen2", "qwen3", "mistral", "gpt2"})
"""Architectures whose continuous batching (paged attention) is verified by the test suite."""
TENSOR_PARALLEL_ARCHS = frozenset({"llama", "qwen2", "qwen3", "mistral"})
"""Architectures with a ``transformers`` ``base_model_tp_plan`` (``tp_plan="auto"``)."""
TP_CHECKPOINT = "tp-checkpoint"
DEFAULT_NUM_REQUESTS = 64
REQUESTS_FILE = "requests.jsonl"
WARMUP_TOKENS = 2


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
    kv_cache_quant={"default": "none", "choices": quant.KV_CACHE_QUANT},
    kv_cache_backend={"choices": quant.KV_CACHE_BACKENDS},
    gpu_clock_mhz={"minimum": 1},
    power_limit_setting_w={"minimum": 1.0},
    tp_size={"default": 1, "minimum": 1},
)
_AXES["length_params"] = JsonSetting("length_params", "string",
                                     doc=_AXES["length_params"].doc)
CB_ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2", "flash_attention_3")
CB_SETTINGS: dict[str, Setting] = {
    # Continuous batching is configured explicitly (issue 11, item 4): transformers would
    # otherwise switch the attention to flash (possibly fetching a kernel from the Hub through
    # `kernels` mid-run) and decide CUDA graphs and async batching on its own. The defaults are
    # what transformers' own heuristic picks for sdpa (a mask is needed: no graphs, no async).
    # Only continuous-batching runs carry them (static runs keep their run ids and rows null).
    "cb_attn_implementation": Setting("cb_attn_implementation", "string", default="sdpa",
                                      choices=CB_ATTN_IMPLEMENTATIONS,
                                      doc="Continuous batching: attention kernel (never "
                                      "switched automatically)"),
    "cb_use_cuda_graph": Setting("cb_use_cuda_graph", "bool", default=False,
                                 doc="Continuous batching: capture CUDA graphs (CUDA only)"),
    "cb_use_async_batching": Setting("cb_use_async_batching", "bool", default=False,
                                     doc="Continuous batching: async double-buffered batches"),
}
SETTINGS: dict[str, Setting] = {
    "model": Setting("model", "string", default="llama-tiny", column=False,
                     doc="Zoo model name (see generation.workloads.models.ZOO)"),
    "model_source": Setting("model_source", "string", default="zoo",
                            choices=models.MODEL_SOURCES,
                            doc="`zoo` (random weights), `hub` (cached checkpoint) or `auto`"),
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
}


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


class InferenceSpec(WorkloadSpec):
    """The ``inference`` workload (see the module docstring)."""

    name = "inference"
    settings = SETTINGS

    def resolve(self, values: dict[str, Any], machine: MachineInfo) -> dict[str, Any]:
        r = {name: values.get(name, s.default) for name, s in self.settings.items()}
        models.resolve_model_columns(r, machine)
        # arrivals
        pattern = r["arrival_pattern"]
        if pattern == "closed":
            r["arrival_rate_rps"] = None
            r["arrival_cv"] = None
        elif pattern == "poisson":
            r["arrival_cv"] = 1.0
        uses_replay = pattern == "replay" or r["length_distribution"] == "replay"
        trace = None
        if uses_replay and r["replay_file"]:
            path = Path(str(r["replay_file"])).expanduser()
            r["_replay_path"] = str(path.resolve())
            r["replay_file"] = path.name
            try:
                trace = arr.read_replay(path)
            except InputError:
                trace = None  # reported by check()
        elif not uses_replay:
            r["replay_file"] = None
            r["replay_time_scale"] = 1.0
        if pattern == "replay":
            scale = float(r["replay_time_scale"] or 1.0)
            if trace is not None and trace.mean_rate_rps is not None:
                r["arrival_rate_rps"] = trace.mean_rate_rps / scale
                gaps = [b - a for a, b in zip(trace.offsets_s[:-1], trace.offsets_s[1:],
                                              strict=True)]
                mean = sum(gaps) / len(gaps)
                if mean > 0:
                    var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
                    r["arrival_cv"] = math.sqrt(var) / mean
        # lengths: prompt_len/output_len hold the value only when fixed
        params = {}
        if r["length_distribution"] != "fixed":
            r["prompt_len"] = None
            r["output_len"] = None
            if r["length_params"]:
                params = json.loads(r["length_params"])
        if trace is not None:
            params.update(replay_file=trace.name, replay_sha256=trace.sha256)
            if pattern == "replay" and float(r["replay_time_scale"] or 1.0) != 1.0:
                params["replay_time_scale"] = float(r["replay_time_scale"])
        r["length_params"] = json.dumps(params, sort_keys=True) if params else None
        if (r["num_requests"] is None and r["target_duration_s"] is None
                and pattern != "replay"):  # a replayed trace is bounded by its rows
            r["num_requests"] = DEFAULT_NUM_REQUESTS
        quant.resolve_backends(r, machine)
        r["num_gpus"] = int(r["tp_size"])
        if r["batching"] != "continuous":
            for key in CB_SETTINGS:  # not part of a static run (nor of its run id)
                r.pop(key, None)
        return r

    def check(self, r: dict[str, Any], machine: MachineInfo) -> list[tuple[str, str]]:
        return validate_settings(r, machine)

    def slug(self, r: dict[str, Any]) -> str:
        parts = ["inf", str(r["model"]), r["batching"], f"c{r['concurrency']}"]
        pattern = r["arrival_pattern"]
        if pattern in ("poisson", "gamma") and r["arrival_rate_rps"] is not None:
            rate = f"{pattern}{r['arrival_rate_rps']:g}"
            if pattern == "gamma" and r["arrival_cv"] is not None:
                rate += f"cv{r['arrival_cv']:g}"
            parts.append(rate)
        else:
            parts.append(pattern)
        if r["length_distribution"] == "fixed":
            parts.append(f"p{r['prompt_len']}o{r['output_len']}")
        else:
            parts.append(f"len-{r['length_distribution']}")
        if r["num_requests"] is not None:
            parts.append(f"n{r['num_requests']}")
        parts.append(r["precision"])
        if r["weight_quant"] != "none":
            parts.append(f"w{r['weight_quant']}")
        if r["kv_cache_quant"] != "none":
            parts.append(f"kv{r['kv_cache_quant']}")
        if r["gpu_clock_mhz"] is not None:
            parts.append(f"clk{r['gpu_clock_mhz']}")
        if r["power_limit_setting_w"] is not None:
            parts.append(f"cap{r['power_limit_setting_w']:g}w")
        if r["tp_size"] != 1:
            parts.append(f"tp{r['tp_size']}")
        return "-".join(parts)

    def num_processes(self, r: dict[str, Any]) -> int:
        return int(r["tp_size"])

    def columns(self, r: dict[str, Any]) -> dict[str, Any]:
        names = schema.RUN_LEVEL_FIELDS["inference"]
        return {k: v for k, v in r.items() if k in names}

    def prepare(self) -> None:
        """Import torch and transformers (and continuous batching) before the sampler's t0."""
        import torch  # noqa: F401
        import transformers  # noqa: F401
        from transformers import ContinuousBatchingConfig  # noqa: F401

    def setup(self, r: dict[str, Any], ctx: RunContext) -> Any:
        return setup(r, ctx)

    def run(self, r: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        return serve(r, ctx)

    def device_settings(self, r: dict[str, Any], gpu_indices: list[int] | tuple[int, ...]
                        ) -> GpuSettings:
        """The context manager that locks clocks / caps power for a run.

        Enter it before the sampler starts, leave it after the sampler stops.
        """
        return GpuSettings(gpu_indices, clock_mhz=r.get("gpu_clock_mhz"),
                           power_limit_w=r.get("power_limit_setting_w"))


def validate_settings(r: dict[str, Any], machine: MachineInfo) -> list[tuple[str, str]]:
    """Impossible settings of one resolved inference run on ``machine``.

    Returns:
        ``(setting name, reason)`` pairs; empty when the run can go ahead.
    """
    spec, problems = models.check_model(r)
    if spec is None:
        return problems
    # arrivals and lengths
    pattern, dist = r["arrival_pattern"], r["length_distribution"]
    if pattern in ("poisson", "gamma") and r["arrival_rate_rps"] is None:
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
            stream = build_stream(r)
        except InputError as exc:
            key = exc.field if exc.field in SETTINGS else (
                "replay_file" if exc.file is not None else "length_params")
            problems.append((key, exc.reason))
    if stream is not None:
        max_prompt, max_output = stream.lengths.max_lengths()
        if max_prompt + max_output > spec.max_positions:
            key = "length_params" if dist != "fixed" else "prompt_len"
            problems.append((key, f"prompt {max_prompt} + output {max_output} tokens exceed "
                             f"{spec.name}'s {spec.max_positions} positions"))
    if (pattern == "closed" and r["num_requests"] is not None
            and r["num_requests"] < r["concurrency"]):
        problems.append(("num_requests", f"a closed loop of {r['concurrency']} clients needs "
                         f"num_requests >= concurrency (got {r['num_requests']}), or the "
                         "concurrency is never reached"))
    # serving engine
    if r["batching"] == "continuous" and spec.arch not in CONTINUOUS_BATCHING_ARCHS:
        problems.append(("batching", f"continuous batching is not verified for the {spec.arch} "
                         f"architecture of {spec.name} (verified: "
                         f"{', '.join(sorted(CONTINUOUS_BATCHING_ARCHS))}); use static"))
    # precision
    if r["precision"] == "bf16" and machine.cuda and not machine.bf16:
        problems.append(("precision", "bf16 is not supported by this GPU (needs compute "
                         "capability >= 8.0)"))
    problems.extend(quant.quant_problems(r, machine))
    # device settings (root only; never on cpu_proxy)
    for key, what in (("gpu_clock_mhz", "lock the GPU clock"),
                      ("power_limit_setting_w", "apply a power cap")):
        if r[key] is None:
            continue
        if machine.source != "nvml":
            problems.append((key, f"cannot {what}: {machine.source} has no GPU clocks or "
                             "power limit"))
        elif not machine.can_set_power_limit:
            problems.append((key, f"cannot {what}: it needs root and NVML permission on this "
                             "machine (and is never done on a lent device machine)"))
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
    if r["serving_engine"] != "transformers":
        problems.append(("serving_engine", "only the transformers serving engine is built in"))
    return problems


SPEC = InferenceSpec()


# ---------------------------------------------------------------------------------------------
# Locked clocks and power caps (root only; generation.sampler.device_settings)
# ---------------------------------------------------------------------------------------------

class GpuSettings:
    """Lock the SM clock and/or cap the power of GPUs for one run; restore them on exit.

    Enter it before the sampler starts (so the sampler's ``power_limit_w`` is the enforced cap
    and ``sm_clock_mhz`` shows the locked clock) and leave it after the sampler stops. The
    original power limit is set back and locked clocks are reset on exit, also when the run
    failed, and also when entering failed half-way. Nothing is touched when neither setting is
    requested. A thin wrapper of ``generation.sampler.device_settings`` (range checks, the
    ``$LLM_POWERTRACE_NO_DEVICE_SETTINGS`` guard, restore; NVML errors arrive translated:
    ``NoPermission``, ``NotSupported``, ...).

    Args:
        gpu_indices: NVML indices of the run's GPUs.
        clock_mhz: the SM clock to lock (``nvmlDeviceSetGpuLockedClocks(min = max = mhz)``).
        power_limit_w: the power cap (``nvmlDeviceSetPowerManagementLimit``).

    Attributes:
        observed: per GPU index, ``power_limit_w`` (enforced after setting) and
            ``sm_clock_mhz`` (read right after locking).
        applied: the ``AppliedSettings`` records (requested, original and observed values).

    Raises:
        InputError: a power cap or clock outside the GPU's allowed range (``SettingOutOfRange``).
        SourceError: NVML refused (``NoPermission`` without root or where settings are guarded,
            ``NotSupported``).
    """

    def __init__(self, gpu_indices: list[int] | tuple[int, ...], *, clock_mhz: int | None = None,
                 power_limit_w: float | None = None) -> None:
        self.gpu_indices = list(gpu_indices)
        self.clock_mhz = clock_mhz
        self.power_limit_w = power_limit_w
        self.observed: dict[int, dict[str, float | None]] = {}
        self.applied: list[Any] = []
        self._stack: contextlib.ExitStack | None = None

    @property
    def active(self) -> bool:
        return self.clock_mhz is not None or self.power_limit_w is not None

    def __enter__(self) -> GpuSettings:
        if not self.active:
            return self
        from generation.sampler import device_settings

        stack = contextlib.ExitStack()
        self.applied = stack.enter_context(device_settings(
            self.gpu_indices, power_limit_w=self.power_limit_w, sm_clock_mhz=self.clock_mhz))
        self._stack = stack
        self.observed = {a.gpu_index: a.observed() for a in self.applied}
        return self

    def __exit__(self, *exc_info: Any) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.__exit__(*exc_info)


# ---------------------------------------------------------------------------------------------
# The request log
# ---------------------------------------------------------------------------------------------

@dataclass
class RequestRecord:
    """One request's life on CLOCK_MONOTONIC (ns).

    Attributes:
        request_id: the stream's id.
        prompt_tokens: prompt length.
        requested_output_tokens: forced output length.
        arrival_ns: when it arrived (recorded by the loop).
        start_ns: when it was admitted to the engine.
        first_token_ns: when its first output token was produced.
        finish_ns: when its output was complete and delivered.
        output_tokens: tokens generated.
        status: ``ok``, ``error`` or ``cancelled``.
        error: the engine's message when ``status`` is ``error``.
    """

    request_id: str
    prompt_tokens: int
    requested_output_tokens: int
    arrival_ns: int
    start_ns: int | None = None
    first_token_ns: int | None = None
    finish_ns: int | None = None
    output_tokens: int = 0
    status: str = "cancelled"
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def write_requests(path: str | os.PathLike[str], records: list[RequestRecord]) -> None:
    """Write the request log (JSON lines, monotonic ns) atomically."""
    text = "".join(json.dumps(r.as_json()) + "\n" for r in records)
    write_text_atomic(path, text, fsync=False)


def read_requests(path: str | os.PathLike[str]) -> list[RequestRecord]:
    """Read a request log written by :func:`write_requests`."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(RequestRecord(**json.loads(line)))
    return out


def _ms(t_ns: int | None, t0_ns: int) -> int | None:
    return None if t_ns is None else (int(t_ns) - int(t0_ns)) // 1_000_000


def load_requests(staging_dir: str | os.PathLike[str], t0_ns: int) -> list[dict[str, Any]]:
    """The ``inference_requests`` rows of a staged run, on the run clock.

    Times are ``floor((t_ns - t0_ns) / 1e6)``, the formula of the samples and events, so the
    per-request order ``arrival_ms <= start_ms <= first_token_ms <= finish_ms`` is kept.

    Returns:
        One dict per request (``run_id``/``platform`` are added by the shard writer); an empty
        list when the run has no request log.
    """
    path = Path(staging_dir) / REQUESTS_FILE
    if not path.exists():
        return []
    rows = []
    for rec in read_requests(path):
        rows.append({
            "request_id": rec.request_id,
            "arrival_ms": _ms(rec.arrival_ns, t0_ns),
            "start_ms": _ms(rec.start_ns, t0_ns),
            "first_token_ms": _ms(rec.first_token_ns, t0_ns),
            "finish_ms": _ms(rec.finish_ns, t0_ns),
            "prompt_tokens": rec.prompt_tokens,
            "requested_output_tokens": rec.requested_output_tokens,
            "output_tokens": rec.output_tokens,
            "status": rec.status,
        })
    return rows


# ---------------------------------------------------------------------------------------------
# Steady state and results (pure)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SteadyWindow:
    """The steady-state window.

    Attributes:
        begin_ns: in-flight requests first reach ``target``.
        end_ns: in-flight requests drop below ``target`` for the last time (draining starts).
        target: the in-flight level (the concurrency, or the peak when it was never reached).
        concurrency_reached: whether ``target`` is the configured concurrency.
    """

    begin_ns: int
    end_ns: int
    target: int
    concurrency_reached: bool

    @property
    def label(self) -> str:
        if self.concurrency_reached:
            return f"in_flight={self.target}"
        return f"in_flight={self.target} (peak; concurrency not reached)"


def in_flight_timeline(records: list[RequestRecord]) -> list[tuple[int, int]]:
    """``(t_ns, in-flight count after it)`` at every admission and finish, time-ordered.

    A finish and an admission at the same ns count the finish first.
    """
    changes = []
    for rec in records:
        if rec.start_ns is None:
            continue
        changes.append((rec.start_ns, 1))
        if rec.finish_ns is not None:
            changes.append((rec.finish_ns, -1))
    changes.sort(key=lambda c: (c[0], c[1]))
    out, level = [], 0
    for t, d in changes:
        level += d
        out.append((t, level))
    return out


def steady_window(records: list[RequestRecord], concurrency: int) -> SteadyWindow | None:
    """The steady-state window of a served stream (``None`` when nothing was admitted)."""
    timeline = in_flight_timeline(records)
    if not timeline:
        return None
    peak = max(level for _, level in timeline)
    target = min(int(concurrency), peak)
    begin = next(t for t, level in timeline if level >= target)
    end = None
    prev = 0
    for t, level in timeline:
        if prev >= target > level:
            end = t
        prev = level
    if end is None or end <= begin:
        end = timeline[-1][0]
    return SteadyWindow(begin, end, target, target == int(concurrency))


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def summarise(records: list[RequestRecord]) -> dict[str, Any]:
    """The run's result columns from its request log (see the module docstring)."""
    done = [r for r in records if r.status == "ok"]
    tokens_in = sum(r.prompt_tokens for r in done)
    tokens_out = sum(r.output_tokens for r in done)
    span_s = None
    if done:
        first = min(r.arrival_ns for r in records)
        last = max(r.finish_ns for r in done if r.finish_ns is not None)
        span_s = (last - first) / 1e9
    ttft = [(r.first_token_ns - r.arrival_ns) / 1e6 for r in done if r.first_token_ns is not None]
    lat = [(r.finish_ns - r.arrival_ns) / 1e6 for r in done if r.finish_ns is not None]
    return {
        "requests_completed": len(done),
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "tokens_per_s": tokens_out / span_s if span_s and span_s > 0 else None,
        "ttft_p50_ms": _percentile(ttft, 50),
        "ttft_p99_ms": _percentile(ttft, 99),
        "latency_p50_ms": _percentile(lat, 50),
        "latency_p99_ms": _percentile(lat, 99),
        "num_requests": len(records),
    }


# ---------------------------------------------------------------------------------------------
# Events on explicit timestamps
# ---------------------------------------------------------------------------------------------

class _StampClock:
    """An ``EventRecorder`` clock that returns a timestamp set for the calling thread."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self) -> int:
        t = getattr(self._local, "t_ns", None)
        return time.monotonic_ns() if t is None else t

    @contextlib.contextmanager
    def at(self, t_ns: int) -> Iterator[None]:
        self._local.t_ns = int(t_ns)
        try:
            yield
        finally:
            self._local.t_ns = None


class EventSink:
    """Run-level events at explicit monotonic times, through ``generation.events``.

    Args:
        staging_dir: the run's staging folder; ``None`` drops events (benchmarks).
    """

    def __init__(self, staging_dir: str | os.PathLike[str] | None) -> None:
        self._clock = _StampClock()
        self._rec = None
        if staging_dir is not None:
            from generation.events import EventRecorder

            self._rec = EventRecorder(staging_dir, rank=None, clock=self._clock)

    def mark(self, kind: str, t_ns: int, *, request_id: str | None = None,
             label: str | None = None) -> None:
        """Record a run-level event at ``t_ns``."""
        if self._rec is None:
            return
        with self._clock.at(t_ns):
            self._rec.mark(kind, request_id=request_id, label=label, rank=None)

    def close(self) -> None:
        if self._rec is not None:
            self._rec.close()


# ---------------------------------------------------------------------------------------------
# Engines (torch and transformers are imported when one is made)
# ---------------------------------------------------------------------------------------------

@dataclass
class Job:
    """A request handed to an engine."""

    request_id: str
    prompt: list[int]
    output_tokens: int


@dataclass
class Completion:
    """What an engine reports for a finished request (monotonic ns).

    Attributes:
        request_id: the job's id.
        first_token_ns: when its first output token was produced.
        finish_ns: when its output was complete and delivered.
        output_tokens: tokens generated.
        prefill_begin_ns: when its prefill began (continuous: when it left the queue).
        batch: the static batch's index (``None`` with continuous batching).
        error: the engine's message, if it failed.
    """

    request_id: str
    first_token_ns: int | None
    finish_ns: int
    output_tokens: int
    prefill_begin_ns: int | None = None
    batch: int | None = None
    error: str | None = None


def _perf_offset_ns() -> int:
    """``monotonic_ns - perf_counter_ns`` (0 where both are CLOCK_MONOTONIC, e.g. Linux)."""
    best = None
    for _ in range(5):
        a = time.monotonic_ns()
        p = time.perf_counter_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2 - p)
    assert best is not None
    return best[1]


class StaticEngine:
    """Static batching: one ``model.generate`` per batch, run to completion in a worker thread.

    The engine interface (shared with :class:`ContinuousEngine`): ``start()``, ``warmup(jobs)``
    (synchronous, not recorded), ``submit(jobs)`` (non-blocking), ``wait(timeout_s)`` (the
    completions that are ready, ``[]`` after ``timeout_s``; ``None`` waits), ``stop()``, and
    ``admits_while_busy`` (whether the loop may add requests while others are running).

    Args:
        model: a causal LM in eval mode.
        pad_id: the pad token id (prompts are left-padded).
        generate_kwargs: extra ``generate`` keyword arguments (e.g. the quantised cache).
    """

    admits_while_busy = False

    def __init__(self, model: Any, *, pad_id: int = models.PAD_ID,
                 generate_kwargs: dict[str, Any] | None = None) -> None:
        self.model = model
        self.pad_id = pad_id
        self.generate_kwargs = dict(generate_kwargs or {})
        self._jobs: queue.Queue[list[Job] | None] = queue.Queue()
        self._done: queue.Queue[list[Completion]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.batches: list[list[str]] = []
        """Request ids of each batch, in order (what the benchmark replays directly)."""

    def tensors(self, jobs: list[Job]) -> tuple[Any, Any]:
        """Left-padded ``input_ids`` and ``attention_mask`` of a batch."""
        import torch

        width = max(len(j.prompt) for j in jobs)
        ids = torch.full((len(jobs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(jobs), width), dtype=torch.long)
        for i, j in enumerate(jobs):
            ids[i, width - len(j.prompt):] = torch.tensor(j.prompt, dtype=torch.long)
            mask[i, width - len(j.prompt):] = 1
        device = self.model.device
        return ids.to(device), mask.to(device)

    def run_batch(self, jobs: list[Job], batch: int = 0) -> list[Completion]:
        """Generate one batch to completion (every row exactly its own forced length)."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        ids, mask = self.tensors(jobs)
        width = ids.shape[1]
        limits = torch.tensor([j.output_tokens for j in jobs], device=ids.device)
        longest = int(limits.max())
        cuda = ids.device.type == "cuda"
        stamps: list[int] = []

        class RowLimits(StoppingCriteria):
            """Stops each row at its own length; records when the first token was produced."""

            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                if not stamps:
                    if cuda:
                        torch.cuda.synchronize(input_ids.device)
                    stamps.append(time.monotonic_ns())
                return (input_ids.shape[1] - width) >= limits

        begin = time.monotonic_ns()
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest,
            do_sample=False, pad_token_id=self.pad_id,
            stopping_criteria=StoppingCriteriaList([RowLimits()]), **self.generate_kwargs)
        if cuda:
            torch.cuda.synchronize(ids.device)
        end = time.monotonic_ns()
        generated = int(out.shape[1]) - width
        first = stamps[0] if stamps else end
        return [Completion(j.request_id, first, end, min(j.output_tokens, generated),
                           prefill_begin_ns=begin, batch=batch) for j in jobs]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="static-engine", daemon=True)
        self._thread.start()

    def submit(self, jobs: list[Job]) -> None:
        self.batches.append([j.request_id for j in jobs])
        self._jobs.put(jobs)

    def wait(self, timeout_s: float | None) -> list[Completion]:
        try:
            return self._done.get(timeout=timeout_s)
        except queue.Empty:
            return []

    def _work(self) -> None:
        import torch

        batch = 0
        with torch.inference_mode():
            while True:
                jobs = self._jobs.get()
                if jobs is None:
                    return
                try:
                    done = self.run_batch(jobs, batch)
                except Exception as exc:  # noqa: BLE001 - reported per request; the loop raises
                    now = time.monotonic_ns()
                    msg = f"{type(exc).__name__}: {exc}"
                    log.error("static batch %d failed: %s", batch, msg)
                    done = [Completion(j.request_id, None, now, 0, batch=batch, error=msg)
                            for j in jobs]
                batch += 1
                self._done.put(done)

    def warmup(self, jobs: list[Job]) -> None:
        """Run a batch synchronously (not recorded)."""
        import torch

        with torch.inference_mode():
            self.run_batch(jobs, -1)

    def stop(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=600)
            self._thread = None


def continuous_batching_config(*, concurrency: int, max_prompt: int, max_output: int,
                               device: str = "cpu", use_cuda_graph: bool = False,
                               use_async_batching: bool = False) -> Any:
    """A ``ContinuousBatchingConfig`` sized for the workload (not from free memory).

    The KV cache holds ``concurrency`` requests of the longest prompt + output, and a batch
    holds every in-flight request's prompt (capped at 8192 tokens; longer prefills are split).
    Sizing by the workload keeps CPU set-up fast (the auto-sizing fills a mask of the whole
    cache) and makes runs on different GPUs comparable. Nothing is left to transformers'
    heuristics: ``auto_switch_to_flash=False``, ``use_cuda_graph`` and ``use_async_batching``
    come from the sweep (CUDA graphs only exist on CUDA).
    """
    from transformers import ContinuousBatchingConfig

    page = 256 if device == "cuda" else 64
    per_request = -(-(max_prompt + max_output + 1) // page)
    num_blocks = concurrency * per_request + concurrency + 1
    max_batch_tokens = max(min(concurrency * max_prompt, 8192), min(max_prompt, 8192)) + concurrency
    return ContinuousBatchingConfig(page_size=page, num_blocks=num_blocks,
                                    max_batch_tokens=max_batch_tokens,
                                    max_requests_per_batch=concurrency,
                                    allow_block_sharing=False, return_logprobs=False,
                                    auto_switch_to_flash=False,
                                    use_cuda_graph=bool(use_cuda_graph and device == "cuda"),
                                    use_async_batching=bool(use_async_batching))


class ContinuousEngine:
    """``transformers`` continuous batching through a ``ContinuousBatchingManager``.

    Requests are added with ``add_request`` (``eos_token_id = -1``: EOS never ends a request;
    ``record_timestamps``: per-token stamps give the first-token time); finished results are
    read from the manager's output queue by the loop thread itself (:meth:`wait`). Same engine
    interface as :class:`StaticEngine`.

    Args:
        model: a causal LM in eval mode.
        concurrency, max_prompt, max_output: the workload's bounds (sizing the paged cache).
    """

    admits_while_busy = True
    POLL_S = 0.1

    def __init__(self, model: Any, *, concurrency: int, max_prompt: int,
                 max_output: int, attn_implementation: str = "sdpa",
                 use_cuda_graph: bool = False, use_async_batching: bool = False) -> None:
        self.model = model
        self.concurrency = concurrency
        self.max_prompt = max_prompt
        self.max_output = max_output
        self.attn_implementation = attn_implementation
        self.use_cuda_graph = use_cuda_graph
        self.use_async_batching = use_async_batching
        self.manager: Any = None
        self._resolved: dict[str, Any] = {}
        self._offset_ns = _perf_offset_ns()
        self._pending: set[str] = set()
        self._refused: list[Completion] = []

    def start(self) -> None:
        from transformers import GenerationConfig

        cb_log = logging.getLogger("ContinuousBatchingLogger")  # transformers' own, propagate off
        if cb_log.level == logging.NOTSET and not log.isEnabledFor(logging.DEBUG):
            cb_log.setLevel(logging.WARNING)  # its INFO lines would flood every run's output
        gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=models.PAD_ID,
                               max_new_tokens=self.max_output)
        cfg = continuous_batching_config(concurrency=self.concurrency, max_prompt=self.max_prompt,
                                         max_output=self.max_output,
                                         device=self.model.device.type,
                                         use_cuda_graph=self.use_cuda_graph,
                                         use_async_batching=self.use_async_batching)
        if self.model.config._attn_implementation != self.attn_implementation:
            self.model.set_attn_implementation(self.attn_implementation)
        self.manager = self.model.init_continuous_batching(generation_config=gen,
                                                           continuous_batching_config=cfg)
        if self.model.device.type == "cuda":
            self.manager.warmup()  # CUDA-graph capture now, not inside the measured window
        cfg = self.manager.continuous_batching_config  # as resolved by the manager
        graphs = cfg.use_cuda_graph
        self._resolved = {
            "cb_attn_implementation": self.model.config._attn_implementation,
            "cb_use_cuda_graph": bool(any(graphs) if isinstance(graphs, (tuple, list))
                                      else graphs),
            "cb_use_async_batching": bool(cfg.use_async_batching)}
        self.manager.start()

    def resolved_config(self) -> dict[str, Any]:
        """The configuration that ran (read back from the manager at start): ``cb_*`` columns."""
        return dict(self._resolved)

    def _ns(self, perf_s: float) -> int:
        return int(round(perf_s * 1e9)) + self._offset_ns

    def submit(self, jobs: list[Job]) -> None:
        for j in jobs:
            self._pending.add(j.request_id)
            rid = self.manager.add_request(j.prompt, request_id=j.request_id,
                                           max_new_tokens=j.output_tokens,
                                           record_timestamps=True, eos_token_id=-1)
            if rid is None:
                self._pending.discard(j.request_id)
                self._refused.append(Completion(j.request_id, None, time.monotonic_ns(), 0,
                                                error="the continuous-batching manager "
                                                "refused it"))

    def _completion(self, res: Any) -> Completion:
        stamps = res.timestamps or []
        begin = self._ns(res.lifespan[0]) if res.lifespan[0] > 0 else None
        finish = self._ns(res.lifespan[1]) if res.lifespan[1] > 0 else time.monotonic_ns()
        first = self._ns(stamps[0]) if stamps else None
        return Completion(res.request_id, first, finish, len(res.generated_tokens),
                          prefill_begin_ns=begin, error=res.error)

    def wait(self, timeout_s: float | None) -> list[Completion]:
        if self._refused:
            out, self._refused = self._refused, []
            return out
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = self.POLL_S if deadline is None else min(self.POLL_S,
                                                             deadline - time.monotonic())
            res = self.manager.get_result(timeout=max(left, 0.0))
            if res is not None:
                if not res.is_finished():
                    continue
                self._pending.discard(res.request_id)
                return [self._completion(res)]
            if not self.manager.is_running():  # the generation thread died
                err = self.manager.background_thread_status.fatal_error
                now = time.monotonic_ns()
                lost, self._pending = sorted(self._pending), set()
                return [Completion(rid, None, now, 0, error=f"engine stopped: {err}")
                        for rid in lost]
            if deadline is not None and time.monotonic() >= deadline:
                return []

    def warmup(self, jobs: list[Job]) -> None:
        """Serve ``jobs`` and wait for them (not recorded)."""
        self.submit([Job(f"warmup-{j.request_id}", j.prompt, j.output_tokens) for j in jobs])
        left = len(jobs)
        while left:
            done = self.wait(600)
            if not done:
                raise RuntimeError("continuous-batching warm-up timed out")
            for c in done:
                if c.error:
                    raise RuntimeError(f"continuous-batching warm-up failed: {c.error}")
            left -= len(done)

    def stop(self) -> None:
        if self.manager is not None:
            self.manager.stop(block=True, timeout=30)
            self.manager.destroy()
            self.manager = None


# ---------------------------------------------------------------------------------------------
# The serving loop
# ---------------------------------------------------------------------------------------------

class ServingLoop:
    """Admit a request stream into an engine, up to ``concurrency`` in flight.

    Args:
        stream: the requests (open loop: scheduled offsets; closed: released by the loop).
        prompts: ``prompts(request) -> token ids`` (exactly ``prompt_tokens`` long).
        concurrency: the most requests in flight (the closed loop's clients).
        events: where run-level events go (``None``: nowhere).

    The engine (:class:`StaticEngine` or :class:`ContinuousEngine`) is attached with
    :meth:`bind`.
    """

    def __init__(self, stream: arr.RequestStream, prompts: Callable[[arr.Request], list[int]],
                 *, concurrency: int, events: EventSink | None = None) -> None:
        self.stream = stream
        self.prompts = prompts
        self.concurrency = int(concurrency)
        self.events = events or EventSink(None)
        self.engine: Any = None
        self.records: dict[str, RequestRecord] = {}
        self.max_in_flight = 0
        self.t_start_ns: int | None = None

    def bind(self, engine: Any) -> None:
        self.engine = engine

    def _arrive(self, req: arr.Request, now: int) -> RequestRecord:
        rec = RequestRecord(req.request_id, req.prompt_tokens, req.output_tokens, now)
        self.records[req.request_id] = rec
        self.events.mark("request_arrival", now, request_id=req.request_id)
        return rec

    def run(self) -> list[RequestRecord]:
        """Serve the whole stream; return the request log in arrival order.

        Raises:
            RuntimeError: no engine bound, or every request failed (with the first error).
        """
        if self.engine is None:
            raise RuntimeError("no engine bound")
        engine = self.engine
        closed = not self.stream.arrivals.open_loop
        requests = iter(self.stream)
        waiting: deque[tuple[arr.Request, RequestRecord]] = deque()
        in_flight: dict[str, arr.Request] = {}
        busy = False  # a static batch is running
        errors: list[str] = []
        t0 = time.monotonic_ns()
        self.t_start_ns = t0
        deadline = None
        if self.stream.target_duration_s is not None:
            deadline = t0 + int(self.stream.target_duration_s * 1e9)
        exhausted = False  # no request will arrive any more

        def pull() -> arr.Request | None:
            nonlocal exhausted
            req = None if exhausted else next(requests, None)
            if req is None:
                exhausted = True
            return req

        def due_ns(req: arr.Request) -> int:
            return t0 + int(round(req.offset_s * 1e9))

        next_req: arr.Request | None = None
        if closed:  # every client sends its first request now
            for _ in range(self.concurrency):
                req = pull()
                if req is None:
                    break
                waiting.append((req, self._arrive(req, time.monotonic_ns())))
        else:
            next_req = pull()

        while True:
            # open loop: release every arrival that is due
            now = time.monotonic_ns()
            while next_req is not None and due_ns(next_req) <= now:
                waiting.append((next_req, self._arrive(next_req, now)))
                next_req = pull()
                now = time.monotonic_ns()
            # admit up to the concurrency (static: only when no batch is running)
            if waiting and (engine.admits_while_busy or not busy) \
                    and len(in_flight) < self.concurrency:
                jobs = []
                while waiting and len(in_flight) < self.concurrency:
                    req, rec = waiting.popleft()
                    rec.start_ns = time.monotonic_ns()
                    in_flight[req.request_id] = req
                    jobs.append(Job(req.request_id, self.prompts(req), req.output_tokens))
                self.max_in_flight = max(self.max_in_flight, len(in_flight))
                busy = True
                engine.submit(jobs)
            if not in_flight and not waiting and next_req is None and exhausted:
                break
            # wait for results, or until the next arrival is due
            timeout = None
            if next_req is not None:
                timeout = max(0.0, (due_ns(next_req) - time.monotonic_ns()) / 1e9)
            for done in engine.wait(timeout):
                in_flight.pop(done.request_id)
                self._complete(self.records[done.request_id], done)
                if done.error:
                    errors.append(done.error)
                if closed:  # the client sends its next request at once (until the deadline)
                    t = time.monotonic_ns()
                    if deadline is not None and t >= deadline:
                        exhausted = True
                    follow = pull()
                    if follow is not None:
                        waiting.append((follow, self._arrive(follow, t)))
            busy = bool(in_flight)
        records = sorted(self.records.values(), key=lambda r: (r.arrival_ns, r.request_id))
        if records and all(r.status == "error" for r in records):
            raise RuntimeError(f"every request failed; first error: {errors[0] if errors else '?'}")
        return records

    def _complete(self, rec: RequestRecord, done: Completion) -> None:
        start = rec.start_ns if rec.start_ns is not None else rec.arrival_ns
        finish = max(done.finish_ns, start)
        first = done.first_token_ns
        if first is not None:
            first = min(max(first, start), finish)
        rec.finish_ns = finish
        rec.first_token_ns = first
        rec.output_tokens = int(done.output_tokens)
        if done.error:
            rec.status, rec.error = "error", done.error
        elif rec.output_tokens != rec.requested_output_tokens:
            rec.status = "error"
            rec.error = (f"generated {rec.output_tokens} tokens, {rec.requested_output_tokens} "
                         "requested")
        else:
            rec.status = "ok"
        ev = self.events
        rid = rec.request_id
        if done.batch is None:  # continuous: per request
            if done.prefill_begin_ns is not None and first is not None:
                ev.mark("prefill_begin", max(done.prefill_begin_ns, start), request_id=rid)
                ev.mark("prefill_end", first, request_id=rid)
                ev.mark("decode_begin", first, request_id=rid)
                ev.mark("decode_end", finish, request_id=rid)
        elif done.request_id == self.engine.batches[done.batch][0] and first is not None:
            label = f"batch-{done.batch}"
            ev.mark("prefill_begin", done.prefill_begin_ns or start, label=label)
            ev.mark("prefill_end", first, label=label)
            ev.mark("decode_begin", first, label=label)
            ev.mark("decode_end", finish, label=label)
        ev.mark("request_finish", finish, request_id=rid)


# ---------------------------------------------------------------------------------------------
# Running one resolved run
# ---------------------------------------------------------------------------------------------

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def load_model(r: dict[str, Any], device: str) -> Any:
    """The model of a resolved run: zoo/Hub weights, precision, weight quantisation, device."""
    import torch

    spec = models.get_spec(r["model"])
    dtype = getattr(torch, _DTYPES[r["precision"]])
    wq, backend = r["weight_quant"], r["weight_quant_backend"]
    if wq != "none" and backend == "bitsandbytes":
        # dtype explicitly: the modules bitsandbytes leaves unquantised (embeddings, norms,
        # lm_head) are then in the row's precision, not float32.
        model = models.build_model(spec, r["model_source"], seed=int(r["seed"]), dtype=dtype,
                                   quantization_config=quant.bitsandbytes_config(wq, dtype),
                                   device_map={"": 0})
        return model.eval()
    # Built where it will run, in the run's dtype (random init of 8B parameters on a CPU takes
    # minutes, and an fp32 copy would double the memory); a Hub checkpoint loads in that dtype.
    model = models.build_model(spec, r["model_source"], seed=int(r["seed"]), dtype=dtype,
                               device=device)
    model = model.to(device=device).eval()
    if wq != "none":
        quant.quantize_weights_quanto(model, wq)
    return model


def load_model_tp(r: dict[str, Any], ctx: RunContext, *, poll_s: float = 0.2,
                  timeout_s: float = 3600.0) -> Any:
    """The model of a tensor-parallel run, sharded over the ranks (``tp_plan="auto"``).

    Every rank of the ``torchrun`` launch calls it. A Hub model loads from the local cache; a
    zoo model is written once as a random-weight checkpoint by rank 0 into the staging folder
    (the other ranks wait for it), then every rank loads its shard of it.
    """
    import torch
    from transformers import AutoModelForCausalLM

    spec = models.get_spec(r["model"])
    dtype = getattr(torch, _DTYPES[r["precision"]])
    kwargs: dict[str, Any] = {"tp_plan": "auto", "dtype": dtype}
    if r["model_source"] == "hub":
        return AutoModelForCausalLM.from_pretrained(spec.hub_id, local_files_only=True,
                                                    **kwargs).eval()
    path = Path(ctx.staging_dir) / TP_CHECKPOINT
    marker = path / ".complete"
    if ctx.rank == 0:
        if not marker.exists():
            model = models.build_model(spec, "zoo", seed=int(r["seed"]), dtype=dtype)
            model.save_pretrained(path)
            del model
            marker.write_text("ok")
    else:
        deadline = time.monotonic() + timeout_s
        while not marker.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank 0 did not write {path} within {timeout_s:g} s")
            time.sleep(poll_s)
    return AutoModelForCausalLM.from_pretrained(str(path), **kwargs).eval()


def follow_tp(model: Any, r: dict[str, Any]) -> None:
    """A non-driver rank of a tensor-parallel continuous-batching run.

    Runs the manager's generation loop, which follows the driver (rank 0) step by step until it
    stops.
    """
    import torch

    stream = build_stream(r)
    max_prompt, max_output = stream.lengths.max_lengths()
    engine = ContinuousEngine(model, concurrency=int(r["concurrency"]), max_prompt=max_prompt,
                              max_output=max_output)
    with torch.inference_mode():
        engine.start()
        try:
            thread = engine.manager._generation_thread
            if thread is not None:
                thread.join()
        finally:
            engine.manager.destroy()
            engine.manager = None


def generate_kwargs(r: dict[str, Any]) -> dict[str, Any]:
    """``generate`` keyword arguments of the static engine (the quantised KV cache)."""
    return quant.kv_cache_kwargs(r)


@dataclass
class Served:
    """A finished serving loop: the log, the steady window and the set-up details."""

    records: list[RequestRecord]
    steady: SteadyWindow | None
    max_in_flight: int
    engine: Any = None
    prompts: dict[str, list[int]] = field(default_factory=dict)


def make_prompts(stream: arr.RequestStream, vocab_size: int) -> Callable[[arr.Request], list[int]]:
    """Deterministic synthetic prompts (see ``RequestStream.prompt_ids``)."""

    def prompt(req: arr.Request) -> list[int]:
        return stream.prompt_ids(req, vocab_size, first_id=models.NUM_SPECIAL)

    return prompt


def make_engine(batching: str, model: Any, *, concurrency: int, max_prompt: int,
                max_output: int, generate_kw: dict[str, Any] | None = None,
                cb_options: dict[str, Any] | None = None) -> Any:
    """A static or continuous engine (``cb_options``: the ``cb_*`` settings)."""
    if batching == "static":
        return StaticEngine(model, generate_kwargs=generate_kw)
    opts = cb_options or {}
    return ContinuousEngine(model, concurrency=concurrency, max_prompt=max_prompt,
                            max_output=max_output,
                            attn_implementation=opts.get("cb_attn_implementation") or "sdpa",
                            use_cuda_graph=bool(opts.get("cb_use_cuda_graph")),
                            use_async_batching=bool(opts.get("cb_use_async_batching")))


def start_engine(model: Any, stream: arr.RequestStream, *, batching: str, concurrency: int,
                 vocab_size: int, generate_kw: dict[str, Any] | None = None,
                 cb_options: dict[str, Any] | None = None) -> Any:
    """Make, start and warm up an engine (continuous batching: manager, CUDA graphs)."""
    import numpy as np

    max_prompt, max_output = stream.lengths.max_lengths()
    engine = make_engine(batching, model, concurrency=concurrency, max_prompt=max_prompt,
                         max_output=max_output, generate_kw=generate_kw, cb_options=cb_options)
    rng = np.random.default_rng(12345)
    warm = [Job(f"w{i}", arr.synthetic_prompt(rng, max_prompt, vocab_size,
                                              first_id=models.NUM_SPECIAL),
                min(WARMUP_TOKENS, max_output)) for i in range(concurrency)]
    engine.start()
    try:
        engine.warmup(warm)
    except BaseException:
        engine.stop()
        raise
    return engine


def serve_stream(model: Any, stream: arr.RequestStream, *, batching: str, concurrency: int,
                 vocab_size: int, events: EventSink | None = None,
                 generate_kw: dict[str, Any] | None = None,
                 mark: Callable[..., Any] | None = None, engine: Any = None,
                 cb_options: dict[str, Any] | None = None) -> Served:
    """Warm up an engine, serve ``stream`` through the loop, stop the engine.

    Args:
        model: the model (eval mode, on its device).
        stream: the requests.
        batching: ``static`` or ``continuous``.
        concurrency: most requests in flight.
        vocab_size: prompt ids are drawn below it.
        events: run-level event sink.
        generate_kw: extra ``generate`` arguments of the static engine.
        mark: ``ctx.mark`` for ``warmup_begin``/``warmup_end``.
        engine: an engine already started and warmed up (:func:`start_engine`, in the
            workload's ``setup``); ``None``: start one here.
        cb_options: the ``cb_*`` settings of a continuous engine.

    Returns:
        The request log, the steady window and the engine (with its batches).
    """
    prompts = make_prompts(stream, vocab_size)
    loop = ServingLoop(stream, prompts, concurrency=concurrency, events=events)
    if engine is None:  # not prepared before the sampler: warm up inside the window, marked
        if mark is not None:
            mark("warmup_begin", label="setup")
        engine = start_engine(model, stream, batching=batching, concurrency=concurrency,
                              vocab_size=vocab_size, generate_kw=generate_kw,
                              cb_options=cb_options)
        if mark is not None:
            mark("warmup_end", label="setup")
    loop.bind(engine)
    try:
        records = loop.run()
    finally:
        engine.stop()
    steady = steady_window(records, concurrency)
    return Served(records, steady, loop.max_in_flight, engine)


def _sampler_t0_ns(staging_dir: str | os.PathLike[str]) -> int | None:
    """The run's t0 (the sampler's first tick, on disk once the sampler has started)."""
    from generation.sampler import SamplerError, read_spool

    try:
        return read_spool(staging_dir).t0_ns
    except (SamplerError, OSError):
        return None


@dataclass
class PreparedServing:
    """An inference run set up before the sampler starts (issue 11, item 2).

    Attributes:
        model: the model on its device, in eval mode.
        model_params: its parameter count.
        engine: the started, warmed-up engine (``None`` on a tensor-parallel follower rank).
        columns: the observed execution columns (and the resolved ``cb_*`` configuration).
        probe: the compute-dtype probe.
    """

    model: Any
    model_params: int
    engine: Any
    columns: dict[str, Any]
    probe: Any


def setup(r: dict[str, Any], ctx: RunContext) -> PreparedServing:
    """Set an inference run up before the sampler starts.

    Loads the model on its device in the run's dtype, quantises it, starts and warms up the
    engine (continuous batching: the manager and its CUDA graphs). A tensor-parallel run only
    loads its shards here: its engine warm-up needs every rank inside ``serve``.
    """
    import torch

    spec = models.get_spec(r["model"])
    tp = ctx.world_size > 1
    cuda = ctx.device == "cuda"
    if cuda and not tp:
        torch.cuda.init()
    if cuda and quant.uses_quanto(r):
        quant.build_quanto_cuda_extension()  # nvcc/ninja build: minutes, never in the window
    model = load_model_tp(r, ctx) if tp else load_model(r, ctx.device)
    model_params = models.count_params(model)  # sharded weights are DTensors: global sizes
    columns = models.execution_columns(model, cuda=cuda)
    probe = models.ComputeDtypeProbe(model)
    if tp:
        # Tensor parallel: the engine's warm-up is a collective the follower ranks only join
        # inside ``serve`` (``follow_tp``), so it stays in the window, between warmup events.
        return PreparedServing(model, model_params, None, columns, probe)
    stream = build_stream(r)
    with torch.inference_mode():
        engine = start_engine(model, stream, batching=r["batching"],
                              concurrency=int(r["concurrency"]), vocab_size=spec.vocab_size,
                              generate_kw=generate_kwargs(r), cb_options=r)
    if isinstance(engine, ContinuousEngine):
        columns.update(engine.resolved_config())
        columns["attn_implementation"] = columns["cb_attn_implementation"]
    if cuda:
        torch.cuda.synchronize()
    return PreparedServing(model, model_params, engine, columns, probe)


def serve(r: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Serve one resolved run in this process; write the request log; return result columns.

    Uses ``ctx.prepared`` (:func:`setup`, run before the sampler starts); without it, loads
    the model inside ``warmup_begin``/``warmup_end`` events labelled ``model``.

    Args:
        r: the resolved settings (``SPEC.resolve``).
        ctx: run id, staging folder, event recorder, device.

    Returns:
        The ``inference`` result columns, ``num_requests``, ``model_params``, what ran
        (``weights_dtype``, ``compute_dtype``, ``attn_implementation``, ``tf32``, ``cb_*``),
        the library versions actually used and ``_requests`` (the ``inference_requests`` rows
        on the run clock, t0 read from the sampler's spool).
    """
    import torch
    import transformers

    spec = models.get_spec(r["model"])
    tp = ctx.world_size > 1
    prepared = ctx.prepared
    ctx.prepared = None
    engine = None
    if isinstance(prepared, PreparedServing):
        model, model_params, engine = prepared.model, prepared.model_params, prepared.engine
    else:
        ctx.mark("warmup_begin", label="model")
        model = load_model_tp(r, ctx) if tp else load_model(r, ctx.device)
        model_params = models.count_params(model)
        ctx.mark("warmup_end", label="model")
        prepared = PreparedServing(model, model_params, None,
                                   models.execution_columns(model, cuda=ctx.device == "cuda"),
                                   models.ComputeDtypeProbe(model))
    if tp and ctx.rank != 0:
        follow_tp(model, r)
        return {}
    stream = build_stream(r)
    events = EventSink(ctx.staging_dir)
    try:
        with torch.inference_mode():
            served = serve_stream(model, stream, batching=r["batching"],
                                  concurrency=int(r["concurrency"]),
                                  vocab_size=spec.vocab_size, events=events,
                                  generate_kw=generate_kwargs(r), mark=ctx.mark, engine=engine,
                                  cb_options=r)
        write_requests(Path(ctx.staging_dir) / REQUESTS_FILE, served.records)
        t0 = _sampler_t0_ns(ctx.staging_dir)
        if t0 is None:
            t0 = min(rec.arrival_ns for rec in served.records)
            log.warning("no sampler spool in %s: request times are relative to the first "
                        "arrival", ctx.staging_dir)
        if served.steady is not None:
            events.mark("steady_begin", served.steady.begin_ns, label=served.steady.label)
            events.mark("steady_end", served.steady.end_ns, label=served.steady.label)
    finally:
        events.close()
    prepared.probe.remove()
    if isinstance(served.engine, ContinuousEngine) and engine is None:  # started in the window
        prepared.columns.update(served.engine.resolved_config())
        prepared.columns["attn_implementation"] = prepared.columns["cb_attn_implementation"]
    result = summarise(served.records)
    result.update(model_params=model_params, torch_version=torch.__version__,
                  transformers_version=transformers.__version__,
                  _requests=load_requests(ctx.staging_dir, t0), **prepared.columns)
    result["compute_dtype"] = prepared.probe.dtype
    del model, prepared, engine, served
    if tp:
        shutil.rmtree(Path(ctx.staging_dir) / TP_CHECKPOINT, ignore_errors=True)
    from .finetune import release_memory

    release_memory(ctx.device == "cuda")
    return result


__all__ = [
    "SPEC",
    "SETTINGS",
    "Completion",
    "ContinuousEngine",
    "EventSink",
    "GpuSettings",
    "InferenceSpec",
    "Job",
    "RequestRecord",
    "ServingLoop",
    "StaticEngine",
    "SteadyWindow",
    "build_stream",
    "continuous_batching_config",
    "in_flight_timeline",
    "load_model",
    "load_requests",
    "make_prompts",
    "serve",
    "serve_stream",
    "setup",
    "start_engine",
    "steady_window",
    "summarise",
    "validate_settings",
    "write_requests",
]
