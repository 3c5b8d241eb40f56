"""WattAMeter ``nvml_*.log`` files, written here in the layout WattAMeter's tracker writes.

One file per node (``nvml_01_wattameter_<job>-<host>.log``): a ``# <time> - WattAMeter run
<id>`` line, a ``# timestamp reading-time[ns] gpu-0[mW] ...`` header, then rows of a local
``YYYY-MM-DD_HH:MM:SS.ffffff`` time (midpoint of the read), the read time in ns and one power
value per GPU in mW.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

import numpy as np
import pytest

from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.wattameter import (
    import_wattameter,
    iter_wattameter,
    read_node_log,
)
from llm_powertrace_ds.shards import list_runs, publish_run, read_run

JOB = "9325971"
T0 = dt.datetime(2026, 9, 1, 15, 48, 33, 525981)


def node_log(folder, host, *, gpus=4, n=50, offset_ms=0.0, base_mw=70_000, job=JOB,
             read_ns=80_000, extra="", drop_newline=False, units="mW"):
    """Write one node's log; GPU g of this node reads base + 1000*g + 100*k mW at row k."""
    stamp = T0 + dt.timedelta(milliseconds=offset_ms)
    tags = " ".join(f"gpu-{g}[{units}]" for g in range(gpus))
    lines = [f"# {stamp:%Y-%m-%d_%H:%M:%S.%f} - WattAMeter run {job}\n",
             f"# timestamp                  reading-time[ns] {tags}\n"]
    for k in range(n):
        t = stamp + dt.timedelta(milliseconds=100 * k + 1)
        vals = " ".join(str(base_mw + 1000 * g + 100 * k) for g in range(gpus))
        lines.append(f"  {t:%Y-%m-%d_%H:%M:%S.%f} {read_ns + k} {vals}\n")
    text = "".join(lines) + extra
    if drop_newline:
        text = text.rstrip("\n")
    path = folder / f"nvml_01_wattameter_{job}-{host}.log"
    path.write_text(text)
    return path


def test_a_two_node_job_is_one_run_in_watts(tmp_path):
    a = node_log(tmp_path, "x1000c0s1b0n0")
    b = node_log(tmp_path, "x1000c0s2b0n0", offset_ms=30.0, base_mw=80_000, read_ns=2_000_000)
    (run,) = import_wattameter([b, a], workload="finetune", platform="h100_sxm_80gb")
    assert run.run_id == f"wattameter-{JOB}" and run.meta["sampler"] == "import:wattameter"
    assert run.meta["num_gpus"] == 8 and len(run.devices) == 8
    assert [(d.node_index, d.gpu_index) for d in run.devices] == \
        [(n, g) for n in (0, 1) for g in range(4)]
    first = run.devices[0]
    # mW -> W: GPU 0 of node 0 reads 70 000 mW at row 0 and 70 000 + 100*k at row k
    assert first.signals["power_w"][0] == pytest.approx(70.0)
    assert first.signals["power_w"][10] == pytest.approx(71.0)
    assert run.devices[7].signals["power_w"][0] == pytest.approx(83.0)
    # one time line: node 1 started 30 ms after node 0
    assert first.t_ms[0] == 0 and run.devices[4].t_ms[0] == 30
    assert list(first.t_ms[:3]) == [0, 100, 200]
    assert run.meta["start_time"] == (T0 + dt.timedelta(milliseconds=1)).replace(
        tzinfo=dt.timezone.utc, microsecond=527000)
    # the alignment error is stated: not measured, and the read-time bound (2 ms + 49 ns) / 2
    text = run.meta["clock_alignment"]
    assert "not measured" in text and "within 1 ms" in text and "2 node" in text
    # the 0.8+ format is the same whether power was the 1 s average (to 0.9.1) or the instant
    # field (0.9.2 on): the reading is not guessed
    assert run.meta.get("power_field") is None and "power_field_unknown" in run.flags
    assert "power_is_1s_average" not in run.flags
    assert json.loads(run.meta["source_metadata"])["slurm_job_id"] == JOB
    res = publish_run(tmp_path / "ds", run)
    back = read_run(tmp_path / "ds", res.run_id)
    assert sorted({d.node_index for d in back.devices}) == [0, 1]
    assert back.meta["clock_alignment"] == text


