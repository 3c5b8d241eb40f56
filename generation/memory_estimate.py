"""Device memory of a cell, estimated from the model's config before any GPU is spent.

Two estimates: a fine-tuning cell's (:func:`estimate`) and a served cell's
(:func:`serving_estimate`, for ``serving_engine`` ``vllm`` and ``sglang``; see
"Serving" below).

``generate --dry-run`` prints the estimate next to the GPU's memory, and every ``generate``
lists a cell that cannot fit as ``too_big`` with the reason instead of running it into an
out-of-memory failure. The estimate is per device, in bytes, the sum of:

* **weights** = P_held · b_w, where b_w = 4 for full fine-tuning (fp32 master weights in every
  precision), the compute precision's bytes for a LoRA base (2 for bf16/fp16, 4 for fp32), and
  ≈ 0.51 for QLoRA's NF4 base (4 bits, one 8-bit constant per 64 weights, one fp32 per 256
  constants; embeddings and the output layer stay in the compute precision); LoRA adapters add
  P_lora · 4. FSDP divides what is sharded (weights, gradients, optimiser states) by dp_size.
* **gradients** = P_trainable · 4 (fp32 gradients of the trainable parameters).
* **optimizer** = P_trainable · s, with s = 8 for AdamW (two fp32 moments), 2 for 8-bit Adam,
  4 for RMSprop/Adagrad, 0 for SGD without momentum and Adafactor's factored moments counted as 0.
* **activations** kept for the backward pass, per sequence token and layer, in the compute
  precision's bytes b_c: without checkpointing
  ``A_layer = 4·h + 2·(n_heads·d_head) + 2·(n_kv·d_head) + 4·k·i`` elements (residual stream and
  norm outputs, queries and attention output, keys and values, the gated MLP's gate, up,
  activation and down input, k = experts per token for a mixture of experts, 1 for dense);
  attention scores are not kept (SDPA/flash kernels). With gradient checkpointing only each
  layer's input (h elements) is kept, plus one layer's full activations while it is
  recomputed. activations = b · s · b_c · (L · A_layer) without, b · s · b_c · (L · h +
  A_layer) with checkpointing.
* **logits** = b · s · V · (4 + 4 + b_c'), the fp32 logits the loss is computed on, their fp32
  gradient, and the compute-precision output of the language-model head (b_c' = 0 in fp32).
  The fp32 logits alone are :attr:`MemoryEstimate.logits_fp32_bytes` = b · s · V · 4
  (8 × 8192 × 128,256 × 4 B = 33.6 GB for a Llama-3 vocabulary).
* **overhead** = :data:`OVERHEAD_BYTES` (CUDA context, allocator, NCCL buffers).

Here P is the parameter count of the zoo entry's published shape (mixture of experts: all
experts are held; k of them run per token), h the hidden size, i the intermediate size, L the
layers, V the vocabulary, b the per-device micro-batch and s the sequence length. A cell fits
when the total is at most the device's memory. The estimate is deliberately simple and its
terms are printed, so a cell near the limit can be judged by eye.

Serving (per tensor-parallel rank, bytes; ``t`` = tp_size):

* **weights** = P · b_load / t, with b_load the bytes of the dtype the engine *loads*: the
  precision's (2 for bf16/fp16, 4 for fp32), also for FP8 quantised on the fly (vLLM's
  ``--quantization fp8`` and SGLang's load a checkpoint that is not FP8 in its original dtype
  and quantise after loading), 1 only for a checkpoint already in FP8 (its name says ``fp8``).
* **kv_cache** = 2 · L · ⌈n_kv / t⌉ · d_head · b_kv · S · M: keys and values of every layer
  for S sequences of ``max_model_len`` M tokens, S the most the run can hold in flight:
  min(``max_num_seqs``, ``concurrency``), or ``max_num_seqs`` when a capacity calibration
  saturates the engine (b_kv = 1 for an FP8 cache, else the precision's bytes; a KV head is
  replicated when t > n_kv).
* **activations** (a reserve) = T · (4·h + 2·i / t) · b_c + S · V · 4 with T = min(S · M, 8192)
  tokens in one forward step: the widest activations of one layer and the fp32 logits of one
  decode step.
* **overhead** = :data:`OVERHEAD_BYTES`.

A served cell fits when the total is at most the share of the card the engine takes,
``gpu_memory_utilization`` × memory (0.9, both engines' default, unless
``engine_extra_args`` sets ``--gpu-memory-utilization`` / ``--mem-fraction-static``).

Example:
    >>> from generation.workloads.models import get_spec
    >>> est = estimate(get_spec("Llama-3.1-8B"), method="lora", precision="bf16",
    ...                batch_size=8, seq_len=8192, gradient_checkpointing=False)
    >>> round(est.logits_fp32_bytes / 1e9, 1)
    33.6
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llm_powertrace_ds.errors import InputError

from .workloads.models import ModelSpec, get_spec

GIB = 1 << 30
OVERHEAD_BYTES = int(1.5 * GIB)
"""Fixed per-device overhead: CUDA context, caching allocator slack, communication buffers."""
COMPUTE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
NF4_BYTES_PER_PARAM = 0.5 + 0.5 / 64 + 4 / (64 * 256)
"""QLoRA base: 4-bit weights, one 8-bit constant per 64 weights, one fp32 per 256 constants."""
OPTIMIZER_BYTES = {"adamw_torch": 8, "adamw_torch_fused": 8, "adamw_8bit": 2,
                   "adamw_bnb_8bit": 2, "paged_adamw_8bit": 2, "paged_adamw_32bit": 8,
                   "rmsprop": 4, "adagrad": 4, "sgd": 0, "adafactor": 0}
_PLATFORM_GB = re.compile(r"_(\d+)gb$")


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-device memory of one cell, by term (bytes); see the module docstring for formulas.

    Attributes:
        weights_bytes: model weights held (adapters included), after sharding.
        gradients_bytes: gradients of the trainable parameters, after sharding.
        optimizer_bytes: optimiser states, after sharding.
        activations_bytes: activations kept for the backward pass.
        logits_bytes: logits, their gradient and the head's output.
        logits_fp32_bytes: the fp32 logits alone (b · s · V · 4).
        overhead_bytes: fixed overhead.
    """

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    logits_bytes: int
    logits_fp32_bytes: int
    overhead_bytes: int = OVERHEAD_BYTES

    @property
    def total_bytes(self) -> int:
        """The sum of every term."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.logits_bytes + self.overhead_bytes)

    def terms_gib(self) -> dict[str, float]:
        """Each term and the total in GiB (rounded to 0.1), for printing."""
        terms = {"weights": self.weights_bytes, "gradients": self.gradients_bytes,
                 "optimizer": self.optimizer_bytes, "activations": self.activations_bytes,
                 "logits": self.logits_bytes, "overhead": self.overhead_bytes,
                 "total": self.total_bytes}
        return {k: round(v / GIB, 1) for k, v in terms.items()}


def lora_params(spec: ModelSpec, rank: int, targets: str | None) -> int:
    """Parameters of LoRA adapters: r · (in + out) per targeted linear layer, every layer.

    Each target maps to the (in, out) sizes of the layers of that name in one decoder layer.
    """
    if spec.arch == "gpt2":
        h = spec.shape["n_embd"]
        # ``c_proj`` names two layers: attention's output (h -> h) and the MLP's (4h -> h)
        dims = {"c_attn": (h, 3 * h), "c_proj": (h, h, 4 * h, h), "c_fc": (h, 4 * h)}
        layers = spec.shape["n_layer"]
    else:
        s = spec.shape
        h, heads = s["hidden_size"], s["num_attention_heads"]
        kv = s.get("num_key_value_heads", heads)
        hd = s.get("head_dim") or h // heads
        inter = s["intermediate_size"]
        dims = {"q_proj": (h, heads * hd), "k_proj": (h, kv * hd), "v_proj": (h, kv * hd),
                "o_proj": (heads * hd, h), "qkv_proj": (h, (heads + 2 * kv) * hd),
                "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h),
                "gate_up_proj": (h, 2 * inter)}
        layers = s["num_hidden_layers"]
    names = (targets or spec.default_lora_targets).split(",")
    return layers * sum(rank * sum(dims[n]) for n in names if n in dims)


def _layer_activation_elements(spec: ModelSpec) -> tuple[int, int, int]:
    """``(A_layer, h, L)``: activation elements per token of one layer, hidden size, layers."""
    s = spec.shape
    if spec.arch == "gpt2":
        h, layers = s["n_embd"], s["n_layer"]
        return 4 * h + 2 * h + 2 * h + 4 * 4 * h, h, layers
    h, heads = s["hidden_size"], s["num_attention_heads"]
    kv = s.get("num_key_value_heads", heads)
    hd = s.get("head_dim") or h // heads
    k = spec.experts_per_token or 1
    per_token = 4 * h + 2 * heads * hd + 2 * kv * hd + 4 * k * s["intermediate_size"]
    return per_token, h, s["num_hidden_layers"]


def estimate(spec: ModelSpec, *, method: str, precision: str, batch_size: int, seq_len: int,
             gradient_checkpointing: bool, parallelism: str = "single", dp_size: int = 1,
             optimizer: str = "adamw_torch", lora_rank: int | None = 16,
             lora_targets: str | None = None) -> MemoryEstimate:
    """Estimate one fine-tuning cell's memory per device (formulas in the module docstring).

    Args:
        spec: the zoo entry (its published shape).
        method: ``full``, ``lora`` or ``qlora``.
        precision: ``fp32``, ``bf16`` or ``fp16`` (the compute precision).
        batch_size: micro-batch per device, sequences.
        seq_len: tokens per sequence.
        gradient_checkpointing: activation checkpointing on.
        parallelism: ``single``, ``ddp`` or ``fsdp`` (FSDP shards weights, gradients, states).
        dp_size: data-parallel degree.
        optimizer: the optimiser name (its state bytes per trainable parameter).
        lora_rank: LoRA rank (LoRA/QLoRA).
        lora_targets: comma-separated LoRA targets (default: the architecture's).

    Returns:
        The :class:`MemoryEstimate`.
    """
    params = spec.estimated_params()
    bc = COMPUTE_BYTES[precision]
    shard = dp_size if parallelism == "fsdp" else 1
    vocab, emb_h = spec.vocab_size, _layer_activation_elements(spec)[1]
    if method == "full":
        trainable = params
        weights = params * 4
    else:
        trainable = lora_params(spec, int(lora_rank or 16), lora_targets)
        if method == "qlora":
            emb = vocab * emb_h * (1 if spec.shape.get("tie_word_embeddings") else 2)
            weights = int((params - emb) * NF4_BYTES_PER_PARAM + emb * bc)
        else:
            weights = params * bc
        weights += trainable * 4
    per_token, h, layers = _layer_activation_elements(spec)
    tokens = batch_size * seq_len
    if gradient_checkpointing:
        acts = tokens * bc * (layers * h + per_token)
    else:
        acts = tokens * bc * layers * per_token
    logits_fp32 = tokens * vocab * 4
    head = 0 if precision == "fp32" else tokens * vocab * bc
    return MemoryEstimate(
        weights_bytes=int(weights // shard), gradients_bytes=int(trainable * 4 // shard),
        optimizer_bytes=int(trainable * OPTIMIZER_BYTES.get(optimizer, 8) // shard),
        activations_bytes=int(acts), logits_bytes=int(2 * logits_fp32 + head),
        logits_fp32_bytes=int(logits_fp32))


def estimate_run(settings: dict[str, Any]) -> MemoryEstimate | None:
    """The estimate of a resolved fine-tuning run (``None`` for another workload or model)."""
    if "method" not in settings or "seq_len" not in settings:
        return None
    try:
        spec = get_spec(settings["model"])
    except InputError:  # an unknown model is reported by the sweep check
        return None
    return estimate(spec, method=settings["method"], precision=settings["precision"],
                    batch_size=int(settings["batch_size"]), seq_len=int(settings["seq_len"]),
                    gradient_checkpointing=bool(settings["gradient_checkpointing"]),
                    parallelism=settings["parallelism"], dp_size=int(settings["dp_size"] or 1),
                    optimizer=settings.get("optimizer") or "adamw_torch",
                    lora_rank=settings.get("lora_rank"),
                    lora_targets=settings.get("lora_targets"))


@dataclass(frozen=True)
class ServingEstimate:
    """Per-rank memory of one served cell, by term (bytes); formulas in the module docstring.

    Attributes:
        weights_bytes: weights at the dtype the engine loads, per rank.
        kv_cache_bytes: KV cache for max_num_seqs x max_model_len, per rank.
        activations_bytes: the activation reserve.
        load_dtype: what the weights are loaded as (``bf16``, ``fp8``, ...).
        overhead_bytes: fixed overhead.
    """

    weights_bytes: int
    kv_cache_bytes: int
    activations_bytes: int
    load_dtype: str
    overhead_bytes: int = OVERHEAD_BYTES

    @property
    def total_bytes(self) -> int:
        """The sum of every term."""
        return (self.weights_bytes + self.kv_cache_bytes + self.activations_bytes
                + self.overhead_bytes)

    def terms_gb(self) -> dict[str, float]:
        """Each term and the total in GB (10^9 bytes, rounded to 0.1), for printing."""
        terms = {"weights": self.weights_bytes, "kv_cache": self.kv_cache_bytes,
                 "activations": self.activations_bytes, "overhead": self.overhead_bytes,
                 "total": self.total_bytes}
        return {k: round(v / 1e9, 1) for k, v in terms.items()}


SERVED_ENGINES = ("vllm", "sglang")
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""The share of a card vLLM (``--gpu-memory-utilization``) and SGLang
(``--mem-fraction-static``, about this by default on large cards) take."""
STEP_TOKENS = 8192
"""Most tokens in one forward step assumed for the activation reserve."""
_UTILIZATION_FLAGS = ("--gpu-memory-utilization", "--mem-fraction-static")


def spec_of(model: str) -> ModelSpec | None:
    """The zoo entry of a zoo name or of its Hub id (``None``: not in the zoo)."""
    try:
        return get_spec(model)
    except InputError:
        pass
    from .workloads.models import ZOO

    low = str(model).lower()
    return next((s for s in ZOO.values() if s.hub_id and s.hub_id.lower() == low), None)


def serving_estimate(spec: ModelSpec, *, precision: str, tp_size: int, max_num_seqs: int,
                     max_model_len: int, weight_quant: str = "none",
                     kv_cache_quant: str = "none", prequantized: bool = False,
                     ) -> ServingEstimate:
    """Estimate one served cell's memory per tensor-parallel rank (module docstring).

    Args:
        spec: the zoo entry (its published shape).
        precision: ``bf16``, ``fp16`` or ``fp32`` (what the engine computes and loads in).
        tp_size: tensor-parallel degree.
        max_num_seqs: most sequences in flight (S of the module docstring).
        max_model_len: longest prompt + output.
        weight_quant: ``none`` or ``fp8``.
        kv_cache_quant: ``none`` or ``fp8``.
        prequantized: the checkpoint is already FP8 (loaded at 1 byte per weight).
    """
    bc = COMPUTE_BYTES[precision]
    t = max(1, int(tp_size))
    fp8_loaded = weight_quant == "fp8" and prequantized
    load = 1 if fp8_loaded else bc
    weights = spec.estimated_params() * load / t
    s = spec.shape
    if spec.arch == "gpt2":
        h, layers, heads = s["n_embd"], s["n_layer"], s["n_head"]
        kv, hd, inter = heads, h // heads, 4 * h
    else:
        h, layers, heads = s["hidden_size"], s["num_hidden_layers"], s["num_attention_heads"]
        kv = s.get("num_key_value_heads", heads)
        hd = s.get("head_dim") or h // heads
        inter = s["intermediate_size"] * (spec.experts_per_token or 1)
    b_kv = 1 if kv_cache_quant == "fp8" else bc
    kv_per_rank = -(-kv // t)
    kv_bytes = 2 * layers * kv_per_rank * hd * b_kv * max_num_seqs * max_model_len
    step = min(max_num_seqs * max_model_len, STEP_TOKENS)
    acts = step * (4 * h + 2 * inter / t) * bc + max_num_seqs * spec.vocab_size * 4
    return ServingEstimate(int(weights), int(kv_bytes), int(acts),
                           "fp8" if fp8_loaded else precision)


def serving_estimate_run(settings: dict[str, Any]) -> ServingEstimate | None:
    """The estimate of a resolved served run (``None``: not launched, or not a zoo model)."""
    if settings.get("serving_engine") not in SERVED_ENGINES:
        return None
    spec = spec_of(str(settings.get("_engine_model") or settings["model"]))
    if spec is None:
        spec = spec_of(str(settings["model"]))
    if spec is None or settings.get("precision") not in COMPUTE_BYTES:
        return None
    from generation.workloads.inference.settings import build_stream

    try:  # the lengths the engine must hold (a stand-in rate: only the lengths are read)
        stream = build_stream({**settings, "arrival_rate_rps": settings.get("arrival_rate_rps")
                               or 1.0})
        max_prompt, max_output = stream.lengths.max_lengths()
    except (InputError, ValueError, KeyError, OSError):
        return None
    name = str(settings.get("_engine_model") or settings["model"]).lower()
    return serving_estimate(spec, precision=settings["precision"],
                            tp_size=int(settings.get("tp_size") or 1),
                            max_num_seqs=in_flight_seqs(settings),
                            max_model_len=max_prompt + max_output + 1,
                            weight_quant=settings.get("weight_quant") or "none",
                            kv_cache_quant=settings.get("kv_cache_quant") or "none",
                            prequantized="fp8" in name)


def in_flight_seqs(settings: dict[str, Any]) -> int:
    """S of the module docstring: the most sequences a served run holds in flight."""
    limit = int(settings.get("batch_size") or 256)
    if settings.get("arrival_rate_capacity_fraction") is not None:
        return limit  # the calibration's closed loop keeps the engine's batch full
    return min(limit, int(settings.get("concurrency") or limit))


def gpu_memory_utilization(settings: dict[str, Any]) -> float:
    """The share of a card the engine takes: ``engine_extra_args``' flag, else the default."""
    import shlex

    words = shlex.split(str(settings.get("engine_extra_args") or ""))
    value = None
    for i, word in enumerate(words):
        key, _, inline = word.partition("=")
        if key in _UTILIZATION_FLAGS:
            value = inline or (words[i + 1] if i + 1 < len(words) else None)
    try:
        share = float(value) if value is not None else DEFAULT_GPU_MEMORY_UTILIZATION
    except ValueError:
        return DEFAULT_GPU_MEMORY_UTILIZATION
    return share if 0 < share <= 1 else DEFAULT_GPU_MEMORY_UTILIZATION


def serving_too_big(settings: dict[str, Any], platform: str) -> str | None:
    """Why a served cell cannot load: one line naming model, dtype, TP and GB needed vs card."""
    est = serving_estimate_run(settings)
    memory = device_memory_bytes(platform)
    if est is None or memory is None:
        return None
    share = gpu_memory_utilization(settings)
    usable = memory * share
    if est.total_bytes <= usable:
        return None
    t = est.terms_gb()
    quant = (f", weight_quant {settings.get('weight_quant')} loaded as {est.load_dtype}"
             if settings.get("weight_quant") not in (None, "none") else "")
    return (f"{settings['model']} in {settings['precision']}{quant} at tp_size "
            f"{settings.get('tp_size') or 1} needs ~{t['total']} GB per GPU > "
            f"{usable / 1e9:.1f} GB ({share:g} of {memory / 1e9:.1f} GB, {platform}): weights "
            f"{t['weights']}, KV cache {t['kv_cache']} ({in_flight_seqs(settings)} seqs), "
            f"activations {t['activations']} GB")


def device_memory_bytes(platform: str) -> int | None:
    """Memory of one device of a platform slug ending in ``_<N>gb`` (N GiB), else ``None``."""
    m = _PLATFORM_GB.search(platform or "")
    return int(m.group(1)) * GIB if m else None


def too_big(settings: dict[str, Any], platform: str) -> str | None:
    """Why a run cannot fit its device: one line with the terms.

    ``None`` when it fits or cannot be judged (unknown device memory, not a fine-tuning run).
    """
    served = serving_too_big(settings, platform)
    if served is not None:
        return served
    est = estimate_run(settings)
    memory = device_memory_bytes(platform)
    if est is None or memory is None or est.total_bytes <= memory:
        return None
    t = est.terms_gib()
    return (f"needs ~{t['total']} GiB per device > {memory / GIB:.0f} GiB ({platform}): "
            f"weights {t['weights']}, gradients {t['gradients']}, optimizer {t['optimizer']}, "
            f"activations {t['activations']}, logits {t['logits']} GiB")


def memory_columns(settings: dict[str, Any], platform: str) -> dict[str, float | None]:
    """``mem_gib`` (the estimate's total) and ``gpu_gib`` (the device's memory) for a dry run."""
    est = estimate_run(settings)
    memory = device_memory_bytes(platform)
    served = serving_estimate_run(settings)
    if served is not None:
        return {"mem_gib": round(served.total_bytes / GIB, 1),
                "gpu_gib": round(memory / GIB, 1) if memory is not None else None}
    return {"mem_gib": est.terms_gib()["total"] if est is not None else None,
            "gpu_gib": round(memory / GIB, 1) if memory is not None else None}
