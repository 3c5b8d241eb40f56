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


# --------------------------------------------------------------------------------------------
# The exact report: flags and messages, one scenario per check (a reader acts on the message)
# --------------------------------------------------------------------------------------------

def device(gpu: int, t_ms, power=None, **signals) -> DeviceSeries:
    t = np.asarray(t_ms, dtype=np.int64)
    p = 200 + 20 * np.sin(np.arange(len(t)) / 7.0) if power is None else np.asarray(power, float)
    return DeviceSeries(gpu, t, {"power_w": p, **signals}, power_limit_w=350.0)


def report_of(*devices: DeviceSeries, period_ms: float | None = 100.0, **meta):
    base = {"run_id": "exact", "workload": "finetune", "platform": "l40s", "sampler": "nvml",
            "num_gpus": len(devices), "sample_period_ms": period_ms}
    base.update(meta)
    rep = validate_run(Run(base, list(devices), [], None))
    assert rep.run_id == "exact"
    return list(zip(rep.flags, rep.messages, strict=True)) if len(rep.flags) == len(
        rep.messages) else (rep.flags, rep.messages)


REGULAR = np.arange(100) * 100
WITH_GAP = with_interval(500)
GAP_MSG = ("gap", "gpu 0:1: 1 gaps > 3 periods")


def test_no_devices_is_empty():
    assert report_of() == [("empty", "the run has no device series")]


def test_fewer_series_than_num_gpus_is_missing_gpu():
    # Fewer series: missing_gpu, and the seed vocabulary's gpu_count_mismatch (either direction).
    assert report_of(device(0, REGULAR), num_gpus=2) == [
        ("missing_gpu", "1 device series for num_gpus=2"),
        ("gpu_count_mismatch", "1 device series, num_gpus=2")]


def test_more_series_than_num_gpus_is_a_count_mismatch_but_no_missing_gpu():
    assert report_of(device(0, REGULAR), device(1, REGULAR), num_gpus=1) == [
        ("gpu_count_mismatch", "2 device series, num_gpus=1")]
    assert report_of(device(0, REGULAR), device(1, REGULAR), num_gpus=2) == []


def test_a_bad_device_does_not_stop_the_checks_of_the_next():
    empty = DeviceSeries(0, np.zeros(0, np.int64), {})
    assert report_of(empty, device(1, WITH_GAP)) == [("empty", "gpu 0:0: no samples"), GAP_MSG]
    short = device(0, REGULAR, gpu_util_pct=np.zeros(3), temp_c=np.zeros(4))
    assert report_of(short, device(1, WITH_GAP)) == [
        ("unequal_lengths", "gpu 0:0: gpu_util_pct, temp_c length differs from t_ms"), GAP_MSG]
    back = np.array([0, 100, 200, 200, 300, 250, 400])  # first a repeat, then a step back
    # The repeat is counted (the step back is not a repeat); the first non-increase is named.
    assert report_of(device(0, back), device(1, WITH_GAP)) == [
        ("duplicate_samples", "gpu 0:0: 1 repeated timestamps"),
        ("nonmonotonic_time", "gpu 0:0: t_ms goes from 200 to 200 at sample 3"), GAP_MSG]


def test_a_repeated_timestamp_alone_is_nonmonotonic_and_named_after_a_one_ms_step():
    # A repeat is a duplicate sample (warning) and, time not increasing strictly, an error too.
    assert report_of(device(0, [0, 1, 100, 100, 200])) == [
        ("duplicate_samples", "gpu 0:0: 1 repeated timestamps"),
        ("nonmonotonic_time", "gpu 0:0: t_ms goes from 100 to 100 at sample 3")]
    assert report_of(device(0, [0, 100, 100, 100, 200, 200])) == [
        ("duplicate_samples", "gpu 0:0: 3 repeated timestamps"),
        ("nonmonotonic_time", "gpu 0:0: t_ms goes from 100 to 100 at sample 2")]


def test_a_step_back_without_a_repeat_is_no_duplicate():
    assert report_of(device(0, [0, 100, 200, 150, 300])) == [
        ("nonmonotonic_time", "gpu 0:0: t_ms goes from 200 to 150 at sample 3")]


def test_a_one_ms_step_is_still_increasing_time():
    t = np.concatenate(([0, 1], np.arange(1, 100) * 100))
    assert "nonmonotonic_time" not in dict(report_of(device(0, t)))


@pytest.mark.parametrize(("low", "expected"),
                         [(-5.0, [("negative_power", "gpu 0:0: power -5.0 W < 0"),
                                  ("implausible_value",
                                   "gpu 0: 1 power_w sample(s) outside 0..5000")]),
                          (-0.01, [("negative_power", "gpu 0:0: power -0.0 W < 0"),
                                   ("implausible_value",
                                    "gpu 0: 1 power_w sample(s) outside 0..5000")]),
                          (0.0, [("zero_power_samples", "gpu 0:0: 1 readings of 0 W")]),
                          (0.5, [])])
