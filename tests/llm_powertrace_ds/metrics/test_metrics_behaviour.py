"""Metric behaviours pinned by known answers (each test fails when its behaviour breaks).

Signals are built so the expected value follows from the metric's formula by hand (the formula
is the docstring in ``llm_powertrace_ds.metrics``); no test re-runs the library's own code path.
Also the helpers' rules: the formula table's bullet parser, the node total and its grid, windows
inside gap-free segments, gaps merged across devices and the observed sampling interval, the
capacity behind every %-of-limit metric, event windows, token counts, sorting and de-duplicating
readings, and each null's reason.
"""

from __future__ import annotations

import numpy as np
import pytest
from metric_runs import run_of_devices as _run

from llm_powertrace_ds import metrics
from llm_powertrace_ds.metrics import core
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


def _group_a() -> None:
    """Group A.

    - ``alpha_w`` = the first formula,
      continued on a second line.
    - ``eta_w`` and more = ignored (the left side is not a list of names)
    - ``beta_w``, ``gamma_w`` = one formula for two names.
    - ``no_formula_w`` has no equals sign
    - ``delta_{δ}_w`` = x over {δ}.
    - a plain list item (no name) ends the formula above
      and its own next line is no formula's either.

    A paragraph after the list is not part of the last bullet.
    """


def _group_without_docstring() -> None:
    pass


def test_metric_formulas_parses_bullets_continuations_shared_names_and_windows(monkeypatch):
    monkeypatch.setattr(metrics, "_GROUPS", [_group_without_docstring, _group_a])
    formulas = metrics.metric_formulas()
    expected = {
        "alpha_w": "the first formula, continued on a second line.",
        "beta_w": "one formula for two names.",
        "gamma_w": "one formula for two names.",
    }
    for tag, _ in core.RAMP_WINDOWS:
        expected[f"delta_{tag}_w"] = f"x over {tag}."
    assert formulas == expected


def test_metric_formulas_real_groups_join_continuations_and_expand_windows():
    formulas = metrics.metric_formulas()
    assert formulas["ramp_up_max_5s_pct_per_s"] == (
        "100 · ramp_up_max_5s_w_per_s / C (% of N × limit per s; null when a limit is unknown).")
    # only the braced {δ} is a window placeholder; r_δ in a formula stays symbolic
    assert formulas["ramp_abs_p99_100ms_w_per_s"] == "p99 of |r_δ(t)|."


def test_node_total_needs_two_readings_per_device_and_takes_the_grid_step():
    t = np.arange(0, 10_001, 100)
    two = _run((t, np.full(len(t), 100.0)), (np.array([0, 10_000]), np.array([50.0, 150.0])))
    al = metrics.node_total(two)
    assert al is not None  # two readings are enough
    assert al.total[0] == pytest.approx(150.0) and al.total[-1] == pytest.approx(250.0)
    assert np.diff(al.grid_ms).tolist() == [100] * 100
    coarse = metrics.node_total(two, grid_ms=1000)
    assert coarse is not None and np.diff(coarse.grid_ms).tolist() == [1000] * 10
    one = _run((t, np.full(len(t), 100.0)), (np.array([0, 10_000]), np.array([np.nan, 150.0])))
    assert metrics.node_total(one) is None  # one finite reading on a device: no node total
    assert metrics.node_total(_run()) is None  # no device


def test_node_total_is_none_when_a_device_cannot_be_read():
    t = np.arange(0, 2001, 100)
    good = DeviceSeries(0, t, {"power_w": np.full(len(t), 100.0)})
    bad = DeviceSeries(1, t, {"power_w": np.full(len(t), 100.0)})
    bad.signals["power_w"] = np.full(len(t) - 1, 100.0)  # lengths differ: the device is ignored
    run = Run({"run_id": "pins", "workload": "finetune", "platform": "l40s"}, [good, bad], [])
    assert metrics.node_total(run) is None  # a node total without a device would be wrong


