"""Provenance of a GPU (not cpu_proxy) spool: platform, 1 s-average flag, clock, versions."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest

from generation.sampler import provenance_meta, spool_to_run
from generation.sampler.base import DeviceInfo
from generation.sampler.convert import _strictly_increasing, t_ms_of
from generation.sampler.spool import read_spool

from .conftest import FakeClock, ScriptedSource, drive_loop

META = {"run_id": "gpu-conv", "workload": "finetune", "model_family": "gpt2", "sweep": "t"}
ANCHOR_UTC = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)  # drive_loop's start anchor


class GpuLike(ScriptedSource):
    """The scripted readings, presented as NVML devices with real product names."""

    name = "nvml"

    def __init__(self, names: list[str]) -> None:
        super().__init__(len(names))
        self.names = names

    def open(self) -> list[DeviceInfo]:
        return [DeviceInfo(i, i, i, n, power_limit_w=700.0) for i, n in enumerate(self.names)]


def gpu_spool(tmp_path, names, *, power_field="instant", provenance=True, **extra):
    drive_loop(GpuLike(names), tmp_path, ticks=10, clock=FakeClock())
    if provenance:
        prov = {"sampler": "nvml", "power_field": power_field, "driver_version": "550.54",
                "nvml_version": "12.550", "cuda_version": "12.4", **extra}
        (tmp_path / "provenance.json").write_text(json.dumps(prov))
    return tmp_path


@pytest.mark.parametrize(("names", "power_field", "platform", "flags"), [
    (["NVIDIA H100 80GB HBM3"] * 2, "instant", "h100_sxm_80gb", []),
    (["NVIDIA H100 80GB HBM3"] * 2, "power_usage", "h100_sxm_80gb", ["power_is_1s_average"]),
    (["NVIDIA A100-SXM4-80GB", "NVIDIA L40S"], "power_usage", "a100_sxm4_80gb",
     ["power_is_1s_average"]),  # any device that averages flags the run
    (["NVIDIA A100-SXM4-80GB"], "power_usage", "a100_sxm4_80gb", []),
    (["NVIDIA A100-SXM4-80GB"], "average", "a100_sxm4_80gb", ["power_is_1s_average"]),
    (["Mystery Accelerator"], "instant", "mystery_accelerator", []),  # slug of its name
])
def test_platform_and_flags_come_from_the_device_names(tmp_path, names, power_field, platform,
                                                       flags):
    meta = provenance_meta(gpu_spool(tmp_path, names, power_field=power_field))
    assert meta["sampler"] == "nvml" and meta["power_field"] == power_field
    assert meta["platform"] == platform
    assert meta["quality_flags"] == flags
    assert meta["num_gpus"] == len(names)
    assert (meta["driver_version"], meta["nvml_version"], meta["cuda_version"]) == (
        "550.54", "12.550", "12.4")
    assert meta["sample_period_ms"] == 100.0
    assert meta["start_time"] == ANCHOR_UTC + dt.timedelta(milliseconds=100)
    assert meta["start_time"].tzinfo is dt.timezone.utc


def test_without_provenance_the_spool_header_names_the_sampler(tmp_path):
    meta = provenance_meta(gpu_spool(tmp_path, ["NVIDIA L40S"], provenance=False))
    assert meta["sampler"] == "nvml" and meta["platform"] == "l40s"
    assert "cpu_proxy" not in meta["quality_flags"]


def test_a_gpu_run_carries_its_provenance_into_the_run(tmp_path):
    run = spool_to_run(gpu_spool(tmp_path, ["NVIDIA H100 80GB HBM3"] * 2,
                                 power_field="power_usage"), META)
    assert run.platform == "h100_sxm_80gb" and run.meta["sampler"] == "nvml"
    assert run.flags == ["power_is_1s_average"]
    assert [d.gpu_name for d in run.devices] == ["NVIDIA H100 80GB HBM3"] * 2
    np.testing.assert_allclose(run.devices[1].power_w, 101.0)


def test_the_stop_anchor_dates_a_run_whose_start_anchor_is_missing(tmp_path):
    gpu_spool(tmp_path, ["NVIDIA L40S"])
    anchors = tmp_path / "spool" / "anchors.json"
    pair = json.loads(anchors.read_text())["start"]
    anchors.write_text(json.dumps({"stop": pair}))
    meta = provenance_meta(tmp_path)
    assert meta["start_time"] == ANCHOR_UTC + dt.timedelta(milliseconds=100)


def test_t_ms_of_accepts_python_ints_beyond_float_precision():
    t0 = 1_767_225_600_123_456_789  # ns since 1970: not exact as a float64
    got = t_ms_of([t0 + 1_999_999, t0 + 2_000_000], t0)
    assert got.dtype == np.int64 and got.tolist() == [1, 2]


def test_strictly_increasing_fixes_a_repeat_at_the_second_sample():
    fixed, nudged = _strictly_increasing(np.array([0, 0, 5]))
    assert fixed.tolist() == [0, 1, 5] and nudged == 1


class Identified(GpuLike):
    """GPU devices with ranks, uuid hashes and both power limits."""

    def open(self) -> list[DeviceInfo]:
        return [DeviceInfo(i, i, 3 - i, n, uuid_hash=f"hash-{i}", power_limit_w=600.0 + i,
                           default_power_limit_w=700.0 + i) for i, n in enumerate(self.names)]


def test_every_device_field_reaches_the_run(tmp_path):
    drive_loop(Identified(["NVIDIA H100 80GB HBM3"] * 2), tmp_path, ticks=5, clock=FakeClock())
    for node, kwargs in ((0, {}), (2, {"node_index": 2})):
        run = spool_to_run(tmp_path, META, **kwargs)
        for g, d in enumerate(run.devices):
            assert (d.gpu_index, d.node_index, d.rank) == (g, node, 3 - g)
            assert d.gpu_uuid_hash == f"hash-{g}"
            assert (d.power_limit_w, d.default_power_limit_w) == (600.0 + g, 700.0 + g)
            assert d.power_w.dtype == np.float64


def test_provenance_names_the_sampler_over_the_spool_header(tmp_path):
    gpu_spool(tmp_path, ["NVIDIA L40S"], sampler="nvml-v2")
    assert provenance_meta(tmp_path)["sampler"] == "nvml-v2"


def test_a_cpu_proxy_spool_is_labelled_cpu_proxy_by_its_own_provenance(tmp_path):
    drive_loop(ScriptedSource(2), tmp_path, ticks=5, clock=FakeClock())
    meta = provenance_meta(tmp_path)
    assert meta["sampler"] == "cpu_proxy" and meta["platform"] == "cpu_proxy"
    assert meta["quality_flags"] == ["cpu_proxy"]


def test_samples_sharing_a_millisecond_are_counted_in_one_log_line(tmp_path, caplog):
    import logging

    # 0.4 ms ticks: most samples floor to the same millisecond as the one before
    drive_loop(GpuLike(["NVIDIA L40S"] * 2), tmp_path, ticks=10, period_ms=0.4,
               clock=FakeClock())
    with caplog.at_level(logging.INFO, logger="generation"):
        run = spool_to_run(tmp_path, META)
    for d in run.devices:
        assert (np.diff(d.t_ms) > 0).all()
    lines = [r.getMessage() for r in caplog.records
             if "shared a millisecond" in r.getMessage()]
    assert len(lines) == 1
    spool = read_spool(tmp_path)
    raw = [t_ms_of(spool.device_samples(slot)["t_after_ns"], spool.t0_ns) for slot in (0, 1)]
    moved = sum(int(np.count_nonzero(r != d.t_ms)) for r, d in zip(raw, run.devices, strict=True))
    assert moved > 2 and lines[0] == (f"{moved} samples shared a millisecond with the previous "
                                      "one and were moved 1 ms")


def test_a_device_without_samples_is_kept_empty_with_a_warning(tmp_path, caplog):
    import logging

    gpu_spool(tmp_path, ["NVIDIA L40S"])
    devices_json = tmp_path / "spool" / "devices.json"
    devices = json.loads(devices_json.read_text())
    devices.append({**devices[0], "slot": 5, "gpu_index": 5})  # appeared, never read
    devices_json.write_text(json.dumps(devices))
    with caplog.at_level(logging.WARNING, logger="generation"):
        run = spool_to_run(tmp_path, META)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "device slot 5 has no samples"]
    assert [len(d.t_ms) for d in run.devices] == [10, 0]
    assert run.devices[1].gpu_index == 5 and run.devices[1].signals == {}


def _dev(t_ms, power=None, energy_mj=None):
    from llm_powertrace_ds.run import DeviceSeries

    signals = {}
    if power is not None:
        signals["power_w"] = np.asarray(power, float)
    if energy_mj is not None:
        signals["energy_mj"] = np.asarray(energy_mj, float)
    return DeviceSeries(0, np.asarray(t_ms, np.int64), signals)


def test_energy_mismatch_pct_is_signed_percent_of_the_counter():
    from generation.sampler.convert import energy_mismatch_pct

    # 100 W for 1 s = 100 J against a counter that moved 80 J: +25 %
    assert energy_mismatch_pct(_dev([0, 1000], [100, 100], [0, 80_000])) == pytest.approx(25.0)
    assert energy_mismatch_pct(_dev([0, 1000], [1, 1], [0, 800])) == pytest.approx(25.0)  # < 1 J
    # the counter's first and last finite readings; the power's finite readings only
    dev = _dev([0, 500, 1000, 1500], [100, np.nan, 100, np.nan],
               [np.nan, 10_000, 135_000, np.nan])
    assert energy_mismatch_pct(dev) == pytest.approx(100 * (100 - 125) / 125)


@pytest.mark.parametrize(("power", "energy"), [
    (None, [0, 1000]), ([100, 100], None),  # a signal never reported
    ([100, np.nan], [0, 1000]), ([100, 100], [np.nan, 1000]),  # fewer than 2 readings
    ([100, 100], [5000, 5000]), ([100, 100], [5000, 4000]),  # counter flat or wrapped back
])
def test_energy_mismatch_pct_is_none_without_two_readings_of_each_and_a_rising_counter(power,
                                                                                      energy):
    from generation.sampler.convert import energy_mismatch_pct

    assert energy_mismatch_pct(_dev([0, 1000], power, energy)) is None


@pytest.mark.parametrize(("scale", "flagged"), [(1.0, False), (1.04, False), (0.8, True),
                                                (1.2, True)])
def test_spool_to_run_flags_an_energy_mismatch_above_five_percent(tmp_path, scale, flagged):
    from generation.sampler.base import Reading

    class Skewed(GpuLike):
        def read(self, slot: int) -> Reading:
            r = super().read(slot)
            return Reading(power_mw=r.power_mw, energy_mj=r.energy_mj * scale)

    drive_loop(Skewed(["NVIDIA L40S"]), tmp_path, ticks=20, clock=FakeClock())
    run = spool_to_run(tmp_path, META)
    assert ("energy_mismatch" in run.flags) is flagged


def test_bad_run_metadata_names_the_spool_folder(tmp_path):
    from llm_powertrace_ds.errors import InputError

    gpu_spool(tmp_path, ["NVIDIA L40S"])
    with pytest.raises(InputError) as info:
        spool_to_run(tmp_path, {**META, "bogus": 1})
    assert str(tmp_path) in str(info.value) and "unknown keys 'bogus'" in str(info.value)