def test_negative_power_below_zero_only(low, expected):
    p = 200 + 20 * np.sin(np.arange(100) / 7.0)
    p[10] = low
    assert report_of(device(0, REGULAR, p)) == expected


def test_zero_power_samples_are_counted_at_exactly_zero_watts():
    p = 200 + 20 * np.sin(np.arange(100) / 7.0)
    p[[3, 40, 41]] = 0.0
    p[50] = np.nan  # missing is no 0 W reading
    p[60] = 1e-3
    assert report_of(device(0, REGULAR, p)) == [
        ("zero_power_samples", "gpu 0:0: 3 readings of 0 W")]


@pytest.mark.parametrize(("peak", "expected"),
                         [(5000.0, []),
                          (5000.5, [("implausible_value",
                                     "gpu 0: 1 power_w sample(s) outside 0..5000")]),
                          (np.inf, [("implausible_value",
                                     "gpu 0: 1 power_w sample(s) outside 0..5000")])])
def test_implausible_value_outside_the_physical_range(peak, expected):
    # No power limit: only the physical range (0..5000 W per device) can flag the peak.
    p = 200 + 20 * np.sin(np.arange(100) / 7.0)
    p[5] = peak
    assert report_of(DeviceSeries(0, REGULAR, {"power_w": p})) == expected


def test_implausible_value_names_the_signal_and_counts_its_samples():
    temp = np.full(100, 50.0) + np.arange(100) * 0.01
    temp[[1, 2]] = [-41.0, 151.0]
    assert report_of(device(0, REGULAR, temp_c=temp)) == [
        ("implausible_value", "gpu 0: 2 temp_c sample(s) outside -40..150")]


def test_gap_and_stall_messages_count_and_measure():
    steps = np.full(99, 100)
    steps[[20, 60]] = [300, 1050]  # 3 periods exactly (no gap), then a 1.05 s stall
    t = np.concatenate(([0], np.cumsum(steps)))
    assert report_of(device(0, t)) == [("gap", "gpu 0:0: 1 gaps > 3 periods"),
                                       ("stall", "gpu 0:0: longest interval 1.1 s")]


def test_irregular_sampling_message_and_its_exact_threshold():
    t = np.concatenate(([0], np.cumsum(np.tile([70, 130], 50))))
    assert report_of(device(0, t)) == [("irregular_sampling", "gpu 0:0: interval CV 0.30")]
    t = np.concatenate(([0], np.cumsum(np.tile([75, 125], 50))))  # CV exactly 0.25
    assert report_of(device(0, t)) == []


def test_irregular_sampling_needs_three_intervals():
    assert report_of(device(0, [0, 70, 200])) == []  # two intervals: no verdict
    assert report_of(device(0, [0, 70, 200, 270])) == [
        ("irregular_sampling", "gpu 0:0: interval CV 0.31")]


def test_intervals_of_exactly_three_periods_count_as_jitter():
    steps = np.full(99, 100)
    steps[::10] = 300  # ten intervals of exactly 3 periods: not gaps, but irregular
    t = np.concatenate(([0], np.cumsum(steps)))
    assert [f for f, _ in report_of(device(0, t))] == ["irregular_sampling"]


@pytest.mark.parametrize(("peak", "expected"),
                         [(700.0, []),
                          (701.0, [("implausible_power", "gpu 0:0: power 701 W > 2x limit")])])
def test_implausible_power_above_twice_the_limit(peak, expected):
    p = 200 + 20 * np.sin(np.arange(100) / 7.0)
    p[5] = peak
    assert report_of(device(0, REGULAR, p)) == expected


