"""Which sum the level metrics take at the edges of the choice between ``tick`` and ``hold``.

``metrics.levels`` sums the devices per common tick when their median periods differ by at most
``SAME_PERIOD_TOLERANCE`` of the shortest and at least ``MIN_TICK_SHARE`` of the reference
device's ticks find every device within half a period; otherwise by sample-and-hold at the
union of the readings. These tests sit on those edges (periods exactly 5 % apart, exactly 90 %
of the ticks matched, a device twice as fast as the reference), read devices just before the
tick with missed readings, and hold a device that has no reading inside the common span; each
total is summed here reading by reading from the formulas of the module docstring.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds import metrics
from llm_powertrace_ds.metrics import core, levels
from llm_powertrace_ds.run import DeviceSeries, Run

LEVELS = (("p5_power_w", 5), ("p50_power_w", 50), ("p95_power_w", 95), ("peak_power_w", 100))


def _run(devices: list[tuple[np.ndarray, np.ndarray]]) -> Run:
    devs = [DeviceSeries(g, np.asarray(t, dtype=np.int64), {"power_w": np.asarray(p, float)},
                         power_limit_w=700.0, default_power_limit_w=700.0)
            for g, (t, p) in enumerate(devices)]
    return Run({"run_id": "lb", "workload": "finetune", "platform": "h100_sxm_80gb"}, devs, [])


def _tick_total(devices: list[tuple[np.ndarray, np.ndarray]], half_ms: float) -> np.ndarray:
    """P_k = Σ_d P_d(reading nearest tick k) per reference tick in the common span.

    Only ticks at which every device has a reading strictly within ``half_ms`` count.
    """
    start = max(int(t[0]) for t, _ in devices)
    end = min(int(t[-1]) for t, _ in devices)
    t0, p0 = devices[0]
    out = []
    for k, tick in enumerate(t0):
        if not start <= tick <= end:
            continue
        value, found = float(p0[k]), True
        for t, p in devices[1:]:
            dist = [abs(int(x) - int(tick)) for x in t]
            j = dist.index(min(dist))  # the earlier of two equally near readings
            found &= dist[j] < half_ms
            value += float(p[j])
        if found:
            out.append(value)
    return np.array(out)


def _hold_total(devices: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """P(t) = Σ_d (last reading of d at or before t), t every reading in the common span.

    Instants strictly inside a gap of some device (an interval over 3 periods) are left out.
    """
    start = max(int(t[0]) for t, _ in devices)
    end = min(int(t[-1]) for t, _ in devices)
    instants = sorted({int(x) for t, _ in devices for x in t if start <= x <= end})
    out = []
    for x in instants:
        value, in_gap = 0.0, False
        for t, p in devices:
            i = max(k for k in range(len(t)) if t[k] <= x)
            period = float(np.median(np.diff(t)))
            in_gap |= i + 1 < len(t) and t[i] < x and t[i + 1] - t[i] > 3 * period
            value += float(p[i])
        if not in_gap:
            out.append(value)
    return np.array(out)


def _assert_levels(m: dict, reference: np.ndarray) -> None:
    assert len(reference) > 10
    for name, q in LEVELS:
        assert m[name] == pytest.approx(float(np.percentile(reference, q)), rel=1e-9), name


def _note(m: dict) -> str:
    return next(n for n in m["metric_notes"] if n.startswith("peak_power_w: "))


def test_periods_exactly_the_tolerance_apart_are_read_on_one_tick():
    """105 ms against 100 ms is 5 % of the shorter period: within the tolerance."""
    assert levels.SAME_PERIOD_TOLERANCE == 0.05
    rng = np.random.default_rng(11)
    a_t = np.arange(400) * 100
    b_t = np.arange(380) * 105
    devices = [(a_t, rng.uniform(50.0, 700.0, len(a_t))),
               (b_t, rng.uniform(50.0, 700.0, len(b_t)))]
    m = metrics.compute_run_metrics(_run(devices))
    assert "per sampling tick" in _note(m)
    reference = _tick_total(devices, 50.0)
    assert f"{len(reference)} ticks" in _note(m)
    _assert_levels(m, reference)


def _missing_share(missed: int, every: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Two devices on a 100 ms tick, the second missing ``missed`` readings.

    The reference is read 3 ms past every 100 ms for 20 s, the second device 3 ms earlier; its
    missed readings are single ones, never at either end.
    """
    rng = np.random.default_rng(12 + missed)
    a_t = np.arange(200) * 100 + 3
    b_t = np.arange(201) * 100
    keep = np.ones(len(b_t), dtype=bool)
    keep[np.arange(10, 195, every)[:missed]] = False
    assert np.count_nonzero(~keep) == missed
    b_t = b_t[keep]
    return [(a_t, rng.uniform(50.0, 700.0, len(a_t))),
            (b_t, rng.uniform(50.0, 700.0, len(b_t)))]


