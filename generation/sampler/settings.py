"""GPU probes and GPU settings (power caps, locked clocks) on top of the NVML device layer.

Vendor-free: NVML is reached only through the public functions of ``generation.sampler.nvml``
(the only module that imports the binding), whose errors arrive translated (``NoPermission``,
``NotSupported``, ...). Two entry points:

* :func:`probe_gpus` — what the GPUs are (name, hashed UUID, compute capability, power-limit
  range) and whether a power cap or a locked clock may be set on them (and why not). Changes
  nothing. Sweep planning uses it (``generation.sweep.detect_machine``).
* :func:`device_settings` — a context manager that sets a power cap and/or locks the SM clock,
  records the requested, original and observed values (:class:`AppliedSettings`) and restores
  the original settings on exit: also when the run fails, and when applying them failed half-way.

Policy: settings change only when a sweep axis asks for it, and never
where ``$LLM_POWERTRACE_NO_DEVICE_SETTINGS`` is set (the lent device machine, shared machines):
there :func:`device_settings` refuses before NVML is even initialised.

Example::

    from generation.sampler import device_settings, probe_gpus

    [gpu] = probe_gpus([0])
    gpu.name, gpu.compute_capability, gpu.bf16       # 'NVIDIA H100 80GB HBM3', (9, 0), True
    gpu.can_set_power_limit, gpu.power_limit_refusal # False, 'needs root (or CAP_SYS_ADMIN)'
    with device_settings([0], power_limit_w=350, sm_clock_mhz=1410) as applied:
        applied[0].observed()                         # {'power_limit_w': 350.0, 'sm_clock_mhz': 1410.0}
        ...                                           # the run
    # the original power limit is back and the clocks are unlocked
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import numbers
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import (
    GpuLost,
    NoPermission,
    NotSupported,
    SamplerConfigError,
    SettingOutOfRange,
    SourceError,
    SourceUnavailable,
    UnknownError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

NO_DEVICE_SETTINGS_ENV = "LLM_POWERTRACE_NO_DEVICE_SETTINGS"
"""Set (to anything) on machines whose GPU settings must never change: every change is refused."""

AXIS_POWER_LIMIT = "power_limit_setting_w"
"""The sweep axis (and run column) of a power cap."""

AXIS_GPU_CLOCK = "gpu_clock_mhz"
"""The sweep axis (and run column) of a locked SM clock."""

BF16_MIN_COMPUTE_CAPABILITY = (8, 0)
"""bf16 compute needs Ampere or newer."""

LOCKED_CLOCKS_MIN_COMPUTE_CAPABILITY = (7, 0)
"""``nvmlDeviceSetGpuLockedClocks`` needs Volta or newer."""


def settings_refusal(env: Mapping[str, str] | None = None) -> str | None:
    """Why this process may not change GPU settings, or ``None`` where it may.

    A prediction for planning (NVML has the last word when a setting is applied): refused where
    ``$LLM_POWERTRACE_NO_DEVICE_SETTINGS`` is set, and for a process that is not root.

    Args:
        env: the environment to read (default ``os.environ``).
    """
    env = os.environ if env is None else env
    if env.get(NO_DEVICE_SETTINGS_ENV) is not None:
        return f"${NO_DEVICE_SETTINGS_ENV} is set: this machine's GPU settings must not change"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (or CAP_SYS_ADMIN)"
    return None


# ---------------------------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuProbe:
    """What one GPU is and which settings may be changed on it.

    Attributes:
        index: the NVML index.
        name: as NVML reports it (``NVIDIA H100 80GB HBM3``).
        uuid_hash: salted hash of the UUID (``nvml.uuid_hash``); ``None`` if unreadable.
        mig_mode: MIG mode is enabled.
        compute_capability: ``(major, minor)``; ``None`` if unreadable.
        power_limit_w: the configured power limit.
        default_power_limit_w: the power limit the GPU boots with.
        min_power_limit_w: the lowest power limit it accepts.
        max_power_limit_w: the highest power limit it accepts.
        power_limit_refusal: why a power cap may not be set here (``None``: it may).
        gpu_clock_refusal: why the SM clock may not be locked here (``None``: it may).

    Unreadable facts are ``None``.
    """

    index: int
    name: str
    uuid_hash: str | None = None
    mig_mode: bool = False
    compute_capability: tuple[int, int] | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    min_power_limit_w: float | None = None
    max_power_limit_w: float | None = None
    power_limit_refusal: str | None = None
    gpu_clock_refusal: str | None = None

    @property
    def can_set_power_limit(self) -> bool:
        """Whether a power cap may be set (root, a known range, not a guarded machine)."""
        return self.power_limit_refusal is None

    @property
    def can_lock_clocks(self) -> bool:
        """Whether the SM clock may be locked (root, Volta or newer, not a guarded machine)."""
        return self.gpu_clock_refusal is None

    @property
    def bf16(self) -> bool | None:
        """Whether the GPU computes in bf16 (compute capability >= 8.0); ``None``: unknown."""
        if self.compute_capability is None:
            return None
        return tuple(self.compute_capability) >= BF16_MIN_COMPUTE_CAPABILITY

    def to_dict(self) -> dict[str, Any]:
        """The fields and the derived ``can_*`` and ``bf16`` flags, JSON-ready."""
        out = dataclasses.asdict(self)
        if self.compute_capability is not None:
            out["compute_capability"] = list(self.compute_capability)
        out.update(can_set_power_limit=self.can_set_power_limit,
                   can_lock_clocks=self.can_lock_clocks, bf16=self.bf16)
        return out


def probe_gpus(indices: Sequence[int] | None = None, *, allow_mig: bool = False,
               uuid_salt: str | None = None, env: Mapping[str, str] | None = None
               ) -> list[GpuProbe]:
    """Probe the GPUs the sampler would read; changes nothing.

    Args:
        indices: NVML indices; ``None`` = ``CUDA_VISIBLE_DEVICES``, else all GPUs (as the
            sampler selects them).
        allow_mig: accept GPUs in MIG mode.
        uuid_salt: salt of the UUID hash (``None`` = ``$LLM_POWERTRACE_SALT`` or the default).
        env: environment for ``CUDA_VISIBLE_DEVICES`` and the settings guard (default
            ``os.environ``).

    Returns:
        One :class:`GpuProbe` per GPU, in selection order.

    Raises:
        SourceUnavailable: no binding, the wrong binding, no driver, no GPU, NVML failing.
        SamplerConfigError: an index out of range, a bad ``CUDA_VISIBLE_DEVICES`` entry, a MIG
            GPU without ``allow_mig``.

    Example::

        [p.name for p in probe_gpus()]      # ['NVIDIA H100 80GB HBM3', ...]
    """
    from . import nvml

    env = os.environ if env is None else env
    refusal = settings_refusal(env)
    with nvml.session():
        nvml.check_binding()
        try:
            return [_probe_one(nvml, index, handle, refusal, uuid_salt)
                    for index, handle in nvml.select_devices(indices, allow_mig=allow_mig,
                                                             env=env)]
        except (NotSupported, NoPermission, UnknownError, GpuLost) as exc:
            raise SourceUnavailable(f"NVML is not usable: {exc}") from exc


def _probe_one(nvml: Any, index: int, handle: Any, refusal: str | None,
               uuid_salt: str | None) -> GpuProbe:
    name = nvml.device_name(handle)
    uuid = _optional(nvml.device_uuid, handle)
    cc = _optional(nvml.compute_capability, handle)
    limits = _optional(nvml.power_limit_constraints_mw, handle)
    power_refusal = refusal
    if power_refusal is None and limits is None:
        power_refusal = "the GPU does not report its power-limit range"
    clock_refusal = refusal
    if clock_refusal is None and (cc is None or cc < LOCKED_CLOCKS_MIN_COMPUTE_CAPABILITY):
        clock_refusal = "locked clocks need Volta (compute capability 7.0) or newer"
    return GpuProbe(
        index=index, name=name, uuid_hash=nvml.uuid_hash(uuid, uuid_salt) if uuid else None,
        mig_mode=nvml.mig_enabled(handle), compute_capability=cc,
        power_limit_w=_w(_optional(nvml.power_limit_mw, handle)),
        default_power_limit_w=_w(_optional(nvml.default_power_limit_mw, handle)),
        min_power_limit_w=_w(limits[0]) if limits else None,
        max_power_limit_w=_w(limits[1]) if limits else None,
        power_limit_refusal=power_refusal, gpu_clock_refusal=clock_refusal)


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------

@dataclass
class AppliedSettings:
    """Requested, original and observed settings of one GPU (raw units: mW, MHz).

    Attributes:
        gpu_index: the NVML index.
        requested_power_limit_mw: the power cap asked for (``None``: not asked).
        original_power_limit_mw: the configured limit before, restored on exit.
        observed_power_limit_mw: the enforced limit right after setting (``None``: unreadable).
        requested_sm_clock_mhz: the SM clock asked for (``None``: not asked).
        observed_sm_clock_mhz: the SM clock read right after locking (``None``: unreadable).
        power_limit_set: the cap is in force now (``False`` again once restored).
        clocks_locked: the clock is locked now (``False`` again once reset).
    """

    gpu_index: int
    requested_power_limit_mw: int | None = None
    original_power_limit_mw: int | None = None
    observed_power_limit_mw: int | None = None
    requested_sm_clock_mhz: int | None = None
    observed_sm_clock_mhz: int | None = None
    power_limit_set: bool = False
    clocks_locked: bool = False

    def observed(self) -> dict[str, float | None]:
        """The observed values of the requested settings: ``power_limit_w``, ``sm_clock_mhz``."""
        out: dict[str, float | None] = {}
        if self.requested_power_limit_mw is not None:
            out["power_limit_w"] = _w(self.observed_power_limit_mw)
        if self.requested_sm_clock_mhz is not None:
            clock = self.observed_sm_clock_mhz
            out["sm_clock_mhz"] = float(clock) if clock is not None else None
        return out

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@contextlib.contextmanager
def device_settings(gpu_indices: Sequence[int], *, power_limit_w: float | None = None,
                    sm_clock_mhz: int | None = None, env: Mapping[str, str] | None = None
                    ) -> Iterator[list[AppliedSettings]]:
    """Cap the power and/or lock the SM clock of GPUs for the duration; restore them on exit.

    Every GPU is checked before any is changed (power cap within the GPU's range, clock not above
    its highest SM clock). On exit — also when the body raised, and when applying failed
    half-way — each changed GPU gets its original power limit back and its clocks unlocked
    (NVML cannot report an earlier lock, so unlocked is the state restored); a restore that
    fails is logged, not raised. Nothing is touched (NVML not even initialised) when neither
    setting is requested.

    Args:
        gpu_indices: NVML indices of the GPUs.
        power_limit_w: the power cap (``nvmlDeviceSetPowerManagementLimit``).
        sm_clock_mhz: the SM clock to lock (``nvmlDeviceSetGpuLockedClocks(min = max)``).
        env: the environment of the settings guard (default ``os.environ``).

    Yields:
        One :class:`AppliedSettings` per GPU (``[]`` when nothing is requested).

    Raises:
        NoPermission: ``$LLM_POWERTRACE_NO_DEVICE_SETTINGS`` is set, or NVML refused (no root);
            the one-line message names the axis and the reason.
        SettingOutOfRange: a value the GPU does not accept (``field`` is the axis).
        SamplerConfigError: a GPU index given twice.
        SourceError: NVML failed otherwise (``NotSupported``, ...), the axis named.

    Example::

        with device_settings([0, 1], power_limit_w=300) as applied:
            [a.observed() for a in applied]      # [{'power_limit_w': 300.0}, ...]
    """
    if power_limit_w is None and sm_clock_mhz is None:
        yield []
        return
    requested = [a for a, v in ((AXIS_POWER_LIMIT, power_limit_w), (AXIS_GPU_CLOCK, sm_clock_mhz))
                 if v is not None]
    env = os.environ if env is None else env
    if env.get(NO_DEVICE_SETTINGS_ENV) is not None:
        raise NoPermission(f"{' and '.join(requested)}: refused: ${NO_DEVICE_SETTINGS_ENV} is "
                           "set (this machine's GPU settings must never change)")
    power_mw = _check_power_value(power_limit_w)
    clock_mhz = _check_clock_value(sm_clock_mhz)
    indices = [int(i) for i in gpu_indices]
    if len(set(indices)) != len(indices):
        raise SamplerConfigError(f"{' and '.join(requested)}: GPU indices {indices} name a GPU "
                                 "twice")
    from . import journal, nvml

    applied = [AppliedSettings(i, requested_power_limit_mw=power_mw,
                               requested_sm_clock_mhz=clock_mhz) for i in indices]
    with nvml.session():
        handles: dict[int, Any] = {}
        uuids: dict[int, str] = {}
        try:
            for a in applied:  # check every GPU before changing any
                handle = handles[a.gpu_index] = nvml.device_handle(a.gpu_index)
                _check_ranges(nvml, handle, a)
            for a in applied:  # journal every original before the first set call
                _journal(nvml, journal, handles[a.gpu_index], a, uuids)
            for a in applied:
                _apply(nvml, handles[a.gpu_index], a)
            yield applied
        finally:
            restored = _restore(nvml, handles, applied)
            journal.clear([uuids[i] for i in restored if i in uuids])


def _check_power_value(watts: float | None) -> int | None:
    if watts is None:
        return None
    if (isinstance(watts, bool) or not isinstance(watts, numbers.Real) or not math.isfinite(watts)
            or watts <= 0):
        raise SettingOutOfRange(f"a power cap must be a positive number of watts, not {watts!r}",
                                field=AXIS_POWER_LIMIT)
    return int(round(watts * 1000))


def _check_clock_value(mhz: int | None) -> int | None:
    if mhz is None:
        return None
    if (isinstance(mhz, bool) or not isinstance(mhz, numbers.Real) or not math.isfinite(mhz)
            or mhz != int(mhz) or mhz <= 0):
        raise SettingOutOfRange(f"a locked clock must be a positive whole number of MHz, not "
                                f"{mhz!r}", field=AXIS_GPU_CLOCK)
    return int(mhz)


def _check_ranges(nvml: Any, handle: Any, a: AppliedSettings) -> None:
    index = a.gpu_index
    if a.requested_power_limit_mw is not None:
        limits = _optional(nvml.power_limit_constraints_mw, handle)
        if limits is not None and not limits[0] <= a.requested_power_limit_mw <= limits[1]:
            raise SettingOutOfRange(
                f"{a.requested_power_limit_mw / 1000:g} W is outside GPU {index}'s range "
                f"{limits[0] / 1000:g}-{limits[1] / 1000:g} W", field=AXIS_POWER_LIMIT)
    if a.requested_sm_clock_mhz is not None:
        top = _optional(nvml.max_sm_clock_mhz, handle)
        if top is not None and a.requested_sm_clock_mhz > top:
            raise SettingOutOfRange(f"{a.requested_sm_clock_mhz} MHz is above GPU {index}'s "
                                    f"highest SM clock {top} MHz", field=AXIS_GPU_CLOCK)


def _journal(nvml: Any, journal: Any, handle: Any, a: AppliedSettings,
             uuids: dict[int, str]) -> None:
    """Read the original settings and journal them by UUID (``generation.sampler.journal``)."""
    index = a.gpu_index
    if a.requested_power_limit_mw is not None:
        a.original_power_limit_mw = _step(AXIS_POWER_LIMIT, f"read GPU {index}'s power limit",
                                          nvml.power_limit_mw, handle)
    # Keyed by UUID (survives renumbering); a GPU whose UUID is unreadable by its NVML index.
    uuid = _optional(nvml.device_uuid, handle) or f"{journal.INDEX_KEY_PREFIX}{index}"
    journal.record(uuid, nvml_index=index, power_limit_mw=a.original_power_limit_mw,
                   clocks_locked=a.requested_sm_clock_mhz is not None)
    uuids[index] = uuid


def _apply(nvml: Any, handle: Any, a: AppliedSettings) -> None:
    index = a.gpu_index
    if a.requested_power_limit_mw is not None:
        if a.original_power_limit_mw is None:
            a.original_power_limit_mw = _step(AXIS_POWER_LIMIT,
                                              f"read GPU {index}'s power limit",
                                              nvml.power_limit_mw, handle)
        _step(AXIS_POWER_LIMIT, f"set GPU {index}'s power limit", nvml.set_power_limit_mw,
              handle, a.requested_power_limit_mw)
        a.power_limit_set = True
        a.observed_power_limit_mw = _optional(nvml.enforced_power_limit_mw, handle)
    if a.requested_sm_clock_mhz is not None:
        mhz = a.requested_sm_clock_mhz
        _step(AXIS_GPU_CLOCK, f"lock GPU {index}'s SM clock", nvml.lock_gpu_clocks_mhz, handle,
              mhz, mhz)
        a.clocks_locked = True
        a.observed_sm_clock_mhz = _optional(nvml.sm_clock_mhz, handle)
    log.info("GPU %d: power cap %s W (was %s W), SM clock %s MHz requested; observed %s", index,
             _w(a.requested_power_limit_mw), _w(a.original_power_limit_mw),
             a.requested_sm_clock_mhz, a.observed())


def _restore(nvml: Any, handles: dict[int, Any], applied: list[AppliedSettings]) -> list[int]:
    """Restore every changed GPU; return the indices whose settings are back (or untouched)."""
    failures: list[str] = []
    restored: list[int] = []
    for a in reversed(applied):
        handle = handles.get(a.gpu_index)
        n_failures = len(failures)
        if a.clocks_locked:
            try:
                nvml.reset_gpu_locked_clocks(handle)
                a.clocks_locked = False
            except SourceError as exc:
                failures.append(f"GPU {a.gpu_index} {AXIS_GPU_CLOCK}: {exc}")
        if a.power_limit_set and a.original_power_limit_mw is not None:
            try:
                nvml.set_power_limit_mw(handle, a.original_power_limit_mw)
                a.power_limit_set = False
            except SourceError as exc:
                failures.append(f"GPU {a.gpu_index} {AXIS_POWER_LIMIT} (back to "
                                f"{a.original_power_limit_mw / 1000:g} W): {exc}")
        if len(failures) == n_failures:
            restored.append(a.gpu_index)
    if failures:
        log.error("could not restore GPU settings (kept in the journal; `llm-powertrace "
                  "restore-gpu-settings` retries): %s", "; ".join(failures))
    return restored


def _step(axis: str, what: str, fn: Callable[..., T], *args: Any) -> T:
    """Call a device function; re-raise its error (same class) with the axis and the reason."""
    try:
        return fn(*args)
    except SourceError as exc:
        hint = " (needs root or CAP_SYS_ADMIN)" if isinstance(exc, NoPermission) else ""
        raise type(exc)(f"{axis}: cannot {what}: NVML refused{hint}: {exc}",
                        exc.code) from exc.__cause__ or exc  # from the original NVMLError


def _optional(fn: Callable[..., T], *args: Any) -> T | None:
    """A fact that may be unsupported, forbidden or failing (``None`` then)."""
    try:
        return fn(*args)
    except (NotSupported, NoPermission, UnknownError) as exc:
        log.info("%s: %s", getattr(fn, "__name__", fn), exc)
        return None


def _w(milliwatts: float | None) -> float | None:
    return milliwatts / 1000.0 if milliwatts is not None else None
