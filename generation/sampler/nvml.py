"""The ``nvml`` source: real GPUs through nvidia-ml-py (the only module importing the binding).

nvidia-ml-py installs a module named ``pynvml``; so did the old unofficial ``pynvml``
distribution, which shadows it with different behaviour. :func:`check_binding` finds which
installed distribution provides the module (``importlib.metadata``) and refuses the unofficial
one with the command that fixes it.

Every call into the binding goes through :func:`_call`, wrapped by one decorator
(:func:`_translate`) that maps NVML return codes through one table (:data:`ERROR_TABLE`) to the
sampler's hierarchy — ``NotSupported``, ``NoPermission``, ``GpuLost``, ``UnknownError`` —
raised ``from`` the original ``NVMLError``. Tests replace this module's ``pynvml`` attribute
with a test double that keeps the real error classes and constants.

Per tick and GPU: **one** ``nvmlDeviceGetFieldValues`` call for every field-backed value at once
— instant power (field 186), the 1 s-average power (185) and the energy counter (191), each with
its own return code — and one ``nvmlDeviceGetSamples`` call for the driver's power buffer; then
utilisation, memory used, SM and memory clocks, temperature and clock-event reasons, which NVML
offers through no field id. Whatever the
start-up probe finds unsupported (or forbidden) is never read again and stays null for the whole
run. ``nvmlDeviceGetPowerUsage`` (a 1 s average on Ampere-non-GA100 and newer) is used only when
field 186 fails at start-up on some GPU — with any code: NOT_SUPPORTED, NO_PERMISSION, or the
INVALID_ARGUMENT older drivers answer — and then for every GPU so that ``power_field`` is one
value; a run of null power labelled ``instant`` cannot happen. Clock-event reasons fall back to
the older ``nvmlDeviceGetCurrentClocksThrottleReasons``.

Each field value carries NVML's own timestamp (``c_nvmlFieldValue_t.timestamp``, CPU µs): it is
kept per sample (``Reading.power_ts_us``, the spool's ``power_ts_us``). That timestamp is when
NVML *fetched* the value — it changes on every call — so it says nothing about whether the driver
measured anything new. Staleness (fault bit ``stale_power``) is decided from the driver's own
power buffer and the values: a tick whose power equals the previous tick's while the buffer
received no newer sample is a repeat; where the buffer is unavailable, a tick whose instant
power and 1 s average (or, without it, energy counter) are both unchanged is.

The driver's buffer of its own power samples (``nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES,
last_seen_us)``, mW with CPU-µs timestamps) is read once per tick for the samples newer than the
last one seen (NVML answers NOT_FOUND when there is none), and published as a second, finer
series per device (``driver_power_t_us`` / ``driver_power_w``). What the buffer holds is what the
power sensor reported at the driver's own rate — not a continuous measurement: on H100 the
sensor covers only about a quarter of the runtime (Yang et al., arXiv 2312.02741), so short
spikes between its windows are not in it. Samples already in the buffer when the source opens
predate the run and are skipped.

Small public device functions (raw units: mW, MHz) — :func:`session`, :func:`select_devices`,
:func:`device_name`, :func:`compute_capability`, the power-limit getters and
:func:`set_power_limit_mw`, :func:`lock_gpu_clocks_mhz`, :func:`reset_gpu_locked_clocks`, ... —
are what ``generation.sampler.settings`` (GPU probes, power caps and locked clocks with restore)
is built on; nothing outside this module calls the binding or this module's private helpers.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llm_powertrace_ds.privacy import hash_identifier

from .base import (
    FAULT_FIELD_ERROR,
    FAULT_FIELD_NOT_SUPPORTED,
    FAULT_NO_PERMISSION,
    FAULT_STALE,
    FAULT_TRANSIENT,
    NAN,
    DeviceInfo,
    Reading,
    Source,
)
from .errors import (
    GpuLost,
    NoPermission,
    NotSupported,
    SamplerConfigError,
    SamplerError,
    SourceError,
    SourceUnavailable,
    UnknownError,
    WrongBinding,
)

try:  # the `generate` extra; without it only cpu_proxy is available
    import pynvml
except ImportError:  # pragma: no cover - depends on the environment
    pynvml = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

# NVML field ids (nvml.h; stable ABI).
FI_POWER_AVERAGE = 185
FI_POWER_INSTANT = 186
FI_ENERGY = 191
FIELD_IDS = (FI_POWER_INSTANT, FI_POWER_AVERAGE, FI_ENERGY)

# NVML return codes (nvml.h; stable ABI) that the table distinguishes.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999

NVML_TOTAL_POWER_SAMPLES = 0
"""``nvmlSamplingType_t`` of the driver's total-power sample buffer (nvml.h; stable ABI)."""

ERROR_TABLE: Mapping[int, type[SourceError]] = {
    NVML_ERROR_NOT_SUPPORTED: NotSupported,
    NVML_ERROR_FUNCTION_NOT_FOUND: NotSupported,
    NVML_ERROR_NO_PERMISSION: NoPermission,
    NVML_ERROR_GPU_IS_LOST: GpuLost,
    NVML_ERROR_RESET_REQUIRED: GpuLost,
}
"""NVML return code -> error class; every other code is ``UnknownError`` (transient)."""

UNAVAILABLE_CODES = frozenset({NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND,
                               NVML_ERROR_UNINITIALIZED})
