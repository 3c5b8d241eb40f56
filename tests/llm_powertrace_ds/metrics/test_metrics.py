"""Metrics on synthetic signals with known answers, bad input, the runs table, real traces."""

from __future__ import annotations

import csv
import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_powertrace_ds import metrics, schema
from llm_powertrace_ds.run import DeviceSeries, Event, Run

LO, HI = 100.0, 300.0


def make_run(series, *, limit: float | None = 400.0, workload: str = "finetune",
             events=None, requests=None, **meta) -> Run:
    """A run from ``[(t_ms, power_w[, extra signals]), ...]``."""
    devs = []
    for g, item in enumerate(series):
        t, p = item[0], item[1]
        signals = {"power_w": np.asarray(p, dtype=float)}
        if len(item) > 2:
            signals.update(item[2])
        devs.append(DeviceSeries(g, np.asarray(t, dtype=np.int64), signals, power_limit_w=limit,
                                 default_power_limit_w=limit))
    base = {"run_id": "synthetic", "workload": workload, "platform": "l40s",
            "sample_period_ms": 100.0}
    base.update(meta)
    return Run(base, devs, events or [], requests)


def square(n: int = 3000, half: int = 10, invert: bool = False) -> np.ndarray:
    """Square wave between LO and HI, ``half`` samples per half-period (100 ms samples)."""
    high = (np.arange(n) // half) % 2 == 0
    if invert:
        high = ~high
    return np.where(high, HI, LO)


def assert_notes_consistent(m: dict) -> None:
    noted = {n.split(":", 1)[0] for n in m["metric_notes"]}
    # every note names a published metric (or a device) and says why it is null
    assert {k for k in noted if not k.startswith("gpu ")} <= set(metrics.METRIC_NAMES), noted
    for name in metrics.METRIC_NAMES:
        assert name in m, name
        if m[name] is None:
            assert name in noted, f"{name} is null without a note"
        elif name == "work_window_source":
            assert m[name] in ("steady", "steps", "idle_events", "stage", "detected", "whole")
        else:
            assert isinstance(m[name], (int, float)) and math.isfinite(m[name]), name


# --------------------------------------------------------------------------------------------
# Known answers
# --------------------------------------------------------------------------------------------

def test_square_wave_frequency_swing_par_ramps():
    t = np.arange(3000) * 100
    run = make_run([(t, square()), (t, square())], tokens=1000)
    m = metrics.compute_run_metrics(run)
    assert_notes_consistent(m)
    amp = 2 * (HI - LO)  # the node total swings between 200 and 600 W
    assert m["dominant_freq_hz"] == pytest.approx(0.5, abs=0.011)
    assert m["dominant_amplitude_w"] == pytest.approx(4 / math.pi * amp / 2, rel=0.03)
    assert m["swing_w"] == pytest.approx(amp)
    assert m["peak_power_w"] == pytest.approx(2 * HI)
    assert m["mean_power_w"] == pytest.approx(LO + HI, rel=1e-3)
    assert m["par"] == pytest.approx(2 * HI / (LO + HI), rel=1e-3)
    assert m["load_factor"] == pytest.approx((LO + HI) / (2 * HI), rel=1e-3)
    assert m["peak_power_1s_w"] == pytest.approx(2 * HI)
    assert m["peak_power_60s_w"] == pytest.approx(LO + HI)
    assert m["par_60s"] == pytest.approx(1.0, rel=1e-3)
    # half-period 1 s: a 0.1 s lag sees each edge once, 1 s and 5 s lags see every edge, 10 s none
    for tag, expect in (("100ms", amp / 0.1), ("1s", amp / 1), ("5s", amp / 5), ("10s", 0.0)):
        assert m[f"ramp_up_max_{tag}_w_per_s"] == pytest.approx(expect)
        assert m[f"ramp_down_max_{tag}_w_per_s"] == pytest.approx(expect)
        assert m[f"ramp_abs_p99_{tag}_w_per_s"] == pytest.approx(expect)
        assert m[f"ramp_abs_p95_{tag}_w_per_s"] == pytest.approx(expect)
        assert m[f"ramp_abs_p99_{tag}_pct_per_s"] == pytest.approx(100 * expect / 800)
    assert m["ramp_up_p95_1s_w_per_s"] == pytest.approx(amp)
    assert m["ramp_down_p99_1s_w_per_s"] == pytest.approx(amp)
    assert m["dynamic_range_1s_w"] == pytest.approx(amp)
    assert m["dynamic_range_10s_w"] == pytest.approx(amp)
    fractions = [m[f"band_fraction_{b}"] for b in ("low", "mid", "high")]
    assert sum(fractions) == pytest.approx(1.0, abs=0.02)
    assert m["band_fraction_low"] > 0.75  # the fundamental
    assert m["band_rms_low_w"] > m["band_rms_mid_w"] > 0
    assert m["step_count"] == 299  # every edge of the square wave, once
    assert m["idle_fraction"] == 0.0 and m["near_limit_fraction"] == 0.0
    assert m["limit_utilisation"] == pytest.approx((LO + HI) / 800, rel=1e-3)
    assert m["energy_per_token_j"] == pytest.approx(m["energy_j"] / 1000)


def test_in_phase_vs_antiphase_devices():
    t = np.arange(3000) * 100
    inphase = metrics.compute_run_metrics(make_run([(t, square()), (t, square())]))
    assert inphase["coincidence_factor"] == pytest.approx(1.0)
    assert inphase["diversity_factor"] == pytest.approx(1.0)
    assert inphase["synchrony_index"] == pytest.approx(1.0, abs=1e-6)
    assert inphase["projected_swing_1000_w"] == pytest.approx((HI - LO) * 1000, rel=1e-6)

    anti = metrics.compute_run_metrics(make_run([(t, square()), (t, square(invert=True))]))
    assert_notes_consistent(anti)
    assert anti["coincidence_factor"] == pytest.approx((LO + HI) / (2 * HI))
    assert anti["diversity_factor"] == pytest.approx(2 * HI / (LO + HI))
    assert anti["synchrony_index"] == pytest.approx(-1.0, abs=1e-6)
    assert anti["swing_w"] == pytest.approx(0.0)
    # independent-like projection (correlation clamped at 0): sqrt(M) * per-device swing
    assert anti["projected_swing_1000_w"] == pytest.approx((HI - LO) * math.sqrt(1000), rel=1e-6)
    assert anti["dominant_freq_hz"] is None
    assert any(n.startswith("dominant_freq_hz: flat spectrum") for n in anti["metric_notes"])


def test_linear_ramp_exact_rate():
    t = np.arange(1201) * 100  # 120 s
    slope = 5.0  # W/s
    m = metrics.compute_run_metrics(make_run([(t, 100 + slope * t / 1000)], limit=1000.0))
    assert_notes_consistent(m)
    for tag, _ in metrics.RAMP_WINDOWS:
        assert m[f"ramp_up_max_{tag}_w_per_s"] == pytest.approx(slope)
        assert m[f"ramp_abs_p95_{tag}_w_per_s"] == pytest.approx(slope)
        assert m[f"ramp_down_max_{tag}_w_per_s"] == 0.0
        assert m[f"ramp_up_max_{tag}_pct_per_s"] == pytest.approx(100 * slope / 1000)
    assert m["ramp_up_p95_1s_w_per_s"] == pytest.approx(slope)
    assert m["ramp_down_p99_1s_w_per_s"] is None
    assert "ramp_down_p99_1s_w_per_s: no down-ramps" in m["metric_notes"]
    assert m["dynamic_range_1s_w"] == pytest.approx(slope * 1)
    assert m["dynamic_range_10s_w"] == pytest.approx(slope * 10)
    assert m["energy_j"] == pytest.approx(100 * 120 + slope * 120 ** 2 / 2)
    assert m["synchrony_index"] is None and m["coincidence_factor"] == pytest.approx(1.0)


@pytest.mark.parametrize("as_nan", [False, True])
def test_gap_excluded_from_shape_counted_and_bridged_for_energy(as_nan):
    t_full = np.arange(1301) * 100  # 0..130 s
    p0 = np.where(t_full < 65_000, 100.0, 200.0)
    in_gap = (t_full > 60_000) & (t_full < 70_000)
    if as_nan:
        t0, pw0 = t_full, np.where(in_gap, np.nan, p0)
    else:
        t0, pw0 = t_full[~in_gap], p0[~in_gap]
    run = make_run([(t0, pw0), (t_full, np.full(len(t_full), 50.0))])
    m = metrics.compute_run_metrics(run)
    assert_notes_consistent(m)
    assert m["gap_count"] == 1
    assert m["gap_s"] == pytest.approx(10.0)
    # energy bridges the gap with the trapezoid: 100*60 + (100+200)/2*10 + 200*60, plus 50 W*130 s
    assert m["energy_j"] == pytest.approx(100 * 60 + 150 * 10 + 200 * 60 + 50 * 130)
    assert m["gpu_energy_j"][0] == pytest.approx(19_500)
    # shape metrics never see the interpolated ramp across the gap
    for tag, _ in metrics.RAMP_WINDOWS:
        assert m[f"ramp_up_max_{tag}_w_per_s"] == 0.0
    assert m["dynamic_range_10s_w"] == 0.0
    assert m["peak_power_w"] == pytest.approx(250.0)
    assert m["p5_power_w"] == pytest.approx(150.0)
    assert m["step_count"] == 0


def test_offset_timestamps_do_not_double_count():
    t = np.arange(2000) * 100
    # device 1 is 3 ms late with jitter; device 2 samples every 50 ms (two samples per 0.1 s)
    rng = np.random.default_rng(0)
    t1 = t + 3 + rng.integers(0, 3, len(t))
    t2 = np.arange(4000) * 50 + 7
    run = make_run([(t, np.full(len(t), 150.0)), (t1, np.full(len(t), 150.0)),
                    (t2, np.full(len(t2), 150.0))])
    m = metrics.compute_run_metrics(run)
    assert m["peak_power_w"] == pytest.approx(450.0)
    assert m["p5_power_w"] == pytest.approx(450.0)
    assert m["p99_power_w"] == pytest.approx(450.0)
    assert m["peak_power_1s_w"] == pytest.approx(450.0)
    assert m["ramp_up_max_100ms_w_per_s"] == pytest.approx(0.0)
    spans = [(tt[-1] - tt[0]) / 1000 for tt in (t, t1, t2)]
    assert m["energy_j"] == pytest.approx(150 * sum(spans))
    assert m["coincidence_factor"] == pytest.approx(1.0)

    # square waves whose samples are offset by a few ms: the total never exceeds 2 x HI
    sq = square(2000)
    m2 = metrics.compute_run_metrics(make_run([(t, sq), (t + 4, sq)]))
    assert m2["peak_power_w"] <= 2 * HI + 1e-9
    assert m2["peak_power_w"] <= sum(m2["gpu_peak_power_w"])
    assert m2["coincidence_factor"] <= 1.0


def test_energy_counter_and_mismatch():
    t = np.arange(1001) * 100
    p = np.full(len(t), 200.0)
    counter = 200.0 * t * 1.02  # mJ: 2 % more than the integral
    counter[600:] -= counter[600] - counter[599]  # a plateau (no increase) is not a reset
    run = make_run([(t, p, {"energy_mj": counter})])
    m = metrics.compute_run_metrics(run)
    expected_counter = (counter[-1] - counter[0]) / 1000
    assert m["energy_counter_j"] == pytest.approx(expected_counter)
    assert m["energy_mismatch_pct"] == pytest.approx(
        100 * (m["energy_j"] - expected_counter) / expected_counter)
    assert m["gpu_energy_counter_j"] == [pytest.approx(expected_counter)]
    # a counter reset loses its interval, it never subtracts energy
    reset = 200.0 * t
    reset[500:] -= reset[500]
    m2 = metrics.compute_run_metrics(make_run([(t, p, {"energy_mj": reset})]))
    assert m2["energy_counter_j"] == pytest.approx(200.0 * 99.9)  # 100 s minus the lost 0.1 s


def test_tokens_steady_window_and_requests():
    t = np.arange(601) * 100  # 60 s
    p = np.full(len(t), 300.0)
    events = [Event(10_000, "steady_begin"), Event(50_000, "steady_end")]
    requests = [{"request_id": "a", "first_token_ms": 0, "finish_ms": 60_000,
                 "output_tokens": 61},  # 1 first token outside, 60 spread: 40 s of 60 -> 40
                {"request_id": "b", "first_token_ms": 20_000, "finish_ms": 30_000,
                 "output_tokens": 11}]  # all 11 inside
    run = make_run([(t, p)], workload="inference", events=events, requests=requests)
    m = metrics.compute_run_metrics(run)
    assert m["steady_energy_j"] == pytest.approx(300 * 40)
    assert m["steady_energy_per_token_j"] == pytest.approx(300 * 40 / (40 + 11))
    # no tokens_out: the request log's output tokens are the generated tokens
    assert m["energy_per_token_j"] == pytest.approx(m["energy_j"] / 72)
    m2 = metrics.compute_run_metrics(make_run([(t, p)], workload="inference", tokens_out=600))
    assert m2["energy_per_token_j"] == pytest.approx(300 * 60 / 600)
    assert m2["steady_energy_j"] is None
    assert "steady_energy_j: no steady_begin/steady_end events" in m2["metric_notes"]
    m3 = metrics.compute_run_metrics(make_run([(t, p)]))
    assert m3["energy_per_token_j"] is None
    assert "energy_per_token_j: no token count" in m3["metric_notes"]


def test_checkpoint_dip_and_step_frequency():
    t = np.arange(1201) * 100
    p = np.full(len(t), 400.0)
    p[(t >= 32_000) & (t < 37_000)] = 100.0
    events = [Event(30_000, "checkpoint_begin", rank=0), Event(40_000, "checkpoint_end", rank=0)]
    events += [Event(int(s), "step_begin", step=i, rank=r)
               for i, s in enumerate(np.arange(0, 120_000, 1700)) for r in (0, 1)]
    m = metrics.compute_run_metrics(make_run([(t, p)], limit=1000.0,
                                             events=sorted(events, key=lambda e: e.t_ms)))
    assert m["checkpoint_dip_pct"] == pytest.approx(75.0)
    assert m["checkpoint_dip_s"] == pytest.approx(5.0, abs=0.11)
    assert m["step_freq_hz"] == pytest.approx(1 / 1.7)
    assert m["idle_fraction"] == pytest.approx(50 / 1201, abs=0.002)  # 100 W < 0.2 x 1000 W


def test_limits_unknown_gives_nulls_with_reasons():
    t = np.arange(600) * 100
    m = metrics.compute_run_metrics(make_run([(t, square(600))], limit=None))
    assert_notes_consistent(m)
    for name in ("limit_utilisation", "ramp_abs_p99_1s_pct_per_s", "idle_fraction", "step_count"):
        assert m[name] is None
        assert f"{name}: power limit unknown" in m["metric_notes"]
    # a 1 s half-period square wave: every 1 s difference is ±(HI − LO), in W/s
    assert m["ramp_abs_p99_1s_w_per_s"] == pytest.approx(HI - LO)
    assert m["ramp_up_max_1s_w_per_s"] == pytest.approx(HI - LO)


# --------------------------------------------------------------------------------------------
# Internals against brute force
# --------------------------------------------------------------------------------------------

def test_welch_matches_scipy_on_one_segment():
    from scipy.signal import welch

    rng = np.random.default_rng(3)
    t = np.arange(5000) * 100
    p = 300 + 50 * np.sin(2 * np.pi * 0.7 * t / 1000) + rng.normal(0, 5, len(t))
    al = metrics.node_total(make_run([(t, p)]))
    f, psd = metrics.welch_psd(al)
    f2, psd2 = welch(al.total, fs=10.0, window="hann", nperseg=1024, noverlap=512,
                     detrend="linear")
    np.testing.assert_allclose(f, f2)
    np.testing.assert_allclose(psd, psd2, rtol=1e-9, atol=1e-12)


def test_sliding_range_and_window_means_against_brute_force():
    rng = np.random.default_rng(5)
    t = np.arange(700) * 100
    p = rng.uniform(100, 500, len(t))
    t = np.delete(t, np.arange(300, 306))  # one gap of 0.7 s
    p = np.delete(p, np.arange(300, 306))
    run = make_run([(t, p)])
    al = metrics.node_total(run)
    m = metrics.compute_run_metrics(run)
    x, valid = al.total, al.valid
    for seconds, name in ((1.0, "dynamic_range_1s_w"), (10.0, "dynamic_range_10s_w")):
        k = int(seconds * 10)
        best = max(np.ptp(x[j:j + k + 1]) for j in range(len(x) - k)
                   if valid[j:j + k + 1].all())
        assert m[name] == pytest.approx(best)
    starts, stops = al.segments()
    means = [x[a + 10 * i:a + 10 * i + 10].mean() for a, b in zip(starts, stops, strict=True)
             for i in range((b - a) // 10)]
    assert m["peak_power_1s_w"] == pytest.approx(max(means))


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["no_devices", "empty", "one_sample", "all_null", "no_overlap"])
def test_bad_input_gives_nulls_with_reasons(case):
    t = np.arange(100) * 100
    series = {
        "no_devices": [],
        "empty": [(np.zeros(0), np.zeros(0))],
        "one_sample": [(np.array([0]), np.array([100.0]))],
        "all_null": [(t, np.full(len(t), np.nan)), (t, np.full(len(t), 100.0))],
        "no_overlap": [(t, np.full(len(t), 100.0)), (t + 100_000, np.full(len(t), 100.0))],
    }[case]
    m = metrics.compute_run_metrics(make_run(series))
    assert_notes_consistent(m)
    assert m["peak_power_w"] is None
    if case == "no_overlap":
        assert m["energy_j"] == pytest.approx(2 * 100 * 9.9)
        assert "peak_power_w: devices share no common span" in m["metric_notes"]
    else:
        assert m["energy_j"] is None
    assert m["energy_per_token_j"] is None
    for key in metrics.PER_DEVICE_NAMES:
        assert len(m[key]) == len(series)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(-50, 50), st.integers(1, 400),
                          st.floats(0, 1), st.integers(0, 2**31)), min_size=0, max_size=3))
