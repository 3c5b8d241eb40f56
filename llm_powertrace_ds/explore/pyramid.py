"""Multi-resolution, peak-preserving downsampling of one time series (pure numpy).

Level 0 is the raw samples. Level ``k >= 1`` cuts the run clock into buckets of
``w_k = period_ms * FACTOR**k`` ms and keeps, per bucket, the minimum and the maximum of the
samples in it, in the order in which they occurred (``first``, ``second``): drawing those two
points per bucket keeps every peak and every dip of the raw trace at any zoom (an M4-style
envelope; a mean would shave the peaks a grid operator cares about). A bucket with no valid
sample is NaN in both arrays, so the chart shows a gap there, never a made-up value.

Each level is cut into chunks of ``CHUNK_POINTS`` buckets (or raw samples' worth of time), so the
explorer loads only the chunks of the visible range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FACTOR = 8
"""Ratio of the bucket widths of two adjacent levels. Levels above the raw one add
``2 / (FACTOR - 1)`` values per raw sample (a min and a max per bucket): 0.29 with 8, 0.67 with
4, which would put the site over its size bound (``site.SIZE_BOUND``) on compressed datasets.
The cost: the power chart shows 188 to 1,500 buckets in view (375 to 1,500 with 4): still every
peak and dip, in coarser steps at some zooms."""
OVERVIEW_BUCKETS = 400
"""The coarsest level has at most this many buckets over the whole run. The run page draws
power at the finest level with at most 1,500 buckets in view (3,000 points per line) and the
small panels (utilisation, clocks, temperature, memory) with at most 400."""
CHUNK_POINTS = 16384
"""Buckets per chunk file (level >= 1); level 0 chunks span ``CHUNK_POINTS`` sample periods."""


@dataclass(frozen=True)
class Levels:
    """The bucket widths of a run's pyramid.

    Attributes:
        origin_ms: run-clock time of bucket 0's left edge (the earliest sample).
        period_ms: the raw sample period (level 0's nominal spacing).
        bucket_ms: ``bucket_ms[k]`` is level k's bucket width; ``bucket_ms[0] == period_ms``.
    """

    origin_ms: int
    period_ms: int
    bucket_ms: tuple[int, ...]

    def chunk_ms(self, level: int) -> int:
        """Run-clock span of one chunk file of ``level``."""
        return self.bucket_ms[level] * CHUNK_POINTS

    def n_chunks(self, level: int, end_ms: int) -> int:
        """How many chunks of ``level`` cover ``[origin_ms, end_ms]``."""
        return int((end_ms - self.origin_ms) // self.chunk_ms(level)) + 1


def plan_levels(origin_ms: int, end_ms: int, period_ms: float) -> Levels:
    """Bucket widths from the raw period up to the overview level.

    ``w_k = period * FACTOR**k`` for ``k = 1, 2, ...`` until ``(end - origin) / w_k`` is at most
    :data:`OVERVIEW_BUCKETS`.
    """
    period = max(1, int(round(period_ms)))
    widths = [period]
    span = max(1, end_ms - origin_ms)
    while span / widths[-1] > OVERVIEW_BUCKETS:
        widths.append(widths[-1] * FACTOR)
    return Levels(int(origin_ms), period, tuple(widths))


def gap_breaks(t_ms: np.ndarray, gap_ms: float) -> tuple[np.ndarray, np.ndarray]:
    """Where to break a line: one point in the middle of every interval longer than ``gap_ms``.

    A line chart joins consecutive points; a NaN value inserted there (``np.insert(values,
    positions, nan)``, and ``np.insert(t_ms, positions, times)``) makes it break across a gap
    instead of drawing a straight line through time that was not measured.

    Returns:
        ``positions`` (insertion indices) and ``times`` (the gaps' midpoints, ms).
    """
    if len(t_ms) < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    gaps = np.flatnonzero(np.diff(t_ms) > gap_ms)
    return gaps + 1, (t_ms[gaps] + t_ms[gaps + 1]) // 2


def bucket_extrema(t_ms: np.ndarray, values: np.ndarray, origin_ms: int, width_ms: int,
                   n_buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-bucket (first, second) extrema in time order; NaN for buckets with no valid sample.

    Args:
        t_ms: sample times, non-decreasing.
        values: samples (NaN = missing, ignored).
        origin_ms: left edge of bucket 0.
        width_ms: bucket width.
        n_buckets: length of the output arrays.

    Returns:
        ``first``, ``second`` (float32): for bucket i, ``{first[i], second[i]} = {min, max}`` of
        the samples with ``origin + i*w <= t < origin + (i+1)*w``, the earlier one first.
    """
    first = np.full(n_buckets, np.nan, dtype=np.float32)
    second = np.full(n_buckets, np.nan, dtype=np.float32)
    ok = np.isfinite(values)
    t, v = t_ms[ok], values[ok].astype(np.float64)
    if not len(t):
        return first, second
    idx = (t - origin_ms) // width_ms
    keep = (idx >= 0) & (idx < n_buckets)
    idx, v = idx[keep], v[keep]
    if not len(idx):
        return first, second
    starts = np.flatnonzero(np.concatenate(([True], idx[1:] != idx[:-1])))
    seg = np.cumsum(np.concatenate(([0], (idx[1:] != idx[:-1]).astype(np.int64))))
    lo = np.minimum.reduceat(v, starts)
    hi = np.maximum.reduceat(v, starts)
    pos = np.arange(len(v))
    big = len(v)
    i_lo = np.minimum.reduceat(np.where(v == lo[seg], pos, big), starts)
    i_hi = np.minimum.reduceat(np.where(v == hi[seg], pos, big), starts)
    lo_first = i_lo <= i_hi
    buckets = idx[starts]
    first[buckets] = np.where(lo_first, lo, hi)
    second[buckets] = np.where(lo_first, hi, lo)
    return first, second
