"""Storage, floor and cap on square waves whose answers are known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llm_powertrace_ds import mitigation as mit
from llm_powertrace_ds.mitigation import strategies as st

P_LO, P_HI = 1.0e6, 3.0e6
DT = 0.1


def square(half_period_s: float = 400.0, periods: int = 3, *, dt: float = DT,
           end_low: bool = True) -> mit.Profile:
    """Low for T, high for T, … ; with ``end_low`` a final low half lets everything settle."""
    n_half = int(round(half_period_s / dt))
    halves = [P_LO, P_HI] * periods + ([P_LO] if end_low else [])
    power = np.concatenate([np.full(n_half, v) for v in halves])
    t = np.arange(len(power)) * dt
    return mit.Profile(start_s=t, dt_s=np.full(len(t), dt), power_w=power, kind="csv",
                       file="square.csv", column="power_w")


def time_at(profile: mit.Profile, level: float) -> float:
    return float(profile.dt_s[profile.power_w == level].sum())


def square_wave_closed_form(step_w: float, period_s: float, tau_s: float) -> tuple[float, float]:
    """Storage energy and power of the controller's periodic steady state on a square wave.

    The load is ±A = ±ΔP/2 about its mean for half a period h = T/2 each. With x = LP and
    y = L²P (L the first-order low-pass of time constant τ), the state of charge is
    S − S* = −τ(x − y) and the grid side G = 2x − y. On the high half (t from 0 to h, a = e^{−h/τ}):
    x = A − (A + X)e^{−t/τ} with X = A(1 − a)/(1 + a); y = A − (Y + A)e^{−t/τ} − (A + X)(t/τ)e^{−t/τ}
    with Y = (A(1 − a) − (A + X)(h/τ)a)/(1 + a); so S − S* = −τ e^{−u}((Y − X) + (A + X)u), u = t/τ,
    whose extreme is at u = 0, h/τ or u* = 1 − (Y − X)/(A + X). The low half mirrors it, so the
    energy is twice the largest |S − S*|; the power is P − G at the rising edge, A + 2X − Y.
    """
    a_w, h = step_w / 2, period_s / 2
    a = math.exp(-h / tau_s)
    x = a_w * (1 - a) / (1 + a)
    y = (a_w * (1 - a) - (a_w + x) * (h / tau_s) * a) / (1 + a)
    c, d = y - x, a_w + x
    us = [0.0, h / tau_s] + ([1 - c / d] if 0 < 1 - c / d < h / tau_s else [])
    peak = max(abs(tau_s * math.exp(-u) * (c + d * u)) for u in us)
    return 2 * peak, a_w + 2 * x - y


def periodic_square(period_s: float, hours: float, phase: float, dt: float = DT) -> mit.Profile:
    n = int(round(hours * 3600 / dt))
    t = np.arange(n) * dt + phase * period_s
    power = np.where((t % period_s) < period_s / 2, P_HI, P_LO)
    return mit.Profile(start_s=np.arange(n) * dt, dt_s=np.full(n, dt), power_w=power, kind="csv",
                       file="square.csv", column="power_w")


@pytest.mark.parametrize(("period_s", "r"), [(4.0, 1e6 / 60), (60.0, 1e6 / 60), (600.0, 1e6 / 60),
                                             (100.0, 2e5), (2000.0, 2e5)])
def test_square_wave_storage_is_the_closed_form_whatever_the_horizon_and_phase(period_s, r):
    dp = P_HI - P_LO
    tau = mit.controller.RANGE_GAIN * dp / r  # τ = (2 + e^-3) ΔP / R
    energy, power = square_wave_closed_form(dp, period_s, tau)
    sizes = []
    for hours, phase in [(1, 0.0), (2, 0.0), (4, 0.0), (1, 0.3), (1, 0.77)]:
        s = mit.apply(periodic_square(period_s, hours, phase),
                      mit.Plan(ramp_limit_w_per_s=r)).summary["storage"]
        assert s["time_constant_s"] == pytest.approx(tau, rel=1e-9)
        assert s["energy_j"] == pytest.approx(energy, rel=0.005)
        assert s["discharge_power_w"] == pytest.approx(power, rel=0.01)
        assert s["charge_power_w"] == pytest.approx(power, rel=0.01)
        assert s["start"] is None and s["stop"] is None
        sizes.append(s["energy_j"])
    assert max(sizes) <= min(sizes) * 1.005


def test_a_fast_square_wave_needs_the_ideal_smoothers_storage():
    """T ≪ τ: the grid side is flat at the mean, storage ΔP·T/4 and ΔP/2 (the closed form's limit)."""
    dp = P_HI - P_LO
    s = mit.apply(periodic_square(4.0, 1, 0.0), mit.Plan(ramp_limit_w_per_s=1e6 / 60)).summary
    assert s["storage"]["energy_j"] == pytest.approx(dp * 4.0 / 4, rel=0.02)
    assert s["storage"]["power_w"] == pytest.approx(dp / 2, rel=0.02)
    assert s["grid"]["ramp_max_w_per_s"]["60"] < 0.01 * s["load"]["ramp_max_w_per_s"]["1"]


@pytest.mark.parametrize("r", [1e3, 1e4, 1e5])
def test_a_single_start_and_stop_need_dp_squared_over_2r(r):
    """Idle at P_lo, a step to P_hi held, then back: each needs ΔP²/(2R) and power ΔP."""
    dp = P_HI - P_LO
    n_idle, n_on = 300, 40_000
    power = np.concatenate([np.full(n_idle, P_LO), np.full(n_on, P_HI), np.full(n_idle, P_LO)])
    n = len(power)
    prof = mit.Profile(start_s=np.arange(n) * DT, dt_s=np.full(n, DT), power_w=power,
                       kind="csv", file="start.csv", column="power_w")
    res = mit.apply(prof, mit.Plan(ramp_limit_w_per_s=r, efficiency=1.0))
    s = res.summary["storage"]
    for part in ("start", "stop"):
        assert s[part]["delta_w"] == pytest.approx(dp)
        assert s[part]["storage_energy_j"] == pytest.approx(dp ** 2 / (2 * r), rel=1e-12)
        assert s[part]["storage_power_w"] == pytest.approx(dp)
        assert s[part]["job_ramp_s"] == pytest.approx(dp / r)
    assert s["energy_j"] == pytest.approx(0.0, abs=1e-3)  # the steady load itself is flat
    # the simulated grid side agrees: it ramps at R from P_lo, the storage covers the triangle
    assert res.soc_j is not None
    ramp_time = dp / r
    if ramp_time < n_on * DT and ramp_time < n_idle * DT:
        assert -res.soc_j.min() == pytest.approx(dp ** 2 / (2 * r), rel=0.01)
        assert np.abs(np.diff(res.grid_w)).max() <= r * DT * (1 + 1e-9)


def test_the_grid_side_never_ramps_faster_than_r_whatever_the_load_does_in_its_range():
    rng = np.random.default_rng(3)
    n = 50_000
    for power in (rng.uniform(P_LO, P_HI, n),                    # noise
                  np.where(rng.random(n) < 0.5, P_LO, P_HI),     # bang-bang
                  np.where((np.arange(n) // 37) % 2 == 0, P_LO, P_HI)):
        s = st.storage(power, np.full(n, DT), 2.0e4)
        assert np.abs(np.diff(s.grid_w)).max() <= 2.0e4 * DT * (1 + 1e-9)


def test_a_load_at_the_controllers_own_time_scale_is_flagged_when_the_grid_side_is_worse():
    """|H(jω)| = √(1 + 4τ²ω²)/(1 + τ²ω²) peaks at √5/2 for ωτ = 1: a sine there is amplified."""
    r = 2.0e4
    dp = P_HI - P_LO
    tau = mit.controller.RANGE_GAIN * dp / r
    n = int(40 * tau / DT)
    t = np.arange(n) * DT
    power = (P_HI + P_LO) / 2 + dp / 2 * np.sin(t / tau)
    prof = mit.Profile(start_s=t, dt_s=np.full(n, DT), power_w=power, kind="csv", file="s.csv",
                       column="power_w")
    res = mit.apply(prof, mit.Plan(ramp_limit_w_per_s=r)).summary
    worse = res["grid_worse_than_load"]
    assert any(w.startswith("range") for w in worse)
    assert any("grid side worse than the load: range" in n for n in res["notes"])
    assert res["grid"]["range_w"] == pytest.approx(res["load"]["range_w"] * math.sqrt(5) / 2,
                                                   rel=0.02)
    # a slow square wave: restoring the state of charge overshoots each step (by e^-2 of the
    # step, the step response's peak 1 + e^-2 at t = 2τ): the range is worse, and flagged
    slow = mit.apply(periodic_square(40 * tau, 8 * 40 * tau / 3600, 0.0),
                     mit.Plan(ramp_limit_w_per_s=r)).summary
    assert slow["grid"]["range_w"] == pytest.approx(dp * (1 + 2 * math.exp(-2)), rel=0.02)
    assert any(w.startswith("range") for w in slow["grid_worse_than_load"])
    # a fast one is smoothed at the time scales that hold it: range, p95-p5, 1 s ramps, bands
    calm = mit.apply(periodic_square(4.0, 1, 0.0), mit.Plan(ramp_limit_w_per_s=r)).summary
    assert not [w for w in calm["grid_worse_than_load"] if not w.startswith("ramp over 60 s")]


def test_lossless_storage_accounts_every_joule():
    prof = periodic_square(60.0, 1, 0.0)
    res = mit.apply(prof, mit.Plan(ramp_limit_w_per_s=2.0e4, efficiency=1.0))
    s = res.summary["storage"]
    assert s["losses_j"] == 0.0
    assert res.summary["grid"]["energy_j"] + s["net_discharged_j"] == pytest.approx(
        prof.energy_j, rel=1e-12)
    assert res.soc_j is not None
    assert res.soc_j[-1] == pytest.approx(-s["net_discharged_j"], rel=1e-9, abs=1.0)


@pytest.mark.parametrize("eta", [1.0, 0.9, 0.85, 0.5])
def test_losses_scale_with_round_trip_efficiency(eta):
    prof = periodic_square(60.0, 1, 0.0)
    s = mit.apply(prof, mit.Plan(ramp_limit_w_per_s=2.0e4, efficiency=eta)).summary
    storage = s["storage"]
    assert storage["losses_j"] == pytest.approx(storage["discharged_j"] * (1 / eta - 1),
                                                rel=1e-9, abs=1e-9)
    # the grid supplies the losses on top of its own energy; sizing itself is unchanged
    assert s["grid"]["energy_with_losses_j"] == pytest.approx(
        s["grid"]["energy_j"] + storage["losses_j"], rel=1e-12)
    ref = mit.apply(prof, mit.Plan(ramp_limit_w_per_s=2.0e4, efficiency=1.0)).summary
    assert storage["energy_j"] == pytest.approx(ref["storage"]["energy_j"], rel=1e-12)


def test_floor_extra_energy_and_swing():
    prof = square()
    f = 1.8e6
    res = mit.apply(prof, mit.Plan(floor_pct=100 * f / P_HI))
    floor = res.summary["floor"]
    assert floor["floor_w"] == pytest.approx(f)
    assert floor["extra_energy_j"] == pytest.approx((f - P_LO) * time_at(prof, P_LO), rel=1e-9)
    assert floor["range_w"] == pytest.approx(P_HI - f)
    assert res.summary["grid"]["range_w"] == pytest.approx(P_HI - f)
    assert floor["extra_energy_pct"] == pytest.approx(
        100 * floor["extra_energy_j"] / prof.energy_j)


def test_floor_of_a_stated_ceiling():
    prof = square()
    res = mit.apply(prof, mit.Plan(floor_pct=50, reference_w=4.0e6))
    assert res.summary["floor"]["floor_w"] == pytest.approx(2.0e6)
    assert res.summary["reference"] == "--ceiling"


def test_cap_energy_above_cap():
    prof = square()
    c = 2.5e6
    res = mit.apply(prof, mit.Plan(cap_pct=100 * c / P_HI))
    cap = res.summary["cap"]
    assert cap["energy_above_cap_j"] == pytest.approx((P_HI - c) * time_at(prof, P_HI),
                                                      rel=1e-9)
    assert res.summary["grid"]["peak_w"] == pytest.approx(c)
    assert cap["slowdown_modelled"] is False
    assert any("slowdown is not modelled" in n for n in res.summary["notes"])


def test_strategies_apply_in_the_stated_order():
    prof = square()
    r = 2.0e4
    res = mit.apply(prof, mit.Plan(cap_pct=90, floor_pct=50, ramp_limit_w_per_s=r))
    assert res.summary["order"] == ["cap", "floor", "storage"]
    # storage sees the capped, floored load: its time constant is set by that load's range
    assert res.summary["storage"]["time_constant_s"] == pytest.approx(
        mit.controller.RANGE_GAIN * (0.9 - 0.5) * P_HI / r, rel=1e-9)


def test_coarser_resolution_sizes_less_storage_for_fast_swings():
    """0.4 s pulses averaged away at 1 s: storage sized there is smaller.

    That is the documented direction: a coarse profile under-sizes storage.
    """
    n = 36_000
    t = np.arange(n) * DT
    power = np.where((np.arange(n) // 4) % 2 == 0, P_LO, P_HI)
    fine = mit.Profile(start_s=t, dt_s=np.full(n, DT), power_w=power, kind="csv",
                       file="pulses.csv", column="power_w")
    coarse = mit.resample(fine, 1.0)
    r = 1.0e5
    e_fine = mit.apply(fine, mit.Plan(ramp_limit_w_per_s=r)).summary
    e_coarse = mit.apply(coarse, mit.Plan(ramp_limit_w_per_s=r)).summary
    assert e_coarse["resolution_s"] == pytest.approx(1.0)
    assert e_fine["resolution_s"] == pytest.approx(DT)
    assert e_coarse["storage"]["power_w"] < 0.5 * e_fine["storage"]["power_w"]
    assert e_coarse["storage"]["energy_j"] <= e_fine["storage"]["energy_j"]
    assert mit.apply(coarse, mit.Plan()).summary["load"]["energy_j"] == pytest.approx(
        fine.energy_j, rel=1e-9)


def test_resampling_conserves_energy_and_refuses_finer():
    prof = square(periods=1)
    for res_s in (0.5, 1.0, 7.0, 60.0):
        coarse = mit.resample(prof, res_s)
        assert coarse.energy_j == pytest.approx(prof.energy_j, rel=1e-12)
    with pytest.raises(mit.profile.UsageError, match="finer"):
        mit.resample(prof, 0.01)


def test_ramp_limited_never_exceeds_the_limit_on_noise():
    rng = np.random.default_rng(3)
    p = rng.uniform(0, 1e6, 5000)
    dt = rng.uniform(0.05, 0.2, 5000)
    g = st.ramp_limited(p, dt, 1e5)
    assert np.all(np.abs(np.diff(g)) <= 1e5 * dt[:-1] * (1 + 1e-12))


def test_band_power_falls_through_a_ramp_limit_and_is_null_beyond_nyquist():
    prof = square(half_period_s=2.0, periods=100)  # 0.25 Hz square wave
    res = mit.apply(prof, mit.Plan(ramp_limit_w_per_s=1.0e5))
    low = "0.1-1 Hz"
    assert res.summary["grid"]["band_rms_w"][low] < 0.2 * res.summary["load"]["band_rms_w"][low]
    coarse = mit.apply(mit.resample(prof, 1.0), mit.Plan())
    assert coarse.summary["load"]["band_rms_w"]["1-3 Hz"] is None
    assert any("not resolved" in n for n in coarse.summary["notes"])


def test_a_1s_average_sensor_warns_on_bands_above_half_a_hertz():
    prof = square(half_period_s=2.0, periods=100)
    prof = mit.Profile(start_s=prof.start_s, dt_s=prof.dt_s, power_w=prof.power_w, kind="csv",
                       file="x.csv", column="power_w", sensor_average_s=1.0)
    notes = mit.apply(prof, mit.Plan()).summary["notes"]
    assert any("under-reported" in n and "0.1-1 Hz" in n for n in notes)
    assert any("under-reported" in n and "1-3 Hz" in n for n in notes)


def test_every_summary_number_is_finite():
    res = mit.apply(square(), mit.Plan(cap_pct=95, floor_pct=40, ramp_limit_w_per_s=1e4))

    def walk(x):
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, float):
            assert math.isfinite(x)
    walk(res.summary)


def test_the_step_by_step_law_of_an_irregular_time_base_equals_the_filtered_one():
    """The controller runs as two IIR filters on a regular base and step by step otherwise."""
    rng = np.random.default_rng(5)
    n = 3000
    power = rng.uniform(P_LO, P_HI, n)
    regular = np.full(n, DT)
    jitter = regular * (1 + 1e-12 * rng.standard_normal(n))  # irregular, by a hair
    g1, e1 = mit.controller._law(power, regular, 50.0, 2e6)
    g2, e2 = mit.controller._law(power, jitter, 50.0, 2e6)
    assert np.allclose(g1, g2, rtol=1e-9, atol=1e-3)
    assert np.allclose(e1, e2, rtol=1e-9, atol=1e-3)
    # and through apply, a CSV-like irregular profile sizes storage without error
    t = np.cumsum(rng.uniform(0.05, 0.2, n))
    prof = mit.Profile(start_s=t, dt_s=np.append(np.diff(t), 0.1), power_w=power, kind="csv",
                       file="irregular.csv", column="power_w")
    s = mit.apply(prof, mit.Plan(ramp_limit_w_per_s=1e5)).summary["storage"]
    assert s["energy_j"] > 0 and math.isfinite(s["energy_j"])