def test_exactly_the_minimum_share_of_matched_ticks_keeps_the_tick_sum():
    """20 of 200 ticks without a reading of the second device: 90 % matched, the minimum."""
    assert levels.MIN_TICK_SHARE == 0.9
    devices = _missing_share(20, 9)
    m = metrics.compute_run_metrics(_run(devices))
    reference = _tick_total(devices, 50.0)
    assert len(reference) == 200 - 20
    assert "per sampling tick" in _note(m)
    assert f"{len(reference)} ticks" in _note(m)
    _assert_levels(m, reference)


def test_one_tick_fewer_than_the_minimum_share_falls_back_to_sample_and_hold():
    devices = _missing_share(21, 8)
    m = metrics.compute_run_metrics(_run(devices))
    assert len(_tick_total(devices, 50.0)) == 200 - 21
    assert "sample-and-hold" in _note(m)
    _assert_levels(m, _hold_total(devices))


def test_devices_read_just_before_the_tick_with_missed_readings_sum_their_nearest_reading():
    """A device read 30 ms before each tick that misses three readings.

    After each miss its nearest reading to a tick is still the one 30 ms before it.
    """
    rng = np.random.default_rng(14)
    b_t = np.arange(300) * 100
    keep = np.ones(len(b_t), dtype=bool)
    keep[[60, 130, 200]] = False
    b_t = b_t[keep]
    a_t = np.arange(1, 280) * 100 + 30  # the reference stops before the other device
    devices = [(a_t, rng.uniform(50.0, 700.0, len(a_t))),
               (b_t, rng.uniform(50.0, 700.0, len(b_t)))]
    m = metrics.compute_run_metrics(_run(devices))
    reference = _tick_total(devices, 50.0)
    assert len(reference) == len(a_t) - 3  # only the ticks of the missed readings find none
    assert "per sampling tick" in _note(m)
    _assert_levels(m, reference)


def test_a_device_twice_as_fast_as_the_reference_is_summed_by_sample_and_hold():
    """Periods 100 ms and 50 ms differ by more than the tolerance.

    Every reference tick finds a reading of the faster device, yet its readings between the
    ticks count too.
    """
    a_t = np.arange(300) * 100
    b_t = np.arange(600) * 50
    a_p = np.full(len(a_t), 200.0)
    b_p = np.full(len(b_t), 100.0)
    b_p[271] = 600.0  # at 13.55 s, between two readings of the reference
    devices = [(a_t, a_p), (b_t, b_p)]
    m = metrics.compute_run_metrics(_run(devices))
    assert "sample-and-hold" in _note(m)
    assert m["peak_power_w"] == pytest.approx(800.0)
    _assert_levels(m, _hold_total(devices))


def test_instants_inside_a_gap_of_one_device_are_left_out_of_the_held_total():
    """A 3 s logger stall of the 250 ms device: the 100 ms device's readings in it do not count."""
    a_t = np.arange(0, 30_001, 100)
    b_t = np.arange(0, 30_001, 250)
    b_t = b_t[(b_t < 10_000) | (b_t > 13_000)]  # the last reading before the stall is at 9.75 s
    a_p = np.full(len(a_t), 100.0)
    a_p[(a_t > 9_750) & (a_t < 13_200)] = 900.0  # only strictly inside the gap
    b_p = np.full(len(b_t), 300.0)
    devices = [(a_t, a_p), (b_t, b_p)]
    m = metrics.compute_run_metrics(_run(devices))
    reference = _hold_total(devices)
    assert "sample-and-hold" in _note(m)
    assert f"{len(reference)} union instants" in _note(m)
    assert m["peak_power_w"] == pytest.approx(400.0)
    _assert_levels(m, reference)


def test_a_device_without_a_reading_in_the_common_span_has_no_peak_but_is_held():
    """A device read only on either side of a one-instant common span.

    The span is 1 s (the first device's last reading, the second's first); the third device,
    read at 0.95 s and 1.05 s, holds its 0.95 s reading there.
    """
    def dev(g: int, t: np.ndarray, p: np.ndarray) -> core._Dev:
        return core._Dev(g, t.astype(np.int64), p, 100.0, np.zeros(0, dtype=np.int64))

    a_t, b_t, c_t = np.arange(0, 1001, 100), np.arange(1000, 2001, 100), np.arange(50, 2000, 100)
    got = levels.sample_levels([dev(0, a_t, np.full(len(a_t), 100.0)),
                                dev(1, b_t, np.full(len(b_t), 200.0)),
                                dev(2, c_t, 300.0 + np.arange(len(c_t)))])
    assert got is not None and got.method == "hold"
    assert got.values.tolist() == [100.0 + 200.0 + 309.0]  # c's reading at 0.95 s is its 10th
    assert got.device_peaks[:2] == (100.0, 200.0)
    assert np.isnan(got.device_peaks[2])
