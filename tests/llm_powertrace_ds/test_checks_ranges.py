"""The range gate's two-pass shortcut refuses exactly the samples the element-wise test refuses."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds import checks
from llm_powertrace_ds.checks import SIGNAL_RANGES_BY_NAME, Range, implausible_samples
from llm_powertrace_ds.run import DeviceSeries


def first_bad_by_masks(values: np.ndarray, rng: Range) -> int | None:
    """The element-wise definition: not NaN, and not finite as float32 or outside the range."""
    with np.errstate(invalid="ignore", over="ignore"):
        as32 = values.astype(np.float32)
        bad = ~np.isnan(values) & (~np.isfinite(as32) | (values < rng.low) | (values > rng.high))
    hits = np.flatnonzero(bad)
    return int(hits[0]) if len(hits) else None


CELLS = st.one_of(st.floats(-100, 6000), st.sampled_from([math.nan, math.inf, -math.inf, 1e300,
                                                          0.0, 5000.0, -0.0]))


@settings(max_examples=500, deadline=None)
@given(st.lists(CELLS, min_size=1, max_size=40),
       st.sampled_from(sorted(SIGNAL_RANGES_BY_NAME)))
def test_first_out_of_range_sample_is_the_element_wise_one(cells, name):
    """NaN is never refused; infinity, 1e300 (inf as float32) and out-of-range values are."""
    values = np.array(cells, dtype=np.float64)
    rng = SIGNAL_RANGES_BY_NAME[name]
    assert checks._first_bad(values, rng) == first_bad_by_masks(values, rng)


def test_range_ends_are_inclusive_and_the_next_float_beyond_is_refused():
    """For every signal: its two ends pass; the nearest float beyond either end is refused."""
    for name, rng in SIGNAL_RANGES_BY_NAME.items():
        ends = np.array([np.nan, rng.low, rng.high])
        assert checks._first_bad(ends, rng) is None, name
        for beyond in (np.nextafter(rng.high, np.inf), np.nextafter(rng.low, -np.inf)):
            assert checks._first_bad(np.append(ends, beyond), rng) == 3, name


def test_never_reported_and_in_range_signals_pass_and_one_bad_sample_is_counted():
    """An all-NaN column and an in-range one pass; one value over the ceiling is reported."""
    n = 1000
    ok = {"power_w": np.full(n, 300.0), "temp_c": np.full(n, np.nan),
          "gpu_util_pct": np.linspace(0, 100, n)}
    assert implausible_samples([DeviceSeries(0, np.arange(n), ok)]) == []
    hot = dict(ok, temp_c=np.where(np.arange(n) == 7, 151.0, np.nan))
    assert implausible_samples([DeviceSeries(0, np.arange(n), hot)]) == [
        "gpu 0: 1 temp_c sample(s) outside -40..150"]
