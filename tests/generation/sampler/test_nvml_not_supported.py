"""NVML that answers field and sample calls NOT_SUPPORTED (as under gVisor): the sampler degrades.

Power falls back to ``nvmlDeviceGetPowerUsage`` for the whole run (``power_field=power_usage``),
which on Hopper is a 1 s average and is flagged ``power_is_1s_average``; the energy counter
falls back to ``nvmlDeviceGetTotalEnergyConsumption``; the driver's buffer is left out. Nothing
is null that another call can read, and nothing is labelled instant.
"""

from __future__ import annotations

import numpy as np

from generation.sampler import read_spool, spool_to_run
from generation.sampler.nvml import NvmlSource, tick_call_latencies_ms

from .conftest import drive_loop
from .fake_nvml import NOT_SUPPORTED, FakeGpu, always

META = {"run_id": "r1", "workload": "finetune"}


def _gvisor_gpu(**kwargs) -> FakeGpu:
    return FakeGpu(name="NVIDIA H200", call_code=NOT_SUPPORTED, driver_samples_per_tick=None,
                   **kwargs)


def _measure(gpu: FakeGpu) -> None:
    """The GPU takes a new measurement (the double's field-values call would do this)."""
    gpu.tick += 1
    gpu.measured_tick = gpu.tick
    gpu.energy_mj += gpu.power_mw() * gpu.period_s


def test_field_and_sample_calls_not_supported_fall_back_to_power_usage_labelled(
        fake_nvml, tmp_path):
    gpu = _gvisor_gpu()
    fake = fake_nvml([gpu])
    source = NvmlSource()
    devices = source.open()
    probes = devices[0].details["probes"]
    assert source.power_field == "power_usage"
    assert probes["power_usage"] == "ok" and probes["driver_power_samples"] == "not_supported"
    assert probes["total_energy_consumption"] == "ok"
    calls = fake.calls["nvmlDeviceGetFieldValues"]
    drive_loop(source, tmp_path, devices=devices, ticks=10,
               between_ticks=lambda _n: _measure(gpu))
    assert fake.calls["nvmlDeviceGetFieldValues"] == calls  # never asked again
    spool = read_spool(tmp_path)
    assert np.isfinite(spool.samples["power_w"]).all()
    assert len(set(spool.samples["power_w"])) == 10  # each tick's own reading
    assert np.isfinite(spool.samples["energy_mj"]).all()
    assert spool.summary.faults == {} and len(spool.driver_samples) == 0
    run = spool_to_run(tmp_path, META)
    assert run.meta["power_field"] == "power_usage"
    assert "power_is_1s_average" in run.flags  # H200: nvmlDeviceGetPowerUsage is a 1 s average


def test_only_the_instant_field_refused_still_labels_the_average(fake_nvml, tmp_path):
    fake_nvml([FakeGpu(name="NVIDIA H200", field_codes={186: NOT_SUPPORTED},
                       driver_samples_per_tick=2)])
    source = NvmlSource()
    devices = source.open()
    drive_loop(source, tmp_path, devices=devices, ticks=5)
    run = spool_to_run(tmp_path, META)
    assert run.meta["power_field"] == "power_usage" and "power_is_1s_average" in run.flags


def test_tick_call_latencies_time_each_call_and_name_the_refused(fake_nvml):
    from generation.sampler import nvml

    fake_nvml([_gvisor_gpu(faults={"nvmlDeviceGetTemperature": always(NOT_SUPPORTED)})])
    with nvml.session():
        got = tick_call_latencies_ms(nvml.device_handle(0), repeats=5)
    assert set(got) == {"field_values", "driver_samples", "power_usage", "utilization",
                        "memory", "sm_clock", "mem_clock", "temperature"}
    for refused in ("field_values", "driver_samples", "temperature"):
        assert isinstance(got[refused], str) and "Not Supported" in got[refused]
    times = got["power_usage"]
    assert isinstance(times, list) and len(times) == 5 and all(t >= 0 for t in times)