def _without(t: np.ndarray, lo_ms: int, hi_ms: int) -> np.ndarray:
    return t[(t <= lo_ms) | (t >= hi_ms)]


def test_dynamic_range_never_spans_a_gap():
    # 0-10 s at 200 W with a 300 W half-second; a 2 s hole (a gap); 12-20 s at 500 W with a
    # 450 W dip. Across the hole the level moves by 300 W: that is not a swing inside a window.
    t = _without(np.arange(0, 20_001, 100), 10_000, 12_000)
    p = np.where(t <= 10_000, 200.0, 500.0)
    p[(t >= 5000) & (t < 5500)] = 300.0
    p[t == 15_000] = 450.0
    m = metrics.compute_run_metrics(_run((t, p)))
    assert m["dynamic_range_1s_w"] == pytest.approx(100.0)
    assert m["dynamic_range_10s_w"] == pytest.approx(100.0)  # only 0-10 s holds 10 s
    assert m["ramp_up_max_1s_w_per_s"] == pytest.approx(100.0)  # 200 -> 300 W, not 200 -> 500
    assert m["ramp_down_max_1s_w_per_s"] == pytest.approx(100.0)


def test_windows_longer_than_the_run_are_null_not_zero():
    t = np.arange(0, 30_001, 100)  # 30 s
    p = 200.0 + 50.0 * np.sin(t / 700.0)
    m = metrics.compute_run_metrics(_run((t, p)))
    assert m["peak_power_1s_w"] is not None and m["peak_power_1s_w"] > 200.0
    assert m["peak_power_60s_w"] is None and m["par_60s"] is None
    short = metrics.compute_run_metrics(_run((np.arange(0, 3001, 100), np.full(31, 200.0))))
    for name in ("ramp_up_max_5s_w_per_s", "ramp_down_max_10s_w_per_s",
                 "ramp_abs_p99_10s_w_per_s", "dynamic_range_10s_w"):
        assert short[name] is None, name
    assert short["ramp_up_max_1s_w_per_s"] == 0.0  # a flat 3 s run has 1 s windows, no ramp


def test_zero_power_gives_null_ratios_not_a_division_error():
    t = np.arange(0, 120_001, 100)
    m = metrics.compute_run_metrics(_run((t, np.zeros(len(t)))))
    assert m["mean_power_w"] == 0.0 and m["peak_power_w"] == 0.0
    for name in ("par", "par_1s", "par_60s", "load_factor"):
        assert m[name] is None, name


def test_idle_power_clips_the_window_to_each_device_span():
    from llm_powertrace_ds.run import Event

    t0 = np.arange(0, 10_001, 100)
    t1 = np.arange(3000, 10_001, 100)
    run = _run((t0, np.full(len(t0), 100.0)), (t1, np.full(len(t1), 50.0)))
    # 0-2 s: only device 0 is there (device 1 adds nothing, not a joule)
    run.events = [Event(0, "idle_begin"), Event(2000, "idle_end")]
    assert metrics.compute_run_metrics(run)["idle_power_w"] == pytest.approx(100.0)
    # 8-12 s: both devices end at 10 s; 2 s of 150 W over a 4 s window
    run.events = [Event(8000, "idle_begin"), Event(12_000, "idle_end")]
    assert metrics.compute_run_metrics(run)["idle_power_w"] == pytest.approx(150.0 * 2 / 4)


def test_gaps_of_several_devices_merge_when_they_overlap_or_touch():
    t = np.arange(0, 20_001, 100)
    clean = (t, np.full(len(t), 100.0))
    a = _without(t, 1000, 2000)  # 1-2 s
    b = _without(_without(t, 2000, 3000), 5000, 6000)  # touches a; 5-6 s
    c = _without(t, 5500, 7000)  # overlaps b's second gap
    m = metrics.compute_run_metrics(_run(clean, (a, np.full(len(a), 100.0)),
                                         (b, np.full(len(b), 100.0)),
                                         (c, np.full(len(c), 100.0))))
    assert m["gap_count"] == 2
    assert m["gap_s"] == pytest.approx(2.0 + 2.0)  # 1-3 s and 5-7 s