def stuck_for(span_ms: int, *, from_start: bool) -> DeviceSeries:
    """100 ms readings; the power holds one value for ``span_ms`` (at the start or inside)."""
    t = np.arange(0, 30_000, 100)
    p = 200 + 20 * np.sin(np.arange(len(t)) / 7.0)
    first = 0 if from_start else 50
    t = t.copy()
    t[first + span_ms // 100:] += span_ms % 100  # a span that is no multiple of 100 ms
    last = first + span_ms // 100
    p[first:last + 1] = 123.0
    return device(0, t, p)


@pytest.mark.parametrize("from_start", [True, False])
def test_stuck_sensor_above_ten_seconds_counted_from_the_first_equal_reading(from_start):
    message = ("stuck_sensor", "gpu 0:0: power unchanged for more than 10 s")
    assert report_of(stuck_for(10_000, from_start=from_start)) == []
    flags = report_of(stuck_for(10_005, from_start=from_start))
    assert message in flags
    assert message in report_of(stuck_for(10_100, from_start=from_start))


def test_two_equal_readings_far_apart_are_a_stuck_sensor():
    assert ("stuck_sensor", "gpu 0:0: power unchanged for more than 10 s") in report_of(
        device(0, [0, 20_000], [5.0, 5.0]))


def test_a_device_with_no_valid_power_does_not_crash_or_flag_stuck():
    flags = [f for f, _ in report_of(device(0, REGULAR, np.full(100, np.nan)))]
    assert "stuck_sensor" not in flags and "negative_power" not in flags


def test_two_readings_without_a_declared_period_use_their_interval():
    # The period is their one interval (5 s): no gap, but a stall.
    assert report_of(device(0, [0, 5000]), period_ms=None) == [
        ("stall", "gpu 0:0: longest interval 5.0 s")]
    assert report_of(device(0, [0]), period_ms=None) == []  # one reading: nothing to say


def test_energy_mismatch_message_names_both_energies():
    t = np.arange(200) * 100
    p = 200 + 20 * np.sin(np.arange(200) / 7.0)
    counter = counter_for(t, p, 1.10)
    counter[[0, -1]] = np.nan  # the counter's first and last valid readings are used
    integral = float(np.trapezoid(p, t / 1000.0))
    used = (counter[-2] - counter[1]) / 1000.0
    expected = f"gpu 0:0: integral {integral:.0f} J vs counter {used:.0f} J"
    assert report_of(device(0, t, p, energy_mj=counter)) == [("energy_mismatch", expected)]


@pytest.mark.parametrize(("power_w", "counter_mj", "period_ms", "flagged"), [
    ([105.0] * 11, np.linspace(0, 1_000_000, 11), 1000.0, False),  # exactly 5.0 %: not above
    ([100.0] * 11, np.linspace(0, 1_000_000 / 1.0497, 11), 1000.0, False),  # 4.97 %
    ([1.0] * 10, np.linspace(0, 500, 10), 100.0, True),  # 0.9 J vs a 0.5 J counter
    ([100.0] * 11, np.full(11, 7.0), 1000.0, False),  # a flat counter has nothing to compare
    ([100.0, 100.0], [0.0, 50_000.0], 1000.0, True),  # two readings are enough
    ([np.nan] * 10 + [100.0], np.linspace(0, 1e6, 11), 1000.0, False),  # one power reading
    ([100.0] * 11, [0.0, 50_000.0] + [np.nan] * 9, 1000.0, True),  # two counter readings
])
def test_energy_mismatch_edges(power_w, counter_mj, period_ms, flagged):
    t = np.arange(len(power_w)) * int(period_ms)
    p = np.asarray(power_w, float)
    flags = [f for f, _ in report_of(device(0, t, p, energy_mj=np.asarray(counter_mj, float)),
                                     period_ms=period_ms)]
    assert ("energy_mismatch" in flags) is flagged


def test_cpu_proxy_message():
    assert report_of(device(0, REGULAR), sampler="cpu_proxy") == [
        ("cpu_proxy", "cpu_proxy: modelled from CPU activity, not a GPU measurement")]


def test_a_counter_reset_loses_its_interval_in_validate_as_in_metrics_and_convert():
    """The one counter rule (metrics.counter_energy_j): a step down adds nothing.

    Before the rule was shared, validate took last − first finite reading, so a counter that
    reset mid-run looked short and the run was flagged ``energy_mismatch``.
    """
    from generation.sampler.convert import energy_mismatch_pct
    from llm_powertrace_ds.metrics import compute_run_metrics

    t = np.arange(41) * 1000
    p = 100.0 + np.where(np.arange(41) % 2, 1.0, -1.0)  # 100 J per interval, never stuck
    counter = np.concatenate((np.arange(21) * 100_000.0, np.arange(20) * 100_000.0 + 10_000.0))
    run = run_with(t, power=p, energy_mj=counter, period_ms=1000.0)
    assert validate_run(run).flags == []  # last − first would give 1910 J: flagged before
    # 40 intervals of 100 J; the reset interval (2000 J -> 10 J) is lost: 3900 J counted
    expected = 100 * (4000 - 3900) / 3900
    assert compute_run_metrics(run)["energy_mismatch_pct"] == pytest.approx(expected)
    assert energy_mismatch_pct(run.devices[0]) == pytest.approx(expected)
    run = run_with(t, power=p, energy_mj=counter * 0.8, period_ms=1000.0)
    assert validate_run(run).flags == ["energy_mismatch"]
