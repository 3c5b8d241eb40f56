"""The min/max pyramid: peaks survive every level, empty buckets are gaps, gaps break lines."""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds.explore import pyramid


def test_bucket_extrema_keeps_every_peak_and_dip_in_time_order():
    t = np.arange(0, 1000, 10, dtype=np.int64)  # 100 samples, 10 ms apart
    v = np.full(100, 50.0)
    v[13], v[17] = 400.0, -3.0  # bucket 1 (100..199 ms): max before min
    v[42] = 7.0  # bucket 4: the max (50 at 400 ms) comes first, then the dip
    first, second = pyramid.bucket_extrema(t, v, 0, 100, 10)
    assert (first[1], second[1]) == (400.0, -3.0)
    assert (first[4], second[4]) == (50.0, 7.0)
    assert (first[0], second[0]) == (50.0, 50.0)
    assert np.nanmax(np.maximum(first, second)) == v.max()
    assert np.nanmin(np.minimum(first, second)) == v.min()


def test_empty_buckets_and_missing_samples_are_nan_never_zero():
    t = np.array([0, 10, 20, 500, 510], dtype=np.int64)
    v = np.array([1.0, np.nan, 3.0, 9.0, 8.0])
    first, second = pyramid.bucket_extrema(t, v, 0, 100, 6)
    assert (first[0], second[0]) == (1.0, 3.0)  # the NaN sample is skipped
    assert np.isnan(first[1:5]).all() and np.isnan(second[1:5]).all()
    assert (first[5], second[5]) == (9.0, 8.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_level_brackets_the_raw_signal(seed):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.integers(80, 120, 20_000)).astype(np.int64)
    v = rng.normal(300, 50, t.size)
    levels = pyramid.plan_levels(int(t[0]), int(t[-1]), 100)
    assert levels.bucket_ms[0] == 100 and len(levels.bucket_ms) >= 3
    assert (t[-1] - t[0]) / levels.bucket_ms[-1] <= pyramid.OVERVIEW_BUCKETS
    for width in levels.bucket_ms[1:]:
        n = int((t[-1] - levels.origin_ms) // width) + 1
        first, second = pyramid.bucket_extrema(t, v, levels.origin_ms, width, n)
        idx = (t - levels.origin_ms) // width
        np.testing.assert_allclose(np.maximum(first, second)[idx[v.argmax()]], v.max(),
                                   rtol=1e-6)
        lo = np.minimum(first, second)
        hi = np.maximum(first, second)
        assert (v >= lo[idx] - 1e-3).all() and (v <= hi[idx] + 1e-3).all()


def test_gap_breaks_put_one_point_inside_each_gap():
    t = np.array([0, 100, 200, 900, 1000, 2000], dtype=np.int64)
    positions, times = pyramid.gap_breaks(t, 300)
    assert positions.tolist() == [3, 5] and times.tolist() == [550, 1500]
    assert np.insert(t, positions, times).tolist() == [0, 100, 200, 550, 900, 1000, 1500, 2000]
    assert pyramid.gap_breaks(t[:1], 300)[0].size == 0
