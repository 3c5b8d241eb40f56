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
from pathlib import Path
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


QUANTO_LOCK_STALE_S = 600.0
"""A build lock of the quanto CUDA extension older than this is stale (its builder died)."""


def _quanto_cuda_dir() -> Path | None:
    """The folder of optimum-quanto's CUDA extension sources (``None``: quanto not installed)."""
    try:
        spec = importlib.util.find_spec("optimum.quanto")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "library" / "extensions" / "cuda"


def quanto_cuda_problem(cuda_dir: Path | None = None) -> str | None:
    """Why optimum-quanto's CUDA extension can be neither found prebuilt nor built here.

    optimum-quanto compiles its CUDA kernels with nvcc and ninja into its installed package on
    first use — minutes, which must never fall inside a measured window. Sweep validation
    calls this on CUDA machines: ``None`` when the extension is prebuilt (a library and the
    torch version it was built for in ``build/``) or can be built (nvcc and ninja found, the
    build folder writable); the workload's ``setup`` then builds it before the sampler starts.
    """
    cuda_dir = _quanto_cuda_dir() if cuda_dir is None else cuda_dir
    if cuda_dir is None:
        return "optimum-quanto is not installed: pip install optimum-quanto"
    build = cuda_dir / "build"
    if (build / "pytorch_version.txt").exists() and any(build.glob("*.so")):
        return None
    import os
    import shutil

    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    nvcc = shutil.which("nvcc") or (str(Path(cuda_home, "bin", "nvcc"))
                                    if Path(cuda_home, "bin", "nvcc").exists() else None)
    missing = [name for name, found in (("nvcc", nvcc), ("ninja", shutil.which("ninja")))
               if not found]
    if missing:
        return (f"optimum-quanto's CUDA extension is not built and cannot be built here: "
                f"{' and '.join(missing)} not found (install the CUDA toolkit matching torch "
                f"and `pip install ninja`, or use weight_quant_backend bitsandbytes)")
    target = build if build.exists() else cuda_dir
    if not os.access(target, os.W_OK):
        return (f"optimum-quanto's CUDA extension is not built and '{target}' is not writable "
                "(it builds into the installed package): build it once as the package's owner")
    return None


def clear_stale_quanto_lock(cuda_dir: Path | None = None, *,
                            stale_s: float = QUANTO_LOCK_STALE_S) -> Path | None:
    """Remove the extension's build lock left by a builder that died; return its path if so.

    ``torch.utils.cpp_extension`` waits forever on ``build/lock`` while another process
    builds; a killed build leaves it behind and every later run would hang in ``setup``.

    Raises:
        RuntimeError: a recent lock (another process may be building right now); the message
            names the file.
    """
    import logging
    import time

    cuda_dir = _quanto_cuda_dir() if cuda_dir is None else cuda_dir
    if cuda_dir is None:
        return None
    lock = cuda_dir / "build" / "lock"
    try:
        age_s = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return None
    if age_s < stale_s:
        raise RuntimeError(f"'{lock}': optimum-quanto's CUDA extension is being built by another "
                           f"process ({age_s:.0f} s ago); wait, or remove the file if no build "
                           "is running")
    lock.unlink(missing_ok=True)
    logging.getLogger(__name__).warning("removed a stale build lock '%s' (%.0f s old) of "
                                        "optimum-quanto's CUDA extension", lock, age_s)
    return lock


def build_quanto_cuda_extension() -> None:
    """Build (or load) optimum-quanto's CUDA extension now, in ``setup``, before the sampler."""
    clear_stale_quanto_lock()
    from optimum.quanto.library.extensions import get_extension, is_extension_available

    if is_extension_available("quanto_cuda"):
        _ = get_extension("quanto_cuda").lib  # compiles on first use


def uses_quanto(r: dict[str, Any]) -> bool:
    """Whether a resolved run uses optimum-quanto (weights or the KV cache)."""
    return ((r["weight_quant"] != "none" and r["weight_quant_backend"] == "quanto")
            or (r["kv_cache_quant"] != "none" and r["kv_cache_backend"] == "quanto"))


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
    if machine.cuda and uses_quanto(r) and installed(_MODULES["quanto"]):
        problem = quanto_cuda_problem()
        if problem:
            key = "weight_quant_backend" if r["weight_quant"] != "none" else "kv_cache_backend"
            problems.append((key, problem))
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
    "build_quanto_cuda_extension",
    "clear_stale_quanto_lock",
    "quanto_cuda_problem",
    "uses_quanto",
    "installed",
    "kv_cache_kwargs",
    "quant_problems",
    "quantize_weights_quanto",
    "resolve_backends",
]
