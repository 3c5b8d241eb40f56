"""An inference run served over HTTP: set up before the sampler, served inside the window.

:func:`setup` (before the sampler's first tick, so before ``prepare_end``):

1. ``vllm``/``sglang``: start the engine's server (:class:`generation.serving.launch.EngineServer`)
   and wait for its ``/health`` (weights loaded, CUDA graphs captured); on a GPU machine the
   engine is given ``CUDA_VISIBLE_DEVICES`` = the UUIDs of the GPUs the sampler reads.
   ``openai``: the server at ``endpoint`` must list ``model`` in ``/v1/models``.
2. record what the server says it is (``served_by``, ``engine_version``) and its configuration
   (launched: read back from the command line that ran; any server: what ``/get_server_info``
   reports fills what is still unknown);
3. warm up (``concurrency`` requests of 2 tokens, not recorded);
4. with ``arrival_rate: <f>x``: calibrate the capacity (:mod:`generation.serving.calibrate`)
   and fix the absolute rate ``arrival_rate_rps = f x capacity_rps``.

:func:`serve` drives the run's own request stream through the project's serving loop
(``ServingLoop`` over :class:`generation.serving.engine.HttpEngine`): arrival, first token,
every streamed chunk and finish of each request on the sampler's clock, failures (HTTP errors,
cut streams, client timeouts) recorded per request; bounded draining with
``drain_timeout_s``. The launched server is stopped when serving ends, and on every failure
path (``PreparedHttp.close``, which the runner also calls when the run fails before serving).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generation.workloads import RunContext, models
from generation.workloads import arrivals as arr
from generation.workloads.inference.engine_settings import LAUNCHED_ENGINES
from generation.workloads.inference.loop import EventSink, ServingLoop
from generation.workloads.inference.requests import (
    REQUESTS_FILE,
    load_requests,
    steady_window,
    summarise,
    write_requests,
)
from generation.workloads.inference.serve import sampler_t0_ns
from generation.workloads.inference.settings import build_stream
from llm_powertrace_ds.errors import InputError

from . import probe
from .calibrate import Capacity, calibration_stream, measure_capacity
from .client import post_json, prompt_text
from .engine import HttpEngine
from .launch import EngineConfig, EngineServer, config_columns, split_extra_args

log = logging.getLogger(__name__)

ENGINE_LOG = "engine.log"
"""The launched engine's output, in the run's staging folder."""
WARMUP_TOKENS = 2
UNKNOWN_VOCAB = 32000
"""Synthetic prompt ids stay below this when the served model's vocabulary is unknown (every
common tokenizer has at least this many ids, and their special ids lie above it)."""


@dataclass
class PreparedHttp:
    """A server ready to serve the run (``ctx.prepared`` between setup and serve).

    Attributes:
        base_url: the API root.
        model: the served model name requests use.
        server: the launched server (``None`` for ``openai``).
        columns: what the run records about the server.
        prompts: where the run's prompt ids come from.
        capacity: the calibration's result, when the rate is a fraction of capacity.
        rate_rps: the absolute arrival rate fixed by the calibration.
    """

    base_url: str
    model: str
    server: EngineServer | None = None
    columns: dict[str, Any] = field(default_factory=dict)
    prompts: PromptIds = field(default_factory=lambda: PromptIds(None))
    capacity: Capacity | None = None
    rate_rps: float | None = None

    @property
    def pids(self) -> list[int]:
        """Processes doing the run's work (the launched engine), for the ``cpu_proxy``."""
        return self.server.pids if self.server is not None else []

    def close(self) -> None:
        """Stop the launched server (idempotent; nothing for ``openai``)."""
        if self.server is not None:
            self.server.stop()
            self.server = None


def served_model(r: dict[str, Any]) -> str:
    """The name requests carry.

    The run's ``model`` as given (``openai``), else its checkpoint; a local checkpoint is
    served under its name, never its path.
    """
    return str(r.get("_served_name") or r.get("_engine_model") or r["model"])


def vocab_size(r: dict[str, Any]) -> int | None:
    """The served model's vocabulary when known here (a zoo entry, a local checkpoint)."""
    if r.get("_vocab_size"):
        return int(r["_vocab_size"])
    try:
        return int(models.get_spec(r["model"]).vocab_size)
    except InputError:  # not a zoo name
        return None


TOKENIZE_TEXT = " ".join(prompt_text(list(range(64))).split()[:16]) + " 0 1 2 3 4 5 6 7 8 9"
"""Text the server's tokenizer is asked to encode: the ids it answers are in its vocabulary."""


def server_token_ids(base_url: str, model: str, timeout_s: float = 10.0) -> list[int] | None:
    """Token ids the server's own tokenizer produces (``POST /tokenize``, vLLM and SGLang).

    ``None`` when the server has no such endpoint or answers something else.
    """
    try:
        status, data = post_json(probe.server_root(base_url), "/tokenize", {"model": model,
                                                         "prompt": TOKENIZE_TEXT}, timeout_s)
    except OSError:
        return None
    ids = data.get("tokens") if status == 200 and isinstance(data, dict) else None
    if not isinstance(ids, list):
        return None
    ids = sorted({i for i in ids if isinstance(i, int) and not isinstance(i, bool) and i >= 0})
    return ids or None


