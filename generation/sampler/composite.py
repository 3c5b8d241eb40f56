"""One source of a run's GPUs (or ``cpu_proxy`` devices) and its host devices, read on one tick.

The primary source keeps its slots; the host source's devices (RAPL CPU package and DRAM zones,
``generation.sampler.rapl``) get slots from :data:`HOST_SLOT_BASE` on, so that devices the
primary adds later (a ``cpu_proxy`` rank joining) never collide with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .base import DeviceInfo, Reading, Source

HOST_SLOT_BASE = 1000
"""First slot of a host device."""


class WithHostDevices(Source):
    """``primary`` plus ``host`` devices; everything else is the primary's.

    Args:
        primary: the GPU (or ``cpu_proxy``) source.
        host: a source of host devices (``RaplSource``); opened with the primary.
    """

    name = "with_host_devices"

    def __init__(self, primary: Source, host: Source) -> None:
        self.primary = primary
        self.host = host
        self.power_field = primary.power_field

    def _route(self, slot: int) -> tuple[Source, int]:
        if slot >= HOST_SLOT_BASE:
            return self.host, slot - HOST_SLOT_BASE
        return self.primary, slot

    def open(self) -> list[DeviceInfo]:
        devices = self.primary.open()
        self.power_field = self.primary.power_field
        try:
            host = self.host.open()
        except BaseException:
            self.primary.close()
            raise
        return devices + [replace(d, slot=HOST_SLOT_BASE + d.slot) for d in host]

    def read(self, slot: int) -> Reading:
        source, own = self._route(slot)
        return source.read(own)

    def read_power(self, slot: int) -> Reading:
        source, own = self._route(slot)
        return source.read_power(own)

    def read_rest(self, slot: int, reading: Reading) -> Reading:
        source, own = self._route(slot)
        return source.read_rest(own, reading)

    def driver_samples(self, slot: int) -> Sequence[tuple[int, float]]:
        source, own = self._route(slot)
        return source.driver_samples(own)

    def rescan(self) -> list[DeviceInfo]:
        return self.primary.rescan()

    def provenance(self) -> dict[str, Any]:
        return {**self.host.provenance(), **self.primary.provenance()}

    def close(self) -> None:
        try:
            self.host.close()
        finally:
            self.primary.close()
