"""Power-state metrics on a 0.1 s grid with a 400 W limit: idle and near-limit shares, steps, dips.

Idle and near-limit shares at or above their thresholds, a step counted only for a change of
more than a tenth of the limit within one second, and checkpoint dips (depth, half-depth width,
dips under a watt, no baseline).
"""

from __future__ import annotations

import numpy as np
import pytest
from metric_runs import run_of_devices as _run

from llm_powertrace_ds import metrics
from llm_powertrace_ds.run import Run


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