"""Codes that, at ``nvmlInit``, mean there is no usable NVML on this machine."""


_FIX_UNOFFICIAL = ("pip uninstall -y pynvml && pip install --force-reinstall 'nvidia-ml-py>=12.535'")

T = TypeVar("T")


def error_class(code: int | None) -> type[SourceError]:
    """The sampler error class of an NVML return code."""
    return ERROR_TABLE.get(code, UnknownError) if code is not None else UnknownError


def translate_error(exc: BaseException) -> SourceError:
    """Translate an ``NVMLError`` into the sampler's hierarchy (the caller raises it ``from``)."""
    code = getattr(exc, "value", None)
    cls = error_class(code)
    return cls(f"NVML error {code}: {exc}", code)


def _translate(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: re-raise the binding's ``NVMLError`` as the sampler's error, ``from`` it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except pynvml.NVMLError as exc:
            raise translate_error(exc) from exc

    return wrapper


@_translate
def _call(name: str, *args: Any) -> Any:
    """Call ``pynvml.<name>(*args)``: the one place the binding is called.

    A function this binding version lacks is ``NotSupported`` (as NVML's own
    ``NVML_ERROR_FUNCTION_NOT_FOUND`` for a function the driver lacks).
    """
    fn = getattr(pynvml, name, None)
    if fn is None:
        raise NotSupported(f"the NVML binding has no {name}", NVML_ERROR_FUNCTION_NOT_FOUND)
    return fn(*args)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ---------------------------------------------------------------------------------------------
# The binding and the machine
# ---------------------------------------------------------------------------------------------

def _module_providers(module: str) -> list[str]:
    """Distributions that install the top-level module ``module``."""
    return list(importlib.metadata.packages_distributions().get(module, []))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_binding() -> str:
    """Check that ``pynvml`` comes from nvidia-ml-py; return its version.

    Raises:
        SourceUnavailable: the binding is missing.
        WrongBinding: the unofficial ``pynvml`` distribution provides the module (the message
            says how to fix it).
    """
    if pynvml is None:
        raise SourceUnavailable("the NVML binding is not installed: pip install "
                                "'llm-powertrace[generate]' (or pip install nvidia-ml-py)")
    providers = {_norm(p) for p in _module_providers("pynvml")}
    if "pynvml" in providers:
        raise WrongBinding(
            "the module `pynvml` is provided by the unofficial 'pynvml' distribution, not by "
            f"NVIDIA's official binding nvidia-ml-py; fix: {_FIX_UNOFFICIAL}")
    if providers and "nvidia-ml-py" not in providers:
        raise WrongBinding(f"the module `pynvml` comes from {sorted(providers)}, not "
                                f"nvidia-ml-py; fix: {_FIX_UNOFFICIAL}")
    try:
        return importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _init() -> None:
    try:
        _call("nvmlInit")
    except SourceError as exc:
        raise SourceUnavailable(f"NVML could not be initialised ({exc}); is an NVIDIA driver "
                                "installed and a GPU visible?") from exc
    except OSError as exc:  # the shared library itself could not be loaded
        raise SourceUnavailable(f"NVML could not be loaded: {exc}") from exc


def _shutdown() -> None:
    try:
        _call("nvmlShutdown")
    except SourceError as exc:
        log.warning("nvmlShutdown failed: %s", exc)


def _visible_entries(env: Mapping[str, str]) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as a list of entries, or ``None`` when it is not set."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    return [e.strip() for e in raw.split(",") if e.strip()]


def _select_handles(gpu_indices: Sequence[int] | None, env: Mapping[str, str]
                    ) -> list[tuple[int, Any]]:
    """(NVML index, handle) of every GPU to sample, in order. NVML must be initialised.

    Explicit ``gpu_indices`` are NVML indices. Otherwise ``CUDA_VISIBLE_DEVICES`` is respected:
    integer entries are taken as NVML indices (true when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and on
    nodes of identical GPUs), ``GPU-<uuid>`` entries (or unique prefixes) are looked up by UUID.
    """
    count = int(_call("nvmlDeviceGetCount"))
    if count == 0:
        raise SourceUnavailable("NVML reports no GPU")

    def by_index(i: int, what: str) -> tuple[int, Any]:
        if not 0 <= i < count:
            raise SamplerConfigError(f"{what} {i} is out of range: this machine has {count} "
                                     f"GPU(s) (indices 0..{count - 1})")
        return i, _call("nvmlDeviceGetHandleByIndex", i)

    if gpu_indices is not None:
        return [by_index(i, "gpu index") for i in gpu_indices]
    entries = _visible_entries(env)
    if entries is None:
        return [by_index(i, "gpu index") for i in range(count)]
    if not entries:
        raise SourceUnavailable("CUDA_VISIBLE_DEVICES is empty: no GPU is visible")
    uuids: list[str] | None = None
    out: list[tuple[int, Any]] = []
    ints = [e for e in entries if re.fullmatch(r"\d+", e)]
    # A container (or a cgroup-constrained Slurm step) may show NVML only the GPUs it was given,
    # renumbered from 0, while CUDA_VISIBLE_DEVICES still holds the host's indices: then the
    # entries are positions, not NVML indices (the run-start UUID check confirms the mapping).
    positional = (len(ints) == len(entries) == count
                  and any(int(e) >= count for e in ints))
    if positional:
        log.warning("CUDA_VISIBLE_DEVICES=%s holds host indices but NVML sees %d GPU(s): "
                    "taking them in order", ",".join(entries), count)
    for pos, entry in enumerate(entries):
        if re.fullmatch(r"\d+", entry):
            out.append(by_index(pos if positional else int(entry), "CUDA_VISIBLE_DEVICES entry"))
        elif entry.startswith("GPU-"):
            if uuids is None:
                uuids = [_text(_call("nvmlDeviceGetUUID", _call("nvmlDeviceGetHandleByIndex", i)))
                         for i in range(count)]
            matches = [i for i, u in enumerate(uuids) if u.startswith(entry)]
            if len(matches) != 1:
                raise SamplerConfigError(f"CUDA_VISIBLE_DEVICES entry {entry!r} matches "
                                         f"{len(matches)} GPUs")
            out.append(by_index(matches[0], "CUDA_VISIBLE_DEVICES entry"))
        elif entry.startswith("MIG-"):
            out.append(by_index(_mig_parent_index(entry), "CUDA_VISIBLE_DEVICES entry"))
        else:
            raise SamplerConfigError(f"CUDA_VISIBLE_DEVICES entry {entry!r} is neither an index "
                                     "nor a GPU or MIG UUID")
    if len({i for i, _ in out}) != len(out):
        raise SamplerConfigError(f"CUDA_VISIBLE_DEVICES={','.join(entries)} names a GPU twice")
    return out


def _mig_parent_index(mig_uuid: str) -> int:
    """The NVML index of the GPU a MIG instance (``MIG-<uuid>``) belongs to.

    NVML reads power per whole GPU: the parent is what the sampler reads (and, being in MIG
    mode, is refused unless ``allow_mig``).
    """
    try:
        mig = _call("nvmlDeviceGetHandleByUUID", mig_uuid)
        parent = _call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig)
        return int(_call("nvmlDeviceGetIndex", parent))
    except SourceError as exc:
        raise SamplerConfigError(f"CUDA_VISIBLE_DEVICES entry {mig_uuid!r} is a MIG instance "
                                 f"whose GPU NVML cannot find ({exc}); NVML reads power per "
                                 "whole GPU: make the whole GPU visible") from exc


