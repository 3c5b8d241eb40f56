"""Pins of the converter that a fresh mutation run of ``convert.py`` found unpinned.

The sampler's name (and so the ``cpu_proxy`` label) taken from the spool header when the
provenance does not name it; the sample period taken from the provenance when the header has
none, and the error naming ``header.json`` when neither has it; the ``stale_power`` flag from
the sampler's fault counts; and the run's flags built afresh from the spool (a caller's
``quality_flags`` merged, never replaced by the caller's list object).
"""

from __future__ import annotations

import json

import pytest

from generation.sampler import provenance_meta, spool_to_run
from generation.sampler.base import FAULT_STALE, Reading
from generation.sampler.errors import SamplerError

from .conftest import FakeClock, ScriptedSource, drive_loop
from .test_convert_behaviour import META, GpuLike, gpu_spool


def _provenance(folder, **fields):
    (folder / "provenance.json").write_text(json.dumps(fields), encoding="utf-8")


def test_the_header_names_the_sampler_when_the_provenance_does_not(tmp_path):
    gpu_spool(tmp_path, ["NVIDIA L40S"], provenance=False)
    _provenance(tmp_path, power_field="instant")  # a provenance without "sampler"
    meta = provenance_meta(tmp_path)
    assert meta["sampler"] == "nvml" and meta["platform"] == "l40s"


def test_a_cpu_proxy_spool_is_labelled_from_its_header_alone(tmp_path):
    drive_loop(ScriptedSource(2), tmp_path, ticks=5, clock=FakeClock())
    _provenance(tmp_path)  # the provenance names no sampler: the header's source decides
    meta = provenance_meta(tmp_path)
    assert meta["sampler"] == "cpu_proxy"
    assert meta["platform"] == "cpu_proxy" and meta["quality_flags"] == ["cpu_proxy"]


def _drop_header_period(folder):
    header = folder / "spool" / "header.json"
    data = json.loads(header.read_text(encoding="utf-8"))
    del data["period_ms"]
    header.write_text(json.dumps(data), encoding="utf-8")
    return header


def test_the_period_comes_from_the_provenance_when_the_header_has_none(tmp_path):
    gpu_spool(tmp_path, ["NVIDIA L40S"], sample_period_ms=250)
    _drop_header_period(tmp_path)
    assert provenance_meta(tmp_path)["sample_period_ms"] == 250.0


def test_no_period_anywhere_is_an_error_naming_the_header(tmp_path):
    gpu_spool(tmp_path, ["NVIDIA L40S"])
    header = _drop_header_period(tmp_path)
    with pytest.raises(SamplerError) as info:
        provenance_meta(tmp_path)
    assert str(info.value) == f"'{header}': field 'period_ms' is missing"


def test_stale_readings_flag_the_run_stale_power(tmp_path):
    class Stale(GpuLike):
        def read(self, slot: int) -> Reading:
            r = super().read(slot)
            return r._replace(faults=FAULT_STALE) if slot == 0 else r

    drive_loop(Stale(["NVIDIA L40S"]), tmp_path, ticks=10, clock=FakeClock())
    run = spool_to_run(tmp_path, META)
    assert "stale_power" in run.flags
    clean = tmp_path / "clean"
    clean.mkdir()
    drive_loop(GpuLike(["NVIDIA L40S"]), clean, ticks=10, clock=FakeClock())
    assert "stale_power" not in spool_to_run(clean, META).flags


def test_the_runs_flags_are_a_fresh_list_of_the_spools_and_the_callers(tmp_path):
    gpu_spool(tmp_path, ["NVIDIA H100 80GB HBM3"], power_field="power_usage")
    mine = ["incomplete"]
    run = spool_to_run(tmp_path, {**META, "quality_flags": mine})
    assert sorted(run.meta["quality_flags"]) == ["incomplete", "power_is_1s_average"]
    assert run.flags == run.meta["quality_flags"]
    assert mine == ["incomplete"]  # the caller's list is not the run's
    assert not [k for k in run.meta if "flags" in k.lower() and k != "quality_flags"]


def test_a_gpu_spool_without_devices_has_an_unknown_platform(tmp_path):
    drive_loop(GpuLike([]), tmp_path, ticks=3, clock=FakeClock())
    meta = provenance_meta(tmp_path)
    assert meta["sampler"] == "nvml" and meta["num_gpus"] == 0
    assert meta["platform"] == "unknown" and "platform_unknown" in meta["quality_flags"]