def test_observed_sampling_interval_is_numpys_percentile_of_every_interval():
    rng = np.random.default_rng(3)
    t0 = np.cumsum(np.r_[0, rng.integers(50, 150, 300)])
    t1 = np.cumsum(np.r_[0, rng.integers(100, 400, 200)])
    t2 = np.cumsum(np.r_[0, rng.integers(90, 110, 100), 65_536, 70_000])  # two long intervals
    t3 = np.cumsum(np.r_[0, rng.integers(90, 110, 50), 65_536])  # longest exactly 65,536 ms
    one = np.array([0])  # one reading: no interval
    order = (t1, t0, t2, t3)  # t0's histogram is shorter than t1's
    devices = [(t, np.full(len(t), 100.0)) for t in (one, *order)]
    m = metrics.compute_run_metrics(_run(*devices))
    dt = np.concatenate([np.diff(t) for t in order]) / 1000.0
    assert m["sampling_interval_observed_median_s"] == pytest.approx(np.percentile(dt, 50))
    assert m["sampling_interval_observed_p95_s"] == pytest.approx(np.percentile(dt, 95))
    two = metrics.compute_run_metrics(_run((np.array([0, 250]), np.array([1.0, 2.0]))))
    assert two["sampling_interval_observed_median_s"] == pytest.approx(0.25)
    from llm_powertrace_ds.metrics import states

    out = core._Out()  # the group on its own (a run with such a device is nulled before it)
    states._group_sampling([None, core._prepare_device(_run(), DeviceSeries(
        0, one, {"power_w": np.array([1.0])}), 0, [])], out)
    assert out.values == {"sampling_interval_observed_median_s": None,
                          "sampling_interval_observed_p95_s": None}
    assert out.notes == ["sampling_interval_observed_median_s: no device has 2 readings",
                         "sampling_interval_observed_p95_s: no device has 2 readings"]


def _notes(m: dict) -> dict[str, str]:
    return dict(n.split(": ", 1) for n in m["metric_notes"])


def _cap_run(limits: list[tuple[float | None, float | None]], **meta) -> Run:
    t = np.arange(0, 1001, 100)
    devs = [DeviceSeries(g, t, {"power_w": np.full(len(t), 100.0)}, power_limit_w=lim,
                         default_power_limit_w=default)
            for g, (lim, default) in enumerate(limits)]
    return Run({"run_id": "pins", "workload": "finetune", "platform": "l40s", **meta}, devs, [])


def test_capacity_is_the_enforced_limits_else_defaults_unless_a_cap_was_set():
    assert core._capacity_w(_cap_run([(300.0, 350.0), (250.0, 350.0)])) == 550.0
    assert core._capacity_w(_cap_run([(None, 350.0), (300.0, 350.0)])) == 650.0
    # a cap was set: a device without an enforced limit does not fall back to its default...
    assert core._capacity_w(_cap_run([(None, 350.0)], power_limit_setting_w=200.0)) is None
    # ...but to the run's recorded limit
    assert core._capacity_w(_cap_run([(None, 350.0)], power_limit_setting_w=200.0,
                                     power_limit_w=200.0)) == 200.0
    assert core._capacity_w(_cap_run([(None, None)], power_limit_w=280.0)) == 280.0
    assert core._capacity_w(_cap_run([(0.5, None)])) == 0.5
    assert core._capacity_w(_cap_run([(0.0, 350.0)])) is None
    assert core._capacity_w(_cap_run([(None, None)])) is None
    assert core._capacity_w(_cap_run([])) is None
    m = metrics.compute_run_metrics(_cap_run([(None, 400.0)], power_limit_setting_w=200.0,
                                             power_limit_w=200.0))
    assert m["limit_utilisation"] == pytest.approx(0.5)


