"""A site of jobs over time: schedule files, the seeded arrival model, starts and stops.

Runs are generated here and published into a real dataset folder in tmp_path; the CLI reads them
back through the library's readers.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from llm_powertrace_ds import facility as fac
from llm_powertrace_ds import shards
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.run import DeviceSeries, Run

IDLE_W, BUSY_W = 60.0, 500.0


def padded_flat(run_id: str = "flat", *, busy_w: float = BUSY_W, devices: int = 4,
                idle_s: float = 20.0, work_s: float = 60.0) -> Run:
    """Idle, then a constant load, then idle: ramps of one sample, a known idle power."""
    n_idle, n_work = int(idle_s * 10), int(work_s * 10)
    p = np.concatenate([np.full(n_idle, IDLE_W), np.full(n_work, busy_w), np.full(n_idle, IDLE_W)])
    t = np.arange(len(p), dtype=np.int64) * 100
    devs = [DeviceSeries(g, t, {"power_w": p.copy()}, power_limit_w=700.0) for g in range(devices)]
    return Run({"run_id": run_id, "workload": "finetune", "platform": "h200", "num_gpus": devices,
                "sample_period_ms": 100.0, "sampler": "nvml", "model_name": run_id}, devs, [])


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "ds"
    shards.publish_run(root, padded_flat("flat"), refresh_card=False)
    shards.publish_run(root, padded_flat("half", busy_w=280.0), refresh_card=False)
    return root


def site_json(root, tmp_path, capsys, *args: str) -> dict:
    assert main(["facility", str(root), "--gpus", "40", "--gpus-per-node", "4", "--pue", "1",
                 "--node-overhead", "none", "--format", "json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_schedule_starts_and_stops_jobs_at_its_times_over_an_idle_site(root, tmp_path, capsys):
    sched = tmp_path / "site.csv"
    sched.write_text("job,trace,selection,gpus,start,end\n"
                     "a,flat,,16,0,10min\n"
                     "b,,model_name=half,8,5min,15min\n", encoding="utf-8")
    out = tmp_path / "site.parquet"
    data = site_json(root, tmp_path, capsys, "--schedule", str(sched), "--duration", "20min",
                     "--out", str(out))
    assert data["sync"] == "schedule"
    kinds = [(e["kind"], e["gpus"]) for e in data["events"]]
    assert kinds == [("start", 16), ("start", 8), ("stop", 16), ("stop", 8)]
    # a start begins at the job's start, a stop's ramp-down ends at the job's end (the work
    # window found from power holds a few samples of each ramp)
    ends = [e["t_s"] + (e["ramp_s"] if e["kind"] == "stop" else 0) for e in data["events"]]
    assert ends == pytest.approx([0.0, 300.0, 600.0, 900.0], abs=0.05)
    assert all(e["ramp_s"] < 1.0 for e in data["events"])
    import pyarrow.parquet as pq

    t = pq.read_table(out).to_pandas()
    gpu = t[t.resolution_s == 1.0]["gpu_kw"].to_numpy() * 1e3
    # 40 GPUs idle, a: 16 GPUs busy 0-600 s, b: 8 GPUs at 280 W 300-900 s, then idle again
    assert gpu[100] == pytest.approx(24 * IDLE_W + 16 * BUSY_W)
    assert gpu[400] == pytest.approx(16 * IDLE_W + 16 * BUSY_W + 8 * 280.0)
    assert gpu[700] == pytest.approx(32 * IDLE_W + 8 * 280.0)
    assert gpu[1000] == pytest.approx(40 * IDLE_W)
    stop_a = data["events"][2]
    assert stop_a["step_w"] == pytest.approx(-16 * (BUSY_W - IDLE_W))
    assert [j["job"] for j in data["jobs"]] == ["a", "b"]
    # racks of 4 nodes: job a fills rack 0 (4 nodes x 4 GPUs at 500 W)
    assert data["metrics"]["rack_peak_w"] == pytest.approx(16 * BUSY_W)
    # the table's ramp report lists every start and stop
    assert main(["facility", str(root), "--gpus", "40", "--gpus-per-node", "4",
                 "--schedule", str(sched), "--duration", "20min"]) == 0
    text = capsys.readouterr().out
    assert "jobs: schedule" in text
    assert text.count("  start t=") == 2 and text.count("  stop  t=") == 2
    assert "MW" in text and "MWh" in text and "MW/min" in text


def test_a_yaml_schedule_is_the_same_site_as_its_csv(root, tmp_path, capsys):
    csv_path = tmp_path / "s.csv"
    csv_path.write_text("job,trace,gpus,start,end\na,flat,16,0,600\nb,half,8,1min,0.25h\n",
                        encoding="utf-8")
    yaml_path = tmp_path / "s.yaml"
    yaml_path.write_text("jobs:\n  - {job: a, trace: flat, gpus: 16, start: 0, end: 600}\n"
                         "  - {job: b, trace: half, gpus: 8, start: 1min, end: 0.25h}\n",
                         encoding="utf-8")
    a = site_json(root, tmp_path, capsys, "--schedule", str(csv_path))
    b = site_json(root, tmp_path, capsys, "--schedule", str(yaml_path))
    assert a["metrics"] == b["metrics"] and a["events"] == b["events"]
    assert a["site"]["duration_s"] == pytest.approx(900.0)  # up to the last job's end


@pytest.mark.parametrize(("text", "match"), [
    ("job,trace,gpus,start,end\na,flat,16,0,10 parsecs\n", r"line 2, field 'end'"),
    ("job,trace,gpus,start,end\na,flat,16,600,60\n", r"line 2, field 'end'.*not after"),
    ("job,trace,gpus,start,end\na,flat,32,0,600\nb,flat,16,100,700\n",
     r"line 3, field 'gpus'.*do not fit"),
    ("job,trace,gpus,start,end\na,nope,16,0,600\n", r"line 2, field 'trace'.*'nope'"),
    ("job,trace,gpus,start\na,flat,16,0\n", r"line 1, field 'end'"),
    ("job,trace,gpus,start,end\na,flat,sixteen,0,600\n", r"line 2, field 'gpus'"),
])
def test_a_bad_schedule_is_one_line_naming_file_line_and_field(root, tmp_path, text, match):
    path = tmp_path / "s.csv"
    path.write_text(text, encoding="utf-8")
    cfg = fac.FacilityConfig(gpus=40, gpus_per_node=4)
    with pytest.raises(InputError, match=r"'s\.csv', " + match):
        fac.run_facility(root, cfg, schedule=path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_schedule_that_is_a_fifo_is_refused_before_reading(root, tmp_path):
    path = tmp_path / "s.csv"
    os.mkfifo(path)
    with pytest.raises(InputError, match="s.csv"):
        fac.run_facility(root, fac.FacilityConfig(gpus=40, gpus_per_node=4), schedule=path)


def test_arrivals_are_seeded_and_give_a_day_of_starts_stops_and_overlaps(root, tmp_path, capsys):
    args = ("--arrivals", "24", "--duration", "24h", "--job-gpus", "4:24",
            "--job-duration", "1h:6h", "--seed", "7")
    a = site_json(root, tmp_path, capsys, *args)
    b = site_json(root, tmp_path, capsys, *args)
    assert a["events"] == b["events"] and a["metrics"] == b["metrics"]
    assert a["sync"] == "arrivals"
    starts = [e for e in a["events"] if e["kind"] == "start"]
    assert sum(e["jobs"] for e in starts) == 24
    assert any(e["kind"] == "stop" for e in a["events"])
    for j in a["jobs"]:
        assert 4 <= j["gpus"] <= 24
        if j["end_s"] is not None:
            # log-uniform in [1 h, 6 h]; the job leaves its block at a cut, so at most a step early
            assert 3600 - 60 <= j["end_s"] - j["start_s"] <= 6 * 3600
    # overlaps: at some time more than one job runs
    spans = [(j["start_s"], j["end_s"] or 86400.0) for j in a["jobs"]]
    assert any(s0 < e1 and s1 < e0 for i, (s0, e0) in enumerate(spans)
               for (s1, e1) in spans[i + 1:])
    c = site_json(root, tmp_path, capsys, *args[:-1], "8")
    assert c["events"] != a["events"]
    assert any("arrival model: 24 arrivals" in line for line in a["limits"])


def test_too_much_work_is_refused_before_composing(root, monkeypatch):
    import importlib

    compose_mod = importlib.import_module("llm_powertrace_ds.facility.compose")
    monkeypatch.setattr(compose_mod, "MAX_JOB_SAMPLES", 1000)
    model = fac.Arrivals(3, 4, 8, 600.0, 600.0, seed=1)
    cfg = fac.FacilityConfig(gpus=40, gpus_per_node=4, duration_s=3600.0)
    with pytest.raises(InputError, match=r"field '--arrivals'.*more than 1,000 samples"):
        fac.run_facility(root, cfg, arrivals=model)


def test_arrivals_larger_than_the_site_are_refused_naming_the_option(root):
    model = fac.Arrivals(3, 4, 400, 600.0, 600.0)
    cfg = fac.FacilityConfig(gpus=40, gpus_per_node=4, duration_s=3600.0)
    with pytest.raises(InputError, match=r"field '--job-gpus'.*400 GPUs.*site of 40"):
        fac.run_facility(root, cfg, arrivals=model)