def visible_entries(env: Mapping[str, str] | None = None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` of ``env`` (default ``os.environ``) as entries; ``None`` if unset."""
    return _visible_entries(os.environ if env is None else env)


def mig_instance_uuid(entry: str) -> str:
    """The full UUID NVML gives the MIG instance ``entry`` (``MIG-...``; in a session).

    A workload on a MIG instance sees that instance's UUID (``torch.cuda`` reports it), not its
    parent GPU's: the run-start check must compare it with this, while power is read from the
    parent (:func:`select_devices`).
    """
    return _text(_call("nvmlDeviceGetUUID", _call("nvmlDeviceGetHandleByUUID", entry)))


def _mig_enabled(handle: Any) -> bool:
    try:
        current, _pending = _call("nvmlDeviceGetMigMode", handle)
    except (NotSupported, NoPermission):
        return False
    return bool(current)


def check_available(gpu_indices: Sequence[int] | None = None, *, allow_mig: bool = False,
                    env: Mapping[str, str] | None = None) -> str:
    """Check that NVML can sample the requested GPUs; return a one-line description.

    Initialises NVML and shuts it down again; changes nothing.

    Raises:
        SourceUnavailable: no binding, the wrong binding, no driver, no GPU.
        SamplerConfigError: an index out of range, a bad ``CUDA_VISIBLE_DEVICES`` entry, a MIG
            GPU without ``allow_mig``.
    """
    if pynvml is None:
        check_binding()  # raises with the install hint
    _init()  # first: on a machine without a driver this fails fast
    try:
        check_binding()  # ~0.3 s (scans installed distributions), only where NVML works
        handles = _select_handles(gpu_indices, os.environ if env is None else env)
        names = []
        for index, handle in handles:
            if _mig_enabled(handle) and not allow_mig:
                raise SamplerConfigError(_mig_message(index))
            names.append(f"{index}: {_text(_call('nvmlDeviceGetName', handle))}")
    except (NotSupported, NoPermission, UnknownError, GpuLost) as exc:
        raise SourceUnavailable(f"NVML is not usable: {exc}") from exc
    finally:
        _shutdown()
    return ", ".join(names)


def _mig_message(index: int) -> str:
    return (f"GPU {index} is in MIG mode: NVML reports power for the whole GPU, not per "
            "instance; refusing (set allow_mig=True to sample anyway; the provenance then says "
            "power is whole-GPU)")


def uuid_hash(uuid: str, salt: str | None = None) -> str:
    """Salted SHA-256 of a GPU UUID (first 16 hex digits); the UUID itself is never stored.

    The same function as the importers' (``llm_powertrace_ds.privacy``), so a device hashes the
    same whether measured or imported.
    """
    return hash_identifier(uuid, salt)


def _cuda_version(raw: int) -> str:
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def field_value(fv: Any) -> float:
    """The numeric value of a ``c_nvmlFieldValue_t`` according to its ``valueType``."""
    attr = _VALUE_ATTR.get(int(fv.valueType))
    if attr is None:
        return NAN
    return float(getattr(fv.value, attr))


# ---------------------------------------------------------------------------------------------
# Device facts and settings (public, raw units; the settings logic is in ``settings.py``)
# ---------------------------------------------------------------------------------------------

@contextlib.contextmanager
def session() -> Iterator[None]:
    """NVML initialised for the duration (``nvmlInit`` on entry, ``nvmlShutdown`` on exit).

    NVML counts initialisations, so sessions nest. The device functions below need one.

    Raises:
        SourceUnavailable: no binding, or NVML could not be initialised (no driver).
    """
    if pynvml is None:
        check_binding()  # raises with the install hint
    _init()
    try:
        yield
    finally:
        _shutdown()


def select_devices(gpu_indices: Sequence[int] | None = None, *, allow_mig: bool = False,
                   env: Mapping[str, str] | None = None) -> list[tuple[int, Any]]:
    """``(NVML index, handle)`` of the GPUs to use, as the sampler selects them (in a session).

    Args:
        gpu_indices: NVML indices; ``None`` = ``CUDA_VISIBLE_DEVICES``, else all GPUs.
        allow_mig: accept GPUs in MIG mode.
        env: environment to read ``CUDA_VISIBLE_DEVICES`` from (default ``os.environ``).

    Raises:
        SourceUnavailable: no GPU.
        SamplerConfigError: an index out of range, a bad ``CUDA_VISIBLE_DEVICES`` entry, a MIG
            GPU without ``allow_mig``.
        SourceError: NVML failed.
    """
    handles = _select_handles(gpu_indices, os.environ if env is None else env)
    if not allow_mig:
        for index, handle in handles:
            if _mig_enabled(handle):
                raise SamplerConfigError(_mig_message(index))
    return handles


def device_handle(index: int) -> Any:
    """The handle of the GPU of NVML index ``index`` (in a session)."""
    return _call("nvmlDeviceGetHandleByIndex", int(index))


def device_handle_by_uuid(uuid: str) -> Any:
    """The handle of the GPU whose UUID is ``uuid`` (``GPU-...``; in a session)."""
    return _call("nvmlDeviceGetHandleByUUID", uuid)


def persistence_mode(handle: Any) -> bool:
    """Whether the GPU is in persistence mode (the driver stays loaded between processes)."""
    return int(_call("nvmlDeviceGetPersistenceMode", handle)) == int(
        getattr(pynvml, "NVML_FEATURE_ENABLED", 1))


def device_name(handle: Any) -> str:
    """The GPU's marketing name, e.g. ``NVIDIA H100 80GB HBM3``."""
    return _text(_call("nvmlDeviceGetName", handle))


def device_uuid(handle: Any) -> str:
    """The GPU's raw UUID (hash it with :func:`uuid_hash` before storing it anywhere)."""
    return _text(_call("nvmlDeviceGetUUID", handle))


def mig_enabled(handle: Any) -> bool:
    """Whether the GPU is in MIG mode (``False`` where MIG is not supported)."""
    return _mig_enabled(handle)


def compute_capability(handle: Any) -> tuple[int, int]:
    """The CUDA compute capability ``(major, minor)``, e.g. ``(9, 0)`` on Hopper."""
    major, minor = _call("nvmlDeviceGetCudaComputeCapability", handle)
    return int(major), int(minor)


def power_limit_mw(handle: Any) -> int:
    """The configured power limit in mW (what :func:`set_power_limit_mw` changes)."""
    return int(_call("nvmlDeviceGetPowerManagementLimit", handle))


def enforced_power_limit_mw(handle: Any) -> int:
    """The power limit in force in mW (the lowest of every limiter's)."""
    return int(_call("nvmlDeviceGetEnforcedPowerLimit", handle))


def default_power_limit_mw(handle: Any) -> int:
    """The power limit in mW the GPU boots with."""
    return int(_call("nvmlDeviceGetPowerManagementDefaultLimit", handle))


def power_limit_constraints_mw(handle: Any) -> tuple[int, int]:
    """The ``(minimum, maximum)`` power limit in mW the GPU accepts."""
    low, high = _call("nvmlDeviceGetPowerManagementLimitConstraints", handle)
    return int(low), int(high)


def set_power_limit_mw(handle: Any, limit_mw: int) -> None:
    """Set the power limit in mW (needs root; raises ``NoPermission`` otherwise)."""
    _call("nvmlDeviceSetPowerManagementLimit", handle, int(limit_mw))


def power_readings_mw(handle: Any) -> tuple[float, float, float, float]:
    """Every power reading of a GPU now, for checks that compare them.

    Returns:
        Instant power (field 186), 1 s average (185), ``nvmlDeviceGetPowerUsage`` (mW), the
        energy counter (field 191, mJ); ``NaN`` for any that fails.
    """
    out = [NAN, NAN, NAN, NAN]
    try:
        fvs = _call("nvmlDeviceGetFieldValues", handle, list(FIELD_IDS))
        for fid, fv in zip(FIELD_IDS, fvs, strict=True):
            if int(fv.nvmlReturn) == NVML_SUCCESS:
                out[{FI_POWER_INSTANT: 0, FI_POWER_AVERAGE: 1, FI_ENERGY: 3}[fid]] = \
                    field_value(fv)
    except (NotSupported, NoPermission, UnknownError):
        pass
    try:
        out[2] = float(_call("nvmlDeviceGetPowerUsage", handle))
    except (NotSupported, NoPermission, UnknownError):
        pass
    return out[0], out[1], out[2], out[3]


def tick_call_latencies_ms(handle: Any, repeats: int = 200) -> dict[str, list[float] | str]:
    """How long each call a sampler tick makes takes on this GPU, ``repeats`` times each.

    The calls are those of :meth:`NvmlSource.read_power` and :meth:`NvmlSource.read_rest`: the
    field-values call (186, 185, 191 at once), the driver's power buffer, the 1 s average,
    utilisation, memory, the two clocks and temperature. A call the GPU refuses is answered with
    the reason (a string) instead of its times. Wall-clock ms of each call, in order.
    """
    last_seen = [0]

    def buffer() -> None:  # as a tick reads it: only the samples newer than the last seen
        samples = _samples_since(handle, last_seen[0])
        if samples:
            last_seen[0] = max(ts for ts, _ in samples)

    calls: dict[str, Callable[[], Any]] = {
        "field_values": functools.partial(_call, "nvmlDeviceGetFieldValues", handle,
                                          list(FIELD_IDS)),
        "driver_samples": buffer,
        "power_usage": functools.partial(_call, "nvmlDeviceGetPowerUsage", handle),
        "utilization": functools.partial(_call, "nvmlDeviceGetUtilizationRates", handle),
        "memory": functools.partial(_call, "nvmlDeviceGetMemoryInfo", handle),
        "sm_clock": functools.partial(_call, "nvmlDeviceGetClockInfo", handle,
                                      pynvml.NVML_CLOCK_SM),
        "mem_clock": functools.partial(_call, "nvmlDeviceGetClockInfo", handle,
                                       pynvml.NVML_CLOCK_MEM),
        "temperature": functools.partial(_call, "nvmlDeviceGetTemperature", handle,
                                         pynvml.NVML_TEMPERATURE_GPU),
    }
    out: dict[str, list[float] | str] = {}
    for key, call in calls.items():
        try:
            call()  # the first call of a kind may set things up: not timed
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                call()
                times.append((time.perf_counter() - t0) * 1e3)
        except (NotSupported, NoPermission, UnknownError) as exc:
            out[key] = str(exc)
            continue
        out[key] = times
    return out


def sm_clock_mhz(handle: Any) -> int:
    """The current SM clock in MHz."""
    return int(_call("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_SM))


def max_sm_clock_mhz(handle: Any) -> int:
    """The highest SM clock in MHz the GPU supports."""
    return int(_call("nvmlDeviceGetMaxClockInfo", handle, pynvml.NVML_CLOCK_SM))


def lock_gpu_clocks_mhz(handle: Any, min_mhz: int, max_mhz: int) -> None:
    """Lock the GPU (SM) clock into ``[min_mhz, max_mhz]`` (Volta and newer; needs root)."""
    _call("nvmlDeviceSetGpuLockedClocks", handle, int(min_mhz), int(max_mhz))


def reset_gpu_locked_clocks(handle: Any) -> None:
    """Undo :func:`lock_gpu_clocks_mhz` (needs root)."""
    _call("nvmlDeviceResetGpuLockedClocks", handle)


# ---------------------------------------------------------------------------------------------
# The source
# ---------------------------------------------------------------------------------------------

@dataclass
class _Gpu:
    """Per-GPU state: its handle and what the probe found readable."""

    index: int
    handle: Any
    field_ids: list[int] = field(default_factory=list)
    probes: dict[str, str] = field(default_factory=dict)
    power_usage: bool = False
    energy_call: bool = False
    util: bool = False
    memory: bool = False
    sm_clock: bool = False
    mem_clock: bool = False
    temp: bool = False
    reasons_fn: str | None = None
    samples: bool = False
    last_sample_ts_us: int = 0
    pending: list[tuple[int, float]] = field(default_factory=list)
    new_samples: bool | None = None
    last_values: tuple[float, float, float] | None = None
    last_power_ts_us: float = NAN
    """NVML timestamp (CPU µs) of the previous tick's instant-power field; NaN when unknown."""


def _probe(what: str, fn: Callable[[], Any], probes: dict[str, str]) -> bool:
    """Call ``fn`` once; record ``ok``, ``not_supported``, ``no_permission`` or ``error: ...``.

    Unsupported and forbidden queries are never made again (their column stays null for the run);
    an unknown error is treated as transient (the query is kept).
    """
    try:
        fn()
    except NotSupported:
        probes[what] = "not_supported"
        return False
    except NoPermission:
        probes[what] = "no_permission"
        return False
    except UnknownError as exc:
        probes[what] = f"error at probe (kept): {exc}"
        return True
    probes[what] = "ok"
    return True


class NvmlSource(Source):
    """NVML GPUs.

    Args:
        gpu_indices: NVML indices; ``None`` = ``CUDA_VISIBLE_DEVICES``, else all GPUs.
        uuid_salt: salt of the UUID hash (``None`` = ``$LLM_POWERTRACE_SALT`` or the default).
        allow_mig: sample MIG-mode GPUs (power is whole-GPU; recorded).
        env: environment to read ``CUDA_VISIBLE_DEVICES`` from (default ``os.environ``).
    """

    name = "nvml"

    def __init__(self, gpu_indices: Sequence[int] | None = None, *, uuid_salt: str | None = None,
                 allow_mig: bool = False, env: Mapping[str, str] | None = None) -> None:
        self.gpu_indices = tuple(gpu_indices) if gpu_indices is not None else None
        self.uuid_salt = uuid_salt
        self.allow_mig = allow_mig
        self.env = env
        self.power_field = "instant"
        self._gpus: list[_Gpu] = []
        self._facts: dict[str, Any] = {}
        self._sample_interval_ms: dict[int, float | None] = {}
        self._open = False

    # -- start-up ---------------------------------------------------------------------------
    def open(self) -> list[DeviceInfo]:
        if self._open:
            raise SamplerError("this NVML source is already open")
        if pynvml is None:
            check_binding()
        _init()
        self._open = True
        try:
            return self._open_devices(check_binding())
        except (NotSupported, NoPermission, UnknownError, GpuLost) as exc:
            self.close()
            raise SourceUnavailable(f"NVML is not usable: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def _open_devices(self, binding_version: str) -> list[DeviceInfo]:
        self._facts = {
            "binding": f"nvidia-ml-py {binding_version}",
            "driver_version": self._optional("nvmlSystemGetDriverVersion", transform=_text),
            "nvml_version": self._optional("nvmlSystemGetNVMLVersion", transform=_text),
            "cuda_version": self._optional("nvmlSystemGetCudaDriverVersion",
                                           transform=lambda v: _cuda_version(int(v))),
        }
        handles = _select_handles(self.gpu_indices, os.environ if self.env is None else self.env)
        infos: list[DeviceInfo] = []
        for slot, (index, handle) in enumerate(handles):
            gpu = _Gpu(index, handle)
            mig = _mig_enabled(handle)
            if mig and not self.allow_mig:
                raise SamplerConfigError(_mig_message(index))
            name = _text(_call("nvmlDeviceGetName", handle))
            details: dict[str, Any] = {"mig_mode": mig}
            if mig:
                details["power_scope"] = "whole_gpu"
            uuid = self._optional("nvmlDeviceGetUUID", handle, transform=_text)
            pci = self._optional("nvmlDeviceGetPciInfo", handle,
                                 transform=lambda p: _text(p.busId))
            details["pci_bus_id"] = pci
            limit = self._optional("nvmlDeviceGetEnforcedPowerLimit", handle, transform=_mw_to_w)
            default = self._optional("nvmlDeviceGetPowerManagementDefaultLimit", handle,
                                     transform=_mw_to_w)
            details["power_limit_range_w"] = self._optional(
                "nvmlDeviceGetPowerManagementLimitConstraints", handle,
                transform=lambda c: [_mw_to_w(c[0]), _mw_to_w(c[1])])
            self._probe_gpu(gpu)
            details["probes"] = gpu.probes
            details["driver_power_sample_interval_ms"] = self._sample_interval_ms.get(index)
            self._gpus.append(gpu)
            infos.append(DeviceInfo(
                slot=slot, gpu_index=index, rank=slot, name=name,
                uuid_hash=uuid_hash(uuid, self.uuid_salt) if uuid else None,
                power_limit_w=limit, default_power_limit_w=default, details=details))
        # One power_field for the run: field 186 where every GPU has it, else the fallback.
        if all(FI_POWER_INSTANT in g.field_ids for g in self._gpus):
            self.power_field = "instant"
        else:
            self.power_field = "power_usage"
            for g in self._gpus:
                if FI_POWER_INSTANT in g.field_ids:
                    g.field_ids.remove(FI_POWER_INSTANT)
                g.power_usage = _probe("power_usage", functools.partial(
                    _call, "nvmlDeviceGetPowerUsage", g.handle), g.probes)
            log.warning("NVML field 186 (instant power) is unsupported on at least one GPU; "
                        "using nvmlDeviceGetPowerUsage for all (power_field=power_usage)")
        return infos

    def _optional(self, fn: str, *args: Any, transform: Callable[[Any], Any] = lambda v: v
                  ) -> Any:
        """A start-up fact that may be unsupported (``None`` then)."""
        try:
            return transform(_call(fn, *args))
        except (NotSupported, NoPermission, UnknownError) as exc:
            log.info("%s: %s", fn, exc)
            return None

    def _probe_gpu(self, gpu: _Gpu) -> None:
        h, probes = gpu.handle, gpu.probes
        names = {FI_POWER_INSTANT: "power_instant", FI_POWER_AVERAGE: "power_average",
                 FI_ENERGY: "energy"}
        try:
            values = _call("nvmlDeviceGetFieldValues", h, list(FIELD_IDS))
        except SourceError as exc:
            if isinstance(exc, GpuLost):
                raise
            # Older drivers answer the whole call with INVALID_ARGUMENT (-> UnknownError) for
            # ids they do not know: every field falls back to the older calls.
            for fid in FIELD_IDS:
                probes[names[fid]] = f"field values: {exc} (fallback)"
        else:
            for fid, fv in zip(FIELD_IDS, values, strict=True):
                code = int(fv.nvmlReturn)
                if code == NVML_SUCCESS:
                    probes[names[fid]] = "ok"
                    gpu.field_ids.append(fid)
                elif error_class(code) is NotSupported:
                    probes[names[fid]] = "not_supported"
                elif error_class(code) is NoPermission:
                    probes[names[fid]] = "no_permission"
                else:
                    # Any other code at start-up (INVALID_ARGUMENT on older drivers, ...) is not
                    # a transient hiccup to keep reading: keeping it would publish a whole run
                    # of null power labelled `instant`. Fall back to the older calls.
                    probes[names[fid]] = f"error {code} at probe (fallback)"
        if FI_ENERGY not in gpu.field_ids:
            gpu.energy_call = _probe("total_energy_consumption", functools.partial(
                _call, "nvmlDeviceGetTotalEnergyConsumption", h), probes)
        gpu.util = _probe("utilization", functools.partial(
            _call, "nvmlDeviceGetUtilizationRates", h), probes)
        gpu.memory = _probe("memory", functools.partial(_call, "nvmlDeviceGetMemoryInfo", h),
                            probes)
        gpu.sm_clock = _probe("sm_clock", functools.partial(
            _call, "nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_SM), probes)
        gpu.mem_clock = _probe("mem_clock", functools.partial(
            _call, "nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_MEM), probes)
        gpu.temp = _probe("temperature", functools.partial(
            _call, "nvmlDeviceGetTemperature", h, pynvml.NVML_TEMPERATURE_GPU), probes)
        self._probe_samples(gpu)
        # The newer name first; drivers/bindings without it answer the older throttle-reasons
        # call (same bitmask).
        for fn in ("nvmlDeviceGetCurrentClocksEventReasons",
                   "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if not hasattr(pynvml, fn):
                continue
            if _probe("clock_event_reasons", functools.partial(_call, fn, h), probes):
                gpu.reasons_fn = fn
                probes["clock_event_reasons"] = f"ok ({fn})"
                break

    def _probe_samples(self, gpu: _Gpu) -> None:
        """Probe the driver's power buffer; skip what it holds already (it predates the run).

        Records ``driver_power_samples`` in the probes and, from the buffer's own timestamps,
        the driver's sample interval (median, ms) in ``gpu.probes``'s sibling fact
        ``driver_power_sample_interval_ms`` (``None`` with fewer than three samples).
        """
        try:
            samples = _samples_since(gpu.handle, 0)
        except NotSupported:
            gpu.probes["driver_power_samples"] = "not_supported"
            return
        except NoPermission:
            gpu.probes["driver_power_samples"] = "no_permission"
            return
        except UnknownError as exc:
            gpu.probes["driver_power_samples"] = f"error at probe (not used): {exc}"
            return
        gpu.samples = True
        gpu.probes["driver_power_samples"] = "ok"
        stamps = sorted(ts for ts, _ in samples)
        if stamps:
            gpu.last_sample_ts_us = stamps[-1]
        gaps = sorted(b - a for a, b in zip(stamps, stamps[1:], strict=False) if b > a)
        self._sample_interval_ms[gpu.index] = (gaps[len(gaps) // 2] / 1000.0
                                               if len(gaps) >= 2 else None)

    # -- per tick ---------------------------------------------------------------------------
    def driver_samples(self, slot: int) -> list[tuple[int, float]]:
        """The driver's power samples (CPU µs, mW) that arrived since the previous tick."""
        gpu = self._gpus[slot]
        out, gpu.pending = gpu.pending, []
        return out

    def _read_buffer(self, gpu: _Gpu, previous_tick_us: float = NAN) -> int:
        """Fetch the buffer's new samples into ``gpu.pending``; return fault bits.

        Every sample newer than the last one fetched is kept. Whether the driver measured
        anything since the previous tick (``gpu.new_samples``, for staleness) counts only the
        samples after ``previous_tick_us``, that tick's power timestamp when known: after a
        failed buffer read, the samples of the failed tick arrive late and are not news.
        """
        gpu.new_samples = None  # unknown until the buffer answers
        try:
            samples = _samples_since(gpu.handle, gpu.last_sample_ts_us)
        except NoPermission:
            return FAULT_NO_PERMISSION
        except (NotSupported, UnknownError):
            return FAULT_TRANSIENT
        gpu.new_samples = False
        fresh = sorted((ts, mw) for ts, mw in samples if ts > gpu.last_sample_ts_us)
        if fresh:
            since = previous_tick_us if previous_tick_us == previous_tick_us else -1.0
            gpu.new_samples = fresh[-1][0] > since
            gpu.last_sample_ts_us = fresh[-1][0]
            gpu.pending.extend(fresh)
        return 0

    def read(self, slot: int) -> Reading:
        return self.read_rest(slot, self.read_power(slot))

    def read_power(self, slot: int) -> Reading:
        """The power phase of a tick: one field-values call, the driver's buffer, staleness.

        ``nvmlDeviceGetPowerUsage`` / ``nvmlDeviceGetTotalEnergyConsumption`` replace fields
        the start-up probe found unusable.
        """
        gpu = self._gpus[slot]
        h = gpu.handle
        faults = 0
        vals: dict[int, float] = {}
        stamps: dict[int, int] = {}
        if gpu.field_ids:
            try:
                fvs = _call("nvmlDeviceGetFieldValues", h, gpu.field_ids)
            except NoPermission:
                faults |= FAULT_NO_PERMISSION
            except (NotSupported, UnknownError):
                faults |= FAULT_TRANSIENT
            else:
                for fid, fv in zip(gpu.field_ids, fvs, strict=True):
                    code = int(fv.nvmlReturn)
                    if code == NVML_SUCCESS:
                        vals[fid] = field_value(fv)
                        stamps[fid] = int(fv.timestamp)
                        continue
                    cls = error_class(code)
                    if cls is GpuLost:
                        raise GpuLost(f"GPU {gpu.index}: field {fid} returned {code}", code)
                    faults |= {NotSupported: FAULT_FIELD_NOT_SUPPORTED,
                               NoPermission: FAULT_NO_PERMISSION}.get(cls, FAULT_FIELD_ERROR)
        out = [NAN] * 10
        power_ts_us = float(stamps[FI_POWER_INSTANT]) if FI_POWER_INSTANT in stamps else NAN
        out[0] = vals.get(FI_POWER_INSTANT, NAN)
        out[1] = vals.get(FI_POWER_AVERAGE, NAN)
        out[2] = vals.get(FI_ENERGY, NAN)
        faults |= _read_calls(out, [
            (gpu.power_usage, "nvmlDeviceGetPowerUsage", (h,), lambda v: _set(out, 0, v)),
            (gpu.energy_call, "nvmlDeviceGetTotalEnergyConsumption", (h,),
             lambda v: _set(out, 2, v)),
        ])
        previous_tick_us, gpu.last_power_ts_us = gpu.last_power_ts_us, power_ts_us
        if gpu.samples:
            faults |= self._read_buffer(gpu, previous_tick_us)
        if _stale(gpu, out[0], out[1], out[2]):
            faults |= FAULT_STALE
        return Reading._make([*out, faults, power_ts_us])  # field order of Reading

    def read_rest(self, slot: int, reading: Reading) -> Reading:
        """Complete ``reading`` with the slow signals (one call each).

        Utilisation, memory, clocks, temperature and clock-event reasons: NVML has no field id
        for them.
        """
        gpu = self._gpus[slot]
        h = gpu.handle
        out = list(reading[:10])
        faults = _read_calls(out, [
            (gpu.util, "nvmlDeviceGetUtilizationRates", (h,),
             lambda v: _set_util(out, v)),
            (gpu.memory, "nvmlDeviceGetMemoryInfo", (h,), lambda v: _set(out, 5, v.used)),
            (gpu.sm_clock, "nvmlDeviceGetClockInfo", (h, pynvml.NVML_CLOCK_SM),
             lambda v: _set(out, 6, v)),
            (gpu.mem_clock, "nvmlDeviceGetClockInfo", (h, pynvml.NVML_CLOCK_MEM),
             lambda v: _set(out, 7, v)),
            (gpu.temp, "nvmlDeviceGetTemperature", (h, pynvml.NVML_TEMPERATURE_GPU),
             lambda v: _set(out, 8, v)),
            (gpu.reasons_fn is not None, gpu.reasons_fn or "", (h,), lambda v: _set(out, 9, v)),
        ])
        return Reading._make([*out, reading.faults | faults, reading.power_ts_us])

    # -- the rest ---------------------------------------------------------------------------
    def provenance(self) -> dict[str, Any]:
        return {"sampler": self.name, "power_field": self.power_field, **self._facts}

    def close(self) -> None:
        if self._open:
            self._open = False
            _shutdown()


def _read_calls(out: list[float],
                calls: list[tuple[bool, str, tuple[Any, ...], Callable[[Any], None]]]) -> int:
    """Make the enabled calls, storing each value; return the fault bits of those that failed.

    ``GpuLost`` propagates (the device's series ends).
    """
    faults = 0
    for enabled, fn, args, store in calls:
        if not enabled:
            continue
        try:
            store(_call(fn, *args))
        except NoPermission:
            faults |= FAULT_NO_PERMISSION
        except NotSupported:
            faults |= FAULT_FIELD_NOT_SUPPORTED
        except UnknownError:
            faults |= FAULT_TRANSIENT
    return faults


def _samples_since(handle: Any, last_seen_us: int) -> list[tuple[int, float]]:
    """The driver's total-power samples newer than ``last_seen_us``: ``(CPU µs, mW)`` pairs.

    NVML answers NOT_FOUND when the buffer holds nothing newer: that is an empty list, not an
    error.
    """
    try:
        value_type, samples = _call("nvmlDeviceGetSamples", handle, NVML_TOTAL_POWER_SAMPLES,
                                    int(last_seen_us))
    except UnknownError as exc:
        if exc.code == NVML_ERROR_NOT_FOUND:
            return []
        raise
    attr = _VALUE_ATTR.get(int(value_type), "uiVal")
    return [(int(x.timeStamp), float(getattr(x.sampleValue, attr))) for x in samples]


def _stale(gpu: _Gpu, power: float, average: float, energy: float) -> bool:
    """Whether this tick's power repeats the previous tick's measurement (see the docstring).

    With the driver's buffer: the value is unchanged and no newer sample arrived. Without it (or
    when the buffer failed this tick): the instant value and the 1 s average (or, without it,
    the energy counter) are both unchanged — one value alone repeats legitimately on a flat
    load.
    """
    previous, gpu.last_values = gpu.last_values, (power, average, energy)
    if previous is None or power != power or power != previous[0]:  # NaN or a new value
        return False
    if gpu.samples and gpu.new_samples is not None:
        return not gpu.new_samples
    # The 1 s average moves with any new measurement; the energy counter stands in without it.
    for now, before in ((average, previous[1]), (energy, previous[2])):
        if now == now and before == before:  # both reported (not NaN)
            return now == before
    return False


_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
               6: "usVal"}


def _set(out: list[float], i: int, value: Any) -> None:
    out[i] = float(value)


def _set_util(out: list[float], value: Any) -> None:
    """``nvmlDeviceGetUtilizationRates``: GPU and memory utilisation into slots 3 and 4."""
    out[3] = float(value.gpu)
    out[4] = float(value.memory)


def _mw_to_w(value: Any) -> float:
    return float(value) / 1000.0
