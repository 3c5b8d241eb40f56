"""Weight and KV-cache quantisation of the inference workload: axes, checks, application.

Weights (``weight_quant`` with ``weight_quant_backend``):

* ``quanto`` (optimum-quanto, CPU and CUDA): ``int8``, ``int4`` and ``fp8`` (``qfloat8``)
  weight-only quantisation of every linear layer but ``lm_head`` (``quantize`` + ``freeze`` on
  the instantiated model; works on the zoo's random-weight models without a checkpoint);
* ``bitsandbytes`` (CUDA only): ``int8`` (LLM.int8) and ``int4`` (NF4, compute in the run's
  precision), applied on load through ``BitsAndBytesConfig``.

KV cache (``kv_cache_quant`` with ``kv_cache_backend``): ``transformers``' ``QuantizedCache``
(``generate(cache_implementation="quantized", cache_config={"backend", "nbits"})``) with the
``quanto`` (int2/int4) or ``hqq`` backend. It is a ``generate()`` cache: the paged cache of
continuous batching has no quantised form, so :func:`quant_problems` refuses the combination.

Nothing here imports torch or transformers at import time.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from . import MachineInfo

WEIGHT_QUANT = ("none", "int8", "int4", "fp8")
WEIGHT_QUANT_BACKENDS = ("quanto", "bitsandbytes")
KV_CACHE_QUANT = ("none", "int4", "int2")
KV_CACHE_BACKENDS = ("quanto", "hqq")
KV_BITS = {"int4": 4, "int2": 2}
_MODULES = {"quanto": "optimum.quanto", "hqq": "hqq", "bitsandbytes": "bitsandbytes"}
_PACKAGES = {"quanto": "optimum-quanto", "hqq": "hqq", "bitsandbytes": "bitsandbytes"}


def installed(module: str) -> bool:
    """Whether a module can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


QLORA_EXTRA_HINT = "pip install 'llm-powertrace[qlora]'"


def bitsandbytes_problem() -> str | None:
    """Why bitsandbytes cannot quantise on CUDA here, or ``None`` when it can.

    Checked at sweep validation on GPU machines (``generation.sweep.detect_machine``): missing,
    failing to import, or a build without CUDA support (``cextension.lib.compiled_with_cuda``;
    ``COMPILED_WITH_CUDA`` in older releases). Imports bitsandbytes (and so torch) only when it
    is installed.
    """
    if not installed(_MODULES["bitsandbytes"]):
        return f"bitsandbytes is not installed: {QLORA_EXTRA_HINT}"
    try:
        from bitsandbytes import cextension
    except (ImportError, OSError, RuntimeError) as exc:
        return f"bitsandbytes cannot be imported ({type(exc).__name__}: {exc})"
    lib = getattr(cextension, "lib", None)
    cuda = getattr(lib, "compiled_with_cuda", getattr(cextension, "COMPILED_WITH_CUDA", None))
    if cuda is False:
        return ("the installed bitsandbytes has no CUDA support (a CPU-only build or no "
                f"matching CUDA library); reinstall it for this CUDA: {QLORA_EXTRA_HINT}")
    return None


def bitsandbytes_reason(machine: MachineInfo) -> str:
    """The one-line reason bitsandbytes is unusable on ``machine`` (for sweep errors)."""
    return str(machine.extra.get("bitsandbytes_problem")
               or f"bitsandbytes is not installed: {QLORA_EXTRA_HINT}")


def resolve_backends(r: dict[str, Any], machine: MachineInfo) -> None:
    """Fill ``weight_quant_backend``/``kv_cache_backend`` in place (null when not quantised).

    Weights default to bitsandbytes for int8/int4 on CUDA when it is installed, else quanto;
    the KV cache defaults to quanto.
    """
    if r["weight_quant"] == "none":
        r["weight_quant_backend"] = None
    elif r["weight_quant_backend"] is None:
        cuda_bnb = machine.cuda and machine.bitsandbytes and r["weight_quant"] in ("int8", "int4")
        r["weight_quant_backend"] = "bitsandbytes" if cuda_bnb else "quanto"
    if r["kv_cache_quant"] == "none":
        r["kv_cache_backend"] = None
    elif r["kv_cache_backend"] is None:
        r["kv_cache_backend"] = "quanto"


def quant_problems(r: dict[str, Any], machine: MachineInfo) -> list[tuple[str, str]]:
    """What the machine cannot honour of a run's quantisation settings.

    Returns:
        ``(setting, reason)`` pairs.
    """
    problems: list[tuple[str, str]] = []
    wq, wb = r["weight_quant"], r["weight_quant_backend"]
    if wq != "none":
        if wb == "quanto" and not installed(_MODULES["quanto"]):
            problems.append(("weight_quant_backend", f"weight_quant {wq} with quanto needs "
                             "optimum-quanto: pip install optimum-quanto"))
        if wb == "bitsandbytes":
            if wq == "fp8":
                problems.append(("weight_quant", "bitsandbytes has no fp8 weights; use "
                                 "weight_quant_backend quanto"))
            if not machine.cuda:
                problems.append(("weight_quant_backend", "bitsandbytes weight quantisation needs "
                                 f"CUDA; this machine samples with {machine.source}"))
            elif not machine.bitsandbytes:
                problems.append(("weight_quant_backend", bitsandbytes_reason(machine)))
    kq, kb = r["kv_cache_quant"], r["kv_cache_backend"]
    if kq != "none":
        if r["batching"] == "continuous":
            problems.append(("kv_cache_quant", "continuous batching uses transformers' paged "
                             "KV cache, which has no quantised form; use batching static"))
        if not installed(_MODULES[kb]):
            problems.append(("kv_cache_backend", f"kv_cache_quant {kq} with the {kb} backend "
                             f"needs {_PACKAGES[kb]}: pip install {_PACKAGES[kb]}"))
    return problems


def bitsandbytes_config(weight_quant: str, dtype: Any) -> Any:
    """The ``BitsAndBytesConfig`` of ``int8`` or ``int4`` (NF4) weights."""
    from transformers import BitsAndBytesConfig

    if weight_quant == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_compute_dtype=dtype)


def quantize_weights_quanto(model: Any, weight_quant: str) -> Any:
    """Quantise the linear layers' weights (not ``lm_head``) with optimum-quanto, in place."""
    from optimum.quanto import freeze, qfloat8, qint4, qint8, quantize

    qtype = {"int8": qint8, "int4": qint4, "fp8": qfloat8}[weight_quant]
    quantize(model, weights=qtype, exclude=["lm_head"])
    freeze(model)
    return model


def kv_cache_kwargs(r: dict[str, Any]) -> dict[str, Any]:
    """``generate`` keyword arguments of a quantised KV cache (``{}`` when not quantised)."""
    if r["kv_cache_quant"] == "none":
        return {}
    return {"cache_implementation": "quantized",
            "cache_config": {"backend": r["kv_cache_backend"],
                             "nbits": KV_BITS[r["kv_cache_quant"]]}}


__all__ = [
    "KV_BITS",
    "KV_CACHE_BACKENDS",
    "KV_CACHE_QUANT",
    "WEIGHT_QUANT",
    "WEIGHT_QUANT_BACKENDS",
    "bitsandbytes_config",
    "bitsandbytes_problem",
    "bitsandbytes_reason",
    "installed",
    "kv_cache_kwargs",
    "quant_problems",
    "quantize_weights_quanto",
    "resolve_backends",
]
