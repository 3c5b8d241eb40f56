"""The nvml source against the NVML test double: probes, per-tick reads, error translation, faults."""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import math

import numpy as np
import pynvml
import pytest

from generation.sampler import (
    GpuLost,
    NoPermission,
    NotSupported,
    SamplerConfig,
    SamplerConfigError,
    SourceUnavailable,
    UnknownError,
    read_spool,
    resolve_source,
    spool_to_run,
)
from generation.sampler import nvml as nvml_mod
from generation.sampler.base import FAULT_FIELD_NOT_SUPPORTED, FAULT_NO_PERMISSION, FAULT_TRANSIENT
from generation.sampler.nvml import NvmlSource, check_available, check_binding, translate_error

from .conftest import drive_loop
from .fake_nvml import (
    FAKED_FUNCTIONS,
    GPU_IS_LOST,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeGpu,
    FakeNvml,
    always,
    on_calls,
)

META = {"run_id": "r1", "workload": "finetune"}


# ---------------------------------------------------------------------------------------------
# The double itself and the translation table
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FAKED_FUNCTIONS)
def test_double_has_the_bindings_signatures(name):
    real = getattr(pynvml, name)
    fake_params = list(inspect.signature(getattr(FakeNvml, name)).parameters)[1:]
    assert fake_params == list(inspect.signature(real).parameters)


@pytest.mark.parametrize(("code", "cls"), [
    (pynvml.NVML_ERROR_NOT_SUPPORTED, NotSupported),
    (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, NotSupported),
    (pynvml.NVML_ERROR_NO_PERMISSION, NoPermission),
    (pynvml.NVML_ERROR_GPU_IS_LOST, GpuLost),
    (pynvml.NVML_ERROR_RESET_REQUIRED, GpuLost),
    (pynvml.NVML_ERROR_UNKNOWN, UnknownError),
    (pynvml.NVML_ERROR_TIMEOUT, UnknownError),
])
def test_error_table(code, cls):
    err = translate_error(pynvml.NVMLError(code))
    assert type(err) is cls and err.code == code


def test_errors_are_raised_from_the_original(fake_nvml):
    fake = fake_nvml([FakeGpu(faults={"nvmlDeviceGetName": always(GPU_IS_LOST)})])
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(GpuLost) as info:
        nvml_mod._call("nvmlDeviceGetName", handle)
    assert isinstance(info.value.__cause__, pynvml.NVMLError_GpuIsLost)
    assert issubclass(NoPermission, PermissionError)


def test_module_constants_match_the_binding():
    assert nvml_mod.FI_POWER_INSTANT == pynvml.NVML_FI_DEV_POWER_INSTANT == 186
    assert nvml_mod.FI_POWER_AVERAGE == pynvml.NVML_FI_DEV_POWER_AVERAGE == 185
    assert nvml_mod.FI_ENERGY == pynvml.NVML_FI_DEV_ENERGY == 191
    for name in ("NOT_SUPPORTED", "NO_PERMISSION", "GPU_IS_LOST", "RESET_REQUIRED",
                 "FUNCTION_NOT_FOUND", "UNKNOWN", "DRIVER_NOT_LOADED", "LIBRARY_NOT_FOUND"):
        assert getattr(nvml_mod, f"NVML_ERROR_{name}") == getattr(pynvml, f"NVML_ERROR_{name}")


# ---------------------------------------------------------------------------------------------
# The binding check
# ---------------------------------------------------------------------------------------------

def test_official_binding_is_accepted():
    assert check_binding() == importlib.metadata.version("nvidia-ml-py")


def test_unofficial_pynvml_distribution_is_refused(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "packages_distributions",
                        lambda: {"pynvml": ["pynvml", "nvidia-ml-py"]})
    with pytest.raises(SourceUnavailable, match="unofficial 'pynvml'.*pip uninstall -y pynvml"):
        check_binding()


def test_auto_does_not_hide_a_wrong_binding_behind_cpu_proxy(fake_nvml, monkeypatch):
    fake_nvml()
    monkeypatch.setattr(importlib.metadata, "packages_distributions",
                        lambda: {"pynvml": ["pynvml"]})
    with pytest.raises(SamplerConfigError, match="unofficial"):
        resolve_source(SamplerConfig(source="auto"))


def test_missing_binding_is_unavailable(monkeypatch):
    monkeypatch.setattr(nvml_mod, "pynvml", None)
    with pytest.raises(SourceUnavailable, match="nvidia-ml-py"):
        check_binding()


