"""The ``rapl`` host source: CPU package and DRAM power from the Linux powercap interface.

Intel RAPL (and AMD's RAPL-compatible driver) zones appear as folders of
``/sys/class/powercap``: ``intel-rapl:<p>`` is CPU package ``p`` (its ``name`` file says
``package-<p>``), ``intel-rapl:<p>:<z>`` its sub-zones, of which the one named ``dram`` is the
package's memory. Each zone holds an energy counter ``energy_uj`` (µJ) that wraps to 0 after
``max_energy_range_uj``. Nothing else is read: no power file exists, power is derived.

Per tick and zone, one read of ``energy_uj``:

* the counter is unwrapped: ``delta = raw - last`` when ``raw >= last``, else
  ``delta = raw + max_energy_range_uj - last`` (one wrap between two ticks: at most about 60 s of
  a 260 W package on a 2^32 µJ range, far longer than a tick);
* ``energy_mj`` = the unwrapped counter in mJ (``convert`` publishes it since t0);
* ``power_mw`` = ``delta / (t - t_last)`` over the interval since the zone's previous read (the
  tick's mean power, the end of the interval being the sample's time); the first read has none
  (null, never 0).

These devices are labelled ``cpu_package`` or ``dram`` (``DeviceInfo.kind``, the ``device_kind``
column) and never count as GPU power. A machine without powercap, or whose counters only root
may read (kernels since 5.10 make ``energy_uj`` 0400), says so once in the log and the run goes
on without them.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import NAN, DeviceInfo, Reading, Source
from .errors import SamplerError

log = logging.getLogger(__name__)

POWERCAP_DIR = "/sys/class/powercap"
"""Where the kernel exposes powercap zones."""

_ZONE_RE = re.compile(r"^(intel-rapl|amd-rapl):(\d+)(?::(\d+))?$")


@dataclass
class RaplZone:
    """One readable powercap zone.

    Attributes:
        path: the zone's folder.
        kind: ``cpu_package`` or ``dram``.
        package: the CPU package (socket) index.
        name: the zone's own ``name`` (``package-0``, ``dram``).
        max_energy_range_uj: where ``energy_uj`` wraps to 0, µJ.
    """

    path: Path
    kind: str
    package: int
    name: str
    max_energy_range_uj: int


def _read_int(path: Path) -> int:
    return int(path.read_text(encoding="ascii").strip())


def find_zones(root: str | Path = POWERCAP_DIR) -> tuple[list[RaplZone], str | None]:
    """The readable package and DRAM zones under ``root``, and why there are none (or ``None``).

    Args:
        root: the powercap folder (``/sys/class/powercap``; tests pass a fake tree).

    Returns:
        ``(zones, reason)``: zones sorted by package then kind; ``reason`` is one line when no
        zone could be used (no powercap, no RAPL zone, counters not readable).
    """
    root = Path(root)
    if not root.is_dir():
        return [], f"no powercap interface at {root}: CPU and DRAM power are not measured"
    zones: list[RaplZone] = []
    refused: list[str] = []
    for entry in sorted(root.iterdir()):
        m = _ZONE_RE.match(entry.name)
        if m is None:
            continue
        try:
            name = (entry / "name").read_text(encoding="ascii").strip()
        except OSError:
            continue
        if m.group(3) is None:
            kind = "cpu_package"
        elif name == "dram":
            kind = "dram"
        else:
            continue  # core, uncore, psys: parts of the package or not a device of this run
        try:
            _read_int(entry / "energy_uj")
            max_range = _read_int(entry / "max_energy_range_uj")
        except PermissionError:
            refused.append(entry.name)
            continue
        except (OSError, ValueError) as exc:
            log.info("powercap zone %s unreadable: %s", entry, exc)
            continue
        zones.append(RaplZone(entry, kind, int(m.group(2)), name, max_range))
    zones.sort(key=lambda z: (z.package, z.kind != "cpu_package", z.name))
    if zones:
        return zones, None
    if refused:
        return [], (f"powercap zones {', '.join(refused)} under {root} are readable only by "
                    "root: CPU and DRAM power are not measured")
    return [], f"no RAPL package or DRAM zone under {root}: CPU and DRAM power are not measured"


def unwrap_delta_uj(raw: int, last: int, max_range_uj: int) -> int:
    """Energy between two reads of a counter that wraps to 0 after ``max_range_uj``, µJ.

    Example:
        >>> unwrap_delta_uj(100, 4_000, 4_096)
        196
    """
    return raw - last if raw >= last else raw + max_range_uj - last


class RaplSource(Source):
    """CPU package and DRAM zones of the node (see the module docstring).

    Args:
        root: the powercap folder.
        clock: monotonic clock in ns (tests pass a deterministic one).
    """

    name = "rapl"
    power_field = "rapl_energy_derivative"

    def __init__(self, root: str | Path = POWERCAP_DIR, *,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.root = Path(root)
        self.clock = clock
        self.zones: list[RaplZone] = []
        self.reason: str | None = None
        self._last: list[tuple[int, int] | None] = []  # (raw µJ, t ns) of the previous read
        self._total_uj: list[int] = []

    def open(self) -> list[DeviceInfo]:
        """The readable zones as devices (none, with the reason logged once, where there are none)."""
        if self.zones:
            raise SamplerError("this RAPL source is already open")
        self.zones, self.reason = find_zones(self.root)
        if self.reason:
            log.info("%s", self.reason)
        self._last = [None] * len(self.zones)
        self._total_uj = [0] * len(self.zones)
        return [DeviceInfo(slot=i, gpu_index=z.package, rank=None, name=z.name, kind=z.kind,
                           details={"powercap_zone": z.path.name,
                                    "max_energy_range_uj": z.max_energy_range_uj})
                for i, z in enumerate(self.zones)]

    def read(self, slot: int) -> Reading:
        zone = self.zones[slot]
        try:
            raw = _read_int(zone.path / "energy_uj")
        except (OSError, ValueError):
            from .base import FAULT_TRANSIENT

            return Reading(faults=FAULT_TRANSIENT)
        now = self.clock()
        last = self._last[slot]
        self._last[slot] = (raw, now)
        if last is None:
            self._total_uj[slot] = raw
            return Reading(energy_mj=raw / 1000.0)
        delta = unwrap_delta_uj(raw, last[0], zone.max_energy_range_uj)
        self._total_uj[slot] += delta
        dt_ns = now - last[1]
        power = delta / dt_ns * 1e6 if dt_ns > 0 else NAN  # µJ/ns = kW; * 1e6 -> mW
        return Reading(power_mw=power, energy_mj=self._total_uj[slot] / 1000.0)

    def provenance(self) -> dict[str, Any]:
        return {"host_power": "rapl" if self.zones else None, "host_power_note": self.reason}
