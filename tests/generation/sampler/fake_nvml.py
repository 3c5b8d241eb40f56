"""A test double of the nvidia-ml-py functions the sampler uses.

It keeps the binding's real constants, error classes and ctypes structures (``pynvml``), and
replaces every function the sampler calls with a deterministic one. Each fake GPU yields
a deterministic power and energy sequence (one step per ``nvmlDeviceGetFieldValues`` call) and can
be told to fail: a field unsupported, the GPU lost from a given tick on, an error on chosen calls. Its power
limit and clock lock are state that the setters change, for the settings tests.
Tests patch ``generation.sampler.nvml.pynvml`` (where the code looks the binding up) with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml as real

NVML_SUCCESS = real.NVML_SUCCESS
NOT_SUPPORTED = real.NVML_ERROR_NOT_SUPPORTED
NO_PERMISSION = real.NVML_ERROR_NO_PERMISSION
GPU_IS_LOST = real.NVML_ERROR_GPU_IS_LOST
UNKNOWN = real.NVML_ERROR_UNKNOWN
LIBRARY_NOT_FOUND = real.NVML_ERROR_LIBRARY_NOT_FOUND
INVALID_ARGUMENT = real.NVML_ERROR_INVALID_ARGUMENT

FaultRule = Callable[[int], "int | None"]
"""call number (0-based, per GPU and function) -> NVML error code to raise, or None."""


def on_calls(code: int, *numbers: int) -> FaultRule:
    """Fail with ``code`` on the given call numbers."""
    wanted = set(numbers)
    return lambda n: code if n in wanted else None


def from_call(code: int, first: int) -> FaultRule:
    """Fail with ``code`` on every call from ``first`` on."""
    return lambda n: code if n >= first else None


def always(code: int) -> FaultRule:
    return lambda n: code


@dataclass
class FakeGpu:
    """One fake GPU.

    Attributes:
        name: as NVML reports it.
        uuid: the raw UUID (must never appear in any output).
        base_power_mw: instant power at tick 0; it rises ``step_mw`` per tick.
        step_mw: power increment per tick.
        period_s: the period the energy counter assumes (energy += power * period_s).
        energy0_mj: counter value at the first read.
        energy_scale: multiply the counter's increments (1.0 = consistent with power).
        field_codes: field id -> return code of that field in every field-values call.
        faults: function name -> rule; a rule's code is raised as ``NVMLError(code)``.
        lost_from_tick: every call fails with GPU_IS_LOST from this field-values call on.
        mig: MIG mode enabled.
        compute_capability: ``(major, minor)``.
        power_limit_mw: the configured power limit (the setters change it).
        power_range_mw: the power limits the GPU accepts.
        locked_clocks_mhz: ``(min, max)`` of a clock lock, ``None`` when unlocked.
        max_sm_clock_mhz: the highest SM clock.
        ts0_us: NVML timestamp (CPU µs) of the first field-values call; each call adds
            ``ts_step_us`` to it — as on real NVML, the field timestamp is when NVML fetched the
            value, so it advances on every call, stale or not.
        stale_ticks: field-values calls (ticks) on which the driver has taken no new
            measurement: the power fields repeat the previous call's values and the driver's
            buffer receives no sample.
        driver_samples_per_tick: samples the driver's power buffer receives between two
            field-values calls, evenly spaced (``None``: ``nvmlDeviceGetSamples`` is not
            supported); each is the tick's power plus its position in mW, so samples differ.
        driver_buffer_len: samples the buffer keeps (the oldest are dropped).
        call_code: a code the whole ``nvmlDeviceGetFieldValues`` call fails with (``None``).
        mig_uuids: UUIDs (``MIG-...``) of the MIG instances on this GPU.
        persistence: persistence mode enabled.
    """

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-11111111-2222-3333-4444-555555555555"
    base_power_mw: int = 100_000
    step_mw: int = 1_000
    period_s: float = 0.1
    energy0_mj: int = 5_000_000
    energy_scale: float = 1.0
    field_codes: dict[int, int] = field(default_factory=dict)
    faults: dict[str, FaultRule] = field(default_factory=dict)
    lost_from_tick: int | None = None
    mig: bool = False
    compute_capability: tuple[int, int] = (9, 0)
    power_limit_mw: int = 700_000
    power_range_mw: tuple[int, int] = (200_000, 700_000)
    locked_clocks_mhz: tuple[int, int] | None = None
    max_sm_clock_mhz: int = 1980
    ts0_us: int = 1_767_225_600_000_000
    ts_step_us: int = 100_000
    stale_ticks: frozenset[int] = frozenset()
    call_code: int | None = None
    mig_uuids: tuple[str, ...] = ()
    persistence: bool = True
    driver_samples_per_tick: int | None = None
    driver_buffer_len: int = 100
    tick: int = -1
    ts_us: int = 0
    energy_mj: float = 0.0
    measured_tick: int = 0
    buffer: list[tuple[int, int]] = field(default_factory=list)

    def power_mw(self) -> int:
        """The power the driver last measured (repeated on stale ticks)."""
        return self.base_power_mw + self.step_mw * max(self.measured_tick, 0)


class _Handle:
    def __init__(self, index: int, mig: str | None = None) -> None:
        self.index = index
        self.mig = mig

    def __repr__(self) -> str:
        return f"<handle {self.index}>"


class FakeNvml:
    """Module-like double of ``pynvml``. ``calls`` counts every function call.

    With ``clock`` (a test's fake monotonic clock, an object with an integer ``t`` in ns), every
    device call advances it by ``call_latency_ns``: the sampler's read phase then takes as long
    as its calls would on real NVML at that latency.
    """

    def __init__(self, gpus: list[FakeGpu] | None = None, *, init_code: int | None = None,
                 driver: str = "550.54.15", cuda: int = 12040,
                 clock: Any = None, call_latency_ns: int = 0) -> None:
        for name in dir(real):
            if name.startswith(("NVML_", "NVMLError", "c_nvml", "nvmlPciInfo")):
                setattr(self, name, getattr(real, name))
        self.NVMLError = real.NVMLError
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.init_code = init_code
        self.driver = driver
        self.cuda = cuda
        self.calls: Counter[str] = Counter()
        self._per_gpu: Counter[tuple[str, int]] = Counter()
        self.initialised = 0
        self.clock = clock
        self.call_latency_ns = call_latency_ns

    # -- helpers ----------------------------------------------------------------------------
    def _gpu(self, handle: _Handle, fn: str) -> FakeGpu:
        self.calls[fn] += 1
        if self.clock is not None:  # every device call takes call_latency_ns of the fake clock
            self.clock.t += self.call_latency_ns
        gpu = self.gpus[handle.index]
        n = self._per_gpu[(fn, handle.index)]
        self._per_gpu[(fn, handle.index)] += 1
        if gpu.lost_from_tick is not None and gpu.tick >= gpu.lost_from_tick:
            raise real.NVMLError(GPU_IS_LOST)
        rule = gpu.faults.get(fn)
        if rule is not None:
            code = rule(n)
            if code is not None:
                raise real.NVMLError(code)
        return gpu

    # -- system -----------------------------------------------------------------------------
    def nvmlInit(self):
        self.calls["nvmlInit"] += 1
        if self.init_code is not None:
            raise real.NVMLError(self.init_code)
        self.initialised += 1

    def nvmlShutdown(self):
        self.calls["nvmlShutdown"] += 1
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetNVMLVersion(self):
        return "12.550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self.gpus):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.calls["nvmlDeviceGetHandleByUUID"] += 1
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, gpu in enumerate(self.gpus):
            if gpu.uuid == text:
                return _Handle(i)
            if text in gpu.mig_uuids:
                return _Handle(i, mig=text)
        raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice):  # noqa: N803
        if migDevice.mig is None:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(migDevice.index)

    def nvmlDeviceGetIndex(self, handle):
        return handle.index

    def nvmlDeviceGetPersistenceMode(self, handle):
        return int(self._gpu(handle, "nvmlDeviceGetPersistenceMode").persistence)

    # -- static facts -----------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetUUID(self, handle):
        gpu = self._gpu(handle, "nvmlDeviceGetUUID")
        return handle.mig if handle.mig is not None else gpu.uuid

    def nvmlDeviceGetPciInfo(self, handle):
        self._gpu(handle, "nvmlDeviceGetPciInfo")
        info = real.nvmlPciInfo_t()
        info.busId = f"00000000:{handle.index + 1:02X}:00.0".encode()
        return info

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return self._gpu(handle, "nvmlDeviceGetPowerManagementLimit").power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        self._gpu(handle, "nvmlDeviceGetPowerManagementDefaultLimit")
        return 700_000

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle):
        return list(self._gpu(handle, "nvmlDeviceGetPowerManagementLimitConstraints")
                    .power_range_mw)

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self._gpu(handle, "nvmlDeviceGetCudaComputeCapability").compute_capability

    def nvmlDeviceGetMaxClockInfo(self, handle, type):  # noqa: A002 - the binding's name
        gpu = self._gpu(handle, "nvmlDeviceGetMaxClockInfo")
        return gpu.max_sm_clock_mhz if type == real.NVML_CLOCK_SM else 2619

    # -- settings (root only on real GPUs) --------------------------------------------------
    def nvmlDeviceSetPowerManagementLimit(self, handle, limit):
        gpu = self._gpu(handle, "nvmlDeviceSetPowerManagementLimit")
        if not gpu.power_range_mw[0] <= limit <= gpu.power_range_mw[1]:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        gpu.power_limit_mw = limit

    def nvmlDeviceSetGpuLockedClocks(self, handle, minGpuClockMHz, maxGpuClockMHz):  # noqa: N803
        gpu = self._gpu(handle, "nvmlDeviceSetGpuLockedClocks")
        gpu.locked_clocks_mhz = (minGpuClockMHz, maxGpuClockMHz)

    def nvmlDeviceResetGpuLockedClocks(self, handle):
        self._gpu(handle, "nvmlDeviceResetGpuLockedClocks").locked_clocks_mhz = None

    def nvmlDeviceGetMigMode(self, device):
        gpu = self._gpu(device, "nvmlDeviceGetMigMode")
        return [int(gpu.mig), int(gpu.mig)]

    # -- per tick ---------------------------------------------------------------------------
    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        gpu = self.gpus[handle.index]
        gpu.tick += 1
        if gpu.tick not in gpu.stale_ticks:
            gpu.measured_tick = gpu.tick
        if gpu.tick == 0:
            gpu.energy_mj = float(gpu.energy0_mj)
        else:
            gpu.energy_mj += gpu.power_mw() * gpu.period_s * gpu.energy_scale
        self._gpu(handle, "nvmlDeviceGetFieldValues")
        if gpu.call_code is not None:
            raise real.NVMLError(gpu.call_code)
        if gpu.tick == 0:
            gpu.ts_us = gpu.ts0_us
        else:
            gpu.ts_us += gpu.ts_step_us
        if gpu.tick not in gpu.stale_ticks:
            n = gpu.driver_samples_per_tick or 0
            for k in range(n):  # evenly spaced in (previous call, this call]
                ts = gpu.ts_us - gpu.ts_step_us + (k + 1) * gpu.ts_step_us // n
                gpu.buffer.append((ts, gpu.power_mw() + k))
            del gpu.buffer[:-gpu.driver_buffer_len]
        values = (real.c_nvmlFieldValue_t * len(fieldIds))()
        for i, fid in enumerate(fieldIds):
            v = values[i]
            v.fieldId = fid
            v.timestamp = gpu.ts_us
            code = gpu.field_codes.get(fid, NVML_SUCCESS)
            v.nvmlReturn = code
            if code != NVML_SUCCESS:
                continue
            if fid == real.NVML_FI_DEV_POWER_INSTANT:
                v.valueType, v.value.uiVal = real.NVML_VALUE_TYPE_UNSIGNED_INT, gpu.power_mw()
            elif fid == real.NVML_FI_DEV_POWER_AVERAGE:
                v.valueType = real.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = gpu.power_mw() - 500
            elif fid == real.NVML_FI_DEV_ENERGY:
                v.valueType = real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                v.value.ullVal = int(round(gpu.energy_mj))
            else:
                v.nvmlReturn = NOT_SUPPORTED
        return values

    def nvmlDeviceGetSamples(self, device, sampling_type, timeStamp):  # noqa: N803
        gpu = self._gpu(device, "nvmlDeviceGetSamples")
        if gpu.driver_samples_per_tick is None or sampling_type != real.NVML_TOTAL_POWER_SAMPLES:
            raise real.NVMLError(NOT_SUPPORTED)
        newer = [(ts, mw) for ts, mw in gpu.buffer if ts > timeStamp]
        if not newer:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        samples = (real.c_nvmlSample_t * len(newer))()
        for i, (ts, mw) in enumerate(newer):
            samples[i].timeStamp = ts
            samples[i].sampleValue.uiVal = mw
        return real.NVML_VALUE_TYPE_UNSIGNED_INT, samples[0:len(newer)]

    def nvmlDeviceGetPowerUsage(self, handle):
        gpu = self._gpu(handle, "nvmlDeviceGetPowerUsage")
        return gpu.power_mw() - 250

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption")
        return int(round(gpu.energy_mj))

    def nvmlDeviceGetUtilizationRates(self, handle):
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        util = real.c_nvmlUtilization_t()
        util.gpu, util.memory = min(100, 10 + gpu.tick), 5
        return util

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        mem = real.c_nvmlMemory_t()
        mem.total, mem.used = 80 * 2**30, 3 * 2**30
        mem.free = mem.total - mem.used
        return mem

    def nvmlDeviceGetClockInfo(self, handle, type):  # noqa: A002 - the binding's name
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        if type == real.NVML_CLOCK_SM:
            return gpu.locked_clocks_mhz[1] if gpu.locked_clocks_mhz else 1980
        return 2619

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._gpu(handle, "nvmlDeviceGetTemperature")
        return 41

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        return 0x1

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        self._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return 0x1


FAKED_FUNCTIONS = sorted(n for n in dir(FakeNvml) if n.startswith("nvml"))
