"""Behaviours of the metric helpers that mutation testing (``make mutation``) found unpinned.

Each test states a rule of the helper and checks it on values worked out by hand, so that a
one-line change of the rule (a bound, a default, a join) fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds import metrics
from llm_powertrace_ds.metrics import core
from llm_powertrace_ds.run import DeviceSeries, Run


def _run(*devices: tuple[np.ndarray, np.ndarray], requests: list[dict] | None = None,
         workload: str = "finetune") -> Run:
    devs = [DeviceSeries(g, np.asarray(t, dtype=np.int64), {"power_w": np.asarray(p, float)},
                         power_limit_w=400.0, default_power_limit_w=400.0)
            for g, (t, p) in enumerate(devices)]
    return Run({"run_id": "pins", "workload": workload, "platform": "l40s",
                "sample_period_ms": 100.0}, devs, [], requests)


# --------------------------------------------------------------------------------------------
# metric_formulas: the docstring bullet parser behind the card's formula table
# --------------------------------------------------------------------------------------------

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


def test_ramp_names_are_four_per_window_and_unit_in_order():
    names = core._ramp_names()
    assert names[:4] == ["ramp_up_max_100ms_w_per_s", "ramp_down_max_100ms_w_per_s",
                         "ramp_abs_p95_100ms_w_per_s", "ramp_abs_p99_100ms_w_per_s"]
    assert names[-4:] == ["ramp_up_max_10s_pct_per_s", "ramp_down_max_10s_pct_per_s",
                          "ramp_abs_p95_10s_pct_per_s", "ramp_abs_p99_10s_pct_per_s"]
    assert len(names) == 2 * 4 * len(core.RAMP_WINDOWS) == len(set(names))
    assert names == list(metrics.RAMP_NAMES)


# --------------------------------------------------------------------------------------------
# node_total
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# steady-window tokens: the first token at first_token_ms, the other k − 1 spread evenly over
# [first_token_ms, finish_ms]; a request of zero span counts its k − 1 when it finishes inside
# --------------------------------------------------------------------------------------------

def _req(first: float, finish: float, k: int) -> dict:
    return {"first_token_ms": first, "finish_ms": finish, "output_tokens": k}


@pytest.mark.parametrize(("request_", "tokens"), [
    (_req(1000, 3000, 11), 1 + 10 * 0.5),     # first token at t0 counts; half the rest inside
    (_req(2000, 2000, 3), 1 + 2),             # first token and zero-span finish at t1 count
    (_req(1000, 1000, 4), 1 + 3),             # zero span at t0
    (_req(0, 500, 5), 0.0),                   # wholly before: no negative share
    (_req(500, 1000, 2), 0.0),                # finishes at t0: nothing inside
    (_req(1999.75, 2000.25, 3), 1 + 2 * 0.5),  # a sub-millisecond span is still spread
    (_req(1500, 2500, 1), 1.0),               # one token: only the first
    (_req(2500, 3000, 4), 0.0),               # wholly after
    (_req(500, 500, 3), 0.0),                 # zero span, before
    (_req(2500, 2500, 3), 0.0),               # zero span, after
])
def test_steady_tokens_per_request(request_, tokens):
    run = _run(requests=[request_], workload="inference")
    assert core._steady_tokens(run, 1000, 2000) == pytest.approx(tokens, abs=1e-12)


def test_steady_tokens_sums_requests_and_skips_incomplete_rows():
    rows = [_req(1000, 3000, 11), _req(2000, 2000, 3),
            {"first_token_ms": None, "finish_ms": 1500, "output_tokens": 9}]
    run = _run(requests=rows, workload="inference")
    assert core._steady_tokens(run, 1000, 2000) == pytest.approx(6 + 3)
    assert core._steady_tokens(_run(requests=rows[2:], workload="inference"), 0, 1) is None
    assert core._steady_tokens(_run(requests=[], workload="inference"), 0, 1) is None


# --------------------------------------------------------------------------------------------
# the one energy rule: trapezoid on the device's own timestamps, the counter's advance, and
# their signed mismatch
# --------------------------------------------------------------------------------------------

def test_device_energy_is_the_trapezoid_in_joules_bridging_missing_readings():
    dev = DeviceSeries(0, np.array([0, 1000, 3000]), {"power_w": np.array([100.0, 200.0, 200.0])})
    assert metrics.device_energy_j(dev) == pytest.approx(150.0 + 400.0)  # W · s
    bridged = DeviceSeries(0, np.array([0, 1000, 2000]),
                           {"power_w": np.array([100.0, np.nan, 300.0])})
    assert metrics.device_energy_j(bridged) == pytest.approx(400.0)
    two = DeviceSeries(0, np.array([0, 500]), {"power_w": np.array([80.0, 120.0])})
    assert metrics.device_energy_j(two) == pytest.approx(50.0)  # two readings are enough
    one = DeviceSeries(0, np.array([0, 500]), {"power_w": np.array([80.0, np.nan])})
    assert metrics.device_energy_j(one) is None


def test_mismatch_pct_is_signed_and_needs_an_advancing_counter():
    assert metrics.mismatch_pct(110.0, 100.0) == pytest.approx(10.0)
    assert metrics.mismatch_pct(90.0, 100.0) == pytest.approx(-10.0)
    assert metrics.mismatch_pct(1.0, 0.5) == pytest.approx(100.0)  # a small counter still counts
    assert metrics.mismatch_pct(1.0, 0.0) is None
    assert metrics.mismatch_pct(None, 100.0) is None
    assert metrics.mismatch_pct(1.0, None) is None


def test_device_mismatch_pct_compares_the_integral_with_the_counter():
    t = np.array([0, 1000, 2000])
    power = np.array([100.0, 100.0, 100.0])  # 200 J by the trapezoid
    dev = DeviceSeries(0, t, {"power_w": power, "energy_mj": np.array([0.0, 80_000, 160_000])})
    assert metrics.device_mismatch_pct(dev) == pytest.approx(25.0)  # 200 J against 160 J
    reset = DeviceSeries(0, t, {"power_w": power,
                                "energy_mj": np.array([50_000.0, 250_000, 10_000])})
    # a counter reset loses its interval: the advance is 200 J, so no mismatch
    assert metrics.device_mismatch_pct(reset) == pytest.approx(0.0)
    assert metrics.device_mismatch_pct(DeviceSeries(0, t, {"power_w": power})) is None
    stuck = DeviceSeries(0, t, {"power_w": power, "energy_mj": np.array([5.0, 5.0, 5.0])})
    assert metrics.device_mismatch_pct(stuck) is None  # the counter did not advance
    no_power = DeviceSeries(0, t, {"power_w": np.full(3, np.nan),
                                   "energy_mj": np.array([0.0, 80_000, 160_000])})
    assert metrics.device_mismatch_pct(no_power) is None


# --------------------------------------------------------------------------------------------
# windows inside gap-free segments, and ratios with a zero denominator
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# the dominant spectral peak: a local maximum in [max(0.05 Hz, 5 cycles), 5 Hz] whose ratio to
# the mean-scaled running median reaches max(4, χ²_ν(1 − 0.01/m)/ν), ν = windows + 1
# --------------------------------------------------------------------------------------------

def _threshold_height(windows: int, m: int) -> float:
    """The smallest peak over a flat unit background that passes, from scipy.stats."""
    from scipy.stats import chi2

    dof = windows + 1.0
    threshold = max(chi2.ppf(1.0 - 0.01 / m, dof) / dof, 4.0)
    return threshold / (1.0 - 2.0 / (9.0 * dof)) ** 3


@pytest.mark.parametrize("windows", [3, 400])  # the χ² term rules; the floor of 4 rules
def test_dominant_peak_threshold_is_exact(windows):
    from llm_powertrace_ds.metrics import spectral

    freqs = np.arange(0, 601) * 0.01  # 0-6 Hz; band 0.05-5 Hz = bins 5..500
    m = 496
    h = _threshold_height(windows, m)
    for scale in (1.0, 1e-6):  # a background far below 1 W²/Hz is still a background
        psd = np.full(len(freqs), scale)
        psd[200] = scale * h * 1.001
        assert spectral._dominant_peak(freqs, psd, windows) == (200, "")
        psd[200] = scale * h * 0.999
        peak, reason = spectral._dominant_peak(freqs, psd, windows)
        assert peak is None
        shown = max(h * (1.0 - 2.0 / (9.0 * (windows + 1.0))) ** 3, 4.0)
        assert reason == (f"no spectral peak in 0.05-5 Hz stands {shown:.1f}x above its local "
                          "background (trend or broadband fluctuation only)")


def test_dominant_peak_band_edges_and_cycles():
    from llm_powertrace_ds.metrics import spectral

    freqs = np.arange(0, 601) * 0.01
    for j in (5, 500):  # 0.05 Hz and 5 Hz are inside the band
        psd = np.ones(len(freqs))
        psd[j] = 1000.0
        assert spectral._dominant_peak(freqs, psd, 50)[0] == j
    psd = np.ones(len(freqs))
    psd[550] = 1000.0  # 5.5 Hz: outside, even as the largest bin
    psd[300] = 100.0
    assert spectral._dominant_peak(freqs, psd, 50)[0] == 300
    psd = np.ones(len(freqs))
    psd[599] = 1000.0  # the bin before the last: still a local maximum candidate
    wide = np.arange(0, 601) * 0.00834  # 0-5.004 Hz: the band reaches the last bins
    assert spectral._dominant_peak(wide, psd, 50)[0] == 599
    coarse = np.arange(0, 301) * 0.02  # 5 cycles need 0.1 Hz here
    psd = np.ones(len(coarse))
    psd[4] = 1000.0  # 0.08 Hz: fewer than 5 cycles per window
    assert spectral._dominant_peak(coarse, psd, 50)[0] is None
    psd[4] = 1.0
    psd[5] = 1000.0  # 0.10 Hz: 5 cycles; a plateau's first bin is the peak
    psd[6] = 1000.0
    assert spectral._dominant_peak(coarse, psd, 50)[0] == 5
    psd = np.ones(len(freqs))
    psd[100], psd[300] = 200.0, 900.0  # two qualifying peaks: the larger one
    assert spectral._dominant_peak(freqs, psd, 50)[0] == 300
    psd = np.ones(len(freqs))
    psd[500], psd[501] = 1000.0, 2000.0  # rising out of the band at 5 Hz: not a maximum
    assert spectral._dominant_peak(freqs, psd, 50)[0] is None


def test_dominant_peak_needs_three_bins_and_a_true_local_maximum():
    from llm_powertrace_ds.metrics import spectral

    freqs = np.arange(0, 10) * 0.7  # band bins 5, 6, 7 (3.5, 4.2, 4.9 Hz): just enough
    psd = np.ones(10)
    psd[6] = 100.0
    assert spectral._dominant_peak(freqs, psd, 50)[0] == 6
    short = np.arange(0, 10) * 0.8  # band bins 5, 6 only (4.0, 4.8 Hz)
    peak, reason = spectral._dominant_peak(short, psd, 50)
    assert peak is None
    assert reason == "the analysed window is too short for 5 cycles above 0.05 Hz"
    freqs = np.arange(0, 601) * 0.01
    trend = np.ones(len(freqs))
    trend[3], trend[4], trend[5] = 1.0, 1e6, 1e3  # a trend's tail entering the band falling
    assert spectral._dominant_peak(freqs, trend, 50)[0] is None
    rising = np.ones(len(freqs))
    rising[495:] = np.geomspace(10.0, 1e6, 106)  # rising through the top edge, no maximum
    assert spectral._dominant_peak(freqs, rising, 50)[0] is None


# --------------------------------------------------------------------------------------------
# the seed authors' ramp r_δ(t) = (P(t) − P(t − δ)) / δ, on samples and on the 0.1 s tick grid
# --------------------------------------------------------------------------------------------

def test_seed_ramps_divide_by_delta_and_start_one_delta_in():
    from llm_powertrace_ds.metrics import ramps

    t_s = np.arange(0, 20.0, 0.5)
    r = ramps.seed_ramps(t_s, 10.0 * t_s, 5.0)  # P rises 10 W/s
    assert len(r) == len(t_s) - 10 and np.allclose(r, 10.0)
    assert ramps.seed_ramps(np.array([0.0, 0.5]), np.array([1.0, 2.0]), 1.0).size == 0


def test_tick_ramps_lag_is_delta_over_the_grid_step():
    from llm_powertrace_ds.metrics import ramps

    p = np.arange(1000.0) * 2.0  # +2 W per 0.1 s tick = 20 W/s
    for delta, k in ((0.1, 1), (1.0, 10), (60.0, 600)):
        r = ramps._tick_ramps(p, delta)
        assert len(r) == len(p) - k and np.allclose(r, 20.0), delta
    assert ramps._tick_ramps(p, 0.01).size == 0  # shorter than one tick: no lag
    assert ramps._tick_ramps(p[:10], 1.0).size == 0  # the run is shorter than δ


# --------------------------------------------------------------------------------------------
# states: idle and near-limit shares, steps, checkpoint dips (C = 400 W: one device, 400 W limit)
# --------------------------------------------------------------------------------------------

def _grid_run(p: np.ndarray, events: list | None = None) -> Run:
    run = _run((np.arange(len(p)) * 100, np.asarray(p, float)))
    run.events = list(events or [])
    return run


def test_idle_below_and_near_limit_at_or_above_their_thresholds():
    # 0.2 · C = 80 W (idle strictly below), 0.9 · C = 360 W (near the limit from 360 W on)
    p = np.r_[np.full(50, 79.9), np.full(50, 80.0), np.full(50, 360.0), np.full(50, 359.9)]
    m = metrics.compute_run_metrics(_grid_run(p))
    assert m["idle_fraction"] == pytest.approx(0.25)
    assert m["near_limit_fraction"] == pytest.approx(0.25)


def test_step_count_needs_more_than_a_tenth_of_the_limit_within_one_second():
    # ±40 W (exactly 0.1 · C) over 1 s is not a step; +100 W ramped over 1 s is one
    edge = np.r_[np.full(50, 100.0), np.full(50, 140.0), np.full(50, 100.0)]
    assert metrics.compute_run_metrics(_grid_run(edge))["step_count"] == 0
    ramp = np.r_[np.full(50, 100.0), np.linspace(110.0, 200.0, 10), np.full(50, 200.0),
                 np.full(50, 100.0), np.full(50, 200.0)]
    assert metrics.compute_run_metrics(_grid_run(ramp))["step_count"] == 3
    short = metrics.compute_run_metrics(_grid_run(np.r_[np.full(5, 100.0), np.full(5, 300.0)]))
    assert short["step_count"] == 0  # under 1 s of readings: no window, no step
    coarse = metrics.compute_run_metrics(_grid_run(ramp), grid_ms=1000)
    assert coarse["step_count"] == 3  # a 1 s grid compares neighbours
    spike = np.r_[np.full(50, 100.0), np.full(10, 300.0), np.full(50, 100.0)]  # 1 s at 300 W
    assert metrics.compute_run_metrics(_grid_run(spike), grid_ms=1000)["step_count"] == 2
    stairs = 100.0 + 30.0 * (np.arange(150) // 10)  # +30 W a second: 60 W over 2 s, no step
    assert metrics.compute_run_metrics(_grid_run(stairs), grid_ms=1000)["step_count"] == 0


def _ckpt(b: int, e: int) -> list:
    from llm_powertrace_ds.run import Event

    return [Event(b, "checkpoint_begin"), Event(e, "checkpoint_end")]


def test_checkpoint_dip_depth_and_half_depth_width():
    # 10 s at 200 W, then [10 s, 12 s]: 0.5 s at 150 W (exactly half depth: not below it),
    # 0.5 s at 120 W, and the minimum 100 W at the checkpoint's end itself
    p = np.r_[np.full(100, 200.0), np.full(5, 150.0), np.full(5, 120.0), np.full(10, 160.0),
              [100.0], np.full(30, 200.0)]
    m = metrics.compute_run_metrics(_grid_run(p, _ckpt(10_000, 12_000)))
    assert m["checkpoint_dip_pct"] == pytest.approx(50.0)
    assert m["checkpoint_dip_s"] == pytest.approx(0.6)  # 5 points at 120 W and the 100 W one


def test_checkpoint_dip_of_under_a_watt_and_a_rise():
    p = np.r_[np.full(100, 200.0), np.full(10, 199.5), np.full(30, 200.0)]
    m = metrics.compute_run_metrics(_grid_run(p, _ckpt(10_000, 10_900)))
    assert m["checkpoint_dip_pct"] == pytest.approx(0.25)
    assert m["checkpoint_dip_s"] == pytest.approx(1.0)
    rise = np.r_[np.full(100, 200.0), np.full(10, 250.0), np.full(30, 200.0)]
    m = metrics.compute_run_metrics(_grid_run(rise, _ckpt(10_000, 10_900)))
    assert m["checkpoint_dip_pct"] == pytest.approx(-25.0)
    assert m["checkpoint_dip_s"] == 0.0


def test_checkpoints_without_a_baseline_are_skipped_not_fatal():
    p = np.r_[np.full(100, 0.5), np.full(10, 0.4), np.full(100, 200.0), np.full(10, 100.0),
              np.full(30, 200.0)]
    # the first checkpoint starts at 0 (no baseline before it), the second has a baseline of
    # 0.5 W (small, still a baseline), the third a 200 W one
    events = _ckpt(0, 500) + _ckpt(10_000, 10_900) + _ckpt(21_000, 21_900)
    m = metrics.compute_run_metrics(_grid_run(p, events))
    assert m["checkpoint_dip_pct"] == pytest.approx((20.0 + 50.0) / 2)
    zero = np.r_[np.full(100, 0.0), np.full(10, 0.0), np.full(100, 200.0), np.full(10, 100.0),
                 np.full(30, 200.0)]
    m = metrics.compute_run_metrics(_grid_run(zero, _ckpt(10_000, 10_900) + _ckpt(21_000, 21_900)))
    assert m["checkpoint_dip_pct"] == pytest.approx(50.0)  # a 0 W baseline is no baseline
    m = metrics.compute_run_metrics(_grid_run(zero[:110], _ckpt(0, 500)))
    assert m["checkpoint_dip_pct"] is None and m["checkpoint_dip_s"] is None
    assert ("checkpoint_dip_pct: no checkpoint with gap-free power before and during it"
            in m["metric_notes"])
    assert "checkpoint_dip_s: no checkpoint with gap-free power before and during it" in (
        m["metric_notes"])


# --------------------------------------------------------------------------------------------
# gaps merged across devices; the observed sampling interval
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# energy group: nulls carry their reasons (published in metric_notes), and the edge values
# --------------------------------------------------------------------------------------------

def _notes(m: dict) -> dict[str, str]:
    return dict(n.split(": ", 1) for n in m["metric_notes"])


def test_energy_nulls_name_their_reasons():
    from llm_powertrace_ds.run import Event

    t = np.arange(0, 5001, 100)
    one = DeviceSeries(1, t, {"power_w": np.r_[100.0, np.full(len(t) - 1, np.nan)]})
    ok = DeviceSeries(0, t, {"power_w": np.full(len(t), 100.0),
                             "energy_mj": np.arange(len(t)) * 10_000.0})
    run = Run({"run_id": "pins", "workload": "finetune", "platform": "l40s", "tokens": 100},
              [ok, one], [Event(0, "idle_begin"), Event(1000, "idle_end"),
                          Event(1000, "steady_begin"), Event(2000, "steady_end")])
    notes = _notes(metrics.compute_run_metrics(run))
    assert notes["energy_j"] == "gpu 1 has fewer than 2 power readings"
    assert notes["energy_counter_j"] == "no energy counter"
    assert notes["energy_mismatch_pct"] == "no energy counter"
    assert notes["energy_per_token_j"] == "energy_j is null"
    assert notes["idle_power_w"] == "a device has fewer than 2 power readings"
    assert notes["steady_energy_j"] == "a device has fewer than 2 power readings"
    assert notes["steady_energy_per_token_j"] == "a device has fewer than 2 power readings"
    both = Run(dict(run.meta), [DeviceSeries(0, t, {"power_w": one.power_w}), one], [])
    assert _notes(metrics.compute_run_metrics(both))["energy_j"] == (
        "gpu 0, 1 has fewer than 2 power readings")
    counted = Run(dict(run.meta), [ok, DeviceSeries(1, t, {
        "power_w": one.power_w, "energy_mj": np.arange(len(t)) * 10_000.0})], [])
    assert _notes(metrics.compute_run_metrics(counted))["energy_mismatch_pct"] == (
        "energy_j is null")


def test_energy_counter_and_token_edges():
    t = np.arange(0, 2001, 100)
    p = np.full(len(t), 100.0)  # 200 J
    stuck = Run({"run_id": "pins", "workload": "finetune", "platform": "l40s", "tokens": 0},
                [DeviceSeries(0, t, {"power_w": p, "energy_mj": np.full(len(t), 7.0)})], [])
    m = metrics.compute_run_metrics(stuck)
    assert m["energy_counter_j"] == 0.0 and m["energy_mismatch_pct"] is None
    assert _notes(m)["energy_mismatch_pct"] == "energy counter did not advance"
    assert m["energy_per_token_j"] is None and _notes(m)["energy_per_token_j"] == "no token count"
    small = Run({"run_id": "pins", "workload": "finetune", "platform": "l40s", "tokens": 0.5},
                [DeviceSeries(0, t, {"power_w": p,
                                     "energy_mj": np.linspace(0.0, 500.0, len(t))})], [])
    m = metrics.compute_run_metrics(small)
    assert m["energy_counter_j"] == pytest.approx(0.5)
    assert m["energy_mismatch_pct"] == pytest.approx(100.0 * (200.0 - 0.5) / 0.5)
    assert m["energy_per_token_j"] == pytest.approx(400.0)


def test_counter_energy_sorts_drops_missing_and_skips_resets():
    t = np.array([0, 1000, 2000, 3000])
    assert metrics.counter_energy_j(t[:2], np.array([1000.0, 3000.0])) == pytest.approx(2.0)
    assert metrics.counter_energy_j(t, np.array([1000.0, np.nan, 3000.0, 4000.0])) == (
        pytest.approx(3.0))
    assert metrics.counter_energy_j(t, np.array([1000.0, 3000.0, 4000.0, np.nan])) == (
        pytest.approx(3.0))
    # out of time order: sorted first (the later times are all after the first one); in time
    # order the counter reads 0, 10, 5 (a reset), 15 mJ: advances of 10 + 10 mJ
    assert metrics.counter_energy_j(np.array([0, 2000, 1000, 3000]),
                                    np.array([0.0, 5.0, 10.0, 15.0])) == pytest.approx(0.020)
    # sub-millijoule steps are advances, not resets
    assert metrics.counter_energy_j(t[:3], np.array([0.0, 0.5, 1.0])) == pytest.approx(0.001)
    assert metrics.counter_energy_j(t[:2], np.array([np.nan, 5.0])) is None
    assert metrics.counter_energy_j(t, None) is None
    assert metrics.counter_energy_j(t, np.zeros(3)) is None


# --------------------------------------------------------------------------------------------
# the capacity C behind every %-of-limit metric, event windows, token counts
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Welch: how many windows, when there is a spectrum, and the one-sided scaling
# --------------------------------------------------------------------------------------------

def _aligned(valid: np.ndarray, total: np.ndarray | None = None) -> core.Aligned:
    n = len(valid)
    total = np.ones(n) if total is None else total
    return core.Aligned(np.arange(n, dtype=np.int64) * 100, [total], np.where(valid, total, np.nan),
                        valid, 0.1)


def test_welch_windows_counts_half_overlapping_windows_per_segment():
    from llm_powertrace_ds.metrics import spectral

    assert spectral.welch_windows(_aligned(np.ones(3000, bool))) == 4  # (3000 − 1024) // 512 + 1
    split = np.ones(3000, bool)
    split[1500:1600] = False  # segments of 1500 and 1400 points
    assert spectral.welch_windows(_aligned(split)) == 2
    short = np.zeros(900, bool)
    short[:500] = True  # 500 and 100 points: one window of the longest; the other too short
    short[800:] = True
    assert spectral.welch_windows(_aligned(short)) == 1
    exact = np.zeros(1000, bool)
    exact[:400] = exact[500:900] = True  # two segments as long as the window
    assert spectral.welch_windows(_aligned(exact)) == 2
    assert spectral.welch_windows(_aligned(np.zeros(50, bool))) == 0
    assert spectral.welch_windows(_aligned(np.ones(10, bool)), segment_s=0.3) == 8  # hop 1
    assert spectral.welch_windows(_aligned(np.ones(20, bool)), segment_s=0.5) == 8  # hop 2
    assert spectral.welch_windows(_aligned(np.ones(21, bool)), segment_s=0.4) == 9  # hop 2


def test_welch_psd_needs_twenty_seconds_and_scales_like_scipy_for_odd_windows():
    from scipy.signal import welch

    from llm_powertrace_ds.metrics import spectral

    rng = np.random.default_rng(5)
    assert spectral.welch_psd(_aligned(np.ones(199, bool), rng.normal(size=199))) is None
    assert spectral.welch_psd(_aligned(np.ones(200, bool), rng.normal(size=200))) is not None
    x = 300.0 + 20.0 * np.sin(np.arange(201) * 0.9) + rng.normal(size=201)
    freqs, psd = spectral.welch_psd(_aligned(np.ones(201, bool), x))
    f_ref, p_ref = welch(x, fs=10.0, window="hann", nperseg=201, detrend="linear")
    assert np.allclose(freqs, f_ref)
    assert np.allclose(psd, p_ref, rtol=1e-9, atol=1e-12 * p_ref.max())
    gapped = np.ones(1000, bool)
    gapped[400:500] = False  # 400 and 500 points: the window is the longest segment
    assert spectral.welch_psd(_aligned(gapped, x.repeat(5)[:1000]))[1].size == 251
    assert np.isfinite(spectral.welch_psd(_aligned(gapped, x.repeat(5)[:1000]))[1]).all()


def test_duration_spans_the_earliest_first_to_the_latest_last_reading():
    t0 = np.arange(5000, 10_001, 100)
    t1 = np.arange(6000, 12_001, 100)
    m = metrics.compute_run_metrics(_run((t0, np.full(len(t0), 100.0)),
                                         (t1, np.full(len(t1), 100.0))))
    assert m["duration_s"] == pytest.approx(7.0)
    assert m["mean_power_w"] == pytest.approx((100.0 * 5 + 100.0 * 6) / 7.0)


# --------------------------------------------------------------------------------------------
# every null carries its reason into metric_notes (published with the run): pinned per case
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# spectrum metrics: bands by their edges, the flat-spectrum floor, step frequency, swings
# --------------------------------------------------------------------------------------------

def test_band_rms_and_fractions_follow_the_band_edges():
    from llm_powertrace_ds.metrics import spectral

    # 20 s of noise: one 200-point window, bins every 0.05 Hz, so 0.05, 0.1, 1, 2.5 and 5 Hz
    # are bins themselves; amplitudes small enough that band powers are below 1 W²
    rng = np.random.default_rng(11)
    t = np.arange(0, 20_000, 100)
    p = 300.0 + rng.normal(0, 0.05, len(t))
    run = _run((t, p))
    m = metrics.compute_run_metrics(run)
    freqs, psd = spectral.welch_psd(metrics.node_total(run))
    df = freqs[1] - freqs[0]
    f = np.round(freqs, 9)

    def power(sel: np.ndarray) -> float:
        return float(psd[sel].sum() * df)

    total = power((f >= 0.05) & (f <= 5.0))
    bands = {"low": (f >= 0.1) & (f < 1.0), "mid": (f >= 1.0) & (f < 2.5),
             "high": (f >= 2.5) & (f <= 5.0)}
    assert total < 1.0
    for key, sel in bands.items():
        assert m[f"band_rms_{key}_w"] == pytest.approx(np.sqrt(power(sel)), rel=1e-12), key
        assert m[f"band_fraction_{key}"] == pytest.approx(power(sel) / total, rel=1e-12), key


@pytest.mark.parametrize(("level_w", "ripple_w", "flat"), [
    (0.5, 1.5e-9, False),   # band power ≈ 1.1e-18 W² > 1e-18 · 1²
    (300.0, 1e-9, True),    # 5e-19 W² ≤ 1e-18 · 300²
    (300.0, 1e-7, True),    # 5e-15 W² ≤ 9e-14 W²
    (300.0, 1e-6, False),   # 5e-13 W² > 9e-14 W²
])
def test_a_spectrum_is_flat_below_1e18_of_the_squared_mean_level(level_w, ripple_w, flat):
    t = np.arange(0, 60_000, 100)
    p = level_w + ripple_w * np.sin(2 * np.pi * 1.0 * t / 1000.0)  # 1 Hz
    m = metrics.compute_run_metrics(_run((t, p)))
    if flat:
        assert m["dominant_freq_hz"] is None
        assert _notes(m)["dominant_freq_hz"] == "flat spectrum (no oscillation in 0.05-5 Hz)"
    else:
        assert m["dominant_freq_hz"] == pytest.approx(1.0, abs=0.01)


def test_dominant_amplitude_is_the_sinusoids_amplitude():
    from llm_powertrace_ds.metrics import spectral

    t = np.arange(0, 300_000, 100)
    p = 400.0 + 30.0 * np.sin(2 * np.pi * 0.503 * t / 1000.0)  # between two bins
    run = _run((t, p))
    m = metrics.compute_run_metrics(run)
    assert m["dominant_freq_hz"] == pytest.approx(0.503, abs=0.01)
    assert m["dominant_amplitude_w"] == pytest.approx(30.0, rel=0.02)
    freqs, psd = spectral.welch_psd(metrics.node_total(run))
    k = int(np.flatnonzero(freqs == m["dominant_freq_hz"])[0])
    df = freqs[1] - freqs[0]
    lobe = psd[k - 2:k + 3].sum() * df  # |f − f*| ≤ 2 Δf
    assert m["dominant_amplitude_w"] == pytest.approx(np.sqrt(2.0 * lobe), rel=1e-12)


def test_step_frequency_from_step_begin_else_step_end_events():
    from llm_powertrace_ds.run import Event

    run = _run((np.arange(0, 5001, 100), np.full(51, 100.0)))
    run.events = [Event(1000, "step_end"), Event(1500, "step_end")]
    assert metrics.compute_run_metrics(run)["step_freq_hz"] == pytest.approx(2.0)
    run.events += [Event(1000, "step_begin"), Event(3000, "step_begin"), Event(4000, "step_begin")]
    assert metrics.compute_run_metrics(run)["step_freq_hz"] == pytest.approx(1 / 1.5)


def test_projected_swing_uses_each_devices_p5_p95_on_gap_free_points():
    t = _without(np.arange(0, 100_000, 100), 40_000, 60_000)
    p = t / 100.0  # 0 ... 999 W, the same on both devices: ρ̄ = 1
    m = metrics.compute_run_metrics(_run((t, p), (t, p)))
    swing = np.percentile(p, 95) - np.percentile(p, 5)  # every reading is a gap-free grid point
    assert m["synchrony_index"] == pytest.approx(1.0)
    assert m["projected_swing_1000_w"] == pytest.approx(1000.0 * swing)


def test_seed_ramps_over_5_and_10_seconds_on_the_tick_total():
    # one device on the 0.1 s grid: Pₖ is its power; r_δ = (P(t) − P(t − δ)) / δ
    rng = np.random.default_rng(17)
    t = np.arange(0, 300_000, 100)
    p = 300.0 + 80.0 * np.sin(2 * np.pi * t / 37_000.0) + np.cumsum(rng.normal(0, 2.0, len(t)))
    m = metrics.compute_run_metrics(_run((t, p)))
    for tag, delta in (("5s", 5.0), ("10s", 10.0)):
        k = int(delta * 10)
        r = (p[k:] - p[:-k]) / delta
        up, down = r[r > 0], -r[r < 0]
        assert m[f"ramp_up_p95_{tag}_w_per_s"] == pytest.approx(np.percentile(up, 95)), tag
        assert m[f"ramp_up_p99_{tag}_w_per_s"] == pytest.approx(np.percentile(up, 99)), tag
        assert m[f"ramp_down_p99_{tag}_w_per_s"] == pytest.approx(np.percentile(down, 99)), tag
    r1 = (p[10:] - p[:-10]) / 1.0
    assert m["ramp_down_p99_1s_w_per_s"] == pytest.approx(np.percentile(-r1[r1 < 0], 99))


def test_seed_ramps_with_a_device_of_two_readings():
    t = np.arange(0, 20_001, 100)
    m = metrics.compute_run_metrics(_run((t, np.linspace(100.0, 300.0, len(t))),
                                         (np.array([0, 20_000]), np.array([50.0, 50.0]))))
    assert m["ramp_up_p95_1s_w_per_s"] == pytest.approx(10.0)  # +200 W over 20 s
    assert m["p50_power_w"] == pytest.approx(250.0)  # two readings make a node total


def test_a_one_second_grid_has_no_100ms_ramps_and_one_point_1s_windows():
    t = np.arange(0, 120_001, 100)
    p = np.full(len(t), 100.0)
    p[(t >= 50_000) & (t < 51_000)] = 500.0  # one second at 500 W
    m = metrics.compute_run_metrics(_run((t, p)), grid_ms=1000)
    assert m["peak_power_1s_w"] == pytest.approx(500.0)
    notes = _notes(m)
    for name in _ramp_block("100ms"):
        assert m[name] is None and notes[name] == "grid step 1 s is longer than δ", name
    assert m["ramp_up_max_1s_w_per_s"] == pytest.approx(400.0)


def test_load_factor_of_a_zero_peak_names_its_reason():
    t = np.arange(0, 120_001, 100)
    m = metrics.compute_run_metrics(_run((t, np.zeros(len(t)))))
    assert _notes(m)["load_factor"] == "mean_power_w is null or peak is 0"


# --------------------------------------------------------------------------------------------
# across devices: synchrony as scipy computes it, coincidence with tiny and zero power
# --------------------------------------------------------------------------------------------

def _reference_synchrony(rows: list[np.ndarray], segments: list[tuple[int, int]]) -> float:
    """ρ̄ by scipy, from the docstring's definition.

    Each segment of ≥ 200 points is high-passed from its steady state; ρ̄ is the Pearson
    correlation of the concatenated outputs, averaged over device pairs.
    """
    from scipy.signal import butter, sosfilt, sosfilt_zi

    sos = butter(2, 0.05, "highpass", fs=10.0, output="sos")
    out = []
    for row in rows:
        parts = [sosfilt(sos, row[a:b], zi=sosfilt_zi(sos) * row[a])[0]
                 for a, b in segments if b - a >= 200]
        out.append(np.concatenate(parts))
    corr = np.corrcoef(np.vstack(out))
    return float(corr[np.triu_indices(len(rows), k=1)].mean())


def test_synchrony_index_is_the_mean_pairwise_correlation_of_high_passed_power():
    rng = np.random.default_rng(23)
    n = 3000  # 300 s on the grid
    t = np.arange(n) * 100
    common = 40.0 * np.sin(2 * np.pi * t / 4000.0)
    rows = [300.0 + common + rng.normal(0, 30.0, n), 280.0 + common + rng.normal(0, 10.0, n),
            250.0 - common + rng.normal(0, 20.0, n)]  # the third swings against the others
    m = metrics.compute_run_metrics(_run(*[(t, r) for r in rows]))
    expected = _reference_synchrony(rows, [(0, n)])
    assert -0.5 < expected < 0.5  # mixed signs: not a case clipping or |ρ| would hide
    assert m["synchrony_index"] == pytest.approx(expected, rel=1e-6)
    swings = [np.percentile(r, 95) - np.percentile(r, 5) for r in rows]
    assert m["projected_swing_1000_w"] == pytest.approx(
        np.mean(swings) * np.sqrt(1000 * (1 + 999 * max(expected, 0.0))), rel=1e-6)


def test_synchrony_skips_segments_shorter_than_20_seconds():
    rng = np.random.default_rng(29)
    t_all = np.arange(0, 600_000, 100)
    # holes at 250-260 s, 275-280 s and 300-310 s: segments of 250 s, 15 s (too short), exactly
    # 20 s (200 points: long enough) and 290 s
    t = _without(_without(_without(t_all, 250_000, 260_000), 275_000, 280_000), 299_900, 310_000)
    a = 300.0 + rng.normal(0, 20.0, len(t))
    b = 0.5 * a + rng.normal(0, 20.0, len(t))
    m = metrics.compute_run_metrics(_run((t, a), (t, b)))
    grid = np.arange(0, 600_000, 100)
    rows = [np.interp(grid, t, x) for x in (a, b)]
    segments = [(0, 2501), (2600, 2751), (2800, 3000), (3100, 6000)]
    assert m["synchrony_index"] == pytest.approx(_reference_synchrony(rows, segments), rel=1e-6)


def test_synchrony_needs_two_fluctuating_devices():
    t = np.arange(0, 60_000, 100)
    rng = np.random.default_rng(31)
    m = metrics.compute_run_metrics(_run((t, 300.0 + rng.normal(0, 5.0, len(t))),
                                         (t, np.full(len(t), 200.0))))
    assert m["synchrony_index"] is None
    assert _notes(m)["synchrony_index"] == "fewer than 2 devices with fluctuating power"
    assert _notes(m)["projected_swing_1000_w"] == "fewer than 2 devices with fluctuating power"


def test_coincidence_factor_with_tiny_and_zero_power():
    t = np.arange(0, 20_001, 100)
    tiny = metrics.compute_run_metrics(_run((t, np.full(len(t), 0.2)), (t, np.full(len(t), 0.2))))
    assert tiny["coincidence_factor"] == pytest.approx(1.0)
    assert tiny["diversity_factor"] == pytest.approx(1.0)
    zero = metrics.compute_run_metrics(_run((t, np.zeros(len(t))), (t, np.zeros(len(t)))))
    assert zero["coincidence_factor"] is None and zero["diversity_factor"] is None
    assert _notes(zero)["coincidence_factor"] == "peak power is not positive"
    assert _notes(zero)["diversity_factor"] == "peak power is not positive"


# --------------------------------------------------------------------------------------------
# a device's own readings: out-of-order and duplicate times, per-device energy, gap intervals
# --------------------------------------------------------------------------------------------

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


def test_per_device_energy_mean_and_peak():
    t = np.arange(1000, 4001, 100)  # 3 s from t = 1 s
    p = np.linspace(100.0, 400.0, len(t))
    m = metrics.compute_run_metrics(_run((t, p), (np.array([1000, 2000]), np.array([50.0, 50.0])),
                                         (np.array([1000, 4000]), np.array([np.nan, 70.0]))))
    assert m["gpu_energy_j"] == [pytest.approx(750.0), pytest.approx(50.0), None]
    assert m["gpu_mean_power_w"] == [pytest.approx(250.0), pytest.approx(50.0), None]
    assert m["gpu_peak_power_w"] == [pytest.approx(400.0), 50.0, 70.0]  # one reading: its own


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


# --------------------------------------------------------------------------------------------
# the seed authors' aggregates, built block by block: the same numbers for any block size
# --------------------------------------------------------------------------------------------

def _reference_seed(devices: list[tuple[np.ndarray, np.ndarray]], delta_s: float = 1.0):
    """Pᵤ and Pₖ from their definitions (each device's last reading carried forward)."""
    start = max(int(t[0]) for t, _ in devices)
    end = max(int(t[-1]) for t, _ in devices)
    union = np.unique(np.concatenate([t[t > start] for t, _ in devices] + [np.array([start])]))

    def total_at(x: np.ndarray) -> np.ndarray:
        return sum(p[np.searchsorted(t, x, side="right") - 1] for t, p in devices)

    pu = total_at(union)
    t_s = union / 1000.0
    first = int(np.searchsorted(t_s, t_s[0] + delta_s))
    r = (pu[first:] - np.interp(t_s[first:] - delta_s, t_s, pu)) / delta_s
    tick = total_at(np.arange(start, end + 1, 100))
    return r, (t_s[-1] - t_s[0]) / 60.0, tick


@pytest.mark.parametrize("block", [8, 50, 1 << 18])
def test_seed_ramps_are_the_same_for_any_union_block(monkeypatch, block):
    from llm_powertrace_ds.metrics import ramps

    monkeypatch.setattr(ramps, "_UNION_BLOCK", block)
    rng = np.random.default_rng(41)
    # both start at 0; no union point lies exactly 1 s after it; half of t1 equals t0; the
    # last reading is off the 0.1 s grid
    t0 = np.r_[0, np.arange(97, 59_900, 100), 59_999]
    t1 = np.r_[0, np.arange(97, 59_900, 100) + np.where(rng.random(599) < 0.5, 0, 5)]
    devices = [(t0, 300 + np.cumsum(rng.normal(0, 4, len(t0)))),
               (t1, 200 + np.cumsum(rng.normal(0, 4, len(t1))))]
    m = metrics.compute_run_metrics(_run(*devices))
    r, minutes, tick = _reference_seed(devices)
    up = r[r >= 0]
    assert m["ramp_down_p99_1s_w_per_s"] == pytest.approx(np.percentile(-r[r < 0], 99))
    assert m["ramp_event_frequency_1s"] == pytest.approx(
        np.count_nonzero(up >= np.percentile(up, 95)) / minutes)
    r1 = tick[10:] - tick[:-10]
    assert m["ramp_up_p95_1s_w_per_s"] == pytest.approx(np.percentile(r1[r1 > 0], 95))


@pytest.mark.parametrize(("delta_s", "block"), [(1.0, 1 << 18), (2.0, 40), (5.0, 40)])
def test_seed_union_ramps_for_other_deltas(monkeypatch, delta_s, block):
    from llm_powertrace_ds.metrics import ramps

    monkeypatch.setattr(ramps, "_UNION_BLOCK", block)
    rng = np.random.default_rng(43)
    t0 = np.arange(0, 30_001, 100)
    t1 = np.r_[53, np.arange(153, 30_051, 100) + rng.integers(1, 40, 299)]  # t0 + δ: no point
    devices = [(t0, 300 + np.cumsum(rng.normal(0, 4, len(t0)))),
               (t1, 200 + np.cumsum(rng.normal(0, 4, len(t1))))]
    devs = [core._prepare_device(_run(), DeviceSeries(i, t, {"power_w": p}), i, [])
            for i, (t, p) in enumerate(devices)]
    _, (down, upward, minutes) = ramps._seed_aggregates(devs, delta_s)
    r, ref_minutes, _ = _reference_seed(devices, delta_s)
    assert np.sort(down) == pytest.approx(np.sort(-r[r < 0]))
    assert np.sort(upward) == pytest.approx(np.sort(r[r >= 0]))
    assert minutes == pytest.approx(ref_minutes)


def test_a_run_without_devices_says_so_for_every_node_metric():
    m = metrics.compute_run_metrics(_run())
    reasons = _by_reason(m)
    assert "p5_power_w" in reasons["the run has no devices"]
    assert "ramp_up_p95_1s_w_per_s" in reasons["the run has no devices"]
    assert "energy_j" in reasons["the run has no devices"]


def test_seed_ramp_notes_sit_between_the_ramp_and_the_oscillation_notes():
    # the seed group may run in a thread; its notes are put back in the groups' order
    t = np.arange(0, 3001, 100)
    m = metrics.compute_run_metrics(_run((t, np.full(len(t), 100.0))))
    names = [n.split(": ", 1)[0] for n in m["metric_notes"]]
    seed = [names.index(n) for n in ("ramp_up_p95_1s_w_per_s", "ramp_down_p99_10s_w_per_s")]
    assert names.index("ramp_abs_p99_10s_pct_per_s") < min(seed)
    assert max(seed) < names.index("dynamic_range_10s_w")


def test_steady_energy_per_token_needs_tokens_in_the_window():
    from llm_powertrace_ds.run import Event

    t = np.arange(0, 10_001, 100)
    events = [Event(2000, "steady_begin"), Event(4000, "steady_end")]

    def run_with(requests: list[dict]) -> dict:
        run = _run((t, np.full(len(t), 100.0)), requests=requests, workload="inference")
        run.events = list(events)
        return metrics.compute_run_metrics(run)

    half = run_with([_req(1000, 5000, 2)])  # no first token inside; half of the second one
    assert half["steady_energy_j"] == pytest.approx(200.0)
    assert half["steady_energy_per_token_j"] == pytest.approx(400.0)
    none = run_with([_req(5000, 6000, 3)])
    assert none["steady_energy_per_token_j"] is None
    assert _notes(none)["steady_energy_per_token_j"] == (
        "no request log with tokens in the steady window")


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


def test_broadband_noise_has_no_dominant_peak_and_says_why():
    rng = np.random.default_rng(53)
    t = np.arange(0, 300_000, 100)
    m = metrics.compute_run_metrics(_run((t, 300.0 + rng.normal(0, 10.0, len(t)))))
    notes = _notes(m)
    assert m["dominant_freq_hz"] is None and m["dominant_amplitude_w"] is None
    assert notes["dominant_freq_hz"].startswith("no spectral peak in 0.05-5 Hz stands ")
    assert notes["dominant_amplitude_w"] == notes["dominant_freq_hz"]


@pytest.mark.parametrize(("level_w", "sigma_w", "live"), [
    (300.0, 1e-4, False),  # variance 1e-8 W² ≤ 1e-12 · 300²
    (300.0, 4e-4, True),   # 1.6e-7 W² > 9e-8 W²
    (1.0, 1.4e-6, True),   # 2e-12 W² > 1e-12 · max(1, 1 W)²
])
def test_a_device_fluctuates_above_1e12_of_its_squared_mean_level(level_w, sigma_w, live):
    rng = np.random.default_rng(59)
    t = np.arange(0, 300_000, 100)
    a = level_w + rng.normal(0, level_w / 300.0, len(t))
    b = level_w + rng.normal(0, sigma_w, len(t))
    m = metrics.compute_run_metrics(_run((t, a), (t, b)))
    if live:
        assert m["synchrony_index"] is not None
    else:
        assert _notes(m)["synchrony_index"] == "fewer than 2 devices with fluctuating power"


def test_one_complete_60s_window_gives_the_60s_peak():
    t = np.arange(0, 61_001, 100)  # 61 s: one complete 60 s window from the start
    p = np.where(t < 30_000, 100.0, 300.0)
    m = metrics.compute_run_metrics(_run((t, p)))
    assert m["peak_power_60s_w"] == pytest.approx(200.0)  # 300 points at 100 W, 300 at 300 W


def test_synchrony_reasons_and_a_flat_device_among_three():
    t = np.arange(0, 10_001, 100)
    rng = np.random.default_rng(61)
    short = metrics.compute_run_metrics(_run((t, 300 + rng.normal(0, 5, len(t))),
                                             (t, 300 + rng.normal(0, 5, len(t)))))
    assert _notes(short)["synchrony_index"] == "no gap-free stretch of 20 s"
    t = np.arange(0, 120_000, 100)
    common = 30.0 * np.sin(2 * np.pi * t / 5000.0)
    rows = [300 + common + rng.normal(0, 5, len(t)), np.full(len(t), 200.0),
            280 + common + rng.normal(0, 5, len(t))]
    m = metrics.compute_run_metrics(_run(*[(t, r) for r in rows]))
    assert m["synchrony_index"] == pytest.approx(_reference_synchrony([rows[0], rows[2]],
                                                                      [(0, len(t))]), rel=1e-6)


def test_dynamic_range_on_a_one_second_grid_spans_two_points():
    t = np.arange(0, 20_001, 100)
    p = 100.0 + 100.0 * (t // 1000)  # +100 W every second
    m = metrics.compute_run_metrics(_run((t, p)), grid_ms=1000)
    assert m["dynamic_range_1s_w"] == pytest.approx(100.0)


def test_seed_event_frequency_counts_flat_stretches_as_upward():
    # mostly flat (r = 0) with a few 1 s rises: θ = p95 of U = 0, so every r ≥ 0 is an event
    t = np.arange(0, 120_001, 100)
    p = np.full(len(t), 100.0)
    for s0 in (20_000, 60_000, 100_000):
        p[(t >= s0) & (t < s0 + 1000)] = np.linspace(100.0, 200.0, 10)
        p[t >= s0 + 1000] += 100.0
    fall = t >= 110_000  # a fall of uneven steps: down ramps of many sizes
    p[fall] -= np.cumsum(np.random.default_rng(67).uniform(0.0, 5.0, int(fall.sum())))
    m = metrics.compute_run_metrics(_run((t, p)))
    r = (p[10:] - p[:-10]) / 1.0
    assert np.percentile(r[r >= 0], 95) == 0.0
    assert m["ramp_event_frequency_1s"] == pytest.approx(np.count_nonzero(r >= 0) / 2.0)
    for tag, k in (("5s", 50), ("10s", 100)):
        rk = (p[k:] - p[:-k]) / (k / 10)
        assert m[f"ramp_down_p99_{tag}_w_per_s"] == pytest.approx(np.percentile(-rk[rk < 0], 99))


def test_a_falling_run_has_no_upward_ramps_for_the_event_frequency():
    t = np.arange(0, 30_001, 100)
    m = metrics.compute_run_metrics(_run((t, 1000.0 - t / 100.0)))
    assert m["ramp_event_frequency_1s"] is None
    assert _notes(m)["ramp_event_frequency_1s"] == "no ramps"


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


def test_synchrony_of_trending_devices_over_several_segments():
    # ramps leave a steady offset after the high-pass (slope / ω0²): the outputs' means are far
    # from 0, so the mean term of the covariance and the point count must be right
    rng = np.random.default_rng(73)
    t_all = np.arange(0, 200_000, 100)
    t = _without(t_all, 80_000, 90_000)
    a = 300.0 + 2.0 * t / 1000.0 + rng.normal(0, 3.0, len(t))
    b = 500.0 - 1.5 * t / 1000.0 + 0.5 * a + rng.normal(0, 3.0, len(t))
    m = metrics.compute_run_metrics(_run((t, a), (t, b)))
    grid = np.arange(0, 200_000, 100)
    rows = [np.interp(grid, t, x) for x in (a, b)]
    expected = _reference_synchrony(rows, [(0, 801), (900, 2000)])
    assert m["synchrony_index"] == pytest.approx(expected, rel=1e-6)
