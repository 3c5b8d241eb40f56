"""Metric behaviours pinned by known answers (each test fails when its behaviour breaks).

Signals are built so the expected value follows from the metric's formula by hand (the formula
is the docstring in ``llm_powertrace_ds.metrics``); no test re-runs the library's own code path.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds import metrics
from llm_powertrace_ds.run import DeviceSeries, Run


def run_of(*devices: tuple[np.ndarray, np.ndarray], period_ms: float = 100.0,
           limit: float = 400.0) -> Run:
    """A fine-tuning run from ``(t_ms, power_w)`` pairs, one per device."""
    devs = [DeviceSeries(g, np.asarray(t, dtype=np.int64), {"power_w": np.asarray(p, float)},
                         power_limit_w=limit, default_power_limit_w=limit)
            for g, (t, p) in enumerate(devices)]
    return Run({"run_id": "behaviour", "workload": "finetune", "platform": "l40s",
                "sample_period_ms": period_ms}, devs, [], None)


def without(t: np.ndarray, lo_ms: int, hi_ms: int) -> np.ndarray:
    """``t`` with every reading strictly between ``lo_ms`` and ``hi_ms`` removed."""
    return t[(t <= lo_ms) | (t >= hi_ms)]


def test_percentiles_on_a_linear_signal_are_the_linear_interpolated_ones():
    # One device, readings on the grid: P takes the values 0, 1, ..., 999 W once each.
    t = np.arange(1000) * 100
    m = metrics.compute_run_metrics(run_of((t, np.arange(1000.0))))
    # numpy's linear percentile of 0..999: q/100 · 999.
    assert m["p5_power_w"] == pytest.approx(49.95)
    assert m["p50_power_w"] == pytest.approx(499.5)
    assert m["p95_power_w"] == pytest.approx(949.05)
    assert m["p99_power_w"] == pytest.approx(989.01)
    assert m["peak_power_w"] == pytest.approx(999.0)


def test_ramp_event_frequency_is_events_per_minute_of_duration():
    rng = np.random.default_rng(7)
    n = 1200  # 119.9 s of readings
    p = 300 + np.cumsum(rng.normal(0, 5, n))  # continuous values: no two readings equal
    t = np.arange(n) * 100
    m = metrics.compute_run_metrics(run_of((t, p)))
    r = p[10:] - p[:-10]  # 1 s differences, W/s (grid = readings)
    up = r[r > 0]
    p95 = np.percentile(up, 95)
    events = int(np.count_nonzero(up >= p95))
    duration_s = (n - 1) * 0.1
    assert m["ramp_up_p95_1s_w_per_s"] == pytest.approx(p95)
    assert m["duration_s"] == pytest.approx(duration_s)
    assert events > 0
    assert m["ramp_event_frequency_1s"] == pytest.approx(events / (duration_s / 60.0))


def test_par_1s_is_the_1s_peak_over_the_mean_not_the_60s_peak():
    t = np.arange(1200) * 100  # 119.9 s
    p = np.full(1200, 100.0)
    p[500:510] = 1000.0  # one complete, window-aligned 1 s block at 1000 W
    m = metrics.compute_run_metrics(run_of((t, p)))
    energy_j = float(np.sum((p[1:] + p[:-1]) / 2 * 0.1))
    mean_w = energy_j / 119.9
    assert m["mean_power_w"] == pytest.approx(mean_w)
    assert m["peak_power_1s_w"] == pytest.approx(1000.0)
    # 60 s windows from t = 0: [0, 60) holds the block: (590 · 100 + 10 · 1000) / 600.
    assert m["peak_power_60s_w"] == pytest.approx(115.0)
    assert m["par_1s"] == pytest.approx(1000.0 / mean_w)
    assert m["par_60s"] == pytest.approx(115.0 / mean_w)
    assert m["par"] == pytest.approx(1000.0 / mean_w)


def test_a_gap_nested_in_another_devices_gap_merges_into_one():
    t = np.arange(0, 10_001, 100)
    outer = without(t, 1000, 5000)  # 1.0 .. 5.0 s
    inner = without(t, 2000, 3000)  # 2.0 .. 3.0 s, inside the outer gap
    m = metrics.compute_run_metrics(run_of((outer, np.full(len(outer), 200.0)),
                                           (inner, np.full(len(inner), 200.0))))
    assert m["gap_count"] == 1
    assert m["gap_s"] == pytest.approx(4.0)


def test_overlapping_and_separate_gaps_merge_by_reach():
    t = np.arange(0, 20_001, 100)
    a = without(without(t, 1000, 5000), 12_000, 13_000)  # 1–5 s and 12–13 s
    b = without(t, 4000, 7000)  # 4–7 s overlaps the first: 1–7 s
    m = metrics.compute_run_metrics(run_of((a, np.full(len(a), 200.0)),
                                           (b, np.full(len(b), 200.0))))
    assert m["gap_count"] == 2
    assert m["gap_s"] == pytest.approx(6.0 + 1.0)


def test_a_longer_declared_period_moves_the_gap_threshold():
    t = without(np.arange(0, 10_001, 100), 4000, 4500)  # one 500 ms interval, others 100 ms
    p = np.full(len(t), 250.0)
    at_100 = metrics.compute_run_metrics(run_of((t, p), period_ms=100.0))
    assert (at_100["gap_count"], at_100["gap_s"]) == (1, pytest.approx(0.5))
    at_200 = metrics.compute_run_metrics(run_of((t, p), period_ms=200.0))  # threshold 600 ms
    assert (at_200["gap_count"], at_200["gap_s"]) == (0, 0.0)
    # The 500 ms interval is no hole in the shape metrics either: every grid point is valid.
    assert at_200["peak_power_1s_w"] == pytest.approx(250.0)


def test_without_a_declared_period_the_median_of_every_interval_sets_the_gap_threshold():
    # Intervals alternate 100 ms (even positions) and 300 ms (odd), and the last odd one is
    # 500 ms: the median of all 40 intervals is (100 + 300) / 2 = 200 ms, so the threshold is
    # 3 x 200 = 600 ms and the 500 ms interval is no gap. (The median of every second interval
    # would be 100 ms, a 300 ms threshold, and one 0.5 s gap.)
    dt = np.tile([100, 300], 20)
    dt[-1] = 500
    t = np.concatenate(([0], np.cumsum(dt)))
    m = metrics.compute_run_metrics(run_of((t, np.full(len(t), 250.0)), period_ms=None))
    assert (m["gap_count"], m["gap_s"]) == (0, 0.0)


def test_an_interval_of_exactly_the_gap_threshold_is_not_a_gap():
    exact = without(np.arange(0, 10_001, 100), 4000, 4300)  # 300 ms = 3 periods
    longer = without(np.arange(0, 10_001, 100), 4000, 4400)  # 400 ms
    m = metrics.compute_run_metrics(run_of((exact, np.full(len(exact), 250.0))))
    assert (m["gap_count"], m["gap_s"]) == (0, 0.0)
    m = metrics.compute_run_metrics(run_of((longer, np.full(len(longer), 250.0))))
    assert (m["gap_count"], m["gap_s"]) == (1, pytest.approx(0.4))


def test_duration_spans_from_the_earliest_first_to_the_latest_last_reading():
    early = np.arange(0, 10_000, 100)  # 0 .. 9.9 s
    late = np.arange(2000, 12_100, 100)  # 2.0 .. 12.0 s
    m = metrics.compute_run_metrics(run_of((early, np.full(len(early), 100.0)),
                                           (late, np.full(len(late), 300.0))))
    assert m["duration_s"] == pytest.approx(12.0)
    energy_j = 100.0 * 9.9 + 300.0 * 10.0
    assert m["energy_j"] == pytest.approx(energy_j)
    assert m["mean_power_w"] == pytest.approx(energy_j / 12.0)


def test_ramp_percentiles_and_maxima_on_a_parabola():
    # P_i = i² / 2 W at 0.1 s: the k-step rate is ((i + k)² − i²) / 2 / (0.1 k) = 10 i + 5 k W/s.
    i = np.arange(1000)
    m = metrics.compute_run_metrics(run_of((i * 100, i ** 2 / 2.0)))  # limit 400 W
    r_100ms = 10.0 * np.arange(999) + 5.0
    r_1s = 10.0 * np.arange(990) + 50.0
    for tag, r in (("100ms", r_100ms), ("1s", r_1s)):
        assert m[f"ramp_up_max_{tag}_w_per_s"] == pytest.approx(r.max())
        assert m[f"ramp_down_max_{tag}_w_per_s"] == 0.0
        assert m[f"ramp_abs_p95_{tag}_w_per_s"] == pytest.approx(np.percentile(r, 95))
        assert m[f"ramp_abs_p99_{tag}_w_per_s"] == pytest.approx(np.percentile(r, 99))
        assert m[f"ramp_abs_p99_{tag}_pct_per_s"] == pytest.approx(
            100 * np.percentile(r, 99) / 400.0)
    assert m["ramp_abs_p99_1s_w_per_s"] == pytest.approx(10 * 0.99 * 989 + 50)
    # falling instead of rising: the same magnitudes as down-ramps
    down = metrics.compute_run_metrics(run_of((i * 100, (999 - i) ** 2 / 2.0)))
    assert down["ramp_down_max_1s_w_per_s"] == pytest.approx(r_1s.max())
    assert down["ramp_up_max_1s_w_per_s"] == 0.0
