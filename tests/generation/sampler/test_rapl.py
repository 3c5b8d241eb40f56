"""CPU package and DRAM power from powercap (RAPL), on a fake sysfs tree read as real files.

Devices of their own kind on the GPUs' tick, counters that wrap, never in GPU power totals.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from generation.sampler import SamplerConfig, spool_to_run
from generation.sampler.composite import HOST_SLOT_BASE, WithHostDevices
from generation.sampler.nvml import NvmlSource
from generation.sampler.rapl import RaplSource, find_zones, unwrap_delta_uj
from generation.sampler.sources import make_source
from llm_powertrace_ds.metrics import compute_run_metrics
from llm_powertrace_ds.run import Run
from llm_powertrace_ds.shards.encode import trace_table
from llm_powertrace_ds.shards.read import runs_from_table

from .conftest import FakeClock, drive_loop
from .fake_nvml import FakeGpu

META = {"run_id": "r1", "workload": "finetune"}
MAX_UJ = 50_000_000  # the package counter wraps every 5 ticks at 100 W


def _zone(root: Path, name: str, label: str, energy_uj: int, max_uj: int = MAX_UJ) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{energy_uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    root = tmp_path / "powercap"
    _zone(root, "intel-rapl:0", "package-0", 45_000_000)
    _zone(root, "intel-rapl:0:0", "core", 1)  # part of the package: not a device
    _zone(root, "intel-rapl:0:1", "dram", 7_000_000, max_uj=2**32)
    _zone(root, "intel-rapl:1", "package-1", 0)
    (root / "intel-rapl-mmio:0").mkdir()  # another interface's zone: ignored
    return root


def test_zones_of_a_fake_tree(powercap):
    zones, reason = find_zones(powercap)
    assert reason is None
    assert [(z.kind, z.package, z.name) for z in zones] == [
        ("cpu_package", 0, "package-0"), ("dram", 0, "dram"), ("cpu_package", 1, "package-1")]
    assert unwrap_delta_uj(5_000_000, 45_000_000, MAX_UJ) == 10_000_000


def test_no_powercap_is_said_once_and_the_run_goes_on(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="generation.sampler.rapl")
    source = RaplSource(tmp_path / "absent")
    assert source.open() == []
    assert [r.getMessage() for r in caplog.records] == [
        f"no powercap interface at {tmp_path / 'absent'}: CPU and DRAM power are not measured"]
    assert source.provenance()["host_power"] is None


def test_rapl_devices_in_a_run_wrap_handled_never_in_gpu_totals(fake_nvml, powercap, tmp_path):
    fake_nvml([FakeGpu(), FakeGpu(base_power_mw=200_000)])
    clock = FakeClock()
    config = SamplerConfig(source="nvml", powercap_dir=str(powercap))
    source = make_source("nvml", config, tmp_path)
    assert isinstance(source, WithHostDevices)
    source.host = RaplSource(powercap, clock=clock)  # the loop's fake clock times the reads
    devices = source.open()
    assert [(d.slot, d.kind) for d in devices] == [
        (0, "gpu"), (1, "gpu"), (HOST_SLOT_BASE, "cpu_package"), (HOST_SLOT_BASE + 1, "dram"),
        (HOST_SLOT_BASE + 2, "cpu_package")]
    per_tick_uj = {"intel-rapl:0": 10_000_000, "intel-rapl:0:1": 2_000_000,
                   "intel-rapl:1": 6_000_000}  # 100 W, 20 W, 60 W over 100 ms

    def advance(_ticks: int) -> None:  # real files, rewritten as the kernel would
        for name, inc in per_tick_uj.items():
            f = powercap / name / "energy_uj"
            top = int((powercap / name / "max_energy_range_uj").read_text())
            f.write_text(f"{(int(f.read_text()) + inc) % top}\n")

    drive_loop(source, tmp_path / "st", devices=devices, ticks=12, clock=clock,
               between_ticks=advance)
    run = spool_to_run(tmp_path / "st", META)
    assert [d.kind for d in run.devices] == ["gpu", "gpu"]
    assert run.meta["num_gpus"] == 2
    kinds = [(d.kind, d.gpu_name) for d in run.host_devices]
    assert kinds == [("cpu_package", "package-0"), ("dram", "dram"),
                     ("cpu_package", "package-1")]
    pkg0, dram, pkg1 = run.host_devices
    assert np.isnan(pkg0.power_w[0])  # no interval before the first read: null, not 0
    # package 0 wraps at 50 J (ticks 0-1, 5-6, 10-11): the power never jumps
    np.testing.assert_allclose(pkg0.power_w[1:], 100.0)
    np.testing.assert_allclose(dram.power_w[1:], 20.0)
    np.testing.assert_allclose(pkg1.power_w[1:], 60.0)
    np.testing.assert_allclose(pkg0.signals["energy_mj"], np.arange(12) * 10_000.0)
    # GPU totals: exactly what the GPUs alone give
    gpu_only = Run(meta=dict(run.meta), devices=run.devices, events=run.events)
    with_host, without = compute_run_metrics(run), compute_run_metrics(gpu_only)
    for key in ("energy_j", "mean_power_w", "peak_power_w", "p99_power_w"):
        assert with_host[key] == without[key], key
    assert 280.0 < with_host["mean_power_w"] < 340.0  # 2 GPUs, ~100 + ~200 W; no CPU in it
    # published as rows of their kind, read back into host_devices
    table = trace_table(run)
    assert table.column("device_kind").to_pylist() == [
        "gpu", "gpu", "cpu_package", "dram", "cpu_package"]
    back = next(runs_from_table(table))
    assert len(back.devices) == 2 and [d.kind for d in back.host_devices] == [
        "cpu_package", "dram", "cpu_package"]
    np.testing.assert_allclose(back.host_devices[0].power_w[1:], 100.0, rtol=1e-6)


def test_unreadable_counters_are_said_and_skipped(powercap, monkeypatch):
    real_read = Path.read_text

    def refuse(self: Path, *a, **k):  # noqa: ANN202 - a kernel >= 5.10 for a non-root user
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", refuse)
    zones, reason = find_zones(powercap)
    assert zones == [] and "readable only by root" in reason


def test_host_power_off_does_not_look(tmp_path):
    source = make_source("nvml", SamplerConfig(host_power="off"), tmp_path)
    assert isinstance(source, NvmlSource)
