"""The tick loop on a deterministic clock: absolute deadlines, late and missed ticks, flushes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generation.sampler import read_spool
from generation.sampler.errors import SamplerConfigError
from generation.sampler.process import TickLoop

from .conftest import FakeClock, ScriptedSource, drive_loop

PERIOD_NS = 100_000_000


def test_deadlines_are_absolute_and_do_not_drift(tmp_path):
    # Every clock read costs 1 ms and every wake-up is 1 ms late: a sleep(period) loop would
    # drift by several ms per tick; with absolute deadlines the lateness stays constant.
    clock = FakeClock(read_ns=1_000_000, oversleep_ns=lambda n: 1_000_000)
    loop = drive_loop(ScriptedSource(), tmp_path, ticks=50, clock=clock)
    spool = read_spool(tmp_path)
    ticks = spool.ticks()
    assert loop.ticks == 50 and len(ticks) == 50
    deadlines = ticks["deadline_ns"]
    assert (np.diff(deadlines) == PERIOD_NS).all()
    assert deadlines[0] == loop.t_start_ns + PERIOD_NS
    late = ticks["t_after_ns"] - deadlines
    assert late.min() > 0 and late.max() <= 5_000_000
    assert np.ptp(late) == 0
    assert ticks["missed"].sum() == 0
    assert spool.summary.drift_ms == pytest.approx(late[-1] / 1e6)
    assert (ticks["t_after_ns"] > ticks["t_before_ns"]).all()


def test_late_tick_is_recorded_late_and_overrun_deadlines_counted(tmp_path):
    # The 5th sleep oversleeps by 250 ms: the tick is recorded when it really happens (never
    # back-dated), the two deadlines it overran are counted missed, and the schedule resumes at
    # the next future deadline.
    over = [0, 0, 0, 0, 250_000_000]
    clock = FakeClock(oversleep_ns=over)
    drive_loop(ScriptedSource(), tmp_path, ticks=10, clock=clock)
    spool = read_spool(tmp_path)
    ticks = spool.ticks()
    late_tick = ticks[4]
    assert late_tick["missed"] == 2
    assert late_tick["t_after_ns"] - late_tick["deadline_ns"] == 250_000_000
    assert late_tick["t_before_ns"] >= late_tick["deadline_ns"] + 250_000_000
    # the next tick serves the first deadline after the late wake-up
    assert ticks[5]["deadline_ns"] == late_tick["deadline_ns"] + 3 * PERIOD_NS
    assert ticks[5]["missed"] == 0
    assert spool.summary.missed_ticks == 2
    assert len(ticks) == 10
    # one row per tick: nothing is invented for the missed deadlines
    assert len(np.unique(spool.samples["tick"])) == 10


def test_late_wake_before_next_deadline_is_late_not_missed(tmp_path):
    clock = FakeClock(oversleep_ns=[0, 0, 90_000_000])
    drive_loop(ScriptedSource(), tmp_path, ticks=5, clock=clock)
    ticks = read_spool(tmp_path).ticks()
    assert ticks["missed"].sum() == 0
    assert ticks[2]["t_after_ns"] - ticks[2]["deadline_ns"] == 90_000_000
    assert ticks[3]["deadline_ns"] == ticks[2]["deadline_ns"] + PERIOD_NS


def test_spool_is_flushed_at_least_every_flush_interval(tmp_path):
    flushed_at: list[int] = []
    clock = FakeClock()
    source = ScriptedSource()
    devices = source.open()
    from generation.sampler.spool import SpoolWriter

    class Recording(SpoolWriter):
        def flush(self, *, fsync: bool = False) -> None:
            if self._pending:
                flushed_at.append(clock.t)
            super().flush(fsync=fsync)

    writer = Recording(tmp_path / "spool", {"source": "cpu_proxy", "period_ms": 100.0})
    writer.open()
    loop = TickLoop(source, writer, devices, PERIOD_NS, flush_ns=500_000_000, clock=clock,
                    sleep=clock.sleep)
    clock.on_sleep = lambda: loop.ticks >= 40 and loop.request_stop()
    loop.run()
    writer.close()
    gaps = np.diff(flushed_at)
    assert len(flushed_at) >= 8
    assert gaps.max() <= 600_000_000  # every 0.5 s (+ one tick)


def test_rescan_adds_devices_about_once_a_second(tmp_path):
    source = ScriptedSource(new_at_rescan=2)
    loop = drive_loop(source, tmp_path, ticks=35, rescan_s=1.0)
    assert 3 <= source.rescans <= 4  # 3.5 s of ticks
    spool = read_spool(tmp_path)
    assert len(spool.devices) == 2
    assert len(spool.device_samples(1)) > 0
    assert len(spool.device_samples(1)) < len(spool.device_samples(0))
    assert loop.devices[1].slot == 1


def test_stop_request_ends_the_loop_promptly(tmp_path):
    loop = drive_loop(ScriptedSource(2), tmp_path, ticks=3)
    assert loop.state == "stopped"
    spool = read_spool(tmp_path)
    assert len(spool.samples) == 6
    assert spool.summary.complete


def test_bad_period_is_refused(tmp_path):
    with pytest.raises(SamplerConfigError):
        TickLoop(ScriptedSource(), None, [], 0)  # type: ignore[arg-type]


@given(over=st.lists(st.integers(min_value=0, max_value=450_000_000), min_size=1, max_size=40),
       read_ns=st.integers(min_value=0, max_value=3_000_000))
@settings(max_examples=40, deadline=None)
def test_schedule_invariants(tmp_path_factory, over, read_ns):
    """Whatever the wake-up delays, deadlines stay on the start + k*period grid.

    Also no tick is back-dated, and every grid deadline is either served or counted missed.
    """
    tmp = tmp_path_factory.mktemp("h")
    clock = FakeClock(read_ns=read_ns, oversleep_ns=over)
    loop = drive_loop(ScriptedSource(), tmp, ticks=len(over) + 3, clock=clock)
    ticks = read_spool(tmp).ticks()
    d = ticks["deadline_ns"] - loop.t_start_ns
    assert (d % PERIOD_NS == 0).all() and (np.diff(d) > 0).all()
    assert (ticks["t_before_ns"] >= ticks["deadline_ns"]).all()
    assert (ticks["t_after_ns"] >= ticks["t_before_ns"]).all()
    served_or_missed = len(ticks) + int(ticks["missed"].sum())
    assert served_or_missed == d[-1] // PERIOD_NS  # grid deadlines 1..k, none lost silently
    expected_missed = (ticks["t_before_ns"] - read_ns - ticks["deadline_ns"]) // PERIOD_NS
    assert (ticks["missed"] == np.maximum(expected_missed, 0)).all()


class _FullReading(ScriptedSource):
    """Every signal in raw units, distinct per slot; ``lose_slot`` is lost at tick ``lose_at``."""

    def __init__(self, n: int = 2, *, lose_slot: int | None = None, lose_at: int = -1) -> None:
        super().__init__(n)
        self.lose_slot, self.lose_at = lose_slot, lose_at

    def read(self, slot: int):  # noqa: ANN201
        from generation.sampler.base import Reading
        from generation.sampler.errors import GpuLost

        k = self.per_slot.get(slot, 0)
        self.per_slot[slot] = k + 1
        if slot == self.lose_slot and k == self.lose_at:
            raise GpuLost("fell off the bus")
        return Reading(power_mw=250_500.0 + slot, power_avg_mw=240_250.0 + slot,
                       energy_mj=1_000.0 * (k + 1), gpu_util_pct=40.0 + slot,
                       mem_util_pct=20.0 + slot, mem_used_bytes=3.5 * 1048576.0 * (slot + 1),
                       sm_clock_mhz=1410.0, mem_clock_mhz=2619.0, temp_c=55.0 + slot,
                       clock_event_reasons=4.0, power_ts_us=1e6 + k)


def test_each_signal_is_stored_in_its_column_unit(tmp_path):
    # mW -> W for both powers, bytes -> MiB, everything else as read
    drive_loop(_FullReading(2), tmp_path, ticks=3)
    s = read_spool(tmp_path).samples
    one = s[s["slot"] == 1]
    assert len(one) == 3
    assert (one["power_w"] == 250.501).all() and (one["power_avg_w"] == 240.251).all()
    assert (one["mem_used_mib"] == 7.0).all()
    assert one["energy_mj"].tolist() == [1000.0, 2000.0, 3000.0]
    assert (one["gpu_util_pct"] == 41.0).all() and (one["mem_util_pct"] == 21.0).all()
    assert (one["sm_clock_mhz"] == 1410.0).all() and (one["mem_clock_mhz"] == 2619.0).all()
    assert (one["temp_c"] == 56.0).all() and (one["clock_event_reasons"] == 4.0).all()
    assert one["power_ts_us"].tolist() == [1e6, 1e6 + 1, 1e6 + 2]
    assert s[s["slot"] == 0]["power_w"][0] == 250.5


def test_a_lost_gpu_ends_its_own_series_and_the_others_go_on(tmp_path):
    # Before the fix one lost GPU ended the whole run (state gpu_lost at tick 4).
    from generation.sampler.base import FAULT_GPU_LOST

    source = _FullReading(3, lose_slot=1, lose_at=4)
    loop = drive_loop(source, tmp_path, ticks=10)
    assert loop.state == "stopped" and loop.ticks == 10
    assert loop.lost[1].startswith("GPU 1 (slot 1) was lost at tick 4: fell off the bus")
    spool = read_spool(tmp_path)
    s = spool.samples
    assert len(spool.device_samples(0)) == 10 and len(spool.device_samples(2)) == 10
    one = spool.device_samples(1)
    assert one["tick"].tolist() == [0, 1, 2, 3, 4]  # its series ends at the loss
    assert one["faults"][-1] == FAULT_GPU_LOST and np.isnan(one["power_w"][-1])
    assert (s[s["slot"] != 1]["faults"] == 0).all()
    assert spool.summary.lost_devices == {"1": loop.lost[1]}
    assert spool.summary.faults == {"gpu_lost": 1}


def test_the_loop_ends_when_every_gpu_is_lost(tmp_path):
    from generation.sampler.errors import GpuLost

    class AllLost(_FullReading):
        def read(self, slot: int):  # noqa: ANN201
            if self.per_slot.get(slot, 0) >= 3:
                raise GpuLost("fell off the bus")
            return super().read(slot)

    loop = drive_loop(AllLost(2), tmp_path, ticks=50)
    assert loop.state == "gpu_lost" and loop.ticks == 4
    assert set(loop.lost) == {0, 1}


def test_first_tick_callback_once_with_t0_after_the_first_tick_is_on_disk(tmp_path):
    seen: list[tuple[int, int]] = []
    source = ScriptedSource(1)
    clock = FakeClock()
    devices = source.open()
    from generation.sampler.spool import SpoolWriter

    writer = SpoolWriter(tmp_path / "spool", {"source": "cpu_proxy", "period_ms": 100.0})
    writer.open()
    writer.set_devices([d.to_dict() for d in devices])

    def first(t0: int) -> None:  # the spool on disk already holds tick 0
        seen.append((t0, len(read_spool(tmp_path).samples)))

    loop = TickLoop(source, writer, devices, PERIOD_NS, clock=clock, sleep=clock.sleep,
                    on_first_tick=first)
    clock.on_sleep = lambda: loop.ticks >= 4 and loop.request_stop()
    loop.run()
    writer.close()
    assert seen == [(loop.t_start_ns, 1)]


def test_missed_deadlines_add_up_on_the_loop(tmp_path):
    over = [0, 250_000_000, 0, 0, 350_000_000]  # 2 then 3 deadlines overrun
    loop = drive_loop(ScriptedSource(), tmp_path, ticks=8, clock=FakeClock(oversleep_ns=over))
    assert loop.missed == 5
    assert read_spool(tmp_path).ticks()["missed"].tolist()[:6] == [0, 2, 0, 0, 3, 0]
