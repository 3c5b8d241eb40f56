"""A time-driven NVML test double that behaves like a Hopper GPU, for the smoke check's rehearsal.

The GPU's true power is a step function of time read from the load's own edge log (``t on`` /
``t off`` lines, ``CLOCK_MONOTONIC`` seconds, one per switch): ``P(t) = idle_w`` while the load
is off, ``active_w`` while it is on. What NVML reports is derived from it the way Hopper does:

- field 186 (instant power): the mean of ``P`` over the last update window of ``update_s``
  (100 ms), ``P_186(t) = (1/Δ) ∫_{u-Δ}^{u} P``, with ``u = ⌊t/Δ⌋ Δ`` the last update;
- field 185 and ``nvmlDeviceGetPowerUsage``: a boxcar over the last ``average_s`` (1 s) of
  updates, ``P_185(t) = (1/W) ∫_{u-W}^{u} P``; its group delay after a step is ``W/2``;
- field 191 (energy, mJ) and ``nvmlDeviceGetTotalEnergyConsumption``: ``E(t) = E_0 + ∫_0^u P``,
  updated every ``update_s``, an integer number of mJ;
- utilisation: the fraction of the last ``util_window_s`` (1 s) the load was on, updated every
  ``util_update_s`` (1/6 s), in whole percent;
- the driver's power buffer (``nvmlDeviceGetSamples``): one sample per update, ``P_186`` at
  ``u``, stamped in CPU µs.

Misbehaviours for the checks to catch: ``frozen_instant`` (field 186 keeps its first value),
``counter_drift`` (the counter's increments are 5 % high), ``util_zero`` (utilisation stuck at
0), and ``unsupported`` (field values and the sample buffer answer NOT_SUPPORTED, as NVML may
under gVisor). The binding's real constants, error classes and ctypes structures are used.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BEHAVIOURS = ("hopper", "frozen_instant", "counter_drift", "util_zero", "unsupported")
"""The double's behaviours: ``hopper`` is the well-behaved one."""

FI_POWER_AVERAGE = 185
FI_POWER_INSTANT = 186
FI_ENERGY = 191


def read_edges(path: Path | None) -> list[tuple[float, bool]]:
    """The load's switches ``(t_s, on)`` from its edge log, in time order (none: always off)."""
    if path is None or not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] in ("on", "off"):
            out.append((float(parts[0]), parts[1] == "on"))
    return sorted(out)


class PowerModel:
    """The true power, a step function of the load's edges, and its exact integrals.

    Args:
        edges: ``(t_s, on)`` switches (sorted) or a callable returning them (re-read per call).
        idle_w: power while the load is off, W.
        active_w: power while it is on, W.
    """

    def __init__(self, edges: list[tuple[float, bool]] | Callable[[], list[tuple[float, bool]]],
                 idle_w: float = 70.0, active_w: float = 450.0) -> None:
        self._edges = edges
        self.idle_w = idle_w
        self.active_w = active_w

    def edges(self) -> list[tuple[float, bool]]:
        return self._edges() if callable(self._edges) else self._edges

    def on_time_s(self, a: float, b: float) -> float:
        """Seconds in ``[a, b]`` during which the load was on."""
        if b <= a:
            return 0.0
        edges = self.edges()
        times = [t for t, _ in edges]
        total, state, start = 0.0, False, a
        i = bisect.bisect_right(times, a)
        if i > 0:
            state = edges[i - 1][1]
        for t, on in edges[i:]:
            if t >= b:
                break
            if state:
                total += t - start
            state, start = on, t
        if state:
            total += b - start
        return total

    def energy_j(self, a: float, b: float) -> float:
        """``∫_a^b P dt`` in J."""
        return self.idle_w * (b - a) + (self.active_w - self.idle_w) * self.on_time_s(a, b)


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