def test_event_windows_pair_each_begin_with_the_first_end_after_it():
    from llm_powertrace_ds.run import Event

    run = _run()
    run.events = [Event(1000, "idle_begin"), Event(1000, "idle_end"), Event(2000, "idle_end"),
                  Event(5000, "idle_begin")]
    assert core.event_windows(run, "idle_begin", "idle_end") == [(1000, 2000)]
    assert core.event_windows(run, "steady_begin", "steady_end") == []


def test_tokens_come_from_the_workloads_own_count():
    reqs = [{"output_tokens": 5}, {"output_tokens": 7}]
    assert core._tokens(_run(requests=reqs, workload="inference")) == 12.0
    assert core._tokens(_run(requests=reqs, workload="finetune")) is None  # needs `tokens`
    partial = [{"output_tokens": 5}, {"output_tokens": None}]
    assert core._tokens(_run(requests=partial, workload="inference")) is None


def test_segments_are_read_only():
    al = metrics.node_total(_run((np.arange(0, 2001, 100), np.full(21, 100.0))))
    starts, stops = al.segments()
    assert starts.tolist() == [0] and stops.tolist() == [21]
    with pytest.raises(ValueError):
        starts[0] = 1


def test_duration_spans_the_earliest_first_to_the_latest_last_reading():
    t0 = np.arange(5000, 10_001, 100)
    t1 = np.arange(6000, 12_001, 100)
    m = metrics.compute_run_metrics(_run((t0, np.full(len(t0), 100.0)),
                                         (t1, np.full(len(t1), 100.0))))
    assert m["duration_s"] == pytest.approx(7.0)
    assert m["mean_power_w"] == pytest.approx((100.0 * 5 + 100.0 * 6) / 7.0)


def _by_reason(m: dict, work: bool = False) -> dict[str, list[str]]:
    """Null metrics by reason: the whole-trace ones, or (``work``) the work-window twins."""
    out: dict[str, list[str]] = {}
    for name, why in _notes(m).items():
        if name in m and m[name] is None and name.startswith("work_") == work:
            out.setdefault(why, []).append(name)
    return out


def _ramp_block(tag: str) -> list[str]:
    return [f"ramp_{k}_{tag}_{u}" for u in ("w_per_s", "pct_per_s")
            for k in ("up_max", "down_max", "abs_p95", "abs_p99")]


def test_null_reasons_of_a_short_flat_run():
    t = np.arange(0, 3001, 100)
    m = metrics.compute_run_metrics(_run((t, np.full(len(t), 100.0))))
    spectral = ["dominant_freq_hz", "dominant_amplitude_w", "band_rms_low_w", "band_rms_mid_w",
                "band_rms_high_w", "band_fraction_low", "band_fraction_mid",
                "band_fraction_high"]
    assert _by_reason(m) == {
        "no energy counter": ["energy_counter_j", "energy_mismatch_pct"],
        "no token count": ["energy_per_token_j"],
        "no idle_begin/idle_end events": ["idle_power_w"],
        "no steady_begin/steady_end events": ["steady_energy_j", "steady_energy_per_token_j"],
        "no gap-free 60 s window": ["peak_power_60s_w"],
        "peak_power_60s_w or mean_power_w is null": ["par_60s"],
        "no gap-free stretch of 5 s": _ramp_block("5s"),
        "no gap-free stretch of 10 s": _ramp_block("10s"),
        "no up-ramps": ["ramp_up_p95_1s_w_per_s", "ramp_up_p99_1s_w_per_s"],
        "no down-ramps": ["ramp_down_p99_1s_w_per_s"],
        "no up-ramps over 5s": ["ramp_up_p95_5s_w_per_s", "ramp_up_p99_5s_w_per_s"],
        "no down-ramps over 5s": ["ramp_down_p99_5s_w_per_s"],
        "no up-ramps over 10s": ["ramp_up_p95_10s_w_per_s", "ramp_up_p99_10s_w_per_s"],
        "no down-ramps over 10s": ["ramp_down_p99_10s_w_per_s"],
        "no gap-free 10 s window": ["dynamic_range_10s_w"],
        "no gap-free stretch of 20 s": spectral,
        "fewer than 2 step events; none detected from power (no gap-free stretch of 20 s)":
            ["step_freq_hz"],
        "needs at least 2 devices": ["synchrony_index", "projected_swing_1000_w"],
        "no checkpoint events and no dip detected from power": ["checkpoint_dip_pct",
                                                                 "checkpoint_dip_s"],
    }
    assert m["checkpoint_dip_count"] == 0  # the detector looked and found none
    # a flat trace has no padding to cut: its work window is the whole trace, and every
    # work-window twin is null for the same reason as its whole-trace metric
    assert m["work_window_source"] == "whole"
    notes = _notes(m)
    for name in metrics.WORK_BASE_NAMES:
        if name == "energy_per_token_j":
            assert notes["work_" + name] == "no token count in the work window"
        elif m[name] is None:
            assert notes["work_" + name] == notes[name], name
        else:
            assert m["work_" + name] == m[name], name


