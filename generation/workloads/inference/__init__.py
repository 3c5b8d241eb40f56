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

**Locked clocks and power caps**: ``generation.workloads.gpu_settings.GpuSettings``
(``SPEC.device_settings``, shared by every workload) sets and restores them through
``generation.sampler.device_settings``; the runner enters it around the sampler.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from llm_powertrace_ds import schema
from llm_powertrace_ds.errors import InputError

from .. import MachineInfo, RunContext, WorkloadSpec, models, quant
from .. import arrivals as arr
from .engine_settings import (
    HTTP_ENGINES,
    LAUNCHED_ENGINES,
    local_checkpoint,
    resolve_engine,
    resolve_engine_model,
)
from .settings import CB_SETTINGS, DEFAULT_NUM_REQUESTS, SETTINGS, resolve_cb, validate_settings

WEIGHT_LABELS = {("quanto", "int8"): "int8_w8a16", ("quanto", "int4"): "int4_w4a16",
                 ("quanto", "fp8"): "fp8_w8a16", ("bitsandbytes", "int8"): "int8_llm_int8",
                 ("bitsandbytes", "int4"): "nf4_w4a16"}
"""``weight_quant`` as published for transformers runs: what the kernels compute with.
optimum-quanto's weights are dequantised to the activation dtype (``w8a16``: its "fp8" is a
weight-only Marlin kernel, never FP8 tensor cores); bitsandbytes int8 is LLM.int8 (int8 matmul
with 16-bit outliers), its int4 is NF4 weight-only."""


class InferenceSpec(WorkloadSpec):
    """The ``inference`` workload (see the module docstring)."""

    name = "inference"
    settings = SETTINGS

    def resolve(self, values: dict[str, Any], machine: MachineInfo) -> dict[str, Any]:
        r = {name: values.get(name, s.default) for name, s in self.settings.items()}
        http = r["serving_engine"] in HTTP_ENGINES
        if http:
            resolve_engine_model(r)
            if r["precision"] is None and r["serving_engine"] != "openai":
                r["precision"] = "bf16" if (machine.cuda and machine.bf16) else "fp32"
        else:
            models.resolve_model_columns(r, machine)
        resolve_engine(r)
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
        if not http:
            quant.resolve_backends(r, machine)
        r["num_gpus"] = int(r["tp_size"])
        if r["batching"] != "continuous" or http:
            for key in CB_SETTINGS:  # not part of a static run (nor of its run id)
                r.pop(key, None)
        else:
            resolve_cb(r, machine)
        return r

    def check(self, r: dict[str, Any], machine: MachineInfo) -> list[tuple[str, str]]:
        problems = validate_settings(r, machine) + self.gpu_axis_problems(r, machine)
        if r["serving_engine"] not in LAUNCHED_ENGINES and local_checkpoint(str(r["model"])):
            problems.append(("model", "a local checkpoint folder is served by serving_engine "
                             "vllm or sglang (published under its name, never its path)"))
        return problems

    def slug(self, r: dict[str, Any]) -> str:
        engine = r["serving_engine"]
        parts = ["inf", str(r["model"]).rsplit("/", 1)[-1],
                 r["batching"] if engine == "transformers" else engine, f"c{r['concurrency']}"]
        pattern = r["arrival_pattern"]
        fraction = r.get("arrival_rate_capacity_fraction")
        if pattern in ("poisson", "gamma") and (r["arrival_rate_rps"] is not None
                                                 or fraction is not None):
            rate = (f"{pattern}{fraction:g}x" if fraction is not None
                    else f"{pattern}{r['arrival_rate_rps']:g}")
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
        if r["precision"] is not None:  # an openai server's precision is its own
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
        if r["serving_engine"] in HTTP_ENGINES:
            return 1  # the engine's server runs its own tensor-parallel workers
        return int(r["tp_size"])

    def in_process(self, r: dict[str, Any]) -> bool:
        return r["serving_engine"] not in HTTP_ENGINES

    def missing_extra(self, r: dict[str, Any]) -> Exception | None:
        from generation.serving.launch import missing_engine

        return missing_engine(r["serving_engine"], r.get("_engine_python"))

    def columns(self, r: dict[str, Any]) -> dict[str, Any]:
        names = schema.RUN_LEVEL_FIELDS["inference"]
        out = {k: v for k, v in r.items() if k in names}
        if r["serving_engine"] == "transformers":
            # labelled by what runs (issue 38): no row claims a kernel it did not run
            label = WEIGHT_LABELS.get((r["weight_quant_backend"], r["weight_quant"]))
            if label is not None:
                out["weight_quant"] = label
            if r["kv_cache_quant"] not in ("none", None):
                out["kv_cache_quant"] = f"{r['kv_cache_quant']}_dequant_per_step"
        return out

    def prepare(self) -> None:
        """Import torch and transformers (and continuous batching) before the sampler's t0."""
        import torch  # noqa: F401
        import transformers  # noqa: F401
        from transformers import ContinuousBatchingConfig  # noqa: F401

    def setup(self, r: dict[str, Any], ctx: RunContext) -> Any:
        if r["serving_engine"] in HTTP_ENGINES:
            from generation.serving.workload import setup as http_setup

            return http_setup(r, ctx)
        from .serve import setup  # torch-free until a run is set up

        return setup(r, ctx)

    def run(self, r: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        if r["serving_engine"] in HTTP_ENGINES:
            from generation.serving.workload import serve as http_serve

            return http_serve(r, ctx)
        from .serve import serve

        return serve(r, ctx)


SPEC = InferenceSpec()
