"""The device layer's interface: a ``Source`` opens devices and reads one tick of one device.

Sources return **raw units** (mW, mJ, bytes) in a :class:`Reading`; the monitor layer
(``process.py``) converts them once into the column contract's units. A value a source does not
report is ``NaN`` — never 0. Faults that leave a tick's values missing are reported as bits in
``Reading.faults`` (the sampler keeps running); a lost device raises :class:`GpuLost`.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

log = logging.getLogger(__name__)

NAN = math.nan

# Fault bits of one reading (``Reading.faults``); names are what summaries count.
FAULT_TRANSIENT = 1 << 0
"""A call failed with an unknown (transient) error: its values are null this tick."""
FAULT_FIELD_NOT_SUPPORTED = 1 << 1
"""A field reported "not supported" this tick although the start-up probe accepted it."""
FAULT_NO_PERMISSION = 1 << 2
"""A call was refused for lack of permission this tick."""
FAULT_GPU_LOST = 1 << 3
"""The device was lost; this is its last row."""
FAULT_PROCESS_GONE = 1 << 4
"""``cpu_proxy``: the rank's process has ended; the reading models what is left of its tree
(``idle_w`` when nothing is), or is null if the process ended before it was first seen."""
FAULT_FIELD_ERROR = 1 << 5
"""A field returned another error code this tick."""

FAULT_STALE = 1 << 6
"""The power reading repeats the previous tick's: the driver took no new measurement in between
(no newer sample in its power buffer, or — where the buffer is unavailable — the instant power
and the 1 s average, or the energy counter without it, both unchanged). NVML's field timestamp is
not evidence: it is when NVML fetched the value and changes on every call."""

FAULT_NAMES = {
    FAULT_TRANSIENT: "transient",
    FAULT_FIELD_NOT_SUPPORTED: "field_not_supported",
    FAULT_NO_PERMISSION: "no_permission",
    FAULT_GPU_LOST: "gpu_lost",
    FAULT_PROCESS_GONE: "process_gone",
    FAULT_FIELD_ERROR: "field_error",
    FAULT_STALE: "stale_power",
}

DEVICE_KINDS = ("gpu", "cpu_package", "dram")
"""What a device is (the ``device_kind`` column): a GPU, or a RAPL powercap zone of the node's
CPUs (package, DRAM). Only ``gpu`` devices count in GPU power totals."""


class Reading(NamedTuple):
    """One tick of one device, in raw units; ``NaN`` = not reported.

    Attributes:
        power_mw: the power reading the source's ``power_field`` names, mW.
        power_avg_mw: 1 s-average power (NVML field 185), mW.
        energy_mj: the energy counter (raw: since driver load for NVML), mJ.
        gpu_util_pct: GPU utilisation, %.
        mem_util_pct: memory-controller utilisation, %.
        mem_used_bytes: device memory used (``cpu_proxy``: the process tree's RSS), bytes.
        sm_clock_mhz: SM clock, MHz.
        mem_clock_mhz: memory clock, MHz.
        temp_c: GPU temperature, degC.
        clock_event_reasons: NVML clock-event reasons bitmask.
        faults: ``FAULT_*`` bits of this reading.
        power_ts_us: the source's own timestamp of ``power_mw`` (NVML field values carry one:
            CPU wall-clock time in µs when the driver took the value), ``NaN`` when the source
            gives none (``nvmlDeviceGetPowerUsage``, ``cpu_proxy``).
    """

    power_mw: float = NAN
    power_avg_mw: float = NAN
    energy_mj: float = NAN
    gpu_util_pct: float = NAN
    mem_util_pct: float = NAN
    mem_used_bytes: float = NAN
    sm_clock_mhz: float = NAN
    mem_clock_mhz: float = NAN
    temp_c: float = NAN
    clock_event_reasons: float = NAN
    faults: int = 0
    power_ts_us: float = NAN


EMPTY_READING = Reading()


@dataclass
class DeviceInfo:
    """What a source knows about one device, fixed for the run.

    Attributes:
        slot: position of the device in this sampler's spool (0, 1, ...).
        gpu_index: NVML index on the node; the rank for ``cpu_proxy``.
        rank: the workload rank whose events this device's row carries.
        name: device name as reported (``cpu_proxy`` for the CPU proxy).
        uuid_hash: salted SHA-256 of the UUID (never the UUID), or ``None``.
        power_limit_w: enforced power limit, W (``cpu_proxy``: the model's ``max_w``).
        default_power_limit_w: default power limit, W.
        details: anything else worth recording in the provenance (probe results, PCI bus id,
            limits' range, MIG mode, ``cpu_proxy`` pid).
        kind: one of :data:`DEVICE_KINDS` (``gpu`` unless a host source says otherwise).
    """

    slot: int
    gpu_index: int
    rank: int | None
    name: str
    uuid_hash: str | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    kind: str = "gpu"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form, as written to ``devices.json``."""
        return {"slot": self.slot, "gpu_index": self.gpu_index, "rank": self.rank,
                "name": self.name, "uuid_hash": self.uuid_hash,
                "power_limit_w": self.power_limit_w,
                "default_power_limit_w": self.default_power_limit_w, "details": self.details,
                "kind": self.kind}


class Source(ABC):
    """A source of readings. Cheap to construct; ``open`` touches the hardware.

    Lifecycle: ``open()`` once (returns the devices), then ``read(slot)`` per device per tick,
    ``rescan()`` about once a second (may return newly found devices), ``close()`` once.
    """

    name: ClassVar[str]
    """``nvml`` or ``cpu_proxy`` (the ``sampler`` column)."""

    power_field: str = ""
    """What ``Reading.power_mw`` holds (the ``power_field`` column); set by ``open``."""

    @abstractmethod
    def open(self) -> list[DeviceInfo]:
        """Open the devices and probe what they support.

        Raises:
            SourceUnavailable: the source cannot be used here.
            SamplerConfigError: the configuration does not fit this machine.
        """

    @abstractmethod
    def read(self, slot: int) -> Reading:
        """Read one tick of device ``slot``.

        Raises:
            GpuLost: the device is gone; its series ends here (the sampler reads it no more and
                goes on with the others).
        """

    def read_power(self, slot: int) -> Reading:
        """The time-critical part of a tick: power and energy (default: the whole :meth:`read`).

        The loop reads every device's power first, then :meth:`read_rest` of each, so that the
        power readings of all devices are taken as close together as possible.

        Raises:
            GpuLost: as :meth:`read`.
        """
        return self.read(slot)

    def read_rest(self, slot: int, reading: Reading) -> Reading:
        """Complete ``reading`` (from :meth:`read_power`) with the slower signals.

        Raises:
            GpuLost: as :meth:`read`.
        """
        return reading

    def driver_samples(self, slot: int) -> Sequence[tuple[int, float]]:
        """The device's own power samples that arrived since the last call.

        ``(timestamp_us, power_mw)`` pairs, oldest first, on the source's own clock (NVML: CPU
        wall-clock µs); empty where the source keeps no such buffer. Called once per tick,
        right after :meth:`read` of the same slot.
        """
        return ()

    def rescan(self) -> list[DeviceInfo]:
        """Periodic maintenance (about once a second); return devices found since ``open``."""
        return []

    def provenance(self) -> dict[str, Any]:
        """Run-level facts for ``provenance.json`` (versions, model constants, probes)."""
        return {"sampler": self.name, "power_field": self.power_field}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the devices."""


PIDS_DIR = "pids"
"""Folder of ``rank-<r>.pid`` files in the staging folder (``cpu_proxy`` devices)."""
