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
