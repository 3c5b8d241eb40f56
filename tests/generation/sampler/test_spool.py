"""The spool: records round-trip, a torn tail is dropped, attempts are archived."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from generation.attempts import archive_attempt
from generation.sampler import SamplerError, read_spool
from generation.sampler.spool import (
    RECORD_DTYPE,
    RECORD_STRUCT,
    SPOOL_SIGNALS,
    SpoolWriter,
    anchor_pair,
)

from .conftest import ScriptedSource, drive_loop


def test_spool_signals_are_the_contracts_signals():
    from llm_powertrace_ds.run import SIGNAL_KEYS

    assert SPOOL_SIGNALS == SIGNAL_KEYS


def test_record_layout_is_the_same_for_writer_and_reader():
    assert RECORD_DTYPE.itemsize == RECORD_STRUCT.size == 136


def test_round_trip_keeps_nan(tmp_path):
    w = SpoolWriter(tmp_path / "spool", {"source": "nvml", "period_ms": 100.0})
    w.open()
    w.set_devices([{"slot": 0, "gpu_index": 0, "rank": 0, "name": "x"}])
    values = [123.5, math.nan, 7.0, 50.0, math.nan, 10.0, math.nan, math.nan, 40.0, 4.0,
              math.nan]  # the last: power_ts_us
    w.append(0, 0, 0, 100, 101, 102, 0, *values)
    w.append(1, 0, 2, 200, 501, 502, 1, *values)
    w.close()
    spool = read_spool(tmp_path)
    assert len(spool.samples) == 2
    assert spool.samples["missed"].tolist() == [0, 2]
    assert spool.samples["power_w"][0] == 123.5
    assert np.isnan(spool.samples["power_avg_w"]).all()
    assert spool.summary.state == "unfinished"  # no summary.json was written
    assert spool.summary.missed_ticks == 2
    assert spool.summary.faults == {"transient": 1}


def test_torn_last_record_is_dropped(tmp_path):
    drive_loop(ScriptedSource(), tmp_path, ticks=5)
    path = tmp_path / "spool" / "samples.bin"
    data = path.read_bytes()
    path.write_bytes(data[:-50])
    spool = read_spool(tmp_path)
    assert len(spool.samples) == 4 and spool.dropped_bytes == RECORD_DTYPE.itemsize - 50


def test_writer_refuses_to_overwrite_a_spool(tmp_path):
    drive_loop(ScriptedSource(), tmp_path, ticks=2)
    with pytest.raises(SamplerError, match="archive"):
        SpoolWriter(tmp_path / "spool", {}).open()


def test_reading_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(SamplerError, match="no sampler spool"):
        read_spool(tmp_path)
    (tmp_path / "spool").mkdir()
    (tmp_path / "spool" / "header.json").write_text('{"format": "other"}')
    with pytest.raises(SamplerError, match="unknown spool format"):
        read_spool(tmp_path)
    (tmp_path / "spool" / "header.json").write_text("{not json")
    with pytest.raises(SamplerError, match="Failed to read"):
        read_spool(tmp_path)


def test_anchor_pair_is_tight():
    a = anchor_pair()
    assert a["uncertainty_ns"] < 10_000_000
    assert a["utc"].endswith("+00:00")


def test_archive_attempt_moves_measurements_and_marks_incomplete(tmp_path):
    (tmp_path / "status.json").write_text(json.dumps({"status": "running"}))
    (tmp_path / "meta.json").write_text("{}")
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "rank0-1-0.jsonl").write_text("")
    (tmp_path / "requests.jsonl").write_text("")
    drive_loop(ScriptedSource(), tmp_path, ticks=3)
    first = archive_attempt(tmp_path)
    assert first.name == "attempt-1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attempt-1", "meta.json", "status.json"]
    assert (first / "spool" / "samples.bin").exists() and (first / "events").is_dir()
    status = json.loads((first / "status.json").read_text())
    assert status["status"] == "incomplete" and status["attempt"] == 1
    assert len(read_spool(first).samples) == 3
    drive_loop(ScriptedSource(), tmp_path, ticks=2)  # a second attempt in the same folder
    assert archive_attempt(tmp_path).name == "attempt-2"
    assert json.loads((tmp_path / "status.json").read_text())["status"] == "running"
