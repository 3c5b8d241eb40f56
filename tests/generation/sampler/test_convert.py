"""From a spool to a ``Run``: the run clock, events, provenance columns, flags.

The sampler's name (and so the ``cpu_proxy`` label) taken from the spool header when the
provenance does not name it; the sample period taken from the provenance when the header has
none, and the error naming ``header.json`` when neither has it; the ``stale_power`` flag from the
sampler's fault counts; and the run's flags built afresh from the spool (a caller's
``quality_flags`` merged, never replaced by the caller's list object).
"""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest

from generation.attempts import archive_attempt
from generation.events import EventRecorder
from generation.sampler import SamplerError, provenance_meta, spool_to_run
from generation.sampler.base import FAULT_STALE, Reading
from generation.sampler.convert import _strictly_increasing, t_ms_of
from generation.sampler.spool import SpoolWriter
from llm_powertrace_ds.errors import InputError

from .conftest import FakeClock, ScriptedSource, drive_loop
from .test_convert_behaviour import META as GPU_META
from .test_convert_behaviour import GpuLike, gpu_spool

META = {"run_id": "conv", "workload": "finetune", "model_family": "gpt2", "sweep": "t"}


def test_t_ms_is_floor_ms_since_t0():
    assert t_ms_of(np.array([1_000_000_000, 1_000_999_999, 1_001_000_000]),
                   1_000_000_000).tolist() == [0, 0, 1]
    assert t_ms_of(np.array([999_999_999]), 1_000_000_000).tolist() == [-1]
    fixed, nudged = _strictly_increasing(np.array([0, 100, 100, 100, 300]))
    assert fixed.tolist() == [0, 100, 101, 102, 300] and nudged == 2


def test_cpu_proxy_run_meta_and_flags(tmp_path):
    clock = FakeClock()
    drive_loop(ScriptedSource(2), tmp_path, ticks=20, clock=clock)
    run = spool_to_run(tmp_path, META)
    m = run.meta
    assert m["sampler"] == "cpu_proxy" and m["power_field"] == "cpu_proxy_model"
    assert m["platform"] == "cpu_proxy" and m["num_gpus"] == 2
    assert m["sample_period_ms"] == 100.0
    assert m["start_time"] == dt.datetime(2026, 1, 1, 0, 0, 0, 100_000,
                                          tzinfo=dt.timezone.utc)  # anchor + one period
    assert run.flags == ["cpu_proxy"]
    assert [d.gpu_index for d in run.devices] == [0, 1]
    assert [d.gpu_name for d in run.devices] == ["cpu_proxy"] * 2
    d0 = run.devices[0]
    assert d0.t_ms.tolist() == list(range(0, 2000, 100))
    assert set(d0.signals) == {"power_w", "energy_mj"}  # never-reported signals are absent
    assert d0.signals["energy_mj"][0] == 0


def test_caller_meta_wins_and_flags_merge(tmp_path):
    drive_loop(ScriptedSource(), tmp_path, ticks=3)
    run = spool_to_run(tmp_path, {**META, "platform": "cpu_proxy",
                                  "quality_flags": ["stall"]})
    assert run.flags == ["stall", "cpu_proxy"]


def test_unknown_meta_keys_are_refused(tmp_path):
    drive_loop(ScriptedSource(), tmp_path, ticks=3)
    with pytest.raises(InputError, match="unknown keys 'bogus'"):
        spool_to_run(tmp_path, {**META, "bogus": 1})


def test_incomplete_flag(tmp_path):
    drive_loop(ScriptedSource(), tmp_path, ticks=3)
    assert "incomplete" not in spool_to_run(tmp_path, META).flags
    assert "incomplete" in spool_to_run(tmp_path, META, incomplete=True).flags
    (tmp_path / "spool" / "summary.json").unlink()  # as after a SIGKILL of the sampler
    assert "incomplete" in spool_to_run(tmp_path, META).flags
    assert "incomplete" not in spool_to_run(tmp_path, META, incomplete=False).flags


def test_archived_attempt_converts_as_incomplete(tmp_path):
    drive_loop(ScriptedSource(), tmp_path, ticks=3)
    attempt = archive_attempt(tmp_path)
    assert "incomplete" in spool_to_run(attempt, META).flags
    assert "incomplete" in provenance_meta(attempt)["quality_flags"]