def test_never_crashes_on_random_small_runs(devs):
    series = []
    for n, offset, period, null_share, seed in devs:
        rng = np.random.default_rng(seed)
        t = offset + np.cumsum(rng.integers(1, period + 1, n))
        p = rng.uniform(0, 500, n)
        p[rng.random(n) < null_share] = np.nan
        series.append((t, p))
    m = metrics.compute_run_metrics(make_run(series, tokens=0))
    assert_notes_consistent(m)


# --------------------------------------------------------------------------------------------
# Contract: names, formulas, schema, runs table through datasets
# --------------------------------------------------------------------------------------------

def test_every_metric_has_a_formula_and_a_column():
    formulas = metrics.metric_formulas()
    for name in metrics.METRIC_NAMES + metrics.PER_DEVICE_NAMES:
        assert formulas.get(name), name
    cols = {c.name: c for c in schema.RUN_METRICS + schema.PER_DEVICE_METRICS}
    assert list(cols) == list(metrics.METRIC_NAMES + metrics.PER_DEVICE_NAMES)
    for c in cols.values():
        assert c.description
    assert "1.1.0" in dict(schema.SCHEMA_CHANGELOG)  # the metric set's version
    assert schema.SCHEMA_CHANGELOG[-1][0] == schema.SCHEMA_VERSION
    for config in schema.RUNS_CONFIGS:
        for name in list(cols) + ["metric_notes"]:
            assert name in schema.FEATURES[config], (config, name)
    for name in ("ramp_up_max_1s_w_per_s", "ramp_abs_p99_100ms_w_per_s",
                 "ramp_abs_p99_1s_pct_per_s", "ramp_up_p95_1s_w_per_s", "ramp_event_frequency_1s",
                 "band_fraction_high", "projected_swing_1000_w", "checkpoint_dip_s"):
        assert name in metrics.METRIC_NAMES


