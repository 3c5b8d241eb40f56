"""``import zeus`` on files Zeus' own monitors wrote (``zeus_writer.py``, the NVML double as GPUs).

Zeus 0.11's power polling process writes the legacy CSV; Zeus 0.16's ``PowerMonitor`` the
change-only timelines, ``python -m zeus.monitor power`` its printed lines and ``ZeusMonitor``
its window CSV. Each file is imported through ``llm-powertrace import``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llm_powertrace_ds import layout
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.zeus import import_zeus
from llm_powertrace_ds.metrics import core as metrics_core
from llm_powertrace_ds.shards import read_run, read_table

WRITER = Path(__file__).with_name("zeus_writer.py")
ZEUS_011 = Path(sys.prefix) / "writers" / "zeus-0.11.0"


def run_writer(mode: str, out: Path, *extra: str, seconds: float = 1.6) -> tuple[dict, str]:
    """Run Zeus in ``mode``; (its own figures, its standard output)."""
    env = {**os.environ, "TZ": "UTC", "ZEUS_WRITER_GPUS": "2"}
    for _ in range(2):  # Zeus gives its spawned pollers 10 s to start: a loaded machine may not
        proc = subprocess.run([sys.executable, str(WRITER), mode, str(seconds), str(out),
                               *extra], capture_output=True, text=True, timeout=180, env=env,
                              cwd=out.parent)
        if "failed to start within 10 seconds" not in proc.stderr:
            break
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout


def import_cli(tmp_path, capsys, *files):
    out = tmp_path / "ds"
    assert main(["import", "zeus", *map(str, files), "--out", str(out), "--workload",
                 "inference", "--platform", "h100_sxm_80gb", "--format", "json"]) == 0
    (res,) = json.loads(capsys.readouterr().out)
    (row,) = read_table(layout.runs_path(out, "inference", res["platform"],
                                         res["run_id"])).to_pylist()
    return row, read_run(out, res["run_id"])


def held_j(timeline: dict, domain: str = "device_instant") -> tuple[float, float]:
    """(Σ_GPU Σ_i P_i · (t_i+1 − t_i), span in s) of a timeline under its hold.

    Each reading is held until the GPU's next instant of any domain, from its first reading of
    ``domain`` on.
    """
    total, first, last = 0.0, [], []
    for gpu, points in timeline[domain].items():
        union = np.unique(np.round(np.concatenate(
            [np.array(timeline[d][gpu])[:, 0] for d in timeline if gpu in timeline[d]]) * 1000))
        t = np.round(np.array(points)[:, 0] * 1000)
        w = np.array(points)[:, 1]
        union = union[union >= t[0]]
        held = w[np.searchsorted(t, union, side="right") - 1]
        total += float(np.dot(np.diff(union), held[:-1])) / 1000.0
        first.append(union[0])
        last.append(union[-1])
    return total, (max(last) - min(first)) / 1000.0


def test_the_legacy_power_csv_of_zeus_0_11(tmp_path, capsys):
    if not (ZEUS_011 / "zeus" / "monitor" / "power.py").is_file():
        pytest.fail(f"Zeus 0.11.0 is not installed in {ZEUS_011}: run `make test` (the "
                    "Makefile's dev install puts it there)")
    csv = tmp_path / "power.csv"
    own, _ = run_writer("legacy", csv, str(ZEUS_011))
    assert "zeus-0.11.0" in own["zeus_version"]
    row, run = import_cli(tmp_path, capsys, csv)
    zeus_j = sum(own["energy_j"].values())  # Zeus 0.11's get_energy (trapezoid) on its CSV
    assert row["energy_j"] == pytest.approx(zeus_j, rel=1e-3)
    duration = (run.devices[0].t_ms[-1] - run.devices[0].t_ms[0]) / 1000
    assert row["mean_power_w"] == pytest.approx(zeus_j / duration, rel=1e-3)
    assert row["sample_hold"] == "linear" and row["power_field"] == "instant"
    assert row["sampler"] == "import:zeus" and len(run.devices) == 2


def test_a_power_monitor_timeline_is_held_not_interpolated(tmp_path, capsys):
    path = tmp_path / "power_timeline.json"
    own, _ = run_writer("timeline", path)
    timeline = json.loads(path.read_text())
    assert set(timeline) == {"device_instant", "device_average"}  # no memory domain here
    row, run = import_cli(tmp_path, capsys, path)
    expected, span = held_j(timeline)
    assert row["sample_hold"] == "previous" and row["power_field"] == "instant"
    assert row["energy_j"] == pytest.approx(expected, rel=1e-3)
    assert row["mean_power_w"] == pytest.approx(expected / span, rel=1e-3)
    # the double's idle stretch left no readings: Zeus' own trapezoid ramps across it
    assert abs(sum(own["energy_j"].values()) / expected - 1) > 3e-3
    avg = run.devices[0].signals["power_avg_w"]  # null only before its domain's first reading
    first = int(np.argmax(np.isfinite(avg)))
    assert np.isfinite(avg).any() and np.isfinite(avg[first:]).all()
    assert "gap" not in row["quality_flags"]


@pytest.mark.slow
def test_the_monitors_printed_lines_and_their_totals(tmp_path, capsys):
    path = tmp_path / "zeus_monitor_power.txt"
    _, printed = run_writer("lines", tmp_path / "unused")
    path.write_text(printed)
    row, run = import_cli(tmp_path, capsys, path)
    totals = [line for line in printed.splitlines() if line.startswith("Total time")]
    assert row["source_duration_s"] == pytest.approx(float(totals[0].split(":")[1]))
    energy = json.loads(row["source_metadata"])["printed_totals"]["total_energy_j"]
    assert row["source_total_energy_wh"] == pytest.approx(sum(energy.values()) / 3600)
    assert [d.gpu_index for d in run.devices] == [0, 1] and len(run.devices[0]) == 16
    assert 60 < row["mean_power_w"] < 200  # 70 W and 80 W GPUs, rising slowly


@pytest.fixture(scope="module")
def zeus_windows(tmp_path_factory):
    """Zeus' own figures, its window CSV and the PowerMonitor timeline of the same power."""
    folder = tmp_path_factory.mktemp("zeus_windows")
    windows = folder / "zeus_windows.csv"
    own, _ = run_writer("windows", windows, seconds=0)
    return own, windows, folder / "power_timeline.json"