def test_events_share_the_sample_clock(tmp_path):
    clock = FakeClock()
    rec = EventRecorder(tmp_path, rank=0, clock=clock)

    class Marking(ScriptedSource):
        def read(self, slot):
            if self.reads == 5:
                rec.mark("stage", label="burst")
            if self.reads == 10:
                rec.mark("idle_begin")
            return super().read(slot)

    drive_loop(Marking(), tmp_path, ticks=15, clock=clock)
    rec.close()
    run = spool_to_run(tmp_path, META)
    d = run.devices[0]
    ev = {e.kind: e for e in run.events}
    # each event was marked during a read, so it lies in (previous sample, its sample]
    assert d.t_ms[4] < ev["stage"].t_ms <= d.t_ms[5]
    assert ev["stage"].rank == 0 and ev["stage"].label == "burst"
    assert ev["idle_begin"].rank is None
    assert d.t_ms[9] < ev["idle_begin"].t_ms <= d.t_ms[10]
    assert len(run.device_events(d)) == 2


def test_an_empty_spool_is_an_error(tmp_path):
    w = SpoolWriter(tmp_path / "spool", {"source": "cpu_proxy", "period_ms": 100.0})
    w.open()
    w.close()
    with pytest.raises(SamplerError, match="no samples"):
        spool_to_run(tmp_path, META)


def test_converted_run_publishes_and_reads_back(tmp_path):
    from llm_powertrace_ds import layout, shards

    staging = layout.staging_dir(tmp_path, "conv")
    drive_loop(ScriptedSource(), staging, ticks=30)
    EventRecorder(staging, rank=0).close()
    run = spool_to_run(staging, META)
    result = shards.publish_run(tmp_path, run, refresh_card=False)
    assert not staging.exists()  # published: staging removed
    trace = [f for f in result.files if f.startswith("data/finetune/")]
    assert trace == ["data/finetune/cpu_proxy/gpt2/conv.arrow"]
    assert "cpu_proxy" in result.flags
    # 30 ticks of 100 W, 100 ms apart; the counter adds 10 J a tick.
    m = result.metrics
    assert m["duration_s"] == pytest.approx(2.9)
    assert m["energy_j"] == pytest.approx(290.0)
    assert m["mean_power_w"] == pytest.approx(100.0)
    assert m["energy_counter_j"] == pytest.approx(290.0)
    assert m["energy_mismatch_pct"] == pytest.approx(0.0, abs=1e-9)
    (row,) = shards.list_runs(tmp_path)
    assert row["run_id"] == "conv" and row["sampler"] == "cpu_proxy"
    assert row["platform"] == "cpu_proxy" and "cpu_proxy" in row["quality_flags"]
    assert row["energy_j"] == pytest.approx(290.0) and row["duration_s"] == pytest.approx(2.9)
    back = shards.read_run(tmp_path, "conv")
    np.testing.assert_array_equal(back.devices[0].t_ms, run.devices[0].t_ms)
    np.testing.assert_allclose(back.devices[0].power_w, 100.0)


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
    run = spool_to_run(tmp_path, GPU_META)
    assert "stale_power" in run.flags
    clean = tmp_path / "clean"
    clean.mkdir()
    drive_loop(GpuLike(["NVIDIA L40S"]), clean, ticks=10, clock=FakeClock())
    assert "stale_power" not in spool_to_run(clean, GPU_META).flags


def test_the_runs_flags_are_a_fresh_list_of_the_spools_and_the_callers(tmp_path):
    gpu_spool(tmp_path, ["NVIDIA H100 80GB HBM3"], power_field="power_usage")
    mine = ["incomplete"]
    run = spool_to_run(tmp_path, {**GPU_META, "quality_flags": mine})
    assert sorted(run.meta["quality_flags"]) == ["incomplete", "power_is_1s_average"]
    assert run.flags == run.meta["quality_flags"]
    assert mine == ["incomplete"]  # the caller's list is not the run's
    assert not [k for k in run.meta if "flags" in k.lower() and k != "quality_flags"]


def test_a_gpu_spool_without_devices_has_an_unknown_platform(tmp_path):
    drive_loop(GpuLike([]), tmp_path, ticks=3, clock=FakeClock())
    meta = provenance_meta(tmp_path)
    assert meta["sampler"] == "nvml" and meta["num_gpus"] == 0
    assert meta["platform"] == "unknown" and "platform_unknown" in meta["quality_flags"]
