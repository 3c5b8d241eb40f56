"""The sampler as real NVML behaves (issue 36).

The driver's own power buffer published as a finer series, eight GPUs read in one tick, a MIG
instance allowed through the run-start check.
"""

from __future__ import annotations

import numpy as np
import pytest

from generation import gpu_devices
from generation.gpu_devices import check_same_gpus, resolve_workload_gpus
from generation.sampler import nvml as nvml_mod
from generation.sampler import read_spool, spool_to_run
from generation.sampler.nvml import NvmlSource
from llm_powertrace_ds.shards.encode import trace_table
from llm_powertrace_ds.shards.read import runs_from_table

from .conftest import FakeClock, drive_loop
from .fake_nvml import FakeGpu, FakeNvml

META = {"run_id": "r1", "workload": "finetune"}


def test_driver_samples_are_published_as_the_finer_series(fake_nvml, tmp_path):
    # 4 driver samples per 100 ms tick (every 25 ms); those already in the buffer at open
    # predate the run and are skipped; t0's UTC is the fake ts0 + 100 ms (see conftest anchors)
    fake_nvml([FakeGpu(driver_samples_per_tick=4), FakeGpu()])  # GPU 1: no buffer
    source = NvmlSource()
    devices = source.open()
    assert devices[0].details["driver_power_sample_interval_ms"] == 25.0  # from the buffer at open
    assert devices[1].details["probes"]["driver_power_samples"] == "not_supported"
    drive_loop(source, tmp_path, devices=devices, ticks=10)
    spool = read_spool(tmp_path)
    assert len(spool.driver_samples) == 40  # every sample of ticks 0..9, once
    run = spool_to_run(tmp_path, META)
    dev = run.devices[0]
    assert dev.driver_t_us is not None and dev.driver_power_w is not None
    # the samples of tick 0 before t0 are dropped: t = 0, 25 ms, ..., 900 ms
    assert dev.driver_t_us.tolist() == list(range(0, 900_001, 25_000))
    assert dev.driver_power_w[0] == pytest.approx(101.003)  # call 1, 4th sample: 101 W + 3 mW
    assert dev.driver_power_w[-1] == pytest.approx(110.003)
    assert run.devices[1].driver_t_us is None
    assert run.meta["driver_power_period_ms"] == 25.0
    assert len(dev) == 10  # the tick series is unchanged
    # through the trace table and back: same series, its own time base
    back = next(runs_from_table(trace_table(run)))
    assert back.devices[0].driver_t_us.tolist() == dev.driver_t_us.tolist()
    np.testing.assert_allclose(back.devices[0].driver_power_w, dev.driver_power_w, rtol=1e-6)
    assert back.devices[1].driver_t_us is None
    assert back.meta["driver_power_period_ms"] == 25.0


@pytest.mark.parametrize("latency_us", [150, 600])
def test_eight_gpus_power_phase_fits_in_10_ms(tmp_path, monkeypatch, latency_us):
    # Every NVML call of the double takes `latency_us` of the loop's (fake) clock. 150 us is the
    # assumed per-call cost (not measured here: no GPU; bench/gpu_smoke.py's nvml step measures
    # it); 600 us is what the power phase can afford: 8 GPUs x 2 calls x 0.6 ms = 9.6 ms.
    clock = FakeClock()
    fake = FakeNvml([FakeGpu(uuid=f"GPU-{i}", driver_samples_per_tick=5) for i in range(8)],
                    clock=clock, call_latency_ns=latency_us * 1000)
    monkeypatch.setattr(nvml_mod, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    source = NvmlSource()
    devices = source.open()
    before = sum(fake.calls.values())
    drive_loop(source, tmp_path, devices=devices, ticks=20, clock=clock)
    summary = read_spool(tmp_path).summary
    # power phase: one field-values call and one buffer call per GPU, every field at once
    assert fake.calls["nvmlDeviceGetFieldValues"] == 8 * 21  # probe + 20 ticks
    assert summary.read_phase_p99_ms == pytest.approx(8 * 2 * latency_us / 1000)
    assert summary.read_phase_p99_ms <= 10.0
    per_tick = (sum(fake.calls.values()) - before) / 20 / 8
    assert per_tick == 8  # 2 power calls + 6 slow signals with no field id
    assert summary.missed_ticks == 0


def test_a_mig_instance_passes_the_run_start_check(monkeypatch):
    # The workload on a MIG instance sees the instance's UUID; the allow-path compared it with
    # the parent GPU's UUID, so it could never succeed.
    fake = FakeNvml([FakeGpu(uuid="GPU-aaaa0000-0000-0000-0000-000000000000", mig=True,
                             mig_uuids=("MIG-bbbb1111-0000-0000-0000-000000000000",))])
    monkeypatch.setattr(nvml_mod, "pynvml", fake)
    env = {"CUDA_VISIBLE_DEVICES": "MIG-bbbb1111-0000-0000-0000-000000000000"}
    [gpu] = resolve_workload_gpus(1, env=env)
    assert gpu.nvml_index == 0  # the parent is what is sampled
    check_same_gpus(["bbbb1111-0000-0000-0000-000000000000"], [gpu])  # torch: no prefix
    with pytest.raises(gpu_devices.GpuMismatch):
        check_same_gpus(["aaaa0000-0000-0000-0000-000000000000"], [gpu])
    # and the sampler reads the parent, allowed, recorded as whole-GPU power
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env["CUDA_VISIBLE_DEVICES"])
    [dev] = NvmlSource(allow_mig=True).open()
    assert dev.details["mig_mode"] is True and dev.details["power_scope"] == "whole_gpu"
