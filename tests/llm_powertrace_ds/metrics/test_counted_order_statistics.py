"""Shortcuts of the metrics' order statistics and searches give numpy's answers exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds.metrics import interval_median
from llm_powertrace_ds.metrics.core import BAND_SELECT_MIN, COUNTED_MEDIAN_SPAN, _percentiles
from llm_powertrace_ds.metrics.levels import _positions


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(-50, 300), min_size=1, max_size=60))
def test_interval_median_equals_numpy_median_of_integers(values):
    """Counting gives numpy's median: the middle value, or the mean of the two middle ones."""
    arr = np.array(values, dtype=np.int64)
    assert interval_median(arr) == float(np.median(arr))


def test_interval_median_of_logged_intervals_equals_numpy():
    """72,000 jittered 100 ms intervals (odd and even counts): the same float."""
    rng = np.random.default_rng(3)
    for n in (71_999, 72_000):
        dt = 100 + np.rint(rng.normal(0, 1.2, n)).astype(np.int64)
        assert interval_median(dt) == float(np.median(dt))


def test_interval_median_falls_back_to_numpy_beyond_its_range_and_for_floats():
    """A range wider than the counted span, and float values, take numpy.median itself."""
    wide = np.array([0, COUNTED_MEDIAN_SPAN + 1, 7, 3], dtype=np.int64)
    assert interval_median(wide) == float(np.median(wide)) == 5.0
    floats = np.array([0.5, 0.25, 0.75])
    assert interval_median(floats) == 0.5


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 400), min_size=1, max_size=80, unique=True),
       st.lists(st.integers(-5, 405), min_size=1, max_size=80, unique=True))
def test_tick_positions_equal_searchsorted(readings, ticks):
    """Any increasing ticks against any increasing readings: searchsorted's positions."""
    t_ms = np.array(sorted(readings), dtype=np.int64)
    tk = np.array(sorted(ticks), dtype=np.int64)
    np.testing.assert_array_equal(_positions(t_ms, tk), np.searchsorted(t_ms, tk))


def test_tick_positions_of_devices_read_in_turn_missing_a_reading_or_reading_on_a_tick():
    """Read 2 ms after each tick, missing a reading, and a reading exactly on the next tick.

    The reading before a guessed position must lie strictly before its tick.
    """
    ticks = np.arange(0, 10_000, 100, dtype=np.int64)
    device = ticks + 2
    got = _positions(device, ticks)
    np.testing.assert_array_equal(got, np.arange(len(ticks)))
    missed = np.delete(device, 40)
    np.testing.assert_array_equal(_positions(missed, ticks), np.searchsorted(missed, ticks))
    on_tick = np.array([100, 150, 250], dtype=np.int64)
    three = np.array([0, 100, 200], dtype=np.int64)
    assert _positions(on_tick, three).tolist() == np.searchsorted(on_tick, three).tolist() \
        == [0, 0, 2]


def long_arrays() -> dict[str, np.ndarray]:
    """Long arrays of every shape the band selection meets, including a misleading sample."""
    rng = np.random.default_rng(11)
    n = 3 * BAND_SELECT_MIN + 17
    decoy = rng.normal(0, 1, n)
    decoy[::64] = 1e6  # every sampled value is an outlier: the band misses, the fallback runs
    ties = rng.integers(0, 4, n).astype(float)
    sparse = np.zeros(n)
    sparse[rng.integers(0, n, 25)] = rng.normal(0, 1, 25)
    return {"normal": rng.normal(300, 40, n), "ascending": np.arange(n, dtype=float),
            "descending": np.arange(n, 0, -1, dtype=float), "ties": ties, "sparse": sparse,
            "decoy": decoy}


@pytest.mark.parametrize("qs", [(95, 99), (99,), (95,), (0.5,), (50,), (100,), (0,), (5, 95),
                                (5, 50, 95, 99)])
def test_percentiles_of_long_arrays_equal_numpy(qs):
    """Narrow ranks through the band, wide ones through the whole partition: numpy's values."""
    for name, x in long_arrays().items():
        want = [float(v) for v in np.atleast_1d(np.percentile(x, qs))]
        assert _percentiles(x.copy(), qs) == want, name