# ---------------------------------------------------------------------------------------------
# Choosing the source
# ---------------------------------------------------------------------------------------------

def test_auto_picks_nvml_when_a_gpu_is_usable(fake_nvml, caplog):
    fake_nvml()
    caplog.set_level("INFO", logger="generation.sampler.sources")
    assert resolve_source(SamplerConfig(source="auto")) == "nvml"
    assert "sampler source: nvml" in caplog.text


def test_auto_falls_back_to_cpu_proxy_and_logs_why(fake_nvml, caplog):
    fake_nvml(init_code=LIBRARY_NOT_FOUND)
    caplog.set_level("INFO", logger="generation.sampler.sources")
    assert resolve_source(SamplerConfig(source="auto")) == "cpu_proxy"
    assert "cpu_proxy" in caplog.text and "NVML unavailable" in caplog.text


def test_explicit_nvml_without_nvml_is_a_config_error(fake_nvml):
    fake_nvml(init_code=LIBRARY_NOT_FOUND)
    with pytest.raises(SamplerConfigError, match="'nvml' was asked for"):
        resolve_source(SamplerConfig(source="nvml"))


def test_permission_error_at_init_means_unavailable(fake_nvml):
    fake_nvml(init_code=NO_PERMISSION)
    with pytest.raises(SourceUnavailable):
        check_available()
    assert resolve_source(SamplerConfig(source="auto")) == "cpu_proxy"


def test_gpu_index_out_of_range_is_a_config_error(fake_nvml):
    fake_nvml([FakeGpu(), FakeGpu()])
    with pytest.raises(SamplerConfigError, match="gpu index 2 is out of range.*2 GPU"):
        resolve_source(SamplerConfig(source="nvml", gpu_indices=[0, 2]))
    with pytest.raises(SamplerConfigError, match="out of range"):
        resolve_source(SamplerConfig(source="auto", gpu_indices=[5]))


def test_mig_gpu_is_refused_unless_allowed(fake_nvml):
    fake_nvml([FakeGpu(mig=True)])
    with pytest.raises(SamplerConfigError, match="MIG"):
        resolve_source(SamplerConfig(source="nvml"))
    assert resolve_source(SamplerConfig(source="nvml", allow_mig=True)) == "nvml"