def test_local_time_zone_is_applied(tmp_path):
    path = node_log(tmp_path, "h0", gpus=1)
    (run,) = import_wattameter([path], workload="inference", tz="America/Denver")
    # 15:48 MDT (UTC-6) is 21:48 UTC
    assert run.meta["start_time"].hour == 21
    assert run.meta.get("clock_alignment") is None  # one node: nothing to align


def test_a_missing_node_file_is_reported_and_counted(tmp_path, caplog):
    node_log(tmp_path, "n0", gpus=4)
    node_log(tmp_path, "n2", gpus=4)
    (tmp_path / f"slurm-{JOB}-wattameter.txt").write_text(
        "".join(f"Logging execution on {h} to wattameter-{JOB}-{h}.txt\n"
                for h in ("n0", "n1", "n2")))
    with caplog.at_level(logging.WARNING, logger="llm_powertrace_ds.importers"):
        (run,) = import_wattameter([tmp_path], workload="finetune")
    assert "1 of 3 nodes have no nvml log" in caplog.text and "n1" in caplog.text
    assert run.meta["num_gpus"] == 12 and len(run.devices) == 8
    # node indices keep the job's node order: n2 is node 2, node 1 has no rows
    assert sorted({d.node_index for d in run.devices}) == [0, 2]
    res = publish_run(tmp_path / "ds", run)
    assert "missing_gpu" in res.flags


def test_a_cut_off_last_line_is_dropped_and_named(tmp_path, caplog):
    path = node_log(tmp_path, "n0", gpus=2, n=20,
                    extra="  2026-09-01_15:48:35.526 81000 7100", drop_newline=True)
    with caplog.at_level(logging.WARNING, logger="llm_powertrace_ds.importers"):
        node = read_node_log(path)
    assert len(node.ts_local_ms) == 20
    assert "line 23 is cut off" in caplog.text and path.name in caplog.text


def test_a_whole_looking_last_line_without_newline_is_still_dropped(tmp_path):
    # the last value may be cut (71000 written as 710): no newline, no trust
    path = node_log(tmp_path, "n0", gpus=1, n=5,
                    extra="  2026-09-01_15:48:34.026000 81000 710", drop_newline=True)
    assert len(read_node_log(path).ts_local_ms) == 5


@pytest.mark.parametrize(("extra", "line", "field", "value"), [
    ("  2026-09-01_15:48:40.000000 80000 71000 abc\n", 13, "gpu-1[mW]", "abc"),
    ("  2026-09-01_15:48:40.000000 fast 71000 71000\n", 13, "reading-time[ns]", "fast"),
    ("  2026/09/01 80000 71000 71000\n", 13, "timestamp", "2026/09/01"),
    ("  2026-09-01_15:48:40.000000 80000 71000\n", 13, None, "3 values where the header has 4"),
])
def test_a_bad_line_is_named(tmp_path, extra, line, field, value):
    path = node_log(tmp_path, "n0", gpus=2, n=10, extra=extra)
    with pytest.raises(InputError) as info:
        read_node_log(path)
    assert info.value.line == line and info.value.field == field
    assert str(path) in str(info.value) and value in str(info.value)


def test_time_going_back_is_refused(tmp_path):
    path = node_log(tmp_path, "n0", gpus=1, n=5,
                    extra="  2026-09-01_15:48:30.000000 80000 71000\n")
    with pytest.raises(InputError, match="time goes back") as info:
        import_wattameter([path], workload="finetune")
    assert info.value.line == 8


def test_zero_readings_are_null_not_zero(tmp_path):
    path = node_log(tmp_path, "n0", gpus=1, n=5,
                    extra="  2026-09-01_15:48:40.000000 80000 0\n")
    (run,) = import_wattameter([path], workload="finetune")
    assert np.isnan(run.devices[0].signals["power_w"][-1])
    assert "zero_power_samples" in run.flags


