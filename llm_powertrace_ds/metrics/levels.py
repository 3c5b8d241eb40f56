"""The node total at the sampling instants: what the level metrics (peak, percentiles) read.

Linear interpolation onto a grid that is not aligned to the readings averages two neighbouring
readings, and so low-passes the signal: on GPUs whose ``power_w`` is an instantaneous reading
(A100 and older, NVML field 186) a spike that falls between two grid points loses up to half
its height. Level statistics are therefore taken where the devices were actually read:

``tick``
    Devices read on a common tick (one ``nvidia-smi`` or sampler loop reads every device in
    turn, a few ms apart): the reference device's readings define the ticks; every other
    device contributes its reading nearest to the tick when it lies strictly within half a
    period of it. P_k = Σ_d P_d(nearest reading to tick k). Ticks at which a device has no
    such reading (it was in a gap) are left out. Chosen when the devices' periods agree within
    :data:`SAME_PERIOD_TOLERANCE` and at least :data:`MIN_TICK_SHARE` of the reference's
    ticks find every device.
``hold``
    Otherwise, sample-and-hold at the union of the instants: at every reading t of any device,
    P(t) = Σ_d (the last reading of d at or before t); instants inside a gap of some device
    are left out. Nothing is averaged, so no spike is shaved.

Both use only the span where every device is present (from the latest first reading to the
earliest last reading). One device: its own readings (both methods agree).

A run whose readings hold until the next one (``sample_hold`` ``previous``: a change-only
source, which logs a reading only when it changes) has no levels here: its readings are not
equally weighted in time, so its levels are taken on the step-held node total of the 0.1 s
grid, where every grid point weighs the same time (``al.values()``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .core import _Dev

SAME_PERIOD_TOLERANCE = 0.05
"""Relative difference of the devices' median periods below which a common tick is tried."""
MIN_TICK_SHARE = 0.9
"""Share of the reference device's ticks that must find every device for the ``tick`` method."""


@dataclass(frozen=True)
class Levels:
    """The node total at the sampling instants (see the module docstring).

    Attributes:
        values: float64 node total at each tick (``tick``) or union instant (``hold``).
        method: ``tick`` or ``hold``.
        device_peaks: per device, its largest reading inside the common span (W).
    """

    values: np.ndarray
    method: str
    device_peaks: tuple[float, ...]

    def note(self, n_devices: int) -> str:
        """The ``metric_notes`` line that says how the level metrics were formed."""
        if self.method == "tick":
            return (f"peak_power_w: with the percentiles, PAR and swing, taken on the node "
                    f"total summed per sampling tick over {n_devices} "
                    f"{'device' if n_devices == 1 else 'devices'}, "
                    f"{len(self.values)} ticks (no interpolation)")
        return (f"peak_power_w: with the percentiles, PAR and swing, taken on the node total "
                f"by sample-and-hold at the {len(self.values)} union instants of devices read "
                "at different instants (no interpolation)")


def _in_gap(d: _Dev, t: np.ndarray) -> np.ndarray:
    """Bool per time: t lies strictly inside one of the device's gaps."""
    if not d.gap_idx.size:
        return np.zeros(len(t), dtype=bool)
    i = np.searchsorted(d.t_ms, t, side="right") - 1  # the reading at or before t
    inside = np.zeros(len(t), dtype=bool)
    ok = (i >= 0) & (i < len(d.t_ms) - 1)
    gap = np.zeros(len(d.t_ms), dtype=bool)
    gap[d.gap_idx] = True
    inside[ok] = gap[i[ok]] & (d.t_ms[i[ok]] < t[ok])
    return inside


def _positions(t_ms: np.ndarray, ticks: np.ndarray) -> np.ndarray:
    """``numpy.searchsorted(t_ms, ticks)`` (side ``left``) for increasing ``ticks``.

    Devices read in turn on one tick have one reading per tick, so the positions are usually
    consecutive: they are guessed from the first one and checked against both neighbours
    (``t_ms[j - 1] < tick <= t_ms[j]``, which defines the position); only when a check fails
    (a missed or extra reading) is every tick searched.
    """
    m = len(ticks)
    j0 = int(np.searchsorted(t_ms, ticks[0])) if m else 0
    if 0 < m and j0 + m <= len(t_ms):
        near = t_ms[j0:j0 + m]  # t_ms[j0 - 1] < ticks[0] holds by the search of j0
        if (near >= ticks).all() and (near[:-1] < ticks[1:]).all():
            return np.arange(j0, j0 + m)
    return np.searchsorted(t_ms, ticks)


def _tick_sum(devs: list[_Dev], start: int, end: int) -> np.ndarray | None:
    """Per-tick sums on the reference device's ticks, or ``None`` if too few ticks match."""
    ref = devs[0]
    lo, hi = np.searchsorted(ref.t_ms, [start, end], side="left")
    hi = np.searchsorted(ref.t_ms, end, side="right")
    ticks = ref.t_ms[lo:hi]
    if not len(ticks):
        return None
    total = ref.p[lo:hi].copy()
    matched = np.ones(len(ticks), dtype=bool)
    half = 0.5 * min(d.period_ms for d in devs)
    for d in devs[1:]:
        j = _positions(d.t_ms, ticks)  # first reading at or after the tick
        right = np.minimum(j, len(d.t_ms) - 1)
        left = np.maximum(j - 1, 0)
        dr = np.abs(d.t_ms[right] - ticks)
        dl = np.abs(ticks - d.t_ms[left])
        pick = np.where(dl <= dr, left, right)
        dist = np.minimum(dl, dr)
        matched &= dist < half
        total += d.p[pick]
    if np.count_nonzero(matched) < MIN_TICK_SHARE * len(ticks):
        return None
    return total if matched.all() else total[matched]


def _hold_sum(devs: list[_Dev], start: int, end: int) -> np.ndarray:
    """Sample-and-hold node total at every reading of any device inside [start, end]."""
    times = np.unique(np.concatenate([d.t_ms[(d.t_ms >= start) & (d.t_ms <= end)]
                                      for d in devs]))
    total = np.zeros(len(times))
    bad = np.zeros(len(times), dtype=bool)
    for d in devs:
        i = np.searchsorted(d.t_ms, times, side="right") - 1  # >= 0: times >= every first reading
        total += d.p[i]
        bad |= _in_gap(d, times)
    return total[~bad] if bad.any() else total


def sample_levels(devs: list[_Dev]) -> Levels | None:
    """The node total at the sampling instants, or ``None`` without a common span.

    Args:
        devs: prepared devices (each with at least 2 valid readings).
    """
    if any(d.hold == "previous" for d in devs):
        return None  # time-weighted on the grid instead (module docstring)
    start = max(int(d.t_ms[0]) for d in devs)
    end = min(int(d.t_ms[-1]) for d in devs)
    if end < start:
        return None
    peaks = []
    for d in devs:
        a, b = np.searchsorted(d.t_ms, [start, end], side="left")
        b = np.searchsorted(d.t_ms, end, side="right")
        peaks.append(float(d.p[a:b].max()) if b > a else float("nan"))
    periods = np.array([d.period_ms for d in devs], dtype=np.float64)
    same = bool(np.all(np.isfinite(periods))) and (
        periods.max() - periods.min() <= SAME_PERIOD_TOLERANCE * periods.min())
    values = _tick_sum(devs, start, end) if same else None
    method = "tick"
    if values is None:
        values, method = _hold_sum(devs, start, end), "hold"
    if not len(values):
        return None
    return Levels(values, method, tuple(peaks))