def test_cuda_visible_devices_is_respected(fake_nvml, monkeypatch):
    gpus = [FakeGpu(uuid=f"GPU-{i}aaa-bbbb") for i in range(4)]
    fake_nvml(gpus)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-0aaa")
    devices = NvmlSource().open()
    assert [d.gpu_index for d in devices] == [2, 0]
    assert [d.rank for d in devices] == [0, 1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-abc")
    with pytest.raises(SamplerConfigError, match="MIG"):
        NvmlSource().open()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    with pytest.raises(SamplerConfigError, match="out of range"):
        NvmlSource().open()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(SourceUnavailable, match="empty"):
        NvmlSource().open()


# ---------------------------------------------------------------------------------------------
# Open and read
# ---------------------------------------------------------------------------------------------

def test_open_records_facts_without_the_raw_uuid(fake_nvml):
    fake = fake_nvml([FakeGpu(), FakeGpu(uuid="GPU-99999999-0000")])
    source = NvmlSource(uuid_salt="s")
    devices = source.open()
    assert [d.name for d in devices] == ["NVIDIA H100 80GB HBM3"] * 2
    assert devices[0].power_limit_w == 700.0 and devices[0].default_power_limit_w == 700.0
    assert devices[0].details["power_limit_range_w"] == [200.0, 700.0]
    assert devices[0].uuid_hash and devices[0].uuid_hash != devices[1].uuid_hash
    assert devices[0].details["probes"]["power_instant"] == "ok"
    prov = source.provenance()
    assert prov["driver_version"] == "550.54.15" and prov["cuda_version"] == "12.4"
    assert prov["power_field"] == "instant"
    text = json.dumps([d.to_dict() for d in devices]) + json.dumps(prov)
    assert "GPU-" not in text
    source.close()
    assert fake.initialised == 0


def test_one_field_values_call_per_gpu_per_tick(fake_nvml):
    fake = fake_nvml()
    source = NvmlSource()
    source.open()
    before = fake.calls["nvmlDeviceGetFieldValues"]
    r = source.read(0)
    assert fake.calls["nvmlDeviceGetFieldValues"] == before + 1
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 0
    assert r.power_mw == 101_000 and r.power_avg_mw == 100_500
    assert r.energy_mj == pytest.approx(5_000_000 + 101_000 * 0.1)
    assert (r.gpu_util_pct, r.mem_util_pct, r.sm_clock_mhz, r.mem_clock_mhz, r.temp_c) == \
        (11, 5, 1980, 2619, 41)
    assert r.mem_used_bytes == 3 * 2**30 and r.clock_event_reasons == 1 and r.faults == 0


def test_unsupported_field_is_null_for_the_whole_run_never_zero(fake_nvml, tmp_path):
    fake_nvml([FakeGpu(field_codes={185: NOT_SUPPORTED},
                       faults={"nvmlDeviceGetTemperature": always(NOT_SUPPORTED)})])
    source = NvmlSource()
    devices = source.open()
    assert devices[0].details["probes"]["power_average"] == "not_supported"
    assert devices[0].details["probes"]["temperature"] == "not_supported"
    drive_loop(source, tmp_path, devices=devices, ticks=20)
    spool = read_spool(tmp_path)
    assert np.isnan(spool.samples["power_avg_w"]).all()
    assert np.isnan(spool.samples["temp_c"]).all()
    assert spool.summary.faults == {}
    run = spool_to_run(tmp_path, META)
    dev = run.devices[0]
    assert "power_avg_w" not in dev.signals and "temp_c" not in dev.signals  # all-null columns
    assert np.isfinite(dev.signals["power_w"]).all()


def test_instant_power_unsupported_falls_back_to_power_usage(fake_nvml, tmp_path):
    fake = fake_nvml([FakeGpu(), FakeGpu(field_codes={186: NOT_SUPPORTED})])
    source = NvmlSource()
    devices = source.open()
    assert source.power_field == "power_usage"
    r = source.read(0)
    assert r.power_mw == 101_000 - 250  # nvmlDeviceGetPowerUsage, for every GPU
    assert fake.calls["nvmlDeviceGetPowerUsage"] >= 2
    drive_loop(source, tmp_path, devices=devices, ticks=5)
    run = spool_to_run(tmp_path, META)
    assert run.meta["power_field"] == "power_usage"
    assert "power_is_1s_average" in run.flags  # H100: power.draw is a 1 s average


def test_energy_falls_back_to_total_energy_consumption(fake_nvml):
    fake = fake_nvml([FakeGpu(field_codes={191: NOT_SUPPORTED})])
    source = NvmlSource()
    devices = source.open()
    assert devices[0].details["probes"]["energy"] == "not_supported"
    assert devices[0].details["probes"]["total_energy_consumption"] == "ok"
    assert math.isfinite(source.read(0).energy_mj)
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] >= 2


def test_no_permission_at_probe_is_null_for_the_run_and_recorded(fake_nvml, tmp_path):
    fake = fake_nvml([FakeGpu(faults={"nvmlDeviceGetClockInfo": always(NO_PERMISSION)})])
    source = NvmlSource()
    devices = source.open()
    assert devices[0].details["probes"]["sm_clock"] == "no_permission"
    calls = fake.calls["nvmlDeviceGetClockInfo"]
    drive_loop(source, tmp_path, devices=devices, ticks=10)
    assert fake.calls["nvmlDeviceGetClockInfo"] == calls  # never asked again
    spool = read_spool(tmp_path)
    assert np.isnan(spool.samples["sm_clock_mhz"]).all()
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov["devices"][0]["details"]["probes"]["mem_clock"] == "no_permission"


def test_no_permission_mid_run_nulls_that_tick_and_is_counted(fake_nvml, tmp_path):
    fake_nvml([FakeGpu(faults={"nvmlDeviceGetUtilizationRates": on_calls(NO_PERMISSION, 3)})])
    source = NvmlSource()
    devices = source.open()  # probe = call 0
    drive_loop(source, tmp_path, devices=devices, ticks=6)
    spool = read_spool(tmp_path)
    util = spool.samples["gpu_util_pct"]
    assert np.isnan(util[2]) and np.isfinite(np.delete(util, 2)).all()
    assert spool.samples["faults"][2] & FAULT_NO_PERMISSION
    assert spool.summary.faults == {"no_permission": 1}


