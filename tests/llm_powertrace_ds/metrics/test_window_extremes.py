"""Sliding window extremes equal the extremes of every window, also at the short ends."""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds.metrics import filters


@pytest.mark.parametrize("n", [1, 2, 3, 7, 12])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 12, 13])
def test_every_window_extreme_and_none_when_the_window_is_longer(n, size):
    """One value per window x[j:j + size], j = 0..n − size; an empty array when n < size."""
    x = np.random.default_rng(n * 31 + size).normal(0, 1, n)
    windows = [x[j:j + size] for j in range(n - size + 1)]
    assert filters.sliding_max(x, size).tolist() == [float(w.max()) for w in windows]
    assert filters.sliding_min(x, size).tolist() == [float(w.min()) for w in windows]
