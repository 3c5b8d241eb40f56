"""A composed job starts once and stops once: ramp-up, its steady window repeated, ramp-down.

The steady window is repeated at matching phase (step boundaries, else the period that the
autocorrelation finds), so the site never shows a dip inside a job's steady window that the
measured run did not have. Generated traces here; the seed authors' pt017 trace (``external``)
for the acceptance at 10,000 GPUs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from llm_powertrace_ds import facility as fac
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.run import DeviceSeries, Run

REPO = Path(__file__).resolve().parents[2]
EXTERNAL = Path(os.environ.get("LLM_POWERTRACE_EXTERNAL",
                               REPO.parent / "shared" / "data" / "external"))
PT = EXTERNAL / "powertraces-v6"
PT017 = "powertraces-pt100array_pt017_r1_7536307_1-50f3a1a4a0"


def event_free_log(*, period_s: float = 4.3, work_s: float = 80.0, idle_s: float = 30.0,
                   devices: int = 4, dip_at_s: float | None = 20.0) -> Run:
    """A training log without events, with a period and a checkpoint-like dip.

    Idle, a 2 s ramp-up, steps of ``period_s`` (a dip every step), one deeper dip, a 1 s
    ramp-down, idle; noise on every device.
    """
    n_idle, n_work = int(idle_s * 10), int(work_s * 10)
    t = np.arange(n_work) * 0.1
    work = np.where((t % period_s) < 0.7 * period_s, 250.0, 190.0)
    ramp_up = np.clip(t / 2.0, 0.0, 1.0)
    ramp_down = np.clip((work_s - t) / 1.0, 0.0, 1.0)
    level = 60.0 + (work - 60.0) * np.minimum(ramp_up, ramp_down)
    if dip_at_s is not None:
        level[(t >= dip_at_s) & (t < dip_at_s + 1.5)] = 160.0
    devs = []
    for g in range(devices):
        rng = np.random.default_rng(g)
        p = np.concatenate([np.full(n_idle, 60.0), level, np.full(n_idle, 60.0)])
        p = p + rng.normal(0, 1.5, len(p))
        devs.append(DeviceSeries(g, np.arange(len(p), dtype=np.int64) * 100, {"power_w": p},
                                 power_limit_w=700.0, default_power_limit_w=700.0))
    return Run({"run_id": "log", "workload": "finetune", "platform": "h200",
                "sample_period_ms": 100.0, "num_gpus": devices}, devs, [])


def steady_min(src: fac.Source) -> float:
    s0, s1 = src.sh.steady
    return float(src.devices.sum(axis=0)[s0:s1].min())


def test_the_period_of_a_square_wave_is_found_and_the_block_holds_whole_periods():
    from llm_powertrace_ds.facility import steady

    x = np.tile(np.r_[np.full(30, 1000.0), np.full(13, 600.0)], 40)  # 4.3 s period
    total = np.r_[np.linspace(100, 1000, 20), x, np.linspace(1000, 100, 20)]
    sh = steady.shape(total, 0.1)
    assert sh.how == "period"
    assert sh.period_s == pytest.approx(4.3, abs=0.01)
    b0, b1 = sh.block
    assert (b1 - b0) % 43 == 0 and len(sh.cuts) == (b1 - b0) // 43
    # seamless: the samples after the block's end are those after its start
    np.testing.assert_array_equal(total[b1:b1 + 43], total[b0:b0 + 43])
    assert all(c % 43 == 0 for c in sh.cuts)


def test_a_job_of_any_length_starts_once_and_stops_once():
    from llm_powertrace_ds.facility import steady

    sh = steady.Shape((2, 8), (2, 6), (0, 2), None, "steps")
    for length in range(7, 40):
        idx = steady.job_indices(sh, 9, length)
        assert idx[:2].tolist() == [0, 1] and idx[-3:].tolist() == [6, 7, 8]
        assert np.count_nonzero(idx < 2) == 2 and np.count_nonzero(idx >= 6) == 3
        assert length - 2 < len(idx) <= length  # ends at most one cut spacing early
        middle = idx[2:-3]
        # inside, the block repeats from its start, never restarted mid-way
        np.testing.assert_array_equal(middle, 2 + np.arange(len(middle)) % 4)


def test_an_event_free_job_has_no_dip_deeper_than_its_measured_steady_window():
    run = event_free_log()
    # the measured steady window as generated: 2 s after the ramp-up begins to 1 s before the
    # ramp-down ends (30 s of idle first, 80 s of work)
    node = np.sum([d.power_w for d in run.devices], axis=0)
    measured_min = float(node[300 + 20:300 + 790].min())
    src = fac.source_from_run(run)
    res = fac.compose([src], fac.FacilityConfig(gpus=400, gpus_per_node=4, sync="lockstep",
                                                duration_s=3600.0,
                                                overhead=fac.OVERHEAD_PRESETS["none"]))
    per_node = res.gpu_w / 100
    # well inside the one job: after its ramp-up, before its last period and ramp-down
    assert per_node[100:35_000].min() >= measured_min - 1e-9
    assert src.sh.how == "period" and src.sh.period_s == pytest.approx(4.3, abs=0.05)
    # the measured ramp-up at the start only, and one fall below the steady window's lowest
    # power: the ramp-down at the job's end
    head = src.sh.block[0]
    np.testing.assert_allclose(per_node[:head], src.devices.sum(axis=0)[:head])
    below = (per_node < steady_min(src) - 1e-9).astype(int)
    assert np.count_nonzero(np.diff(below) == 1) == 1
    assert any(line.startswith("steady repeat") and "autocorrelation" in line
               for line in res.limits)


def test_the_measured_checkpoint_dip_stays_inside_the_block_at_its_offset():
    src = fac.source_from_run(event_free_log(dip_at_s=20.0))
    node = src.devices.sum(axis=0)
    b0, b1 = src.block
    dips = np.flatnonzero(node[b0:b1] < 4 * 170.0)
    res = fac.compose([src], fac.FacilityConfig(gpus=4, gpus_per_node=4, sync="lockstep",
                                                duration_s=600.0,
                                                overhead=fac.OVERHEAD_PRESETS["none"]))
    # every repeat holds the dip at the same offset from the block's start
    for k in range(1, (6000 - b1) // (b1 - b0)):
        start = b0 + k * (b1 - b0)
        assert (np.flatnonzero(res.gpu_w[start:start + b1 - b0] < 4 * 170.0) == dips).all()


@pytest.mark.external
@pytest.mark.skipif(not PT.is_dir(), reason=f"external traces not present at {EXTERNAL}")
def test_pt017_at_10000_gpus_has_no_steady_dip_deeper_than_measured(tmp_path, capsys):
    root = tmp_path / "ds"
    assert main(["-q", "import", "powertrace-csv", str(PT / f"{PT017}.csv"), "--meta",
                 str(PT / f"{PT017}.json"), "--out", str(root), "--workload", "finetune"]) == 0
    capsys.readouterr()
    site = tmp_path / "site.parquet"
    assert main(["facility", str(root), "--gpus", "10000", "--gpus-per-node", "4", "--sync",
                 "lockstep", "--duration", "1h", "--out", str(site), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    [src] = fac.select_sources(root)
    assert src.sh.how == "period"
    import pyarrow.parquet as pq

    t = pq.read_table(site).to_pandas()
    gpu = t[t.resolution_s == 0.1]["gpu_kw"].to_numpy() * 1e3 / 2500  # per 4-GPU node
    s0, s1 = src.sh.steady
    tail = src.length - src.sh.block[1]
    [stop] = [e for e in data["events"] if e["kind"] == "stop"]
    end = int(round(stop["t_s"] / 0.1))
    assert gpu[s0:end - tail].min() >= steady_min(src) - 1e-6
    # the old tiling restarted the job every 78 s, with ramp dips to about half the steady power
    assert gpu[s0:end - tail].min() > 0.8 * np.median(gpu[s0:end - tail])