def test_null_reasons_of_a_flat_run_without_a_limit():
    t = np.arange(0, 30_001, 100)
    run = _run((t, np.full(len(t), 100.0)))
    run.devices[0].power_limit_w = run.devices[0].default_power_limit_w = None
    reasons = _by_reason(metrics.compute_run_metrics(run))
    pct = [n for tag in ("100ms", "1s", "5s", "10s") for n in _ramp_block(tag)
           if n.endswith("pct_per_s")]
    assert reasons["power limit unknown"] == (["limit_utilisation"] + pct
                                              + ["idle_fraction", "near_limit_fraction",
                                                 "step_count"])
    assert reasons["no oscillation power in 0.05-5 Hz"] == ["band_fraction_low",
                                                            "band_fraction_mid",
                                                            "band_fraction_high"]
    assert reasons["flat spectrum (no oscillation in 0.05-5 Hz)"] == ["dominant_freq_hz",
                                                                      "dominant_amplitude_w"]


def test_null_reasons_when_devices_share_no_span_or_a_device_has_no_power():
    apart = _run((np.arange(0, 5001, 100), np.full(51, 100.0)),
                 (np.arange(6000, 10_001, 100), np.full(41, 100.0)))
    m = metrics.compute_run_metrics(apart)
    reasons = _by_reason(m)
    assert len(reasons["devices share no common span"]) == (
        77 - len(metrics.SEED_RAMP_NAMES) - len(metrics.SAMPLING_NAMES))
    for name in metrics.SAMPLING_NAMES:  # need no common span: a value, and no note calling it null
        assert m[name] is not None and name not in _notes(m), name
    assert "p5_power_w" in reasons["devices share no common span"]
    # the seed authors' aggregates carry each device's last reading forward: they exist
    # without a common span, and a value never comes with a note that calls it null
    assert m["ramp_event_frequency_1s"] is not None
    for name in metrics.SEED_RAMP_NAMES:
        assert (m[name] is None) == (name in _notes(m)), name
    two = metrics.compute_run_metrics(_run((np.array([0, 5000]), np.array([100.0, 150.0])),
                                           (np.array([6000, 10_000]), np.array([80.0, 90.0]))))
    for name in metrics.SEED_RAMP_NAMES:
        assert (two[name] is None) == (name in _notes(two)), name
    t = np.arange(0, 3001, 100)
    reasons = _by_reason(metrics.compute_run_metrics(_run((t, np.full(len(t), np.nan)))))
    assert reasons["a device has no power readings"] == ["duration_s"]
    assert reasons["energy_j is null"] == ["energy_per_token_j", "mean_power_w"]
    assert reasons["mean_power_w is null"] == ["limit_utilisation"]
    assert len(reasons["a device has fewer than 2 power readings"]) == 77 - 2
    assert reasons["no device has 2 readings"] == list(metrics.SAMPLING_NAMES)
    work = _by_reason(metrics.compute_run_metrics(_run((t, np.full(len(t), np.nan)))), work=True)
    assert work == {"the run has no power readings": list(metrics.WORK_NAMES)}


