"""Ramp limits at several time scales: each read per second, and several searched together.

A ramp limit ``{window_s: w, max_w_per_s: R}`` bounds the change between consecutive w-second
means divided by w. These tests use windows of 0.5 s to 2 min against loads whose window ramps
are known in closed form, limits written in other units (MW/min), and several limits at once,
given in any order: the search's storage ramp is the largest of R₀, R₀/2, … (R₀ the strictest
limit) that meets them all.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds import mitigation as mit
from llm_powertrace_ds.mitigation import limits as lim
from llm_powertrace_ds.mitigation import strategies


def _profile(p: np.ndarray, dt: float = 0.5) -> mit.Profile:
    t = np.arange(len(p)) * dt
    return mit.Profile(start_s=t, dt_s=np.full(len(p), dt), power_w=p, kind="csv",
                       file="site.csv", column="power_w")


@settings(max_examples=40, deadline=None)
@given(window_s=st.sampled_from([0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0]),
       step_w=st.floats(1e3, 5e6), at=st.integers(2, 6))
def test_a_step_at_a_window_edge_ramps_its_height_over_the_window(window_s, step_w, at):
    dt = 0.5
    edge = at * window_s  # the step falls on a window boundary
    n = int(round((edge + 3 * window_s) / dt))
    t = np.arange(n) * dt
    p = np.where(t < edge, 1e6, 1e6 + step_w)
    expected = step_w / window_s  # W/s: the jump of the window mean, per second of window
    for allowed, met in ((expected * 1.001, True), (expected * 0.999, False)):
        (c,) = lim.check(p, np.full(n, dt), mit.Limits(ramps=(lim.RampLimit(window_s, allowed),)))
        assert c.value == pytest.approx(expected, rel=1e-9)
        assert c.met is met


def test_a_limit_in_mw_per_minute_is_read_per_second(tmp_path):
    path = tmp_path / "limits.yaml"
    path.write_text("ramp:\n  - {window_s: 1min, max_w_per_s: 6MW/min}\n"
                    "  - {window_s: 2, max_w_per_s: 50kW/s}\n", encoding="utf-8")
    limits = lim.load_limits(path)
    assert limits.ramps == (lim.RampLimit(60.0, 1e5), lim.RampLimit(2.0, 5e4))
    # a 6 MW step at a minute boundary ramps 6 MW/min = 100 kW/s over one minute
    t = np.arange(0, 300, 0.5)
    p = np.where(t < 120, 1e6, 7e6)
    one_min = lim.check(p, np.full(len(t), 0.5), mit.Limits(ramps=limits.ramps[:1]))
    assert one_min[0].value == pytest.approx(1e5) and one_min[0].met


def _square(period_s: float = 40.0, low: float = 2e6, high: float = 6e6, dt: float = 0.5,
            duration_s: float = 1200.0) -> np.ndarray:
    t = np.arange(0, duration_s, dt)
    return np.where((t % period_s) < period_s / 2, high, low)


def _largest_feasible_r(profile: mit.Profile, limits: mit.Limits) -> float | None:
    """The largest R₀/2^i (R₀ the strictest ramp limit) whose storage meets every limit."""
    r0 = min(r.max_w_per_s for r in limits.ramps)
    for i in range(lim.MAX_HALVINGS + 1):
        s = strategies.storage(profile.power_w, profile.dt_s, r0 / 2 ** i,
                               strategies.DEFAULT_EFFICIENCY)
        if all(c.met for c in lim.check(s.grid_w, profile.dt_s, limits)):
            return r0 / 2 ** i
    return None


RAMPS = [lim.RampLimit(1.0, 2e4), lim.RampLimit(10.0, 8e3), lim.RampLimit(60.0, 1.5e3)]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_several_ramp_limits_are_searched_from_the_strictest_in_any_order(order):
    profile = _profile(_square())
    limits = mit.Limits(ramps=tuple(RAMPS[i] for i in order))
    res = mit.search(profile, limits)
    assert res.feasible and all(c.met for c in res.checks)
    assert [c.limit for c in res.checks] == [f"ramp over {RAMPS[i].window_s:g} s (W/s)"
                                             for i in order]
    assert res.plan.cap_pct is None and res.plan.floor_pct is None  # storage alone is cheapest
    assert res.plan.ramp_limit_w_per_s == pytest.approx(_largest_feasible_r(profile, limits))
    # a grid side ramping at most R has window ramps of at most R at every time scale: the
    # strictest limit, whichever its place in the file, is the storage ramp
    assert res.plan.ramp_limit_w_per_s == pytest.approx(1.5e3)


@pytest.mark.parametrize("kept", [(0,), (1,), (2,), (0, 1), (1, 2), (0, 2)])
def test_fewer_limits_never_need_a_slower_grid_side(kept):
    profile = _profile(_square())
    every = mit.search(profile, mit.Limits(ramps=tuple(RAMPS)))
    some = mit.search(profile, mit.Limits(ramps=tuple(RAMPS[i] for i in kept)))
    assert some.feasible
    assert (some.plan.ramp_limit_w_per_s or np.inf) >= every.plan.ramp_limit_w_per_s
