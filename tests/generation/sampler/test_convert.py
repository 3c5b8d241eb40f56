"""From a spool to a ``Run``: the run clock, events, provenance columns, flags."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from generation.attempts import archive_attempt
from generation.events import EventRecorder
from generation.sampler import SamplerError, provenance_meta, spool_to_run
from generation.sampler.convert import _strictly_increasing, t_ms_of
from generation.sampler.spool import SpoolWriter
from llm_powertrace_ds.errors import InputError

from .conftest import FakeClock, ScriptedSource, drive_loop

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
