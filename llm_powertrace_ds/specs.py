"""Published facts the logs leave out: model sizes and GPU default power limits.

Two small tables, each entry with its source, used where a log or its metadata is silent:

- :data:`MODEL_FACTS`: parameter counts (and active parameters per token for mixture-of-experts
  models), keyed by the lower-cased model name. :func:`fill_model_facts` copies them into a
  run's metadata and records where each fact came from in ``model_facts_source``.
- :data:`PLATFORM_SPECS`: the default board power limit of each platform slug (the vendor's
  datasheet "max TDP/TGP"). :func:`spec_power_limit_w` gives it; importers use it only when the
  log reports no power limit, and then add the quality flag ``power_limit_from_spec``.

A fact is never guessed: an unknown model or an ambiguous bare family (``h100``: 350 W PCIe or
700 W SXM) gives ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelFacts:
    """Published size of one model.

    Attributes:
        params: total parameters.
        active_params: parameters used per token (mixture-of-experts); ``None`` for dense models.
        source: where the numbers come from.
    """

    params: int
    active_params: int | None
    source: str


_DEEPSEEK_7B = ModelFacts(
    6_910_365_696, None,
    "deepseek-ai/deepseek-llm-7b config.json (30 layers, hidden 4096, FFN 11008, vocab 102400, "
    "untied head): 30 x 202,383,360 + 2 x 419,430,400 + 4,096")
_MIXTRAL_8X7B = ModelFacts(
    46_700_000_000, 12_900_000_000,
    "Mistral AI, 'Mixtral of experts' (2023-12-11): 46.7B total, 12.9B used per token")
_MIXTRAL_8X22B = ModelFacts(
    141_000_000_000, 39_000_000_000,
    "Mistral AI, 'Cheaper, Better, Faster, Stronger' (2024-04-17): 141B total, 39B active")

MODEL_FACTS: dict[str, ModelFacts] = {
    "deepseek-llm-7b-base": _DEEPSEEK_7B,
    "deepseek-llm-7b-chat": _DEEPSEEK_7B,
    "gpt-j-6b": ModelFacts(6_053_381_344, None,
                           "EleutherAI/gpt-j-6b model card: n_parameters 6,053,381,344"),
    "mistral-7b-v0.1": ModelFacts(7_241_732_096, None,
                                  "mistralai/Mistral-7B-v0.1 safetensors metadata: 7.24B"),
    "mixtral-8x7b-instruct-v0.1": _MIXTRAL_8X7B,
    "mixtral-8x7b-v0.1": _MIXTRAL_8X7B,
    "mixtral-8x22b-instruct-v0.1": _MIXTRAL_8X22B,
    "mixtral-8x22b-v0.1": _MIXTRAL_8X22B,
    "qwen3-8b": ModelFacts(8_200_000_000, None, "Qwen/Qwen3-8B model card: 8.2B parameters"),
}
"""Model name (lower case, no organisation) -> facts."""


def model_facts(name: str | None) -> ModelFacts | None:
    """Facts of a model name (``org/`` prefix and case ignored), or ``None``."""
    if not name:
        return None
    key = str(name).strip().split("/")[-1].lower()
    key = key.removesuffix("-pp1")
    return MODEL_FACTS.get(key)


def fill_model_facts(meta: dict[str, Any]) -> list[str]:
    """Fill ``model_params`` / ``model_params_active`` from :data:`MODEL_FACTS` where null.

    Values already in ``meta`` win. ``model_facts_source`` records the source of each fact
    filled here.

    Returns:
        The names of the columns filled.
    """
    facts = model_facts(meta.get("model_name"))
    if facts is None:
        return []
    filled = []
    if meta.get("model_params") is None:
        meta["model_params"] = facts.params
        filled.append("model_params")
    if facts.active_params is not None and meta.get("model_params_active") is None:
        meta["model_params_active"] = facts.active_params
        filled.append("model_params_active")
    if filled:
        meta["model_facts_source"] = f"{', '.join(filled)}: {facts.source}"
    return filled


@dataclass(frozen=True)
class PlatformSpec:
    """Datasheet facts of one platform.

    Attributes:
        default_power_limit_w: default board power limit (max TDP/TGP) of one device.
        source: the datasheet.
    """

    default_power_limit_w: float
    source: str


_H100_SXM = PlatformSpec(700.0, "NVIDIA H100 Tensor Core GPU datasheet: SXM max TDP up to 700 W")
_H200_SXM = PlatformSpec(700.0, "NVIDIA H200 Tensor Core GPU datasheet: SXM max TDP up to 700 W")
_A100_SXM = PlatformSpec(400.0, "NVIDIA A100 Tensor Core GPU datasheet: SXM max TDP 400 W")
_L40S = PlatformSpec(350.0, "NVIDIA L40S datasheet: max power consumption 350 W")

PLATFORM_SPECS: dict[str, PlatformSpec] = {
    "h100_sxm_80gb": _H100_SXM,
    "h100_pcie_80gb": PlatformSpec(350.0, "NVIDIA H100 datasheet: PCIe max TDP 350 W"),
    "h100_nvl_94gb": PlatformSpec(400.0, "NVIDIA H100 NVL datasheet: max TDP 400 W"),
    "h200_sxm_141gb": _H200_SXM,
    "h200_nvl_141gb": PlatformSpec(600.0, "NVIDIA H200 datasheet: NVL max TDP up to 600 W"),
    "a100_sxm4_80gb": _A100_SXM,
    "a100_sxm4_40gb": _A100_SXM,
    "a100_pcie_40gb": PlatformSpec(250.0, "NVIDIA A100 datasheet: PCIe 40GB max TDP 250 W"),
    "a100_pcie_80gb": PlatformSpec(300.0, "NVIDIA A100 datasheet: PCIe 80GB max TDP 300 W"),
    "l40s": _L40S,
    "l40": PlatformSpec(300.0, "NVIDIA L40 datasheet: max power consumption 300 W"),
    "l4": PlatformSpec(72.0, "NVIDIA L4 datasheet: max thermal design power 72 W"),
    "a10g": PlatformSpec(300.0, "AWS EC2 G5 / NVIDIA A10G: 300 W board power"),
    "a10": PlatformSpec(150.0, "NVIDIA A10 datasheet: max TDP 150 W"),
    "t4": PlatformSpec(70.0, "NVIDIA T4 datasheet: max power 70 W"),
    "v100_sxm2_16gb": PlatformSpec(300.0, "NVIDIA V100 datasheet: SXM2 max power 300 W"),
    "v100_sxm2_32gb": PlatformSpec(300.0, "NVIDIA V100 datasheet: SXM2 max power 300 W"),
}
"""Platform slug -> default board power limit. Bare family slugs (``h100``, ``a100``,
``h200``) are absent on purpose: their form factors have different limits. ``l40s`` and ``l4``
have one form factor, so the bare label is the full slug."""


def spec_power_limit_w(platform: str | None) -> float | None:
    """The datasheet default power limit of a platform slug, or ``None`` when unknown."""
    spec = PLATFORM_SPECS.get(str(platform)) if platform else None
    return spec.default_power_limit_w if spec else None
