"""Serving one resolved inference run: setup before the sampler starts, then ``serve``."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import RunContext, models, quant
from .. import arrivals as arr
from .engines import ContinuousBatchingOptions, ContinuousEngine, Job, StaticEngine
from .loop import EventSink, ServingLoop
from .model import TP_CHECKPOINT, follow_tp, generate_kwargs, load_model, load_model_tp
from .requests import (
    REQUESTS_FILE,
    RequestRecord,
    SteadyWindow,
    load_requests,
    steady_window,
    summarise,
    write_requests,
)
from .settings import build_stream

log = logging.getLogger(__name__)

WARMUP_TOKENS = 2
"""Tokens each warm-up request generates (engine set-up, before the sampler starts)."""


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
                cb_options: Mapping[str, Any] | None = None) -> StaticEngine | ContinuousEngine:
    """A static or continuous engine (``cb_options``: the ``cb_*`` settings)."""
    if batching == "static":
        return StaticEngine(model, generate_kwargs=generate_kw)
    opts = ContinuousBatchingOptions.from_settings(cb_options)
    return ContinuousEngine(model, concurrency=concurrency, max_prompt=max_prompt,
                            max_output=max_output, attn_implementation=opts.attn_implementation,
                            use_cuda_graph=opts.use_cuda_graph,
                            use_async_batching=opts.use_async_batching)


def start_engine(model: Any, stream: arr.RequestStream, *, batching: str, concurrency: int,
                 vocab_size: int, generate_kw: dict[str, Any] | None = None,
                 cb_options: Mapping[str, Any] | None = None) -> StaticEngine | ContinuousEngine:
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
                 cb_options: Mapping[str, Any] | None = None) -> Served:
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


def sampler_t0_ns(staging_dir: str | os.PathLike[str]) -> int | None:
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

    def close(self) -> None:
        """Stop the engine (its generation thread) if ``serve`` never took it over."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.stop()


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
    try:
        if isinstance(engine, ContinuousEngine):
            columns.update(engine.resolved_config())
            columns["attn_implementation"] = columns["cb_attn_implementation"]
        if cuda:
            torch.cuda.synchronize()
    except BaseException:
        engine.stop()
        raise
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
    try:
        stream = build_stream(r)
        events = EventSink(ctx.staging_dir)
    except BaseException:
        if engine is not None:  # a started engine's generation thread must never outlive us
            engine.stop()
        raise
    try:
        with torch.inference_mode():
            served = serve_stream(model, stream, batching=r["batching"],
                                  concurrency=int(r["concurrency"]),
                                  vocab_size=spec.vocab_size, events=events,
                                  generate_kw=generate_kwargs(r), mark=ctx.mark, engine=engine,
                                  cb_options=r)
        write_requests(Path(ctx.staging_dir) / REQUESTS_FILE, served.records)
        t0 = sampler_t0_ns(ctx.staging_dir)
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
    from ..finetune import release_memory

    release_memory(ctx.device == "cuda")
    return result