def test_transient_unknown_errors_null_those_ticks_and_the_sampler_keeps_going(
        fake_nvml, tmp_path):
    fake_nvml([FakeGpu(faults={"nvmlDeviceGetFieldValues": on_calls(UNKNOWN, 4, 7),
                               "nvmlDeviceGetTemperature": on_calls(UNKNOWN, 5)})])
    source = NvmlSource()
    devices = source.open()
    loop = drive_loop(source, tmp_path, devices=devices, ticks=12)
    assert loop.state == "stopped"
    spool = read_spool(tmp_path)
    power = spool.samples["power_w"]
    bad = [3, 6]  # field-values calls 4 and 7 (call 0 was the probe)
    assert np.isnan(power[bad]).all()
    assert np.isfinite(np.delete(power, bad)).all()
    assert np.isnan(spool.samples["temp_c"][4])
    assert spool.summary.faults == {"transient": 3}
    assert (spool.samples["faults"][bad] & FAULT_TRANSIENT).all()
    assert spool.summary.ticks == 12 and spool.summary.complete


def test_field_not_supported_mid_run_is_null_that_tick(fake_nvml, tmp_path):
    gpu = FakeGpu()
    fake_nvml([gpu])
    source = NvmlSource()
    source.open()
    gpu.field_codes[185] = NOT_SUPPORTED
    r = source.read(0)
    assert math.isnan(r.power_avg_mw) and math.isfinite(r.power_mw)
    assert r.faults & FAULT_FIELD_NOT_SUPPORTED


def test_gpu_lost_mid_run_ends_its_series_the_other_gpu_goes_on(fake_nvml, tmp_path):
    # Before the fix one GPU falling off the bus ended the whole run at its loss.
    fake_nvml([FakeGpu(), FakeGpu(lost_from_tick=6)])
    source = NvmlSource()
    devices = source.open()
    loop = drive_loop(source, tmp_path, devices=devices, ticks=20)
    assert loop.state == "stopped" and "GPU 1" in loop.lost[1]
    spool = read_spool(tmp_path)
    assert spool.summary.ticks == 20 and spool.summary.complete
    assert spool.summary.faults == {"gpu_lost": 1}
    # GPU 0 on to the end; GPU 1: 5 full ticks, then the tick of its loss, then nothing
    assert len(spool.device_samples(0)) == 20 and len(spool.device_samples(1)) == 6
    assert np.isfinite(spool.device_samples(0)["power_w"]).all()
    assert np.isfinite(spool.device_samples(1)["power_w"][:5]).all()
    assert np.isnan(spool.device_samples(1)["power_w"][5])
    run = spool_to_run(tmp_path, META)
    assert "gpu_lost" in run.flags and "incomplete" not in run.flags
    assert len(run.devices[0]) == 20 and len(run.devices[1]) == 6
    lost_at_ms = run.devices[1].t_ms[-1]
    assert run.devices[0].t_ms[5] == lost_at_ms  # its series ends at the time of the loss


def test_every_gpu_lost_ends_the_run_incomplete(fake_nvml, tmp_path):
    fake_nvml([FakeGpu(lost_from_tick=4), FakeGpu(lost_from_tick=6)])
    source = NvmlSource()
    devices = source.open()
    loop = drive_loop(source, tmp_path, devices=devices, ticks=50)
    assert loop.state == "gpu_lost" and loop.ticks == 6
    spool = read_spool(tmp_path)
    assert spool.summary.state == "gpu_lost" and not spool.summary.complete
    assert "incomplete" in spool_to_run(tmp_path, META).flags


def test_nvml_run_end_to_end(fake_nvml, tmp_path):
    fake_nvml([FakeGpu(), FakeGpu(base_power_mw=200_000)])
    source = NvmlSource()
    devices = source.open()
    drive_loop(source, tmp_path, devices=devices, ticks=30)
    run = spool_to_run(tmp_path, {**META, "model_family": "llama"})
    assert run.meta["sampler"] == "nvml" and run.meta["power_field"] == "instant"
    assert run.meta["platform"] == "h100_sxm_80gb"
    assert run.meta["num_gpus"] == 2
    assert run.meta["driver_version"] == "550.54.15"
    assert run.meta["start_time"].tzinfo is not None
    assert run.flags == []
    dev = run.devices[1]
    assert dev.t_ms[0] >= 0 and (np.diff(dev.t_ms) == 100).all()
    assert dev.signals["energy_mj"][0] == 0  # energy since t0
    assert dev.power_limit_w == 700.0 and dev.gpu_uuid_hash
    from llm_powertrace_ds.validate import validate_run

    assert validate_run(run).errors == []


def test_counter_disagreeing_with_power_is_flagged(fake_nvml, tmp_path):
    fake_nvml([FakeGpu(energy_scale=1.2)])
    source = NvmlSource()
    devices = source.open()
    drive_loop(source, tmp_path, devices=devices, ticks=30)
    run = spool_to_run(tmp_path, META)
    assert "energy_mismatch" in run.flags
