"""Loading the model of an inference run: one device, or tensor-parallel ranks."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from .. import RunContext, models, quant
from .engines import ContinuousEngine
from .settings import build_stream

log = logging.getLogger(__name__)

TP_CHECKPOINT = "tp-checkpoint"
"""Folder (in the run's staging folder) of the checkpoint that tensor-parallel ranks load."""


# ---------------------------------------------------------------------------------------------
# Loading (one device, or tensor-parallel ranks)
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
        return AutoModelForCausalLM.from_pretrained(models.hub_id_of(spec), local_files_only=True,
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