def test_publish_and_load_dataset_runs_table(tmp_path, make_run):
    from datasets import load_dataset

    from llm_powertrace_ds.shards import publish_run

    run = make_run("run-metrics", devices=2, n=900, tokens=5000)
    res = publish_run(tmp_path, run)
    ds = load_dataset(str(tmp_path), "finetune_runs", split="l40s")
    assert ds.num_rows == 1
    row = ds[0]
    for name in metrics.METRIC_NAMES + metrics.PER_DEVICE_NAMES:
        assert name in ds.column_names, name
        expected = res.metrics[name]
        if isinstance(expected, float):
            assert row[name] == pytest.approx(expected), name
        else:
            assert row[name] == expected, name
    assert row["metric_notes"] == res.metrics["metric_notes"]
    assert row["schema_version"] == schema.SCHEMA_VERSION
    assert ds.features["step_count"].dtype == "int32"


# --------------------------------------------------------------------------------------------
# The seed authors' real traces
# --------------------------------------------------------------------------------------------

@pytest.mark.external
def test_external_traces_energy_and_peaks(external_dir):
    folder = external_dir / "powertraces-v6"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    from llm_powertrace_ds.importers import import_file  # a broken importer fails, never skips

    csvs = sorted(folder.glob("*.csv"))
    assert csvs
    for path in csvs:
        run = import_file("powertrace-csv", path, workload="finetune",
                          meta_path=path.with_suffix(".json"))
        m = metrics.compute_run_metrics(run)
        assert_notes_consistent(m)
        # independent per-device trapezoid straight from the CSV
        per_gpu: dict[str, list[tuple[float, float]]] = defaultdict(list)
        with open(path, newline="") as fh:
            for rec in csv.DictReader(fh):
                if rec["power_w"] not in ("", None):
                    per_gpu[rec["gpu_id"]].append((float(rec["time_relative_s"]),
                                                   float(rec["power_w"])))
        energy = 0.0
        peaks = []
        for samples in per_gpu.values():
            samples.sort()
            ts = np.array([s[0] for s in samples])
            ps = np.array([s[1] for s in samples])
            energy += float(np.sum((ps[1:] + ps[:-1]) / 2 * np.diff(ts)))
            peaks.append(ps.max())
        assert m["energy_j"] == pytest.approx(energy, rel=1e-9), path.name
        assert m["peak_power_w"] <= sum(peaks) + 1e-6
        assert m["peak_power_w"] <= sum(m["gpu_peak_power_w"]) + 1e-6
        assert m["coincidence_factor"] <= 1.0 + 1e-12
        assert len(m["gpu_energy_j"]) == len(per_gpu)


def test_idle_power_is_the_mean_node_power_of_the_first_idle_window(make_run):
    # Issue 11, item 3: every run records its own idle baseline.
    run = make_run("idle", devices=2, n=200)
    res = metrics.compute_run_metrics(run)
    expected = 0.0
    for d in run.devices:
        t = np.asarray(d.t_ms, dtype=float)
        p = np.asarray(d.signals["power_w"], dtype=float)
        a, b = max(0.0, t[0]), min(1000.0, t[-1])  # clipped to the device's span
        ts = np.concatenate(([a], t[(t > a) & (t < b)], [b]))
        expected += float(np.trapezoid(np.interp(ts, t, p), ts) / 1000.0)  # J in the 1 s window
    assert res["idle_power_w"] == pytest.approx(expected, rel=1e-6)
    run.events = [e for e in run.events if not e.kind.startswith("idle_")]
    res = metrics.compute_run_metrics(run)
    assert res["idle_power_w"] is None
    assert any(n.startswith("idle_power_w:") for n in res["metric_notes"])
