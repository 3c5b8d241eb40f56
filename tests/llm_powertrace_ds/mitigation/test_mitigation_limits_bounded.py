"""The ``--limits`` search is bounded: bisection over storage ramps, a stated budget, a bar."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llm_powertrace_ds import mitigation as mit
from llm_powertrace_ds.mitigation import limits as lim


def busy_site(n: int = 20_000, dt: float = 0.1) -> mit.Profile:
    """A 4 s training step (±100 kW on 6.5 MW), noise and a checkpoint dip every 10 minutes."""
    t = np.arange(n) * dt
    rng = np.random.default_rng(1)
    p = 6.5e6 + 1e5 * np.sign(np.sin(2 * np.pi * t / 4.0)) + 3e4 * rng.standard_normal(n)
    p[(t % 600.0) < 20.0] -= 2e6
    return mit.Profile(start_s=t, dt_s=np.full(n, dt), power_w=p, kind="csv", file="site.csv",
                       column="power_w")


IMPOSSIBLE = mit.Limits(ramps=(lim.RampLimit(60.0, 1e6 / 60),), max_range_w=1.0, file="l.yaml")


def test_an_impossible_limit_is_searched_in_a_few_passes_per_combination_not_fourteen():
    res = mit.search(busy_site(), IMPOSSIBLE)
    assert not res.feasible and res.complete
    pairs = sum(1 for s in res.steps if "storage" not in s)  # one no-storage pass per pair
    per_pair = 1 + 2 + math.ceil(math.log2(lim.MAX_HALVINGS + 1))
    assert res.evaluated <= pairs * per_pair
    assert res.evaluated < 1000  # the exhaustive grid with 13 storage passes per pair: ~2,900


def test_the_search_stops_at_its_budget_and_says_so():
    prof = busy_site()
    res = mit.search(prof, IMPOSSIBLE, budget_sample_passes=10 * len(prof.power_w))
    assert res.evaluated == 10 and not res.complete
    assert "search stopped after 10 evaluations" in res.statement
    assert "the grid was not exhausted" in res.statement


def test_a_met_limit_keeps_the_largest_storage_ramp_that_meets_it():
    prof = busy_site()
    limits = mit.Limits(ramps=(lim.RampLimit(1.0, 1e6 / 60), lim.RampLimit(60.0, 1e6 / 60)),
                        file="l.yaml")
    res = mit.search(prof, limits)
    assert res.feasible and res.complete
    assert res.plan.ramp_limit_w_per_s == pytest.approx(1e6 / 60)
    assert res.plan.cap_pct is None and res.plan.floor_pct is None


def test_a_long_search_draws_a_progress_bar_on_stderr(capsys):
    mit.search(busy_site(), IMPOSSIBLE, progress=True, budget_sample_passes=5 * 20_000)
    err = capsys.readouterr().err
    assert "limits search" in err and "eval" in err
    mit.search(busy_site(), IMPOSSIBLE, budget_sample_passes=5 * 20_000)
    assert capsys.readouterr().err == ""


def test_a_spectral_limit_on_a_sine_at_the_bands_centre():
    """A sine of amplitude A at the centre of [0.1, 1) Hz has RMS A/√2 in the band."""
    dt, n, amp = 0.1, 36_000, 2e5
    t = np.arange(n) * dt
    f0 = 0.55
    prof = mit.Profile(start_s=t, dt_s=np.full(n, dt), power_w=5e6 + amp * np.sin(2 * np.pi * f0 * t),
                       kind="csv", file="sine.csv", column="power_w")
    band = mit.Band(0.1, 1.0, amp / math.sqrt(2) / 10)  # a tenth of the sine's RMS
    checks = lim.check(prof.power_w, prof.dt_s, mit.Limits(bands=(band,)))
    assert checks[0].value == pytest.approx(amp / math.sqrt(2), rel=0.02)
    assert not checks[0].met
    res = mit.search(prof, mit.Limits(bands=(band,), file="l.yaml"))
    assert res.feasible and res.plan.ramp_limit_w_per_s is not None
    grid = mit.apply(prof, res.plan, bands=(band,)).summary["grid"]["band_rms_w"][band.label]
    assert grid <= band.max_rms_w