class HopperNvml:
    """Module-like double of ``pynvml`` for one Hopper GPU (see the module docstring).

    Args:
        real: the real ``pynvml`` module (constants, errors, ctypes structures).
        model: the true power.
        behaviour: one of :data:`BEHAVIOURS`.
        clock: monotonic seconds (default ``time.monotonic``).
        name: the GPU's name as NVML reports it.
    """

    update_s = 0.1
    average_s = 1.0
    util_window_s = 1.0
    util_update_s = 1.0 / 6.0
    energy0_mj = 5_000_000_000
    drift = 1.05
    buffer_s = 10.0

    def __init__(self, real: Any, model: PowerModel, behaviour: str = "hopper", *,
                 clock: Callable[[], float] = time.monotonic,
                 name: str = "NVIDIA H100 80GB HBM3") -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}; one of {', '.join(BEHAVIOURS)}")
        for attr in dir(real):
            if attr.startswith(("NVML_", "NVMLError", "c_nvml", "nvmlPciInfo")):
                setattr(self, attr, getattr(real, attr))
        self._real = real
        self.model = model
        self.behaviour = behaviour
        self.clock = clock
        self.name = name
        self.power_limit_mw = 700_000
        self._wall_offset_s = time.time() - time.monotonic()  # fixed: stable sample stamps
        self._frozen_mw: float | None = None

    # -- the physics --------------------------------------------------------------------------
    def _last_update(self, t: float, period: float) -> float:
        return math.floor(t / period) * period

    def instant_mw(self, t: float) -> float:
        u = self._last_update(t, self.update_s)
        value = self.model.energy_j(u - self.update_s, u) / self.update_s * 1e3
        if self.behaviour == "frozen_instant":
            if self._frozen_mw is None:
                self._frozen_mw = value
            return self._frozen_mw
        return value

    def average_mw(self, t: float) -> float:
        u = self._last_update(t, self.update_s)
        return self.model.energy_j(u - self.average_s, u) / self.average_s * 1e3

    def energy_mj(self, t: float) -> int:
        u = self._last_update(t, self.update_s)
        scale = self.drift if self.behaviour == "counter_drift" else 1.0
        return int(self.energy0_mj + scale * self.model.energy_j(0.0, u) * 1e3)

    def util_pct(self, t: float) -> int:
        if self.behaviour == "util_zero":
            return 0
        v = self._last_update(t, self.util_update_s)
        return int(round(100.0 * self.model.on_time_s(v - self.util_window_s, v)
                         / self.util_window_s))

    def _unsupported(self) -> None:
        if self.behaviour == "unsupported":
            raise self._real.NVMLError(self._real.NVML_ERROR_NOT_SUPPORTED)

    # -- system ---------------------------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - the binding's names
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "580.159.04"

    def nvmlSystemGetNVMLVersion(self) -> str:  # noqa: N802
        return "13.580.159.04"

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return 13000

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802
        if index != 0:
            raise self._real.NVMLError(self._real.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(0)

    def nvmlDeviceGetHandleByUUID(self, uuid: Any) -> _Handle:  # noqa: N802
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        if text != self.nvmlDeviceGetUUID(_Handle(0)):
            raise self._real.NVMLError(self._real.NVML_ERROR_NOT_FOUND)
        return _Handle(0)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:  # noqa: N802
        return handle.index

    # -- static facts ---------------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: _Handle) -> str:  # noqa: N802
        return self.name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:  # noqa: N802
        return "GPU-00000000-0000-4000-8000-000000000000"

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:  # noqa: N802
        info = self._real.nvmlPciInfo_t()
        info.busId = b"00000000:01:00.0"
        return info

    def nvmlDeviceGetMigMode(self, device: _Handle) -> list[int]:  # noqa: N802
        return [0, 0]

    def nvmlDeviceGetPersistenceMode(self, handle: _Handle) -> int:  # noqa: N802
        return 1

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:  # noqa: N802
        return self.power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: _Handle) -> int:  # noqa: N802
        return self.power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: _Handle) -> int:  # noqa: N802
        return 700_000

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: _Handle) -> list[int]:  # noqa: N802
        return [200_000, 700_000]

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:  # noqa: N802
        return (9, 0)

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, type: int) -> int:  # noqa: A002,N802
        return 1980 if type == self._real.NVML_CLOCK_SM else 2619

    def nvmlDeviceSetPowerManagementLimit(self, handle: _Handle, limit: int) -> None:  # noqa: N802
        raise self._real.NVMLError(self._real.NVML_ERROR_NO_PERMISSION)  # a lent machine

    def nvmlDeviceSetGpuLockedClocks(self, handle: _Handle, minGpuClockMHz: int,  # noqa: N802,N803
                                     maxGpuClockMHz: int) -> None:  # noqa: N803
        raise self._real.NVMLError(self._real.NVML_ERROR_NO_PERMISSION)

    def nvmlDeviceResetGpuLockedClocks(self, handle: _Handle) -> None:  # noqa: N802
        raise self._real.NVMLError(self._real.NVML_ERROR_NO_PERMISSION)

    # -- per tick ---------------------------------------------------------------------------------
    def nvmlDeviceGetFieldValues(self, handle: _Handle, fieldIds: list[int]) -> Any:  # noqa: N802,N803
        self._unsupported()
        t = self.clock()
        stamp = int((t + self._wall_offset_s) * 1e6)
        values = (self._real.c_nvmlFieldValue_t * len(fieldIds))()
        for i, fid in enumerate(fieldIds):
            v = values[i]
            v.fieldId = fid
            v.timestamp = stamp
            v.nvmlReturn = self._real.NVML_SUCCESS
            if fid == FI_POWER_INSTANT:
                v.valueType = self._real.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = int(round(self.instant_mw(t)))
            elif fid == FI_POWER_AVERAGE:
                v.valueType = self._real.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = int(round(self.average_mw(t)))
            elif fid == FI_ENERGY:
                v.valueType = self._real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                v.value.ullVal = self.energy_mj(t)
            else:
                v.nvmlReturn = self._real.NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlDeviceGetSamples(self, device: _Handle, sampling_type: int, timeStamp: int) -> Any:  # noqa: N802,N803
        self._unsupported()
        t = self.clock()
        last = self._last_update(t, self.update_s)
        k0 = math.ceil((last - self.buffer_s) / self.update_s)
        newer = []
        for k in range(k0, int(round(last / self.update_s)) + 1):
            u = k * self.update_s
            ts = int(round((u + self._wall_offset_s) * 1e6))
            if ts > timeStamp:
                newer.append((ts, int(round(self.instant_mw(u)))))
        if not newer:
            raise self._real.NVMLError(self._real.NVML_ERROR_NOT_FOUND)
        samples = (self._real.c_nvmlSample_t * len(newer))()
        for i, (ts, mw) in enumerate(newer):
            samples[i].timeStamp = ts
            samples[i].sampleValue.uiVal = mw
        return self._real.NVML_VALUE_TYPE_UNSIGNED_INT, samples[0:len(newer)]

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:  # noqa: N802
        return int(round(self.average_mw(self.clock())))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:  # noqa: N802
        return self.energy_mj(self.clock())

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:  # noqa: N802
        util = self._real.c_nvmlUtilization_t()
        util.gpu = self.util_pct(self.clock())
        util.memory = util.gpu // 2
        return util

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: Any = None) -> Any:  # noqa: N802
        mem = self._real.c_nvmlMemory_t()
        mem.total, mem.used = 80 * 2**30, 2 * 2**30
        mem.free = mem.total - mem.used
        return mem

    def nvmlDeviceGetClockInfo(self, handle: _Handle, type: int) -> int:  # noqa: A002,N802
        if type == self._real.NVML_CLOCK_SM:
            return 1980 if self.util_pct(self.clock()) > 0 else 345
        return 2619

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:  # noqa: N802
        return 40

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:  # noqa: N802
        return 0x1
