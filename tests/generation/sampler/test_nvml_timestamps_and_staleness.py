"""NVML readings carry their own time and staleness; start-up fallbacks."""

from __future__ import annotations

import numpy as np

from generation.sampler import read_spool, spool_to_run
from generation.sampler.base import FAULT_STALE
from generation.sampler.nvml import NvmlSource

from .conftest import drive_loop
from .fake_nvml import INVALID_ARGUMENT, NOT_SUPPORTED, FakeGpu

META = {"run_id": "r1", "workload": "finetune"}


def test_each_sample_keeps_the_fields_own_nvml_timestamp(fake_nvml, tmp_path):
    gpu = FakeGpu(ts0_us=1_000_000, ts_step_us=100_000)
    fake_nvml([gpu])
    source = NvmlSource()
    devices = source.open()  # the probe is field-values call 0 (timestamp ts0)
    drive_loop(source, tmp_path, devices=devices, ticks=5)
    spool = read_spool(tmp_path)
    ts = spool.samples["power_ts_us"]
    assert ts.tolist() == [1_100_000 + 100_000 * i for i in range(5)]
    assert spool.summary.faults == {}


def test_a_repeated_measurement_is_stale_though_the_nvml_timestamp_moves(fake_nvml, tmp_path):
    # The field timestamp is when NVML fetched the value: it advances on every call, so the old
    # rule (timestamp equal to the previous tick's) never fired. No driver buffer here: the
    # instant power and the 1 s average both repeat on ticks 2 and 3 (calls 3 and 4).
    fake_nvml([FakeGpu(stale_ticks=frozenset({3, 4}))])
    source = NvmlSource()
    devices = source.open()
    drive_loop(source, tmp_path, devices=devices, ticks=6)
    spool = read_spool(tmp_path)
    assert (np.diff(spool.samples["power_ts_us"]) > 0).all()
    stale = (spool.samples["faults"] & FAULT_STALE) != 0
    assert stale.tolist() == [False, False, True, True, False, False]
    assert spool.summary.faults == {"stale_power": 2}
    assert "stale_power" in spool_to_run(tmp_path, META).flags


def test_stale_from_the_driver_buffer_and_a_flat_load_is_not_stale(fake_nvml, tmp_path):
    # With the driver's buffer, staleness is "no newer sample and the same value"; a load so flat
    # that the value repeats while the driver keeps measuring is not stale.
    fake_nvml([FakeGpu(stale_ticks=frozenset({3, 4}), driver_samples_per_tick=4),
               FakeGpu(step_mw=0, driver_samples_per_tick=4)])
    source = NvmlSource()
    devices = source.open()
    assert devices[0].details["probes"]["driver_power_samples"] == "ok"
    drive_loop(source, tmp_path, devices=devices, ticks=6)
    spool = read_spool(tmp_path)
    stale = (spool.device_samples(0)["faults"] & FAULT_STALE) != 0
    assert stale.tolist() == [False, False, True, True, False, False]
    flat = spool.device_samples(1)
    assert len(set(flat["power_w"].tolist())) == 1 and not (flat["faults"] & FAULT_STALE).any()


def test_invalid_argument_per_field_at_start_falls_back_to_power_usage(fake_nvml, tmp_path):
    # An older driver answers the power fields with INVALID_ARGUMENT: before the fix the
    # field was "kept" and the whole run published null power labelled `instant`.
    fake_nvml([FakeGpu(field_codes={185: INVALID_ARGUMENT, 186: INVALID_ARGUMENT,
                                    191: INVALID_ARGUMENT})])
    source = NvmlSource()
    devices = source.open()
    assert source.power_field == "power_usage"
    assert "fallback" in devices[0].details["probes"]["power_instant"]
    assert devices[0].details["probes"]["total_energy_consumption"] == "ok"
    drive_loop(source, tmp_path, devices=devices, ticks=5)
    run = spool_to_run(tmp_path, META)
    assert run.meta["power_field"] == "power_usage"
    assert np.isfinite(run.devices[0].signals["power_w"]).all()
    assert np.isfinite(run.devices[0].signals["energy_mj"]).all()
    assert np.isnan(read_spool(tmp_path).samples["power_ts_us"]).all()  # no NVML stamp


def test_whole_field_values_call_invalid_at_start_falls_back(fake_nvml):
    fake_nvml([FakeGpu(call_code=INVALID_ARGUMENT)])
    source = NvmlSource()
    devices = source.open()  # used to raise SourceUnavailable: no power at all
    assert source.power_field == "power_usage"
    assert devices[0].details["probes"]["power_usage"] == "ok"
    assert np.isfinite(source.read(0).power_mw)


def test_clock_event_reasons_fall_back_to_throttle_reasons(fake_nvml):
    fake = fake_nvml([FakeGpu(faults={
        "nvmlDeviceGetCurrentClocksEventReasons": lambda n: NOT_SUPPORTED})])
    source = NvmlSource()
    devices = source.open()
    assert "ThrottleReasons" in devices[0].details["probes"]["clock_event_reasons"]
    assert source.read(0).clock_event_reasons == 1
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] >= 2


def test_runner_flags_a_leftover_power_limit_and_records_persistence(fake_nvml):
    from types import SimpleNamespace

    from generation import runner
    from generation.workloads import MachineInfo
    from llm_powertrace_ds.run import DeviceSeries, Run

    fake_nvml([FakeGpu(persistence=True), FakeGpu(persistence=False)])
    machine = MachineInfo(source="nvml", platform="h100_sxm_80gb", num_devices=2, cuda=True,
                          bf16=True)

    def record(limit_w: float) -> Run:
        devs = [DeviceSeries(gpu_index=i, t_ms=np.arange(3), signals={},
                             power_limit_w=limit_w, default_power_limit_w=700.0)
                for i in (0, 1)]
        return Run(meta={"run_id": "r", "workload": "finetune"}, devices=devs, events=[])

    leftover = record(450.0)
    runner._gpu_state_facts(leftover, SimpleNamespace(run_id="r", settings={}), machine)
    assert "power_limit_not_default" in leftover.flags
    assert leftover.meta["gpu_persistence_mode"] is False  # GPU 1 is not in persistence mode
    capped = record(450.0)
    runner._gpu_state_facts(capped, SimpleNamespace(run_id="r", settings={
        "power_limit_setting_w": 450.0}), machine)
    assert "power_limit_not_default" not in capped.flags  # asked for


def test_a_spool_written_before_power_ts_us_still_reads(tmp_path):
    import json

    from generation.sampler.spool import FORMAT, RECORD_FIELDS

    old_fields = [(n, t) for n, t, _ in RECORD_FIELDS if n != "power_ts_us"]
    old = np.zeros(3, dtype=np.dtype(old_fields))
    old["tick"] = [0, 1, 2]
    old["power_w"] = [100.0, 101.0, 102.0]
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "header.json").write_text(json.dumps({
        "format": FORMAT, "record_fields": [list(f) for f in old_fields],
        "record_size": old.dtype.itemsize, "source": "nvml", "period_ms": 100.0}))
    (spool / "samples.bin").write_bytes(old.tobytes())
    samples = read_spool(tmp_path).samples
    assert samples["power_w"].tolist() == [100.0, 101.0, 102.0]
    assert "power_ts_us" not in samples.dtype.names
