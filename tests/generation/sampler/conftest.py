"""Fixtures of the sampler tests: the NVML test double, a deterministic clock, a loop driver."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from generation.sampler import nvml as nvml_mod
from generation.sampler.base import DeviceInfo, Reading, Source
from generation.sampler.process import TickLoop
from generation.sampler.spool import PROVENANCE_FILE, SPOOL_DIR, SpoolWriter
from llm_powertrace_ds.atomic import write_json_atomic

from .fake_nvml import FakeGpu, FakeNvml


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeNvml]:
    """Install the NVML test double where the sampler looks the binding up."""

    def install(gpus: list[FakeGpu] | None = None, **kwargs) -> FakeNvml:
        fake = FakeNvml(gpus, **kwargs)
        monkeypatch.setattr(nvml_mod, "pynvml", fake)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        return fake

    return install


class FakeClock:
    """A monotonic clock in ns that only moves when told to.

    Every read advances it by ``read_ns`` (so reads take time); ``sleep`` advances it by the
    requested time plus the next value of ``oversleep_ns`` (how late the OS wakes us).
    """

    def __init__(self, start_ns: int = 1_000_000_000_000, read_ns: int = 0,
                 oversleep_ns: Iterable[int] | Callable[[int], int] = ()) -> None:
        self.t = start_ns
        self.read_ns = read_ns
        self.sleeps = 0
        self._over = oversleep_ns if callable(oversleep_ns) else list(oversleep_ns)
        self.on_sleep: Callable[[], None] | None = None

    def __call__(self) -> int:
        self.t += self.read_ns
        return self.t

    def sleep(self, seconds: float) -> None:
        if callable(self._over):
            extra = self._over(self.sleeps)
        else:
            extra = self._over[self.sleeps] if self.sleeps < len(self._over) else 0
        self.sleeps += 1
        self.t += int(round(seconds * 1e9)) + int(extra)
        if self.on_sleep is not None:
            self.on_sleep()


class ScriptedSource(Source):
    """A source of fixed readings with no hardware.

    Power = 100 W + slot; its energy counter assumes 100 ms ticks.
    """

    name = "cpu_proxy"

    def __init__(self, n: int = 1, *, new_at_rescan: int = 0) -> None:
        self.n = n
        self.power_field = "cpu_proxy_model"
        self.reads = 0
        self.per_slot: dict[int, int] = {}
        self.rescans = 0
        self.new_at_rescan = new_at_rescan

    def open(self) -> list[DeviceInfo]:
        return [DeviceInfo(i, i, i, "cpu_proxy", power_limit_w=300.0) for i in range(self.n)]

    def read(self, slot: int) -> Reading:
        self.reads += 1
        self.per_slot[slot] = self.per_slot.get(slot, 0) + 1
        return Reading(power_mw=(100.0 + slot) * 1000.0,
                       energy_mj=self.per_slot[slot] * (100.0 + slot) * 100.0)

    def rescan(self) -> list[DeviceInfo]:
        self.rescans += 1
        if self.rescans == self.new_at_rescan:
            self.n += 1
            return [DeviceInfo(self.n - 1, self.n - 1, self.n - 1, "cpu_proxy")]
        return []


def drive_loop(source: Source, staging: Path, *, ticks: int, period_ms: float = 100.0,
               clock: FakeClock | None = None, flush_s: float = 0.5, rescan_s: float = 1.0,
               header: dict | None = None, devices: list[DeviceInfo] | None = None,
               between_ticks: Callable[[int], None] | None = None) -> TickLoop:
    """Run a ``TickLoop`` on a fake clock until ``ticks`` ticks were taken.

    ``source`` is opened here unless its ``devices`` (from an earlier ``open``) are given;
    ``between_ticks(ticks_taken)`` runs at every sleep (e.g. to move a fake sysfs counter).
    """
    clock = clock or FakeClock()
    if devices is None:
        devices = source.open()
    writer = SpoolWriter(staging / SPOOL_DIR, {"source": source.name, "period_ms": period_ms,
                                               **(header or {})})
    writer.open()
    writer.set_devices([d.to_dict() for d in devices])
    loop = TickLoop(source, writer, devices, int(period_ms * 1e6), flush_ns=int(flush_s * 1e9),
                    rescan_ns=int(rescan_s * 1e9), clock=clock, sleep=clock.sleep)

    def maybe_stop() -> None:
        if between_ticks is not None:
            between_ticks(loop.ticks)
        if loop.ticks >= ticks:
            loop.request_stop("stopped", "test")

    clock.on_sleep = maybe_stop
    loop.run()
    writer.write_json("summary.json", {"state": loop.state, "message": loop.message,
                                       "lost_devices": loop.lost})
    writer.write_json("anchors.json", {"start": {"monotonic_ns": loop.t_start_ns,
                                                 "utc_ns": 1_767_225_600_000_000_000}})
    writer.close()
    write_json_atomic(staging / PROVENANCE_FILE, {**source.provenance(),
                                                  "sample_period_ms": period_ms,
                                                  "devices": [d.to_dict() for d in devices]})
    return loop
