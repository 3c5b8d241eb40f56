"""Choosing and constructing the sampler's source (``nvml`` or ``cpu_proxy``).

The factory lives apart from the :class:`~generation.sampler.base.Source` interface, so the
interface imports no implementation and each implementation imports only the interface.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .base import PIDS_DIR, Source
from .config import SamplerConfig
from .errors import SamplerConfigError, SourceUnavailable, WrongBinding

log = logging.getLogger(__name__)


def resolve_source(config: SamplerConfig) -> str:
    """Decide which source a configuration uses, before anything starts.

    ``cpu_proxy`` is always usable. ``nvml`` needs the official binding and a usable GPU; when
    it was asked for explicitly and is unavailable this raises; ``auto`` falls back to
    ``cpu_proxy`` (except when a GPU works but the binding is the wrong one: fixing that beats
    silently measuring a proxy). The choice is logged.

    Args:
        config: the sampler configuration.

    Returns:
        ``"nvml"`` or ``"cpu_proxy"``.

    Raises:
        SamplerConfigError: ``nvml`` asked for where NVML is unavailable, a GPU index out of
            range, a MIG GPU without ``allow_mig``, or (also with ``auto``) a working GPU read
            through the unofficial ``pynvml`` binding.

    Example:
        >>> resolve_source(SamplerConfig(source="cpu_proxy"))
        'cpu_proxy'
    """
    if config.source == "cpu_proxy":
        log.info("sampler source: cpu_proxy (asked for)")
        return "cpu_proxy"
    from . import nvml

    try:
        summary = nvml.check_available(config.gpu_indices, allow_mig=config.allow_mig)
    except SourceUnavailable as exc:
        if config.source == "nvml" or isinstance(exc, WrongBinding):
            asked = "was asked for" if config.source == "nvml" else "(auto) found a GPU"
            raise SamplerConfigError(f"sampler source 'nvml' {asked} but NVML is "
                                     f"unavailable: {exc}") from exc
        log.info("sampler source: cpu_proxy (auto; NVML unavailable: %s)", exc)
        return "cpu_proxy"
    log.info("sampler source: nvml (%s)", summary)
    return "nvml"


def make_source(name: str, config: SamplerConfig, staging_dir: Path,
                exclude_pids: tuple[int, ...] = ()) -> Source:
    """Construct (not open) the source ``name`` for ``config``.

    The node's RAPL zones join as host devices unless ``config.host_power`` is ``off``.
    """
    primary = _primary(name, config, staging_dir, exclude_pids)
    if config.host_power == "off":
        return primary
    from .composite import WithHostDevices
    from .rapl import RaplSource

    return WithHostDevices(primary, RaplSource(config.powercap_dir))


def _primary(name: str, config: SamplerConfig, staging_dir: Path,
             exclude_pids: tuple[int, ...]) -> Source:
    if name == "nvml":
        from .nvml import NvmlSource

        return NvmlSource(config.gpu_indices, uuid_salt=config.uuid_salt,
                          allow_mig=config.allow_mig)
    if name == "cpu_proxy":
        from .cpu_proxy import CpuProxySource

        return CpuProxySource(Path(staging_dir) / PIDS_DIR, idle_w=config.idle_w,
                              max_w=config.max_w, exclude_pids=exclude_pids)
    raise SamplerConfigError(f"sampler source {name!r} is unknown")
