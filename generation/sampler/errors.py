"""The sampler's small exception hierarchy (vendor-free).

Device-layer errors (``NotSupported``, ``NoPermission``, ``GpuLost``, ``UnknownError``) are what
a source raises after translating its vendor's error codes at the call site (see
``generation.sampler.nvml``); callers catch the narrow type to choose a fallback. Every error
subclasses :class:`llm_powertrace_ds.errors.PowerTraceError` and the matching built-in.
"""

from __future__ import annotations

from llm_powertrace_ds.errors import InputError, PowerTraceError


class SamplerError(PowerTraceError, RuntimeError):
    """The sampler could not start, or its process failed."""


class SamplerConfigError(SamplerError, ValueError):
    """Bad sampler configuration, raised before anything starts."""


class SettingOutOfRange(SamplerConfigError, InputError):
    """A requested GPU setting (power cap, locked clock) outside what the GPU accepts.

    ``field`` names the sweep axis (``power_limit_setting_w`` or ``gpu_clock_mhz``); raised
    before anything is changed.
    """


class SourceUnavailable(SamplerError):
    """A source cannot be used on this machine (no driver, no binding, the wrong binding)."""


class WrongBinding(SourceUnavailable):
    """A GPU is there but the NVML binding is not the official one.

    ``auto`` does not fall back to ``cpu_proxy`` for this: the message says how to fix it.
    """


class SourceError(SamplerError):
    """Base of the device-layer errors a source raises while reading.

    Attributes:
        code: the vendor's error code (e.g. an NVML return code), when there is one.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class NotSupported(SourceError):
    """The device does not support this query (the column is null for the run)."""


class NoPermission(SourceError, PermissionError):
    """The query needs privileges the process does not have."""


class GpuLost(SourceError):
    """The device fell off the bus or needs a reset; nothing more can be read from it."""


class UnknownError(SourceError):
    """Any other device error; treated as transient (that tick's values are null)."""