def test_a_second_run_in_one_file_is_refused(tmp_path):
    path = node_log(tmp_path, "n0", gpus=1, n=3,
                    extra="# 2026-09-01_16:00:00.000000 - WattAMeter run 777\n")
    with pytest.raises(InputError, match="second WattAMeter run") as info:
        read_node_log(path)
    assert info.value.line == 6


def _one_gpu_log(tmp_path, tags, rows):
    path = tmp_path / f"nvml_01_wattameter_{JOB}-n0.log"
    path.write_text(f"# 2026-09-01_15:48:33.524463 - WattAMeter run {JOB}\n"
                    f"# timestamp reading-time[ns] {tags}\n"
                    + "".join(f"  2026-09-01_15:48:33.{600000 + 100000 * k} 1000 {row}\n"
                              for k, row in enumerate(rows)))
    return path


def test_power_energy_temperature_and_unknown_columns(tmp_path):
    path = _one_gpu_log(tmp_path, "gpu-0[mW] gpu-0[mJ] gpu-0[C] gpu-0[GB/s]",
                        ["150500 5000 40 1.5", "151500 20000 41 1.5"])
    assert read_node_log(path).dropped == ["gpu-0[GB/s]"]
    (run,) = import_wattameter([path], workload="finetune")
    sig = run.devices[0].signals
    assert list(sig["power_w"]) == [150.5, 151.5]
    assert list(sig["energy_mj"]) == [0.0, 15000.0] and list(sig["temp_c"]) == [40, 41]
    assert json.loads(run.meta["source_metadata"])["columns_not_imported"] == ["gpu-0[GB/s]"]


def test_power_in_watts_is_read(tmp_path):
    path = _one_gpu_log(tmp_path, "gpu-0[W]", ["150.5", "151.5"])
    (run,) = import_wattameter([path], workload="finetune")
    assert list(run.devices[0].signals["power_w"]) == [150.5, 151.5]


def test_power_derived_from_energy_is_not_taken_for_a_reading(tmp_path):
    # energy logged without power: WattAMeter appends gpu-0[W] computed from energy deltas
    path = _one_gpu_log(tmp_path, "gpu-0[mJ] gpu-0[W]", ["5000 150.0", "20000 150.0"])
    node = read_node_log(path)
    assert not node.has_power and node.dropped == ["gpu-0[W]"]
    with pytest.raises(InputError, match="no log with a GPU power column"):
        import_wattameter([path], workload="finetune")


def test_two_jobs_are_two_runs_and_the_cli_publishes_them(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    node_log(logs, "n0", gpus=2, job="111")
    node_log(logs, "n1", gpus=2, job="111")
    node_log(logs, "n0", gpus=2, job="222")
    out = tmp_path / "ds"
    code = main(["import", "wattameter", str(logs), "--out", str(out), "--workload",
                 "finetune", "--platform", "h100_sxm_80gb", "--format", "json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["num_gpus"]) for r in rows] == [("wattameter-111", 4),
                                                            ("wattameter-222", 2)]
    assert {r["run_id"] for r in list_runs(out)} == {"wattameter-111", "wattameter-222"}


def test_a_name_that_is_not_wattameters_is_refused(tmp_path):
    path = tmp_path / "power.log"
    path.write_text("# timestamp reading-time[ns] gpu-0[mW]\n")
    with pytest.raises(InputError, match="not a WattAMeter NVML log name"):
        read_node_log(path)


def test_jobs_are_read_one_at_a_time(tmp_path):
    node_log(tmp_path, "n0", gpus=1, job="111")
    node_log(tmp_path, "n0", gpus=1, job="222", extra="  not a sample line\n")
    runs = iter_wattameter([tmp_path], workload="finetune")
    assert next(runs).run_id == "wattameter-111"  # job 222's bad line not read yet
    with pytest.raises(InputError) as info:
        next(runs)
    assert "222" in str(info.value.file) and info.value.line == 53


def test_a_bad_job_publishes_nothing(tmp_path):
    node_log(tmp_path, "n0", gpus=1, job="111")
    node_log(tmp_path, "n0", gpus=1, job="222", extra="  not a sample line\n")
    out = tmp_path / "ds"
    assert main(["import", "wattameter", str(tmp_path), "--out", str(out), "--workload",
                 "finetune"]) == 1
    assert list_runs(out) == []
