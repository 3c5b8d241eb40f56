"""Importer behaviours pinned by generated logs (each test fails when its behaviour breaks)."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import numpy as np
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file

from .test_nvidia_smi import UUIDS, indexed_log, stamp, write
from .test_powertrace_csv import HEADER, RUN_ID, T0, trace_csv


def test_an_explicit_utc_offset_in_a_timestamp_is_honoured(tmp_path):
    # 14:44:37.638+02:00 is 12:44:37.638 UTC; the --tz given is for zone-less stamps only.
    lines = [HEADER]
    for k in range(5):
        local = T0.astimezone(dt.timezone(dt.timedelta(hours=2))) + dt.timedelta(seconds=k / 10)
        stamp_text = local.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+02:00"
        lines.append(f"{RUN_ID},{stamp_text},{k / 10},0,{50 + k},1980,1,0,,,,")
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for tz in (None, "America/Phoenix"):
        run = import_file("powertrace-csv", path, workload="finetune", tz=tz)
        assert run.meta["start_time"] == T0
        np.testing.assert_array_equal(run.devices[0].t_ms, np.arange(5) * 100)


def test_a_negative_offset_and_a_z_in_one_file_share_one_clock(tmp_path):
    lines = [HEADER, f"{RUN_ID},2026-05-01T12:00:00.000Z,0,0,50,1,1,0,,,,",
             f"{RUN_ID},2026-05-01T07:00:00.100-05:00,0.1,0,51,1,1,0,,,,",
             f"{RUN_ID},2026-05-01T12:00:00.200+00:00,0.2,0,52,1,1,0,,,,"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = import_file("powertrace-csv", path, workload="finetune")
    np.testing.assert_array_equal(run.devices[0].t_ms, [0, 100, 200])
    assert run.meta["start_time"] == dt.datetime(2026, 5, 1, 12, tzinfo=dt.timezone.utc)


def test_gpu_order_restarts_after_a_repeated_header_in_a_log_without_gpu_column(tmp_path):
    header = "timestamp, power.draw [W]"
    # The first logger was killed after GPU 0's row of its last tick: an odd number of rows.
    first = [f"{stamp(k * 100 + g)}, {10 + g}.0 W" for k in range(5) for g in range(2)]
    first.append(f"{stamp(500)}, 10.0 W")
    second = [f"{stamp(2000 + k * 100 + g)}, {10 + g}.0 W" for k in range(5) for g in range(2)]
    path = write(tmp_path / "a.csv", [header, *first, header, *second])
    run = import_file("nvidia-smi", path, workload="inference", num_gpus=2)
    assert [len(d) for d in run.devices] == [11, 10]
    assert (run.devices[0].power_w == 10).all() and (run.devices[1].power_w == 11).all()
    inferred = import_file("nvidia-smi", path, workload="inference")
    assert [len(d) for d in inferred.devices] == [11, 10]
    assert (inferred.devices[1].power_w == 11).all()


def test_an_8_gpu_log_with_one_extra_row_still_infers_8_devices(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="llm_powertrace_ds")
    lines = ["timestamp, power.draw [W]"]
    lines += [f"{stamp(k * 100 + g)}, {30 + g}.0 W" for k in range(40) for g in range(8)]
    lines.append(f"{stamp(4000)}, 30.0 W")  # GPU 0 of a tick the logger did not finish
    run = import_file("nvidia-smi", write(tmp_path / "a.csv", lines), workload="inference")
    assert len(run.devices) == 8 and run.meta["num_gpus"] == 8
    assert [len(d) for d in run.devices] == [41] + [40] * 7
    for g, dev in enumerate(run.devices):
        assert (dev.power_w == 30 + g).all()
    assert "8 GPU(s)" in caplog.text


def test_a_cut_off_last_line_ending_in_a_newline_is_dropped_with_a_warning(tmp_path, caplog):
    path = indexed_log(tmp_path / "a.csv", ticks=5)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{stamp(500)},0,{UUIDS[0]},NVIDIA H1\n")
    with caplog.at_level(logging.WARNING, logger="llm_powertrace_ds"):
        run = import_file("nvidia-smi", path, workload="inference")
    assert [len(d) for d in run.devices] == [5, 5]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "cut off" in r.message]
    assert len(warned) == 1 and "line 12" in warned[0].message


def test_a_short_line_before_the_last_is_an_error_not_dropped(tmp_path):
    path = indexed_log(tmp_path / "a.csv", ticks=5)
    text = path.read_text(encoding="utf-8").splitlines()
    text.insert(3, f"{stamp(150)},0,{UUIDS[0]},NVIDIA H1")
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"line 4.*the line has 4 fields, the header has 7"):
        import_file("nvidia-smi", path, workload="inference")


def test_negative_power_in_a_powertrace_csv_names_the_line_and_field(tmp_path):
    path = trace_csv(tmp_path / "t.csv", gpus=2, ticks=3)
    lines = path.read_text(encoding="utf-8").splitlines()
    cells = lines[4].split(",")
    cells[4] = "-3.5"  # line 5, power_w
    lines[4] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        import_file("powertrace-csv", path, workload="finetune")
    message = str(info.value)
    assert "line 5" in message and "field 'power_w'" in message and "-3.5" in message
    assert "value '-3.5' is negative" in message and Path(path).name in message  # the converter says so
