"""The nvml source when the driver's power-sample buffer fails in the middle of a run.

Through the NVML test double: ``nvmlDeviceGetSamples`` answers for a while, then fails for a
stretch of ticks (an unknown error, not supported, no permission), then answers again. The
power readings go on every tick; the failed ticks carry their fault bit and nothing else does;
staleness on those ticks is judged from the values alone; and every sample the driver took is
delivered once, in order — those taken while the buffer failed arrive when it answers again.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generation.sampler import nvml as nvml_mod
from generation.sampler import read_spool, spool_to_run
from generation.sampler.base import FAULT_NO_PERMISSION, FAULT_STALE, FAULT_TRANSIENT

from .conftest import drive_loop
from .fake_nvml import NO_PERMISSION, NOT_SUPPORTED, UNKNOWN, FakeGpu, FakeNvml

TICKS = 20
META = {"run_id": "r1", "workload": "finetune"}
FAULT_OF = {UNKNOWN: (FAULT_TRANSIENT, "transient"), NOT_SUPPORTED: (FAULT_TRANSIENT, "transient"),
            NO_PERMISSION: (FAULT_NO_PERMISSION, "no_permission")}


def _failing(code: int, first_tick: int, n_ticks: int):
    """Fail the buffer on ticks first_tick .. first_tick + n_ticks - 1 (call 0 is the probe)."""
    calls = range(first_tick + 1, first_tick + 1 + n_ticks)
    return lambda n: code if n in calls else None


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.sampled_from([UNKNOWN, NOT_SUPPORTED, NO_PERMISSION]),
       first=st.integers(1, 12), length=st.integers(1, 6),
       stale=st.sets(st.integers(1, TICKS - 1), max_size=5), per_tick=st.integers(1, 4))
def test_a_buffer_failing_mid_run_loses_no_reading_and_no_driver_sample(
        monkeypatch, tmp_path_factory, code, first, length, stale, per_tick):
    failed = set(range(first, min(first + length, TICKS)))
    # the double counts the probe's field-values call as its tick 0: loop tick k is its k + 1
    gpu = FakeGpu(driver_samples_per_tick=per_tick, stale_ticks=frozenset(k + 1 for k in stale),
                  faults={"nvmlDeviceGetSamples": _failing(code, first, length)})
    other = FakeGpu(base_power_mw=200_000, driver_samples_per_tick=per_tick)
    monkeypatch.setattr(nvml_mod, "pynvml", FakeNvml([gpu, other]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    staging = tmp_path_factory.mktemp("buffer")
    source = nvml_mod.NvmlSource()
    devices = source.open()
    assert devices[0].details["probes"]["driver_power_samples"] == "ok"
    before_open = len(gpu.buffer)  # the buffer's samples at the probe predate the run
    loop = drive_loop(source, staging, devices=devices, ticks=TICKS, flush_s=10.0)
    assert loop.state == "stopped"
    spool = read_spool(staging)
    assert spool.summary.ticks == TICKS and spool.summary.complete
    mine, theirs = spool.device_samples(0), spool.device_samples(1)
    # every tick has its power: the buffer is a second series, not the reading
    assert len(mine) == len(theirs) == TICKS
    assert np.isfinite(mine["power_w"]).all() and np.isfinite(theirs["power_w"]).all()
    # the failed ticks, and only they, carry the buffer's fault
    bit, name = FAULT_OF[code]
    hit = (mine["faults"] & bit) != 0
    assert sorted(np.flatnonzero(hit).tolist()) == sorted(failed)
    assert not (theirs["faults"] & (FAULT_TRANSIENT | FAULT_NO_PERMISSION)).any()
    assert spool.summary.faults.get(name) == len(failed)
    # staleness: from the buffer where it answered, from the values where it failed; the double
    # repeats both power fields on a stale tick, so either way those ticks are stale (the tick
    # right after the failure is left to its own test below)
    flagged = set(np.flatnonzero((mine["faults"] & FAULT_STALE) != 0).tolist())
    after = first + length
    assert flagged - {after} == stale - {after}
    # every driver sample taken after the source opened, once and in order, values intact
    d = spool.driver_samples
    got = d[d["slot"] == 0]
    expected = gpu.buffer[before_open:]  # 21 calls x at most 4 samples fit its 100 samples
    assert [int(x) for x in got["ts_us"]] == [ts for ts, _ in expected]
    assert np.allclose(got["power_w"], [mw / 1000.0 for _, mw in expected])
    run = spool_to_run(staging, META)
    t_us = run.devices[0].driver_t_us
    assert t_us is not None and (np.diff(t_us) > 0).all()


def test_a_buffer_failing_from_a_tick_on_keeps_the_readings_and_what_came_before(
        fake_nvml, tmp_path):
    gpu = FakeGpu(driver_samples_per_tick=2,
                  faults={"nvmlDeviceGetSamples": lambda n: UNKNOWN if n >= 6 else None})
    fake_nvml([gpu])
    source = nvml_mod.NvmlSource()
    drive_loop(source, tmp_path, ticks=12, flush_s=10.0)
    spool = read_spool(tmp_path)
    samples = spool.device_samples(0)
    assert np.isfinite(samples["power_w"]).all()
    assert np.flatnonzero(samples["faults"] & FAULT_TRANSIENT).tolist() == list(range(5, 12))
    # what the buffer gave before it failed is kept (ticks 0-4: two samples each, after the
    # probe's two)
    assert [int(x) for x in spool.driver_samples["ts_us"]] == [ts for ts, _ in gpu.buffer[2:12]]
    # the power rises every tick: no tick is stale although the buffer says nothing
    assert not (samples["faults"] & FAULT_STALE).any()


def test_the_first_tick_after_a_buffer_failure_is_stale_when_it_repeats(fake_nvml, tmp_path):
    # loop tick 1: the buffer fails; loop tick 2: the driver measured nothing new (the double's
    # tick 3), so its power repeats tick 1's
    gpu = FakeGpu(driver_samples_per_tick=2, stale_ticks=frozenset({3}),
                  faults={"nvmlDeviceGetSamples": _failing(UNKNOWN, 1, 1)})
    fake_nvml([gpu])
    drive_loop(nvml_mod.NvmlSource(), tmp_path, ticks=5, flush_s=10.0)
    samples = read_spool(tmp_path).device_samples(0)
    assert samples["power_w"][2] == samples["power_w"][1]
    assert np.flatnonzero(samples["faults"] & FAULT_STALE).tolist() == [2]
