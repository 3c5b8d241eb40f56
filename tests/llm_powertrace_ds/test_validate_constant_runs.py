"""The stuck-sensor span visits only repeated readings and equals the span over every run."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds.validate import _longest_constant_run_ms


def span_over_every_run(t_ms: np.ndarray, power: np.ndarray) -> float:
    """The definition: every run of equal readings (a NaN never equals), its last − first time."""
    best, start = 0.0, 0
    for i in range(1, len(power) + 1):
        if i == len(power) or not power[i] - power[i - 1] == 0:
            if not math.isnan(power[start]):
                best = max(best, float(t_ms[i - 1] - t_ms[start]))
            start = i
    return best


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400),
                          st.sampled_from([1.0, 2.0, 3.0, math.nan, math.inf, -math.inf])),
                max_size=40))
def test_longest_constant_run_equals_the_span_over_every_run(rows):
    """Repeats anywhere, NaN and infinities among them: the same longest span."""
    t_ms = np.cumsum([dt for dt, _ in rows]).astype(np.int64)
    power = np.array([p for _, p in rows])
    with np.errstate(invalid="ignore"):
        assert _longest_constant_run_ms(t_ms, power) == span_over_every_run(t_ms, power)