@pytest.mark.slow
def test_window_energies_are_kept_as_zeus_measured_them_and_never_read_as_watts(tmp_path,
                                                                              capsys,
                                                                              zeus_windows):
    own, windows, timeline = zeus_windows
    with pytest.raises(InputError, match=r"zeus_windows\.csv.*joules per window, not power"):
        import_zeus([windows], workload="inference")
    assert main(["import", "series", str(windows), "--out", str(tmp_path / "s"), "--workload",
                 "inference", "--time-col", "start_time", "--power-col", "gpu0_energy",
                 "--unit", "W", "--num-gpus", "1"]) == 1
    assert "import zeus" in capsys.readouterr().err
    row, run = import_cli(tmp_path, capsys, timeline, windows)
    kept = {w["window_name"]: w for w in json.loads(row["source_metadata"])["windows"]}
    for name, m in own["windows"].items():
        assert kept[name]["elapsed_time"] == m["time"]
        assert [kept[name][f"gpu{g}_energy"] for g in (0, 1)] == \
            [m["gpu_energy"]["0"], m["gpu_energy"]["1"]]
    labels = [e.label for e in run.events if e.kind == "stage"]
    assert labels[:2] == ["prefill", "end"] or "prefill" in labels


@pytest.mark.slow
def test_each_window_held_on_the_timeline_is_zeus_own_window_energy(tmp_path, capsys,
                                                                    zeus_windows):
    """Our energy of each Zeus window is Zeus' own, within 0.1 %, per GPU; so is mean power.

    Ours: the imported change-only timeline, held, between the window's stage events (the
    metrics' own window integral), and that / the events' span. Zeus': its energy counter
    difference, and that / its elapsed time. The double's power follows the wall clock in
    every process and its counter is the exact integral (``zeus_writer.WINDOWS`` bounds the
    held error at 0.05 %; linear interpolation reads ≥ 0.2 % too much). prefill begins on the
    timeline's first reading, held since before the power first changed; decode ends on the
    reading before the last.
    """
    own, windows, timeline = zeus_windows
    row, run = import_cli(tmp_path, capsys, timeline, windows)
    devs = {d.gpu_index: metrics_core._prepare_device(run, d, i, [])
            for i, d in enumerate(run.devices)}
    stages = sorted((e for e in run.events if e.kind == "stage"), key=lambda e: e.t_ms)
    begins = [e for e in stages if e.label != "end"]
    ends = [e for e in stages if e.label == "end"]  # windows follow each other: k-th is k-th's
    assert [e.label for e in begins] == list(own["windows"]) == ["prefill", "decode"]
    found = {}
    for begin, end in zip(begins, ends, strict=True):
        zeus = own["windows"][begin.label]
        for gpu, dev in devs.items():
            ours_j = metrics_core._device_integral(dev, begin.t_ms, end.t_ms)
            ours_w = ours_j / ((end.t_ms - begin.t_ms) / 1000.0)
            zeus_j = zeus["gpu_energy"][str(gpu)]
            found[(begin.label, gpu)] = (ours_j, zeus_j, ours_w, zeus_j / zeus["time"])
    assert len(found) == 4, found
    for key, (ours_j, zeus_j, ours_w, zeus_w) in found.items():
        assert ours_j == pytest.approx(zeus_j, rel=1e-3), (key, found)
        assert ours_w == pytest.approx(zeus_w, rel=1e-3), (key, found)
    assert row["sample_hold"] == "previous"
    for dev in devs.values():  # the first and last readings are each the only one they hold
        assert dev.t_ms[0] < begins[0].t_ms < dev.t_ms[1]
        assert dev.t_ms[-2] < ends[-1].t_ms < dev.t_ms[-1]


