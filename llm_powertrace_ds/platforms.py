"""Platform slugs from GPU names, and which GPUs report a 1 s average as ``power.draw``.

Part of the column contract (:mod:`llm_powertrace_ds.schema` re-exports these names): the
platform slug is a run's split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_KNOWN_PLATFORMS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bH200\b.*\bNVL\b", re.I), "h200_nvl_141gb"),
    (re.compile(r"\bH200\b", re.I), "h200_sxm_141gb"),
    (re.compile(r"\bH100\b.*\bPCIe\b", re.I), "h100_pcie_80gb"),
    (re.compile(r"\bH100\b.*\bNVL\b", re.I), "h100_nvl_94gb"),
    (re.compile(r"\bH100\b.*HBM3", re.I), "h100_sxm_80gb"),
    (re.compile(r"\bH100\b.*SXM", re.I), "h100_sxm_80gb"),
    (re.compile(r"\bB200\b", re.I), "b200_180gb"),
    (re.compile(r"\bGH200\b", re.I), "gh200_96gb"),
    (re.compile(r"\bA100\b.*SXM4.*80", re.I), "a100_sxm4_80gb"),
    (re.compile(r"\bA100\b.*SXM4.*40", re.I), "a100_sxm4_40gb"),
    (re.compile(r"\bA100\b.*PCIE.*80", re.I), "a100_pcie_80gb"),
    (re.compile(r"\bA100\b.*PCIE.*40", re.I), "a100_pcie_40gb"),
    (re.compile(r"\bA100\b.*80\s*GB\s*PCIe", re.I), "a100_pcie_80gb"),
    (re.compile(r"\bL40S\b", re.I), "l40s"),
    (re.compile(r"\bL40\b", re.I), "l40"),
    (re.compile(r"\bL4\b", re.I), "l4"),
    (re.compile(r"\bA10G\b", re.I), "a10g"),
    (re.compile(r"\bA10\b", re.I), "a10"),
    (re.compile(r"\bT4\b", re.I), "t4"),
    (re.compile(r"\bV100\b.*SXM2.*32", re.I), "v100_sxm2_32gb"),
    (re.compile(r"\bV100\b.*SXM2.*16", re.I), "v100_sxm2_16gb"),
]
# Bare family labels from other tools: the form factor is unknown.
_BARE_FAMILIES = {"a100", "h100", "h200", "l40s", "l40", "l4", "a10", "a10g", "v100", "t4",
                  "b200", "a6000", "rtx4090"}
# GPU families whose nvidia-smi ``power.draw`` / nvmlDeviceGetPowerUsage is a 1 s average
# (Ampere except GA100, Ada, Hopper, Blackwell), per NVML's documentation.
_ONE_SECOND_AVERAGE_RE = re.compile(
    r"\b(H100|H200|GH200|H20|H800|B100|B200|GB200|L40S?|L4|L20|A10G?|A16|A2|A30|A40|"
    r"RTX\s?(A\d000|[3-5]0\d0)|RTX 6000 Ada)\b", re.I)


@dataclass(frozen=True)
class PlatformInfo:
    """Result of :func:`platform_from_name`.

    Attributes:
        slug: split-safe platform slug.
        flags: quality flags implied by the name (``form_factor_unknown``, ``platform_unknown``).
    """

    slug: str
    flags: tuple[str, ...] = ()


def platform_from_name(gpu_name: str | None) -> PlatformInfo:
    """Turn an NVML / nvidia-smi GPU name into a split-safe platform slug.

    Known names map to their form-factor slug (``NVIDIA H100 80GB HBM3`` -> ``h100_sxm_80gb``);
    bare family labels from other tools (``A100``, ``L40s``) map to the bare family slug with the
    flag ``form_factor_unknown``; no name gives ``unknown`` with ``platform_unknown``; any other
    name gives a deterministic slug of its lower-cased words.

    Example:
        >>> platform_from_name("NVIDIA A100-SXM4-80GB").slug
        'a100_sxm4_80gb'
    """
    if gpu_name is None or not str(gpu_name).strip():
        return PlatformInfo("unknown", ("platform_unknown",))
    name = str(gpu_name).strip()
    if name == "cpu_proxy":
        return PlatformInfo("cpu_proxy", ("cpu_proxy",))
    bare = name.lower().replace(" ", "")
    # NVML / nvidia-smi names start with the vendor ("NVIDIA L40S"); other tools' bare labels
    # ("L40s", "A100") name only the family.
    if bare in _BARE_FAMILIES:
        return PlatformInfo(bare, ("form_factor_unknown",))
    for pattern, slug in _KNOWN_PLATFORMS:
        if pattern.search(name):
            return PlatformInfo(slug)
    words = re.sub(r"^nvidia[\s_-]+", "", name, flags=re.I).lower()
    slug = re.sub(r"[^a-z0-9]+", "_", words).strip("_") or "unknown"
    if slug[0].isdigit():
        slug = "gpu_" + slug
    return PlatformInfo(slug)


def known_platforms() -> list[str]:
    """Every platform slug this package derives from a GPU name, and ``cpu_proxy``, sorted.

    Example:
        >>> "h100_sxm_80gb" in known_platforms(), "h100" in known_platforms()
        (True, False)
    """
    return sorted({slug for _, slug in _KNOWN_PLATFORMS} | {"cpu_proxy"})


def power_usage_is_1s_average(gpu_name: str | None) -> bool:
    """Whether ``power.draw``/``nvmlDeviceGetPowerUsage`` is a 1 s average on this GPU."""
    if not gpu_name:
        return False
    return bool(_ONE_SECOND_AVERAGE_RE.search(str(gpu_name)))
