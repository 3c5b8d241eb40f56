"""Level metrics at the sampling instants, the work window, and events detected from power."""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds import metrics, schema
from llm_powertrace_ds.run import DeviceSeries, Event, Run

PERIOD_MS = 100


def _run(devices: list[tuple[np.ndarray, np.ndarray]], events: list[Event] | None = None,
         tokens: int | None = None, flags: tuple[str, ...] = ()) -> Run:
    devs = [DeviceSeries(g, np.asarray(t, dtype=np.int64), {"power_w": np.asarray(p, float)},
                         power_limit_w=700.0, default_power_limit_w=700.0)
            for g, (t, p) in enumerate(devices)]
    meta = {"run_id": "lv", "workload": "finetune", "platform": "h100_sxm_80gb",
            "sample_period_ms": float(PERIOD_MS), "tokens": tokens}
    run = Run(meta, devs, sorted(events or [], key=lambda e: e.t_ms))
    run.add_flags(*flags)
    return run


# --------------------------------------------------------------------------------------------
# item 1: peaks and percentiles at the sampling instants
# --------------------------------------------------------------------------------------------

def _spiky(n_ticks: int = 600, offsets: tuple[int, ...] = (0, 4, 47, 49)
           ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """Instant-power devices read on one tick, a few ms apart; single-tick spikes."""
    rng = np.random.default_rng(7)
    ticks = np.arange(n_ticks) * PERIOD_MS
    spikes = rng.choice(np.arange(10, n_ticks - 10), size=12, replace=False)
    devices = []
    per_tick = np.zeros(n_ticks)
    for g, off in enumerate(offsets):
        p = 200.0 + rng.normal(0.0, 3.0, n_ticks)
        p[spikes] = 390.0 + 5.0 * g + rng.normal(0.0, 2.0, len(spikes))
        devices.append((ticks + off, p))
        per_tick += p
    return devices, per_tick


def test_peak_and_p99_are_the_tick_sums_when_spikes_fall_between_grid_points():
    devices, per_tick = _spiky()
    m = metrics.compute_run_metrics(_run(devices))
    assert m["peak_power_w"] == pytest.approx(float(per_tick.max()), rel=1e-12)
    # tick 0 of the first device is before the last device's first reading (49 ms)
    inside = per_tick[1:]
    assert m["p99_power_w"] == pytest.approx(float(np.percentile(inside, 99)), rel=1e-12)
    assert m["p5_power_w"] == pytest.approx(float(np.percentile(inside, 5)), rel=1e-12)
    assert m["par"] == pytest.approx(m["peak_power_w"] / m["mean_power_w"])
    # the interpolated grid (anchored at the 49 ms device) would have shaved the spikes by
    # about half their height above the base
    al = metrics.node_total(_run(devices))
    assert al is not None and float(al.total.max()) < 0.9 * per_tick.max()
    assert any(n.startswith("peak_power_w: ") and "per sampling tick over 4 device" in n
               for n in m["metric_notes"])
    # per device peaks at the readings: the spikes coincide, so the coincidence factor is 1
    assert m["coincidence_factor"] == pytest.approx(
        per_tick.max() / sum(float(p.max()) for _, p in devices))


def test_devices_without_a_common_tick_are_summed_by_sample_and_hold():
    t_a = np.arange(0, 30_001, 100)
    t_b = np.arange(0, 30_001, 250)
    p_a = np.full(len(t_a), 100.0)
    p_b = np.full(len(t_b), 300.0)
    p_a[137] = 500.0  # at 13.7 s, between two readings of device b (13.5 s and 13.75 s)
    m = metrics.compute_run_metrics(_run([(t_a, p_a), (t_b, p_b)]))
    assert m["peak_power_w"] == pytest.approx(800.0)
    assert any("sample-and-hold" in n for n in m["metric_notes"])


@pytest.mark.external
@pytest.mark.parametrize("name", ["a100-hf-mistral7b-b32-100ms.csv",
                                  "a100x2-vllm-gemma4-26b-tp2-250ms.csv",
                                  "h100-vllm-qwen3-8b-tp1-250ms.csv",
                                  "a100-vllm-qwen3-8b-smoke-250ms.csv"])
def test_nvidia_smi_logs_peak_and_p99_are_their_tick_sums(external_dir, name):
    from llm_powertrace_ds.importers import import_file

    run = import_file("nvidia-smi", external_dir / "nvidia-smi" / name, workload="inference")
    m = metrics.compute_run_metrics(run)
    # the reference: the k-th reading of every device belongs to tick k (one row per GPU per
    # tick in the log), summed, over the ticks every device has
    n = min(len(d.t_ms) for d in run.devices)
    per_tick = np.sum([d.power_w[:n] for d in run.devices], axis=0)
    per_tick = per_tick[np.isfinite(per_tick)]
    assert m["peak_power_w"] == pytest.approx(float(per_tick.max()), rel=0.01)
    assert m["p99_power_w"] == pytest.approx(float(np.percentile(per_tick, 99)), rel=0.01)


@pytest.mark.external
@pytest.mark.parametrize("stem", ["pt017", "pt019", "pt220"])
def test_seed_traces_peak_p95_p99_and_mean_match_the_authors_catalog(external_dir, stem):
    import json

    from llm_powertrace_ds.importers import import_file

    folder = external_dir / "powertraces-v6"
    (catalog,) = [p for p in (folder / "catalog").glob("*.json") if f"_{stem}_" in p.name]
    published = json.loads(catalog.read_text())
    run = import_file("powertrace-csv", folder / f"{published['run_id']}.csv",
                      workload="finetune")
    m = metrics.compute_run_metrics(run)
    assert m["peak_power_w"] == pytest.approx(published["max_total_power_w"], rel=0.01)
    assert m["p99_power_w"] == pytest.approx(published["p99_total_power_w"], rel=0.01)
    assert m["p95_power_w"] == pytest.approx(published["p95_total_power_w"], rel=0.01)
    assert m["mean_power_w"] == pytest.approx(published["mean_total_power_w"], rel=1e-4)
    # 1 s-averaged sensors (H200, L40S): the band metrics say what the sensor filtered away
    assert "power_is_1s_average" in run.flags
    assert any(n.startswith("band_rms_mid_w: power_w is a 1 s average") for n in
               m["metric_notes"])
    # no events: the training window is found from power, after the idle and loading phases
    assert m["work_window_source"] == "detected" and "work_window_detected" in run.flags
    assert m["work_par"] < m["par"] and m["work_p5_power_w"] > m["p5_power_w"]


# --------------------------------------------------------------------------------------------
# item 2: the work window; padding changes whole-trace metrics, not work-window ones
# --------------------------------------------------------------------------------------------

def _workload(rng: np.random.Generator, n: int) -> np.ndarray:
    """One device's training power: 2.5 s steps (compute high, optimiser low), noise."""
    t = np.arange(n) * PERIOD_MS
    high = (t % 2500) < 1500
    return np.where(high, 620.0, 470.0) + rng.normal(0.0, 8.0, n)


def _padded(pad_s: float, *, with_events: bool, dips: tuple[float, ...] = (),
            work_s: float = 300.0, ndev: int = 4) -> Run:
    """The same workload (same samples) with ``pad_s`` of idle before and after it."""
    n_pad = int(round(pad_s * 1000 / PERIOD_MS))
    n_work = int(round(work_s * 1000 / PERIOD_MS))
    devices = []
    for g in range(ndev):
        work = _workload(np.random.default_rng(100 + g), n_work)
        for at in dips:  # a checkpoint save: 8 s near idle
            i = int(at * 1000 / PERIOD_MS)
            work[i:i + 80] = 140.0 + np.random.default_rng(g).normal(0.0, 3.0, 80)
        # idle noise drawn outwards from the workload, so both paddings share the readings
        # next to it and differ only in how far they reach
        head = np.random.default_rng(200 + g).normal(0.0, 1.0, n_pad)[::-1]
        tail = np.random.default_rng(300 + g).normal(0.0, 1.0, n_pad)
        p = np.concatenate([70.0 + head, work, 70.0 + tail])
        devices.append((np.arange(len(p)) * PERIOD_MS, p))
    events = []
    if with_events:
        w0 = n_pad * PERIOD_MS
        events += [Event(0, "idle_begin"), Event(w0, "idle_end")]
        for k in range(int(work_s / 2.5)):
            events += [Event(w0 + k * 2500, "step_begin", step=k, rank=0),
                       Event(w0 + k * 2500 + 2400, "step_end", step=k, rank=0)]
        end = w0 + n_work * PERIOD_MS
        events += [Event(end, "idle_begin"), Event(end + n_pad * PERIOD_MS - 100, "idle_end")]
    return _run(devices, events, tokens=1_000_000)


@pytest.mark.parametrize("with_events", [True, False], ids=["steps", "detected"])
def test_padding_changes_whole_trace_metrics_not_work_window_ones(with_events):
    short = metrics.compute_run_metrics(_padded(10.0, with_events=with_events))
    long = metrics.compute_run_metrics(_padded(120.0, with_events=with_events))
    source = "steps" if with_events else "detected"
    assert short["work_window_source"] == long["work_window_source"] == source
    assert long["work_window_start_s"] - short["work_window_start_s"] == pytest.approx(110.0)
    compared = 0
    for name in metrics.WORK_BASE_NAMES:
        a, b = short["work_" + name], long["work_" + name]
        if a is None:
            assert b is None, name
            continue
        assert b == pytest.approx(a, rel=1e-9, abs=1e-9), name
        compared += 1
    assert compared >= 50
    # the whole-trace twins do move with the padding
    for name in ("energy_per_token_j", "par", "load_factor", "mean_power_w", "p50_power_w"):
        assert short[name] != pytest.approx(long[name], rel=1e-3), name
    # the workload's own numbers: about 8 W noise around a 470/620 W square wave per device
    assert long["work_p5_power_w"] > 4 * 440.0
    assert long["work_energy_per_token_j"] == pytest.approx(long["work_energy_j"] / 1e6)


def test_steady_window_is_the_work_window_of_inference():
    t = np.arange(0, 60_001, PERIOD_MS)
    p = np.where((t >= 10_000) & (t <= 50_000), 400.0, 80.0)
    run = _run([(t, p)], [Event(12_000, "steady_begin"), Event(48_000, "steady_end")])
    run.meta["workload"] = "inference"
    m = metrics.compute_run_metrics(run)
    assert m["work_window_source"] == "steady"
    assert (m["work_window_start_s"], m["work_window_end_s"]) == (12.0, 48.0)
    assert m["work_p5_power_w"] == pytest.approx(400.0) and m["work_par"] == pytest.approx(1.0)
    assert m["p5_power_w"] == pytest.approx(80.0)


def test_work_columns_are_in_the_schema_with_formulas():
    runs = {c.name: c for c in schema.COLUMNS["finetune_runs"]}
    formulas = metrics.metric_formulas()
    for name in metrics.WORK_NAMES:
        assert name in runs and runs[name].description, name
        assert name in formulas, name
    assert formulas["work_peak_power_w"].startswith(formulas["peak_power_w"])
    assert "work window" in formulas["work_peak_power_w"]
    assert runs["work_peak_power_w"].unit == "W"
    for flag in ("work_window_detected", "checkpoint_dips_detected", "step_period_detected"):
        assert flag in schema.FLAG_DESCRIPTIONS and flag in schema.QUALITY_FLAGS


# --------------------------------------------------------------------------------------------
# item 4: checkpoint dips and the step period from power alone
# --------------------------------------------------------------------------------------------

DIPS_AT_S = (40.0, 100.0, 160.0, 220.0, 280.0)


def test_planted_checkpoint_dips_and_step_period_are_detected():
    run = _padded(30.0, with_events=False, dips=DIPS_AT_S, work_s=320.0)
    m = metrics.compute_run_metrics(run)
    assert m["checkpoint_dip_count"] == len(DIPS_AT_S)
    assert "checkpoint_dips_detected" in run.flags
    # depth: from the training level (median over the 10 s before, ~4 x 545 W) to ~4 x 140 W
    assert 65.0 < m["checkpoint_dip_pct"] < 85.0
    assert m["checkpoint_dip_s"] == pytest.approx(8.0, abs=1.0)
    assert m["step_freq_hz"] == pytest.approx(1 / 2.5, rel=0.02)
    assert m["work_step_freq_hz"] == pytest.approx(1 / 2.5, rel=0.02)
    assert "step_period_detected" in run.flags
    assert any(n.startswith("checkpoint_dip_count: 5 dips detected") for n in m["metric_notes"])


def test_no_dips_detected_in_steady_training_and_real_events_win():
    run = _padded(30.0, with_events=False)
    m = metrics.compute_run_metrics(run)
    assert m["checkpoint_dip_count"] == 0 and m["checkpoint_dip_pct"] is None
    assert "checkpoint_dips_detected" not in run.flags
    assert m["step_freq_hz"] == pytest.approx(0.4, rel=0.02)
    # real events are never overwritten: step events give the period, checkpoint events the dips
    evented = _padded(30.0, with_events=True, dips=DIPS_AT_S[:2], work_s=320.0)
    w0 = 300 * PERIOD_MS
    evented.events += [Event(w0 + 40_000, "checkpoint_begin"), Event(w0 + 48_000,
                                                                     "checkpoint_end")]
    m = metrics.compute_run_metrics(evented)
    assert m["checkpoint_dip_count"] == 1
    assert not {"checkpoint_dips_detected", "step_period_detected"} & set(evented.flags)
    assert m["step_freq_hz"] == pytest.approx(0.4, rel=1e-9)  # 1 / median Δ of step_begin


def test_a_slow_rhythm_is_not_taken_for_checkpoint_dips():
    # 20 s high, 20 s low: half the time below the level is the workload itself
    t = np.arange(0, 400_000, PERIOD_MS)
    p = np.where((t % 40_000) < 20_000, 600.0, 150.0)
    m = metrics.compute_run_metrics(_run([(t, p)]))
    assert m["checkpoint_dip_count"] is None
    assert "workload's own rhythm" in dict(n.split(": ", 1) for n in
                                           m["metric_notes"])["checkpoint_dip_count"]