@dataclass(frozen=True)
class PromptIds:
    """Where synthetic prompt ids come from.

    Ids below ``vocab`` (from ``models.NUM_SPECIAL``), or, when the vocabulary is not known
    here, ids the server's tokenizer produced (``pool``).
    """

    vocab: int | None
    pool: tuple[int, ...] = ()

    def for_stream(self, stream: arr.RequestStream) -> Any:
        def prompt(req: arr.Request) -> list[int]:
            if self.vocab is not None or not self.pool:
                return stream.prompt_ids(req, self.vocab or UNKNOWN_VOCAB,
                                         first_id=models.NUM_SPECIAL)
            ids = stream.prompt_ids(req, models.NUM_SPECIAL + len(self.pool),
                                    first_id=models.NUM_SPECIAL)
            return [self.pool[i - models.NUM_SPECIAL] for i in ids]

        return prompt


def prompt_ids(r: dict[str, Any], base_url: str, model: str) -> PromptIds:
    """:class:`PromptIds` of a run: its known vocabulary, else the server's tokenizer."""
    vocab = vocab_size(r)
    if vocab is not None or r["serving_api"] == "chat":  # chat prompts are text
        return PromptIds(vocab)
    pool = server_token_ids(base_url, model)
    if pool is None:
        log.warning("the served model's vocabulary is unknown and the server has no /tokenize: "
                    "prompt ids are drawn below %d", UNKNOWN_VOCAB)
    return PromptIds(None, tuple(pool or ()))


def engine_config(r: dict[str, Any], stream: arr.RequestStream) -> EngineConfig:
    """The launched engine's configuration of resolved settings ``r``."""
    max_prompt, max_output = stream.lengths.max_lengths()
    return EngineConfig(
        engine=r["serving_engine"], model=str(r.get("_engine_model") or r["model"]),
        served_name=served_model(r), python=r.get("_engine_python"),
        precision=r["precision"], max_num_seqs=int(r["batch_size"]),
        max_model_len=max_prompt + max_output + 1, tp_size=int(r["tp_size"]),
        kv_cache_quant=r["kv_cache_quant"], weight_quant=r["weight_quant"],
        block_size=r.get("engine_block_size"), cuda_graphs=bool(r["engine_cuda_graphs"]),
        prefix_caching=bool(r["engine_prefix_caching"]),
        chunked_prefill=bool(r["engine_chunked_prefill"]), seed=int(r["seed"] or 0),
        extra_args=split_extra_args(r.get("engine_extra_args")))


