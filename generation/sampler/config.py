"""The sampler's configuration: a frozen dataclass, validated when it is made."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .errors import SamplerConfigError

SOURCES = ("auto", "nvml", "cpu_proxy")
PRIORITIES = ("auto", "fifo", "nice", "none")

SourceName = Literal["auto", "nvml", "cpu_proxy"]
HostPower = Literal["auto", "off"]
HOST_POWER = ("auto", "off")
Priority = Literal["auto", "fifo", "nice", "none"]


@dataclass(frozen=True)
class SamplerConfig:
    """How to sample.

    Attributes:
        source: ``auto`` (``nvml`` when a GPU is usable, else ``cpu_proxy``), ``nvml`` or
            ``cpu_proxy``.
        period_ms: tick period in ms (> 0; default 100).
        gpu_indices: NVML indices to read; ``None`` = the GPUs ``CUDA_VISIBLE_DEVICES`` names,
            else all.
        idle_w: ``cpu_proxy`` model power at zero CPU utilisation, W.
        max_w: ``cpu_proxy`` model power at full utilisation, W (also its ``power_limit_w``).
        flush_s: the spool is written out at least this often, s (0 < flush_s <= 1).
        rescan_s: how often the sampler re-reads pid files and a process tree's children, s.
        priority: scheduling priority to ask for: ``auto`` tries ``SCHED_FIFO``, then a negative
            nice value, then stays as it is; ``fifo``/``nice`` try only that (falling back to
            the default when not permitted); ``none`` leaves the priority alone. What was
            obtained is recorded in the provenance.
        uuid_salt: salt of the published GPU UUID hash; ``None`` = ``$LLM_POWERTRACE_SALT`` or
            the project's default salt.
        allow_mig: sample a GPU in MIG mode (power is then whole-GPU, recorded); refused by
            default.
        start_timeout_s: how long ``Sampler.start`` waits for the first tick, s.
        host_power: ``auto`` also samples the node's CPU package and DRAM power from the Linux
            powercap interface (RAPL) on the same tick, as devices of kind ``cpu_package`` /
            ``dram`` (never GPU power), where it is readable (else said once in the log);
            ``off`` does not look.
        powercap_dir: the powercap folder (``/sys/class/powercap``; tests use a fake tree).

    Raises:
        SamplerConfigError: any invalid field (named in the message).

    Example:
        >>> SamplerConfig(source="cpu_proxy", period_ms=50).period_ns
        50000000
    """

    source: SourceName = "auto"
    period_ms: float = 100.0
    gpu_indices: tuple[int, ...] | None = None
    idle_w: float = 60.0
    max_w: float = 300.0
    flush_s: float = 0.5
    rescan_s: float = 1.0
    priority: Priority = "auto"
    uuid_salt: str | None = None
    allow_mig: bool = False
    start_timeout_s: float = 60.0
    host_power: HostPower = "auto"
    powercap_dir: str = "/sys/class/powercap"

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise SamplerConfigError(
                f"sampler source {self.source!r} is unknown; choose one of {', '.join(SOURCES)}")
        if self.priority not in PRIORITIES:
            raise SamplerConfigError(
                f"sampler priority {self.priority!r} is unknown; choose one of "
                f"{', '.join(PRIORITIES)}")
        if self.host_power not in HOST_POWER:
            raise SamplerConfigError(f"host_power {self.host_power!r} is unknown; choose one of "
                                     f"{', '.join(HOST_POWER)}")
        _positive("period_ms", self.period_ms)
        if self.period_ms < 1.0:
            raise SamplerConfigError(f"period_ms={self.period_ms!r} is below 1 ms")
        _positive("flush_s", self.flush_s)
        if self.flush_s > 1.0:
            raise SamplerConfigError(f"flush_s={self.flush_s!r} must be <= 1 s (the spool is "
                                     "flushed at least once a second)")
        _positive("rescan_s", self.rescan_s)
        _positive("start_timeout_s", self.start_timeout_s)
        _finite("idle_w", self.idle_w)
        _finite("max_w", self.max_w)
        if self.idle_w < 0:
            raise SamplerConfigError(f"idle_w={self.idle_w!r} must be >= 0 W")
        if not self.max_w > self.idle_w:
            raise SamplerConfigError(
                f"max_w={self.max_w!r} must be greater than idle_w={self.idle_w!r}")
        if self.gpu_indices is not None:
            if isinstance(self.gpu_indices, (str, bytes)) or not hasattr(self.gpu_indices, "__iter__"):
                raise SamplerConfigError(
                    f"gpu_indices={self.gpu_indices!r} must be a list of GPU indices or None")
            indices = tuple(self.gpu_indices)
            for i in indices:
                if isinstance(i, bool) or not isinstance(i, int) or i < 0:
                    raise SamplerConfigError(f"gpu index {i!r} in gpu_indices is not an "
                                             "integer >= 0")
            if len(set(indices)) != len(indices):
                raise SamplerConfigError(f"gpu_indices={list(indices)} has duplicates")
            if not indices:
                raise SamplerConfigError("gpu_indices is empty (use None for all GPUs)")
            object.__setattr__(self, "gpu_indices", indices)
        if self.source == "cpu_proxy" and self.gpu_indices is not None:
            raise SamplerConfigError("gpu_indices applies to the nvml source only "
                                     "(cpu_proxy has one virtual device per rank)")

    @property
    def period_ns(self) -> int:
        """The period in integer ns."""
        return int(round(self.period_ms * 1e6))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of the fields (``from_dict`` restores it)."""
        out = asdict(self)
        if out["gpu_indices"] is not None:
            out["gpu_indices"] = list(out["gpu_indices"])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplerConfig:
        """Rebuild a config from :meth:`to_dict` output (unknown keys are an error)."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise SamplerConfigError(f"unknown sampler settings {unknown}; known: {sorted(known)}")
        data = dict(data)
        if data.get("gpu_indices") is not None:
            data["gpu_indices"] = tuple(data["gpu_indices"])
        return cls(**data)


def _finite(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SamplerConfigError(f"{name}={value!r} is not a finite number")


def _positive(name: str, value: Any) -> None:
    _finite(name, value)
    if value <= 0:
        raise SamplerConfigError(f"{name}={value!r} must be > 0")