def test_projected_swing_uses_each_devices_p5_p95_on_gap_free_points():
    t = _without(np.arange(0, 100_000, 100), 40_000, 60_000)
    p = t / 100.0  # 0 ... 999 W, the same on both devices: ρ̄ = 1
    m = metrics.compute_run_metrics(_run((t, p), (t, p)))
    swing = np.percentile(p, 95) - np.percentile(p, 5)  # every reading is a gap-free grid point
    assert m["synchrony_index"] == pytest.approx(1.0)
    assert m["projected_swing_1000_w"] == pytest.approx(1000.0 * swing)


def test_load_factor_of_a_zero_peak_names_its_reason():
    t = np.arange(0, 120_001, 100)
    m = metrics.compute_run_metrics(_run((t, np.zeros(len(t)))))
    assert _notes(m)["load_factor"] == "mean_power_w is null or peak is 0"


def test_unsorted_timestamps_are_sorted_and_duplicates_dropped_with_a_note():
    t = np.array([0, 2000, 1000, 3000, 3000, 4000])
    p = np.array([100.0, 300.0, 200.0, 400.0, 999.0, 400.0])  # the second 3000 ms is dropped
    m = metrics.compute_run_metrics(_run((t, p)))
    # sorted: 100, 200, 300, 400, 400 W at 0-4 s, 1 s apart
    assert m["gpu_energy_j"] == [pytest.approx(150.0 + 250.0 + 350.0 + 400.0)]
    assert m["gpu_peak_power_w"] == [400.0]
    assert "gpu 0: timestamps not increasing; sorted, duplicates dropped" in m["metric_notes"]
    two = metrics.compute_run_metrics(_run((np.array([1000, 0]), np.array([300.0, 100.0]))))
    assert two["gpu_energy_j"] == [pytest.approx(200.0)]  # two readings, reversed
    fine = metrics.compute_run_metrics(_run((np.arange(0, 200), np.full(200, 100.0))))
    assert not [n for n in fine["metric_notes"] if n.startswith("gpu 0:")]  # 1 ms apart: in order
    dup = metrics.compute_run_metrics(_run((np.array([0, 1000, 1000, 2000]),
                                            np.array([100.0, 200.0, 900.0, 200.0]))))
    assert "gpu 0: timestamps not increasing; sorted, duplicates dropped" in dup["metric_notes"]
    assert dup["gpu_peak_power_w"] == [200.0]  # in order, but a repeated time: the first kept
    # many readings out of order with a repeated time: the first one logged is kept
    t = np.r_[np.arange(5000, 0, -100), 2500]
    p = np.r_[np.full(50, 100.0), 700.0]
    m = metrics.compute_run_metrics(_run((t, p)))
    assert m["gpu_peak_power_w"] == [100.0]


def test_a_device_whose_columns_differ_in_length_is_ignored_with_a_note():
    t = np.arange(0, 2001, 100)
    bad = DeviceSeries(1, t, {"power_w": np.full(len(t), 100.0)})
    bad.signals["power_w"] = np.full(len(t) - 1, 100.0)
    run = Run({"run_id": "pins", "workload": "finetune", "platform": "l40s"},
              [DeviceSeries(0, t, {"power_w": np.full(len(t), 100.0)}), bad], [])
    m = metrics.compute_run_metrics(run)
    assert "gpu 1: power_w and t_ms differ in length; device ignored" in m["metric_notes"]
    assert m["gpu_energy_j"] == [pytest.approx(200.0), None]


def test_gaps_are_longer_than_three_periods_of_the_median_interval():
    # no declared period: the median interval (100 ms) rules; an interval of exactly 3 periods
    # (300 ms) is no gap, one of 1 s is
    dt = np.r_[np.full(400, 100), 300, np.full(400, 100), 1000, np.full(100, 100)]
    t = np.r_[0, np.cumsum(dt)]
    run = _run((t, np.full(len(t), 100.0)))
    del run.meta["sample_period_ms"]
    m = metrics.compute_run_metrics(run)
    assert m["gap_count"] == 1 and m["gap_s"] == pytest.approx(1.0)


