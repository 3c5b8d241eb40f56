"""Validation flags at their thresholds (each test fails when its behaviour breaks)."""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds.run import DeviceSeries, Run
from llm_powertrace_ds.validate import validate_run


def run_with(t_ms, *, power=None, energy_mj=None, period_ms: float | None = 100.0,
             **meta) -> Run:
    """One device at ``t_ms`` with a never-constant power (no ``stuck_sensor``) near 200 W."""
    t = np.asarray(t_ms, dtype=np.int64)
    p = 200 + 20 * np.sin(np.arange(len(t)) / 7.0) if power is None else np.asarray(power, float)
    signals = {"power_w": p}
    if energy_mj is not None:
        signals["energy_mj"] = np.asarray(energy_mj, float)
    base = {"run_id": "v", "workload": "finetune", "platform": "l40s", "sampler": "nvml",
            "num_gpus": 1, "sample_period_ms": period_ms}
    base.update(meta)
    return Run(base, [DeviceSeries(0, t, signals, power_limit_w=350.0)], [], None)


def with_interval(interval_ms: int, n: int = 100, at: int = 50) -> np.ndarray:
    """``n`` readings 100 ms apart except one interval of ``interval_ms`` after reading ``at``."""
    steps = np.full(n - 1, 100)
    steps[at] = interval_ms
    return np.concatenate(([0], np.cumsum(steps)))


def test_a_regular_run_has_no_flags():
    assert validate_run(run_with(np.arange(100) * 100)).flags == []


def test_stall_starts_just_above_one_second():
    assert "stall" not in validate_run(run_with(with_interval(1000))).flags
    flags = validate_run(run_with(with_interval(1001))).flags
    assert "stall" in flags and "gap" in flags


def test_gap_at_a_five_period_hole_and_not_at_three():
    assert validate_run(run_with(with_interval(300))).flags == []
    assert validate_run(run_with(with_interval(500))).flags == ["gap"]


def test_gap_threshold_follows_the_declared_period():
    # At 200 ms the 500 ms interval is no gap (it counts as jitter instead).
    assert "gap" not in validate_run(run_with(with_interval(500), period_ms=200.0)).flags
    assert "gap" in validate_run(run_with(with_interval(700), period_ms=200.0)).flags
    # No declared period: the median interval (100 ms) is the period.
    assert validate_run(run_with(with_interval(500), period_ms=None)).flags == ["gap"]


@pytest.mark.parametrize(("short", "long", "flagged"),
                         [(80, 120, False),  # interval CV 0.20
                          (70, 130, True)])  # interval CV 0.30
def test_irregular_sampling_above_a_coefficient_of_variation_of_a_quarter(short, long, flagged):
    steps = np.tile([short, long], 50)
    t = np.concatenate(([0], np.cumsum(steps)))
    flags = validate_run(run_with(t)).flags
    assert flags == (["irregular_sampling"] if flagged else [])


def test_one_long_gap_does_not_make_sampling_irregular():
    # The 2 s hole is a gap (and a stall), not jitter: the CV is over the regular intervals.
    flags = validate_run(run_with(with_interval(2000))).flags
    assert sorted(flags) == ["gap", "stall"]


def counter_for(t_ms: np.ndarray, power: np.ndarray, excess: float) -> np.ndarray:
    """A cumulative energy counter (mJ) reading ``excess`` × the trapezoid integral of power."""
    steps = (power[1:] + power[:-1]) / 2 * np.diff(t_ms)  # W·ms = mJ
    return 1e6 + np.concatenate(([0.0], np.cumsum(steps))) * excess


@pytest.mark.parametrize(("excess", "flagged"),
                         [(1.04, False),  # |I − C| / C = 3.8 %
                          (1.10, True),  # 9.1 %
                          (0.94, True)])  # counter short by 6 %: 6.4 %
def test_energy_mismatch_near_its_five_percent_threshold(excess, flagged):
    t = np.arange(200) * 100
    p = 200 + 20 * np.sin(np.arange(200) / 7.0)
    flags = validate_run(run_with(t, power=p, energy_mj=counter_for(t, p, excess))).flags
    assert flags == (["energy_mismatch"] if flagged else [])


@pytest.mark.parametrize(("sampler", "platform", "flagged"),
                         [("cpu_proxy", "l40s", True), ("nvml", "cpu_proxy", True),
                          ("cpu_proxy", "cpu_proxy", True), ("nvml", "l40s", False)])
def test_cpu_proxy_flag_when_either_the_sampler_or_the_platform_says_so(sampler, platform,
                                                                         flagged):
    run = run_with(np.arange(100) * 100, sampler=sampler, platform=platform)
    assert validate_run(run).flags == (["cpu_proxy"] if flagged else [])