def _timeline(tmp_path, data) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    return path


def test_one_domain_and_the_memory_domain(tmp_path):
    t0 = 1_796_684_800.0
    one = {"0": [[t0, 70.0], [t0 + 10, 600.0], [t0 + 30, 70.0]]}
    run = import_zeus([_timeline(tmp_path, one)], workload="finetune")
    assert run.meta["sample_hold"] == "previous" and run.meta["power_field"] == "instant"
    both = {"device_average": one, "memory_average": {"0": [[t0, 20.0]]}}
    run = import_zeus([_timeline(tmp_path, both)], workload="finetune")
    assert run.meta["power_field"] == "average"
    assert json.loads(run.meta["source_metadata"])["domains_not_imported"] == ["memory_average"]


@pytest.mark.parametrize(("data", "message"), [
    ({"0": [[1.796e9, "x"]]}, "pairs of numbers"),
    ({"0": [[1.796e9, float("inf")]]}, "not finite"),
    ({"gpu0": [[1.796e9, 70.0]]}, "not a GPU index"),
    ({"device_instant": {"0": [[5e12, 70.0]]}}, "not a unix time"),
    ({"device_instant": {"0": [[1.796e9, 70.0]]}, "power": {}}, "unknown power domain"),
])
def test_a_bad_timeline_is_one_line_naming_its_field(tmp_path, data, message):
    text = json.dumps(data).replace("Infinity", "1e999")
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        import_zeus([path], workload="finetune")


def test_a_legacy_row_that_is_not_a_number_is_named_by_line(tmp_path):
    path = tmp_path / "power.csv"
    path.write_text("1796684800.0,70.0,80.0\n1796684800.1,70.5,nan\n1796684800.2,x,80\n")
    with pytest.raises(InputError, match=r"power\.csv.*line 2.*'W1'"):
        import_zeus([path], workload="finetune")