def test_a_long_device_takes_its_period_from_every_kth_interval():
    t = np.arange(0, 450_000 * 100, 100)  # 450,000 readings: a stride of 2 for the median
    m = metrics.compute_run_metrics(_run((t, np.full(len(t), 100.0))))
    assert m["gap_count"] == 0 and m["duration_s"] == pytest.approx((len(t) - 1) / 10)


def test_a_run_without_devices_says_so_for_every_node_metric():
    m = metrics.compute_run_metrics(_run())
    reasons = _by_reason(m)
    assert "p5_power_w" in reasons["the run has no devices"]
    assert "ramp_up_p95_1s_w_per_s" in reasons["the run has no devices"]
    assert "energy_j" in reasons["the run has no devices"]


def test_node_total_over_exactly_one_grid_step_and_up_to_the_common_end():
    a = _run((np.array([0, 100]), np.array([1.0, 2.0])), (np.array([0, 100]), np.array([1.0, 2.0])))
    assert metrics.node_total(a).grid_ms.tolist() == [0, 100]
    t = np.r_[np.arange(0, 9901, 100), 9999]
    al = metrics.node_total(_run((t, np.full(len(t), 1.0))))
    assert al.grid_ms[-1] == 9900  # no grid point after the last reading


def test_out_keeps_floats_and_nulls_what_is_not_finite():
    out = core._Out()
    out.set("a", np.float64(2.5))
    out.set("b", np.float64(np.inf))
    out.set("c", 3)
    assert type(out.values["a"]) is float and out.values["c"] == 3
    assert out.values["b"] is None and out.notes == ["b: not finite"]
    out.null(("a", "d", "e"), "why")  # a keeps its value; the others get the reason
    assert out.values["a"] == 2.5 and out.values["d"] is None and out.values["e"] is None
    assert out.notes == ["b: not finite", "d: why", "e: why"]


def test_percentiles_are_numpys_to_the_bit():
    assert core._percentiles(np.array([0.1, 0.7]), (50,)) == [np.percentile([0.1, 0.7], 50)]
    rng = np.random.default_rng(47)
    for n in (1, 2, 3, 7, 100, 1001):
        x = rng.normal(300, 50, n)
        qs = (0, 5, 50, 95, 99, 100)
        assert core._percentiles(x.copy(), qs) == [float(v) for v in np.percentile(x, qs)], n


def test_one_complete_60s_window_gives_the_60s_peak():
    t = np.arange(0, 61_001, 100)  # 61 s: one complete 60 s window from the start
    p = np.where(t < 30_000, 100.0, 300.0)
    m = metrics.compute_run_metrics(_run((t, p)))
    assert m["peak_power_60s_w"] == pytest.approx(200.0)  # 300 points at 100 W, 300 at 300 W


def test_dynamic_range_on_a_one_second_grid_spans_two_points():
    t = np.arange(0, 20_001, 100)
    p = 100.0 + 100.0 * (t // 1000)  # +100 W every second
    m = metrics.compute_run_metrics(_run((t, p)), grid_ms=1000)
    assert m["dynamic_range_1s_w"] == pytest.approx(100.0)


def test_of_readings_logged_twice_at_one_time_the_first_is_kept():
    rng = np.random.default_rng(71)
    t = rng.permutation(np.repeat(np.arange(500, dtype=np.int64) * 100, 2))
    seen: set[int] = set()
    p = np.empty(len(t))
    for i, v in enumerate(t):  # the first reading logged at a time is 100 W, the second 900 W
        p[i] = 900.0 if int(v) in seen else 100.0
        seen.add(int(v))
    m = metrics.compute_run_metrics(_run((t, p)))
    assert m["gpu_peak_power_w"] == [100.0]