def _gpu_env(r: dict[str, Any], ctx: RunContext) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` naming, by UUID, the GPUs the sampler reads (GPU machines)."""
    if ctx.device != "cuda":
        return {}
    from generation.gpu_devices import resolve_workload_gpus

    gpus = resolve_workload_gpus(int(r["tp_size"]))
    return {"CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in gpus)}


def _stand_in(r: dict[str, Any]) -> dict[str, Any]:
    """``r`` with a stand-in rate when the rate is still to be calibrated."""
    if r.get("arrival_rate_rps") is None and r.get("arrival_rate_capacity_fraction") is not None:
        return {**r, "arrival_rate_rps": 1.0}
    return r


def setup(r: dict[str, Any], ctx: RunContext) -> PreparedHttp:
    """Start (or find) the server, record it, warm it up, calibrate (module docstring).

    Raises:
        EngineStartError: a launched engine exited or was not healthy in time.
        OSError: the server cannot be reached.
        LookupError: the server does not serve ``model``.
        RuntimeError: warm-up or calibration failed.
    """
    stream = build_stream(_stand_in(r))
    engine_name = r["serving_engine"]
    model = served_model(r)
    prepared: PreparedHttp
    if engine_name in LAUNCHED_ENGINES:
        cfg = engine_config(r, stream)
        server = EngineServer(cfg, Path(ctx.staging_dir) / ENGINE_LOG, env=_gpu_env(r, ctx))
        base_url = server.start(float(r.get("engine_start_timeout_s") or 1800.0))
        prepared = PreparedHttp(base_url, model, server,
                                config_columns(server.command, engine_name))
    else:
        prepared = PreparedHttp(str(r["_endpoint"]).rstrip("/"), model)
    try:
        _describe(prepared, r)
        prepared.prompts = prompt_ids(r, prepared.base_url, model)
        engine = HttpEngine(prepared.base_url, model, api=r["serving_api"],
                            timeout_s=r.get("request_timeout_s"))
        concurrency = int(r["concurrency"])
        from generation.workloads.inference.engines import Job

        # prompts of another seed than the run's: a prefix cache never holds the run's prompts
        warm_stream = calibration_stream(stream.lengths, concurrency, int(r["seed"] or 0))
        prompts = prepared.prompts.for_stream(warm_stream)
        warm = [Job(f"warmup-{req.request_id}", prompts(req), WARMUP_TOKENS)
                for req in warm_stream]
        engine.warmup(warm)
        fraction = r.get("arrival_rate_capacity_fraction")
        if fraction is not None:
            prepared.capacity = _calibrate(r, engine, stream, prepared)
            prepared.rate_rps = float(fraction) * prepared.capacity.requests_per_s
            log.info("capacity %.3g req/s (%.3g tokens/s): arrival rate %.3g req/s (%gx)",
                     prepared.capacity.requests_per_s, prepared.capacity.tokens_per_s,
                     prepared.rate_rps, fraction)
        engine.stop()
    except BaseException:
        prepared.close()
        raise
    return prepared


RUN_FACTS = ("tp_size", "batch_size")
"""Columns the run itself states (``tp_size`` is the number of GPUs its sampler measures):
a server reporting another value is refused before the run, never taken over."""


class ServerDisagrees(InputError):
    """The server reports a setting that contradicts what the run measures."""


def _describe(prepared: PreparedHttp, r: dict[str, Any]) -> None:
    """``served_by``, ``engine_version`` and the server-reported configuration.

    What the server reports fills only what the run does not know; a reported value of
    :data:`RUN_FACTS` that differs from the run's is refused (:class:`ServerDisagrees`), before
    warm-up and before the measured window.

    Raises:
        probe.ServerSettingError: a reported value no row can hold.
        ServerDisagrees: see above.
    """
    prepared.columns["served_by"] = probe.served_by(prepared.base_url, prepared.model)
    prepared.columns["engine_version"] = probe.engine_version(prepared.base_url)
    for key, value in probe.server_config(prepared.base_url).items():
        ours = prepared.columns.get(key)
        if ours is None and key in RUN_FACTS:
            ours = r.get(key)
        if ours is None:
            prepared.columns[key] = value
        elif key in RUN_FACTS and value != ours:
            hint = (f"; the run measures {r.get('num_gpus') or ours} GPU(s): give tp_size "
                    f"{value} and run it where the sampler reads all of them"
                    if key == "tp_size" else f": give {key} {value} or serve with {ours}")
            raise ServerDisagrees(f"the server at {prepared.base_url} reports {key} {value}, "
                                  f"the run has {key} {ours}{hint}", field=key)
        elif value != ours:
            log.warning("the server reports %s %r; the run's %r is kept", key, value, ours)


def _calibrate(r: dict[str, Any], engine: HttpEngine, stream: arr.RequestStream,
               prepared: PreparedHttp) -> Capacity:
    limit = prepared.columns.get("batch_size") or r.get("batch_size")
    concurrency = int(limit) if limit else int(r["concurrency"])
    n = int(r.get("calibration_requests") or 4 * concurrency)
    cal = calibration_stream(stream.lengths, n, int(r["seed"] or 0))
    return measure_capacity(engine, cal, concurrency=concurrency,
                            prompts=prepared.prompts.for_stream(cal))


def serve(r: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Serve the run's request stream over HTTP; write the request log; return the columns.

    Returns:
        The ``inference`` result columns, ``num_requests``, ``requests_unfinished``, the server
        columns (``served_by``, ``engine_*``, ``batch_size``, ``tp_size``), the calibration
        (``capacity_*``, the absolute ``arrival_rate_rps``) and ``_requests`` (the
        ``inference_requests`` rows on the run clock).
    """
    prepared = ctx.prepared
    ctx.prepared = None
    if not isinstance(prepared, PreparedHttp):  # not set up before the sampler: inside, marked
        ctx.mark("warmup_begin", label="engine")
        prepared = setup(r, ctx)
        ctx.mark("warmup_end", label="engine")
    events = EventSink(ctx.staging_dir)
    engine = None
    try:
        run_r = dict(r)
        if prepared.rate_rps is not None:
            run_r["arrival_rate_rps"] = prepared.rate_rps
        stream = build_stream(run_r)
        engine = HttpEngine(prepared.base_url, prepared.model, api=r["serving_api"],
                            timeout_s=r.get("request_timeout_s"))
        loop = ServingLoop(stream, prepared.prompts.for_stream(stream),
                           concurrency=int(r["concurrency"]), events=events,
                           drain_timeout_s=r.get("drain_timeout_s"))
        loop.bind(engine)
        try:
            records = loop.run()
        finally:
            engine.stop()
        write_requests(Path(ctx.staging_dir) / REQUESTS_FILE, records)
        steady = steady_window(records, int(r["concurrency"]))
        if steady is not None:
            events.mark("steady_begin", steady.begin_ns, label=steady.label)
            events.mark("steady_end", steady.end_ns, label=steady.label)
    finally:
        events.close()
        prepared.close()
    t0 = sampler_t0_ns(ctx.staging_dir)
    if t0 is None:
        t0 = min(rec.arrival_ns for rec in records)
        log.warning("no sampler spool in %s: request times are relative to the first arrival",
                    ctx.staging_dir)
    result = summarise(records)
    result.update(prepared.columns)
    if prepared.capacity is not None:
        result.update(prepared.capacity.columns())
        result["arrival_rate_rps"] = prepared.rate_rps
    result["_requests"] = load_requests(ctx.staging_dir, t0)
    return result


__all__ = ["ENGINE_LOG", "PreparedHttp", "serve", "setup"]
