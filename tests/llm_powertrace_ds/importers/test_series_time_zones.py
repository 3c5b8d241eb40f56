"""``import series`` with zone-less timestamps read in ``--tz``: real zones, through the CLI.

A zone-less time column is local time of the zone ``--tz`` names (IANA, ``zoneinfo``): the run's
``start_time`` is that instant in UTC and its clock counts real elapsed time, across a daylight
saving change too. The same log written with explicit offsets imports to the same run.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from llm_powertrace_ds.cli import main
from llm_powertrace_ds.query import Runs

ZONES = ["America/Phoenix", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe",
         "Pacific/Chatham", "Europe/London", "America/St_Johns", "Asia/Kathmandu"]


def _import(folder: Path, csv: Path, *extra: str) -> tuple[dt.datetime, np.ndarray]:
    """Import one series log through the CLI; its start_time and its trace's t_ms."""
    code = main(["import", "series", str(csv), "--out", str(folder), "--workload", "finetune",
                 "--time-col", "time", "--power-col", "kw", "--unit", "kW", "--num-gpus", "8",
                 *extra])
    assert code == 0
    runs = Runs.load(str(folder), workload="finetune")
    (start,) = runs.to_arrow().column("start_time").to_pylist()
    ((_, trace),) = list(runs.traces())
    return start, np.asarray(trace.t_ms)


def _write(path: Path, stamps: list[str]) -> Path:
    rows = [f"{s},{2.0 + 0.25 * (k % 4)}" for k, s in enumerate(stamps)]
    path.write_text("time,kw\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _unambiguous(local: dt.datetime, zone: ZoneInfo) -> bool:
    """The wall time exists once in the zone (not skipped, not repeated by a DST change)."""
    a, b = local.replace(tzinfo=zone, fold=0), local.replace(tzinfo=zone, fold=1)
    back = a.astimezone(dt.timezone.utc).astimezone(zone).replace(tzinfo=None)
    return a.utcoffset() == b.utcoffset() and back == local


@settings(max_examples=12, deadline=None)
@given(zone_name=st.sampled_from(ZONES),
       start=st.datetimes(min_value=dt.datetime(2026, 1, 1), max_value=dt.datetime(2026, 12, 30)),
       period_ms=st.sampled_from([100, 250, 1000]), n=st.integers(5, 40))
def test_zone_less_times_are_local_times_of_the_tz(zone_name, start, period_ms, n):
    zone = ZoneInfo(zone_name)
    start = start.replace(microsecond=(start.microsecond // 1000) * 1000)
    local = [start + dt.timedelta(milliseconds=period_ms * k) for k in range(n)]
    assume(all(_unambiguous(x, zone) for x in local))
    aware = [x.replace(tzinfo=zone) for x in local]
    assume(all(a.utcoffset() == aware[0].utcoffset() for a in aware))  # no DST change inside
    expected_start = aware[0].astimezone(dt.timezone.utc)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        naive = _write(root / "naive.csv", [x.isoformat(timespec="milliseconds") for x in local])
        start_tz, t_tz = _import(root / "a", naive, "--tz", zone_name)
        explicit = _write(root / "explicit.csv",
                          [a.isoformat(timespec="milliseconds") for a in aware])
        start_offset, t_offset = _import(root / "b", explicit)
        start_utc, _ = _import(root / "c", naive, "--tz", "UTC")
    assert start_tz == expected_start == start_offset
    assert list(t_tz) == list(t_offset) == [period_ms * k for k in range(n)]
    # read as UTC, the same text is another instant, off by the zone's offset
    offset = aware[0].utcoffset()
    assert offset is not None
    assert start_utc - start_tz == offset


def test_a_spring_forward_inside_the_log_keeps_real_elapsed_time(tmp_path):
    # New York, 2026-03-08: 01:59:59 EST is followed one second later by 03:00:00 EDT
    stamps = ["2026-03-08T01:59:57", "2026-03-08T01:59:58", "2026-03-08T01:59:59",
              "2026-03-08T03:00:00", "2026-03-08T03:00:01"]
    start, t_ms = _import(tmp_path / "ds", _write(tmp_path / "ny.csv", stamps),
                          "--tz", "America/New_York")
    assert start == dt.datetime(2026, 3, 8, 6, 59, 57, tzinfo=dt.timezone.utc)
    assert list(t_ms) == [0, 1000, 2000, 3000, 4000]


def test_a_fall_back_repeats_wall_times_and_is_refused_naming_the_line(tmp_path, capsys):
    # New York, 2026-11-01: 01:59:59 EDT is followed by 01:00:00 EST; zone-less, the repeated
    # hour cannot be told from the first
    stamps = ["2026-11-01T01:59:58", "2026-11-01T01:59:59", "2026-11-01T01:00:00",
              "2026-11-01T01:00:01"]
    code = main(["import", "series", str(_write(tmp_path / "ny.csv", stamps)), "--out",
                 str(tmp_path / "ds"), "--workload", "finetune", "--time-col", "time",
                 "--power-col", "kw", "--unit", "kW", "--num-gpus", "8",
                 "--tz", "America/New_York"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert "ny.csv" in err[0] and "line 4" in err[0] and "time" in err[0]
    assert not (tmp_path / "ds" / "data").exists() or not any((tmp_path / "ds" / "data").rglob(
        "*.arrow"))


@pytest.mark.parametrize("zone_name", ["Asia/Kolkata", "America/Phoenix"])
def test_the_tz_does_not_move_times_that_carry_an_offset(tmp_path, zone_name):
    stamps = [f"2026-06-01T12:00:{k:02d}+02:00" for k in range(5)]
    start, t_ms = _import(tmp_path / "ds", _write(tmp_path / "s.csv", stamps), "--tz", zone_name)
    assert start == dt.datetime(2026, 6, 1, 10, 0, 0, tzinfo=dt.timezone.utc)
    assert list(t_ms) == [0, 1000, 2000, 3000, 4000]
