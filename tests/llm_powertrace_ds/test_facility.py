"""From GPUs to the grid: composition of node, rack and site profiles (``facility``).

Source runs are generated here (square-wave training steps with jitter and noise, step events)
and, for the CLI, published into a real dataset folder in tmp_path and read back through the
library's readers. The real 4-GPU H200 traces of ``../shared/data/external`` check the
one-node identity on measured data (``external`` marker).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from llm_powertrace_ds import facility as fac
from llm_powertrace_ds import metrics, shards
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.run import DeviceSeries, Event, Run

REPO = Path(__file__).resolve().parents[2]
EXTERNAL = Path(os.environ.get("LLM_POWERTRACE_EXTERNAL",
                               REPO.parent / "shared" / "data" / "external"))


def step_run(run_id: str = "steps-a", *, devices: int = 8, seconds: float = 300.0,
             seed: int = 0, platform: str = "h100_sxm_80gb", idle_s: float = 5.0,
             sampler: str = "nvml") -> Run:
    """Fine-tuning-like power: idle, then steps with random lengths, events at each step.

    Busy ~600 W, a short dip ~250 W, per-device jitter of one tick and noise.
    """
    rng = np.random.default_rng(seed)
    n = int(seconds * 10)
    t = np.arange(n, dtype=np.int64) * 100
    level = np.full(n, 90.0)
    starts = []
    i = int(idle_s * 10)
    while i < n - 40:
        starts.append(i)
        busy, dip = int(rng.integers(8, 30)), int(rng.integers(2, 6))
        level[i:i + busy] = 600.0
        level[i + busy:i + busy + dip] = 250.0
        i += busy + dip
    level[i:] = 90.0
    devs = []
    for g in range(devices):
        lag = int(rng.integers(0, 2))
        p = np.roll(level, lag) + rng.normal(0, 8, n)
        devs.append(DeviceSeries(g, t + g, {"power_w": p}, gpu_name="NVIDIA H100 80GB HBM3",
                                 power_limit_w=700.0, default_power_limit_w=700.0))
    meta = {"run_id": run_id, "workload": "finetune", "platform": platform,
            "model_family": "llama", "model_name": "llama-tiny", "sweep": "test", "repeat": 0,
            "num_gpus": devices, "sample_period_ms": 100.0, "sampler": sampler,
            "power_field": "instant", "start_time": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            "method": "lora", "batch_size": 4, "seq_len": 128, "tokens": 10_000}
    if sampler == "cpu_proxy":
        meta["power_field"] = "cpu_proxy_model"
    events = [Event(int(s * 100), "step_begin", step=k + 1) for k, s in enumerate(starts)]
    return Run(meta, devs, events)


def compose(run: Run, gpus: int, **kw) -> fac.FacilityResult:
    kw.setdefault("overhead", fac.OVERHEAD_PRESETS["none"])
    cfg = fac.FacilityConfig(gpus=gpus, **kw)
    return fac.compose([fac.source_from_run(run, window=cfg.window)], cfg)


def swing(x: np.ndarray) -> float:
    q5, q95 = np.percentile(x, [5, 95])
    return float(q95 - q5)


# ---------------------------------------------------------------------------------------------
# Known answers
# ---------------------------------------------------------------------------------------------

def test_one_node_lockstep_no_overhead_pue1_is_the_node_total():
    run = step_run()
    al = metrics.node_total(run)
    # by default the node total over the work window (first to last step_begin)
    work = compose(run, 8, sync="lockstep")
    steps = [e.t_ms for e in run.events]
    inside = (al.grid_ms >= steps[0]) & (al.grid_ms <= steps[-1])
    np.testing.assert_allclose(work.gpu_w, al.total[inside], rtol=1e-12)
    assert any(line.startswith("window: each source replays its work window")
               and "work window (steps)" in line for line in work.limits)
    res = compose(run, 8, sync="lockstep", window="whole")
    np.testing.assert_allclose(res.gpu_w, np.sum(al.devices, axis=0), rtol=1e-13)
    np.testing.assert_array_equal(res.facility_w, res.gpu_w)
    np.testing.assert_allclose(res.gpu_w, al.total, rtol=1e-12)
    energy = metrics.compute_run_metrics(run)["energy_j"]
    site, _ = fac.site_metrics(res)
    assert site["energy_j"] == pytest.approx(energy, rel=1e-3)
    assert site["peak_w"] == pytest.approx(float(al.total.max()), rel=1e-12)
    assert not any("tiling" in line for line in res.limits)
    assert any("lock-step" in line for line in res.limits)


def test_lockstep_mean_and_swing_grow_like_n():
    run = step_run(seconds=200)
    small = compose(run, 32, sync="lockstep", duration_s=600)
    big = compose(run, 512, sync="lockstep", duration_s=600)
    assert big.gpu_w.mean() == pytest.approx(16 * small.gpu_w.mean(), rel=1e-9)
    assert swing(big.gpu_w) == pytest.approx(16 * swing(small.gpu_w), rel=1e-9)


def test_independent_mean_grows_like_n_and_swing_like_sqrt_n():
    run = step_run(seconds=600, idle_s=0.0)
    src = fac.source_from_run(run)
    block_s = (src.block[1] - src.block[0]) * 0.1
    ratios = []
    for seed in range(4):
        small = compose(run, 128, sync="independent", duration_s=block_s, seed=seed)
        big = compose(run, 2048, sync="independent", duration_s=block_s, seed=100 + seed)
        assert big.gpu_w.mean() == pytest.approx(16 * small.gpu_w.mean(), rel=0.01)
        ratios.append(swing(big.gpu_w) / swing(small.gpu_w))
    # 16 x the jobs: sqrt(16) = 4 for independent phases (16 if they were in lock-step)
    assert np.mean(ratios) == pytest.approx(4.0, rel=0.08)


def test_measured_mode_follows_the_runs_synchrony():
    run = step_run(seconds=300, idle_s=0.0)
    coupled = fac.source_from_run(run, synchrony_index=1.0)
    cfg = fac.FacilityConfig(gpus=256, sync="measured", duration_s=200,
                             overhead=fac.OVERHEAD_PRESETS["none"])
    res = fac.compose([coupled], cfg)
    assert all(j.common_phase for j in res.jobs) and len({j.offset for j in res.jobs}) == 1
    loose = fac.source_from_run(run, synchrony_index=None)
    res = fac.compose([loose], cfg)
    assert not any(j.common_phase for j in res.jobs)
    assert any("synchrony_index null" in line for line in res.limits)
    assert res.config.sync == "measured" and fac.to_json(res)["sync"] == "measured"


def test_measured_mode_draws_sqrt_rho_of_the_jobs_into_the_common_phase():
    run = step_run(seconds=60, idle_s=0.0)
    src = fac.source_from_run(run, synchrony_index=0.25)
    res = fac.compose([src], fac.FacilityConfig(gpus=8 * 400, sync="measured", duration_s=10,
                                                overhead=fac.OVERHEAD_PRESETS["none"]))
    joined = [j for j in res.jobs if j.common_phase]
    assert len(joined) / len(res.jobs) == pytest.approx(0.5, abs=0.08)
    assert len({j.offset for j in joined}) == 1
    assert len({j.offset for j in res.jobs if not j.common_phase}) > 50


def test_auto_overhead_follows_the_platform():
    a100 = step_run("a", seconds=30, platform="a100_sxm4_80gb")
    res = fac.compose([fac.source_from_run(a100)], fac.FacilityConfig(gpus=8))
    assert res.config.overhead == fac.OVERHEAD_PRESETS["dgx-a100"]
    l40s = step_run("l", seconds=30, platform="l40s")
    res = fac.compose([fac.source_from_run(l40s)], fac.FacilityConfig(gpus=4, gpus_per_node=4))
    assert res.config.overhead is not None and res.config.overhead.name == "dgx-h100"
    assert res.config.overhead.idle_w == pytest.approx(fac.OVERHEAD_PRESETS["dgx-h100"].idle_w / 2)
    assert any("no preset for platform(s) l40s" in line for line in res.limits)


def test_energy_is_conserved_across_resolutions():
    run = step_run(seconds=120)
    res = compose(run, 64, sync="independent", duration_s=1000.0, seed=3)  # 1000 s: partial 15 min
    energies = []
    for res_s, prof in fac.profiles(res).items():
        assert np.all(prof["length_s"] <= res_s + 1e-9)
        energies.append(float(np.sum(prof["facility_w"] * prof["length_s"])))
    assert len(energies) == 4
    np.testing.assert_allclose(energies, energies[0], rtol=1e-12)
    assert fac.profiles(res)[900.0]["length_s"].tolist() == pytest.approx([900.0, 100.0])


def test_runs_are_tiled_at_step_boundaries_never_stretched():
    run = step_run(seconds=100)
    src = fac.source_from_run(run, window="whole")
    b0, b1 = src.block
    assert src.tile.endswith("whole steps")
    step_ms = [e.t_ms for e in run.events]
    grid = metrics.node_total(run).grid_ms
    assert grid[b0] >= step_ms[0] and grid[b1] >= step_ms[-1] and grid[b1 - 1] < step_ms[-1]
    res = compose(run, 8, sync="lockstep", duration_s=350.0, window="whole")
    node = src.devices.sum(axis=0)
    length = b1 - b0
    # the measured ramp-up and first block, whole blocks, whole steps of one more, the measured
    # ramp-down once at the end, then the GPUs idle (at their lowest power: no idle measured)
    steps = [int(np.searchsorted(grid, t)) - b0 for t in step_ms]
    full, rest = divmod(3500 - b0 - (len(node) - b1), length)
    r = max(c for c in steps if c <= rest)
    job = np.concatenate([node[:b0]] + [node[b0:b1]] * full + [node[b0:b0 + r], node[b1:]])
    expected = np.concatenate([job, np.full(3500 - len(job), src.devices.min(axis=1).sum())])
    np.testing.assert_allclose(res.gpu_w, expected, rtol=1e-13)
    assert full >= 3 and 0 < 3500 - len(job) < max(np.diff(steps))
    assert any(line.startswith("steady repeat: to fill 350.0 s") and "steps-a" in line
               and "cut at step boundaries" in line for line in res.limits)
    # the work window starts at the first step: its template is the whole-step block itself
    work = fac.source_from_run(run)
    np.testing.assert_array_equal(work.devices, src.devices[:, b0:b1])
    assert work.block == (0, b1 - b0) and work.tile.endswith("whole steps")


def test_inference_runs_tile_their_steady_state_window():
    run = step_run(seconds=100)
    run.meta["workload"] = "inference"
    run.events = [Event(20_000, "steady_begin"), Event(70_000, "steady_end")]
    src = fac.source_from_run(run, window="whole")
    grid = metrics.node_total(run).grid_ms
    assert src.tile == "steady-state window"
    assert grid[src.block[0]] >= 20_000 > grid[src.block[0] - 1]
    assert grid[src.block[1]] >= 70_000 > grid[src.block[1] - 1]
    work = fac.source_from_run(run)  # the steady window is the work window
    assert work.window == "work window (steady) [20.0 s, 70.0 s]"
    np.testing.assert_array_equal(work.devices, src.devices[:, src.block[0]:src.block[1]])
    run.events = []
    # no events: the steady window is found from power, never the whole run with its ramps
    assert fac.source_from_run(run, window="whole").tile.startswith("steady window")
    assert "(detected)" in fac.source_from_run(run).window


def test_jobs_fill_whole_nodes_and_replay_devices_in_phase():
    run = step_run(devices=2, seconds=60)
    res = compose(run, 16, gpus_per_node=8, sync="lockstep")
    src = fac.source_from_run(run)
    assert len(res.jobs) == 2 and [j.nodes for j in res.jobs] == [1, 1]
    np.testing.assert_allclose(res.gpu_w, 8 * src.devices.sum(axis=0))
    assert any(line.startswith("replicas:") for line in res.limits)
    big = step_run("big", devices=16, seconds=60)  # a 2-node job, cut to the 1 node that is left
    res = compose(big, 8, gpus_per_node=8)
    assert [j.nodes for j in res.jobs] == [1]
    assert any("cut to the nodes left" in n for n in res.notes)


def test_mix_shares_nodes_in_proportion():
    a, b = step_run("a", seconds=60), step_run("b", seconds=60, seed=1)
    sa, sb = fac.source_from_run(a, share=0.75), fac.source_from_run(b, share=0.25)
    res = fac.compose([sa, sb], fac.FacilityConfig(gpus=8 * 40))
    nodes = [sum(j.nodes for j in res.jobs if j.source == i) for i in (0, 1)]
    assert nodes == [30, 10]


def test_node_overhead_racks_and_pue():
    run = step_run(seconds=60)
    ov = fac.parse_overhead("1000:0.25")
    res = compose(run, 8 * 6, overhead=ov, nodes_per_rack=4, pue=fac.Pue(1.5), sync="lockstep")
    np.testing.assert_allclose(res.it_w, 6 * 1000 + 1.25 * res.gpu_w)
    np.testing.assert_allclose(res.facility_w, 1.5 * res.it_w)
    node_gpu_w = res.gpu_w / 6  # lock-step: six identical nodes; racks of 4 and 2 nodes
    np.testing.assert_allclose(res.rack_peak_it_w, [4 * 1000 + 1.25 * 4 * node_gpu_w.max(),
                                                    2 * 1000 + 1.25 * 2 * node_gpu_w.max()])
    assert fac.site_metrics(res)[0]["rack_peak_w"] == pytest.approx(res.rack_peak_it_w[0])
    mixed = fac.compose([fac.source_from_run(run), fac.source_from_run(step_run("b", seed=5))],
                        fac.FacilityConfig(gpus=8 * 3, nodes_per_rack=2, overhead=ov,
                                           sync="independent", duration_s=100))
    assert len(mixed.rack_peak_it_w) == 2
    assert mixed.rack_peak_it_w.sum() >= mixed.it_w.max() - 1e-6  # peaks of parts >= peak of sum
    dgx = fac.OVERHEAD_PRESETS["dgx-h100"]
    assert dgx.node_w(8 * 700.0) == pytest.approx(10_200.0)  # the vendor's system maximum
    assert "10.2 kW" in dgx.source
    assert fac.OVERHEAD_PRESETS["hgx-h100-measured"].node_w(5600.0) == pytest.approx(8400.0)


def test_pue_curve_file(tmp_path):
    path = tmp_path / "pue.csv"
    path.write_text("it_load_fraction,pue\n0.2,1.6\n1.0,1.2\n", encoding="utf-8")
    curve = fac.load_pue_curve(path)
    out = curve.apply(np.array([100.0, 600.0, 1000.0, 2000.0]), 1000.0)
    np.testing.assert_allclose(out, [160.0, 600 * 1.4, 1200.0, 2400.0])
    path.write_text("it_load_fraction,pue\n0.2,1.6\n0.5,abc\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"'pue.csv', line 3, field 'pue': value 'abc'"):
        fac.load_pue_curve(path)
    path.write_text("load,pue\n0.2,1.6\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 1"):
        fac.load_pue_curve(path)
    with pytest.raises(InputError, match=r"PUE must be in \[1, 10\]"):
        fac.Pue(0.9)


def test_bad_configuration_is_one_clear_error():
    with pytest.raises(InputError, match="field '--gpus'.*multiple"):
        fac.FacilityConfig(gpus=10)
    with pytest.raises(InputError, match="field '--node-overhead'"):
        fac.parse_overhead("dgx-h1000")
    with pytest.raises(InputError, match="field '--sync'"):
        fac.FacilityConfig(gpus=8, sync="sometimes")  # type: ignore[arg-type]


def test_site_metrics_units_and_demand_peak():
    run = step_run(seconds=120)
    res = compose(run, 8 * 125, sync="independent", duration_s=1800.0, pue=fac.Pue(1.2))
    m, notes = fac.site_metrics(res)
    x = res.facility_w
    assert m["peak_w"] == pytest.approx(x.max())
    assert m["mean_w"] == pytest.approx(x.mean())
    assert m["swing_p95_p5_w"] == pytest.approx(swing(x))
    assert m["range_w"] == pytest.approx(x.max() - x.min())
    means15 = x.reshape(2, -1).mean(axis=1)
    assert m["demand_peak_900s_w"] == pytest.approx(means15.max())
    assert m["ramp_up_max_900s_w_per_s"] == pytest.approx(
        max(0.0, means15[1] - means15[0]) / 900)
    r1 = (x[10:] - x[:-10]) / 1.0
    assert m["ramp_up_max_1s_w_per_s"] == pytest.approx(r1.max())
    m1 = x.reshape(30, -1).mean(axis=1)
    assert m["ramp_down_max_60s_w_per_s"] == pytest.approx(max(0, -np.diff(m1).min()) / 60)
    ldc = fac.load_duration_curve(x)
    assert ldc[0] == (0.0, pytest.approx(x.max())) and ldc[-1][1] == pytest.approx(x.min())
    short = compose(run, 8, duration_s=30.0)
    m, notes = fac.site_metrics(short)
    assert m["demand_peak_900s_w"] is None and any("900s" in n for n in notes)


# ---------------------------------------------------------------------------------------------
# Through a real dataset folder and the CLI
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def dataset(tmp_path):
    root = tmp_path / "ds"
    shards.publish_run(root, step_run("run-a", seconds=120, seed=1), refresh_card=False)
    shards.publish_run(root, step_run("run-b", seconds=90, seed=2, devices=4),
                       refresh_card=False)
    return root


def test_cli_json_profile_and_figure(dataset, tmp_path, capsys):
    out, png = tmp_path / "site.parquet", tmp_path / "site.png"
    args = ["facility", str(dataset), "--gpus", "64", "--sync", "independent", "--duration",
            "1000", "--pue", "1.25", "--mix", "run-a=3", "run-b=1", "--out", str(out),
            "--format", "json"]
    pytest.importorskip("matplotlib")
    assert main(args + ["--plot", str(png)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["shape"] == fac.JSON_SHAPE and data["sync"] == "independent"
    assert data["measured"] is False
    assert [s["nodes"] for s in data["sources"]] == [6, 2]
    assert data["site"] == {"gpus": 64, "gpus_per_node": 8, "nodes": 8, "nodes_per_rack": 4,
                            "racks": 2, "jobs": 8, "duration_s": 1000.0, "step_s": 0.1,
                            "seed": 0}
    assert data["node_overhead"]["model"] == "dgx-h100"
    assert any(line.startswith("phase model independent") for line in data["limits"])
    assert any(line.startswith("steady repeat") for line in data["limits"])
    table = pq.read_table(out)
    assert sorted(set(table.column("resolution_s").to_pylist())) == [0.1, 1.0, 60.0, 900.0]
    meta = json.loads(table.schema.metadata[b"llm_powertrace_facility"])
    assert meta["sync"] == "independent" and meta["limits"] == data["limits"]
    cols = table.to_pydict()
    energy = {}
    for r, length, kw in zip(cols["resolution_s"], cols["length_s"], cols["facility_kw"],
                             strict=True):
        energy[r] = energy.get(r, 0.0) + length * kw
    assert max(energy.values()) == pytest.approx(min(energy.values()), rel=1e-9)
    assert energy[0.1] * 1e3 == pytest.approx(data["metrics"]["energy_j"], rel=1e-9)
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_cli_table_states_mode_and_limits(dataset, capsys):
    assert main(["facility", str(dataset), "--gpus", "16", "--where", "run_id=run-a",
                 "--node-overhead", "none"]) == 0
    text = capsys.readouterr().out
    assert "sync: lockstep (composed, not measured)" in text
    assert "source run-a" in text and "source run-b" not in text
    assert "demand_peak_900s_w" in text and "limit: phase model lock-step" in text


def test_where_filters_on_any_runs_column(dataset):
    assert [s.run_id for s in fac.select_sources(dataset, where=["num_gpus=4"])] == ["run-b"]
    assert [s.run_id for s in fac.select_sources(dataset, where=["method=lora", "num_gpus=8.0"])
            ] == ["run-a"]
    with pytest.raises(InputError, match="no run of finetune_runs"):
        fac.select_sources(dataset, where=["method=full"])
    with pytest.raises(InputError, match="field '--config'"):
        fac.select_sources(dataset, config="finetune")


def test_cli_pue_curve(dataset, tmp_path, capsys):
    curve = tmp_path / "pue.csv"
    curve.write_text("it_power_kw,pue\n0,1.5\n1000,1.1\n", encoding="utf-8")
    assert main(["facility", str(dataset), "--gpus", "16", "--node-overhead", "none",
                 "--pue-curve", str(curve), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pue"]["curve"] == {"x_name": "it_power_kw", "x": [0.0, 1000.0],
                                    "pue": [1.5, 1.1]}
    ratio = data["metrics"]["mean_w"] / data["metrics"]["it_mean_w"]
    assert 1.1 < ratio < 1.5
    with pytest.raises(SystemExit) as exc:  # one PUE model or the other
        main(["facility", str(dataset), "--gpus", "16", "--pue", "1.2", "--pue-curve",
              str(curve)])
    assert exc.value.code == 2


def test_cli_bad_input_names_the_field(dataset, capsys):
    assert main(["facility", str(dataset), "--gpus", "16", "--where", "colour=red"]) == 1
    assert "field '--where'" in capsys.readouterr().err
    assert main(["facility", str(dataset), "--gpus", "16", "--mix", "nope=1"]) == 1
    assert "run 'nope'" in capsys.readouterr().err
    assert main(["facility", str(dataset), "--gpus", "12"]) == 1
    assert "field '--gpus'" in capsys.readouterr().err


def test_existing_profile_is_kept_when_a_run_fails(dataset, tmp_path, capsys):
    out = tmp_path / "site.parquet"
    out.write_bytes(b"previous")
    assert main(["facility", str(dataset), "--gpus", "16", "--mix", "nope=1",
                 "--out", str(out)]) == 1
    assert out.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".site")] == []


def test_cpu_proxy_sources_are_labelled(tmp_path, capsys):
    root = tmp_path / "ds"
    shards.publish_run(root, step_run("proxy", seconds=60, platform="cpu_proxy",
                                      sampler="cpu_proxy"), refresh_card=False)
    assert main(["facility", str(root), "--gpus", "8", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["limits"][0].startswith("cpu_proxy:") and "NOT GPU" in data["limits"][0]
    assert data["sources"][0]["cpu_proxy"] is True


# ---------------------------------------------------------------------------------------------
# Real traces (never committed)
# ---------------------------------------------------------------------------------------------

PT = EXTERNAL / "powertraces-v6"
H200 = ["powertraces-pt100array_pt017_r1_7536307_1-50f3a1a4a0",
        "powertraces-pt100array_pt019_r1_7536307_11-89ffb37037"]


@pytest.mark.external
@pytest.mark.skipif(not PT.is_dir(), reason=f"external traces not present at {EXTERNAL}")
@pytest.mark.parametrize("stem", H200, ids=["pt017", "pt019"])
def test_real_4xh200_one_node_reproduces_the_run(tmp_path, capsys, stem):
    """The acceptance check on measured data (the largest node in the fixtures: 4 x H200)."""
    root = tmp_path / "ds"
    assert main(["import", "powertrace-csv", str(PT / f"{stem}.csv"), "--meta",
                 str(PT / f"{stem}.json"), "--out", str(root), "--workload", "finetune"]) == 0
    capsys.readouterr()
    row = next(iter(shards.iter_rows(root, "finetune_runs")))
    assert main(["facility", str(root), "--gpus", "4", "--gpus-per-node", "4", "--sync",
                 "lockstep", "--pue", "1", "--node-overhead", "none", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # by default the site replays the run's work window (detected from power: no events)
    energy_j = data["metrics"]["energy_j"]
    # N profile samples of 0.1 s against the trapezoid over the N - 1 intervals between them:
    # they differ by at most one sample's energy
    assert abs(energy_j - row["work_energy_j"]) <= 0.1 * row["work_peak_power_w"]
    assert math.isclose(data["metrics"]["peak_w"], row["work_peak_power_w"],
                        rel_tol=1e-2)
    assert any("1 s average" in line for line in data["limits"])  # H200 power.draw
    assert main(["facility", str(root), "--gpus", "4", "--gpus-per-node", "4", "--sync",
                 "lockstep", "--pue", "1", "--node-overhead", "none", "--format", "json",
                 "--window", "whole"]) == 0
    data = json.loads(capsys.readouterr().out)
    energy_j = data["metrics"]["energy_j"]
    assert math.isclose(energy_j, row["energy_j"], rel_tol=1e-3), (energy_j, row["energy_j"])
    assert math.isclose(data["metrics"]["peak_w"], row["peak_power_w"], rel_tol=1e-2)


def test_the_card_states_what_composition_extrapolates(dataset):
    from cards.builder import render_card

    card = render_card(dataset)
    section = card.split("## From GPUs to the grid", 1)[1].split("\n## ", 1)[0]
    for line in fac.CARD_LIMITS:
        assert line in section
    assert "10.2 kW" in section and "Latif" in section and "`dgx-a100`" in section


SMI = EXTERNAL / "nvidia-smi"


@pytest.mark.external
@pytest.mark.skipif(not SMI.is_dir(), reason=f"external traces not present at {EXTERNAL}")
@pytest.mark.parametrize("name,gpus", [("a100x2-vllm-gemma4-26b-tp2-250ms.csv", 2),
                                       ("h100-vllm-qwen3-8b-tp1-250ms.csv", 1)],
                         ids=["a100x2", "h100"])
def test_real_nvidia_smi_inference_one_node_reproduces_the_run(tmp_path, capsys, name, gpus):
    root = tmp_path / "ds"
    assert main(["import", "nvidia-smi", str(SMI / name), "--out", str(root),
                 "--workload", "inference"]) == 0
    capsys.readouterr()
    row = next(iter(shards.iter_rows(root, "inference_runs")))
    # the folder holds inference runs only: facility picks that table by itself
    assert main(["facility", str(root), "--gpus", str(gpus), "--window", "whole",
                 "--gpus-per-node", str(gpus), "--pue", "1", "--node-overhead", "none",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert math.isclose(data["metrics"]["energy_j"], row["energy_j"], rel_tol=1e-3)
    # the composed profile is the devices interpolated onto the 0.1 s grid (a common grid for
    # every job), so between-grid spikes of these A100s are partly averaged; the run's own
    # peak_power_w is the tick sum, at most a few % higher, and the limits say so
    grid_peak = float(metrics.node_total(shards.read_run(root, row["run_id"])).total.max())
    assert math.isclose(data["metrics"]["peak_w"], grid_peak, rel_tol=1e-9)
    assert grid_peak <= row["peak_power_w"] <= 1.05 * grid_peak
    assert any(line.startswith("0.1 s grid:") for line in data["limits"])


# ---------------------------------------------------------------------------------------------
# The work window: idle head and tail are never repeated
# ---------------------------------------------------------------------------------------------

def padded_log(pad_s: float, *, devices: int = 4, work_s: float = 200.0) -> Run:
    """An imported-like training log without events, ``pad_s`` of idle before and after.

    The workload is the same whatever the padding; idle noise is drawn outwards, so the
    readings next to the workload agree.
    """
    n_pad, n_work = int(pad_s * 10), int(work_s * 10)
    t_work = np.arange(n_work) * 100
    devs = []
    for g in range(devices):
        rng = np.random.default_rng(g)
        work = np.where((t_work % 3000) < 2000, 640.0, 420.0) + rng.normal(0, 10, n_work)
        head = 90.0 + np.random.default_rng(10 + g).normal(0, 1, n_pad)[::-1]
        tail = 90.0 + np.random.default_rng(20 + g).normal(0, 1, n_pad)
        p = np.concatenate([head, work, tail])
        devs.append(DeviceSeries(g, np.arange(len(p), dtype=np.int64) * 100, {"power_w": p},
                                 gpu_name="NVIDIA H100 80GB HBM3", power_limit_w=700.0,
                                 default_power_limit_w=700.0))
    run = Run({"run_id": f"log-{pad_s:g}", "workload": "finetune", "platform": "h100_sxm_80gb",
               "sample_period_ms": 100.0, "power_field": "power_usage"}, devs, [])
    run.add_flags("power_is_1s_average")
    return run


def test_an_event_free_log_composes_its_active_window_whatever_its_padding():
    sites = {}
    for pad in (10.0, 120.0):
        run = padded_log(pad)
        src = fac.source_from_run(run)
        assert "work window (detected)" in src.window
        res = fac.compose([src], fac.FacilityConfig(gpus=64, overhead=fac.OVERHEAD_PRESETS["none"],
                                                    sync="lockstep", duration_s=600.0))
        sites[pad], _ = fac.site_metrics(res)
        assert any(line.startswith("window: each source replays its work window")
                   for line in res.limits)
        assert any(line.startswith("1 s averages:") and "under-reported" in line
                   for line in res.limits)
        assert fac.to_json(res)["sources"][0]["power_is_1s_average"] is True
    for name in ("par", "peak_w", "mean_w", "swing_p95_p5_w", "ramp_up_max_1s_w_per_s",
                 "ramp_down_max_1s_w_per_s", "ramp_abs_p99_1s_w_per_s", "p5_w"):
        # rel 1e-6: the idle power after the job is the median of the padding actually measured
        assert sites[10.0][name] == pytest.approx(sites[120.0][name], rel=1e-6), name
    # the whole trace repeats the idle head and tail: PAR grows with the padding
    whole = {}
    for pad in (10.0, 120.0):
        src = fac.source_from_run(padded_log(pad), window="whole")
        res = fac.compose([src], fac.FacilityConfig(gpus=64, overhead=fac.OVERHEAD_PRESETS["none"],
                                                    sync="lockstep", duration_s=600.0,
                                                    window="whole"))
        whole[pad], _ = fac.site_metrics(res)
        assert any("--window whole" in line for line in res.limits)
    assert whole[120.0]["par"] > 1.2 * sites[120.0]["par"]
    assert whole[10.0]["par"] != pytest.approx(whole[120.0]["par"], rel=1e-3)


def test_limits_name_every_run_once(tmp_path):
    runs = [step_run(f"r{i}", devices=2, seconds=40, seed=i) for i in range(5)]
    res = fac.compose([fac.source_from_run(r, share=0.2) for r in runs],
                      fac.FacilityConfig(gpus=80, sync="independent", duration_s=120.0,
                                         overhead=fac.OVERHEAD_PRESETS["none"]))
    text = "\n".join(res.limits)
    for r in runs:  # the first line lists them; the window and tiling lines give their spans
        assert text.count(r.run_id + " ") + text.count(r.run_id + ":") <= 3, r.run_id
    replicas = next(line for line in res.limits if line.startswith("replicas:"))
    assert "every source run" in replicas and "r0" not in replicas


def test_facility_picks_the_runs_table_the_folder_holds(tmp_path):
    root = tmp_path / "inference-only"
    run = step_run("inf", devices=2, seconds=60)
    run.meta["workload"] = "inference"
    for key in ("method", "batch_size", "seq_len", "tokens"):
        run.meta.pop(key)
    run.events = [Event(10_000, "steady_begin"), Event(50_000, "steady_end")]
    shards.publish_run(root, run, refresh_card=False)
    assert fac.default_config(root) == "inference_runs"
    res = fac.run_facility(root, fac.FacilityConfig(gpus=8, overhead=fac.OVERHEAD_PRESETS["none"]))
    assert [s.run_id for s in res.sources] == ["inf"]
    assert res.sources[0].window == "work window (steady) [10.0 s, 50.0 s]"
