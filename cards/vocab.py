"""Meanings of the fixed vocabularies, for the card's axis and measurement tables.

The vocabularies themselves (which values exist) live in ``llm_powertrace_ds.schema``; this
module only adds a one-line meaning per value. A column listed here is a *fixed vocabulary*: the
card prints each value with its meaning and marks a value it does not know. Columns not listed
(e.g. ``serving_engine``, ``dataset_name``) are free text and are listed as found.
"""

from __future__ import annotations

from llm_powertrace_ds import schema

VALUE_MEANINGS: dict[str, dict[str, str]] = {
    "workload": {
        "finetune": "fine-tuning (training steps)",
        "inference": "inference (serving a request stream)",
    },
    "method": {
        "full": "full fine-tuning: every weight is trained",
        "lora": "LoRA: low-rank adapters trained on a frozen base model",
        "qlora": "QLoRA: LoRA on a 4-bit quantised frozen base model",
    },
    "precision": {
        "fp32": "32-bit floating point",
        "bf16": "bfloat16 mixed precision",
        "fp16": "float16 mixed precision",
    },
    "parallelism": {
        "single": "one device",
        "ddp": "distributed data parallel (a full replica per device)",
        "fsdp": "fully sharded data parallel (weights, gradients and optimiser state sharded)",
        "tp": "tensor parallel (layers split across devices)",
    },
    "batching": {
        "static": "static batching: a batch runs to completion before the next is admitted",
        "continuous": "continuous batching: requests join and leave the running batch",
    },
    "arrival_pattern": {
        "closed": "closed loop: a new request is sent when one finishes (fixed concurrency)",
        "poisson": "open loop: exponential inter-arrival times (Poisson process)",
        "gamma": "open loop: gamma inter-arrival times (bursty when `arrival_cv` > 1)",
        "replay": "arrival times replayed from a recorded trace",
    },
    "length_distribution": {
        "fixed": "every request has `prompt_len` prompt and `output_len` output tokens",
        "uniform": "lengths drawn uniformly from the range in `length_params`",
        "list": "lengths drawn from the list in `length_params`",
        "replay": "lengths replayed from the file named in `length_params`",
    },
    "weight_quant": {
        "none": "weights in the compute precision",
        "int8": "8-bit integer weights",
        "int4": "4-bit integer weights",
        "fp8": "8-bit floating-point weights",
    },
    "kv_cache_quant": {
        "none": "KV cache in the compute precision",
        "int4": "4-bit quantised KV cache",
        "int2": "2-bit quantised KV cache",
    },
    "model_source": {
        "zoo": "published architecture instantiated with random weights (compute, and so "
               "power, depends on shape, not on weight values)",
        "hub": "pretrained weights from the local Hugging Face cache",
        "import": "imported trace: the model as the source names it",
    },
    "sampler": {
        "nvml": "our NVML sampler, in its own process",
        "cpu_proxy": "NOT a GPU measurement: a virtual device modelled from real CPU activity",
        "import:nvidia-smi": "imported from an `nvidia-smi --query-gpu` CSV log",
        "import:powertrace-csv": "imported from the LLM-PowerTrace authors' canonical CSV",
        "import:mlenergy-v2": "imported ML.ENERGY leaderboard v2 run summary (no trace)",
    },
    "power_field": dict(schema.POWER_FIELDS),
    "status": {
        "ok": "completed",
        "error": "failed",
        "cancelled": "cancelled before completion",
    },
}


def meaning(column: str, value: object) -> str | None:
    """The meaning of ``value`` in ``column``'s fixed vocabulary.

    Returns ``None`` when ``column`` is free text; ``"not in the documented vocabulary"`` for a
    value the vocabulary does not list.

    Example:
        >>> meaning("method", "lora")
        'LoRA: low-rank adapters trained on a frozen base model'
    """
    vocab = VALUE_MEANINGS.get(column)
    if vocab is None:
        return None
    if value is None:
        return "not set (null)"
    return vocab.get(str(value), "not in the documented vocabulary")
