"""What a grid operator looks at in a load profile: level, swing, ramps per time scale, bands.

Every figure is computed on the piecewise-constant profile at its own resolution Δt (the output
says which), so a coarser profile shows smaller ramps and band power than the same load seen finer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_BANDS_HZ: tuple[tuple[float, float], ...] = ((0.1, 1.0), (1.0, 3.0))
"""Bands reported by default: sub-synchronous oscillation ranges that transmission operators
watch (Choukse et al., arXiv 2508.14318, discuss 0.2-3 Hz)."""
RAMP_WINDOWS_S: tuple[float, ...] = (1.0, 60.0)
"""Time scales of the window-mean ramps reported by default (per second, per minute)."""
WELCH_SEGMENT_POINTS = 1024
"""Points per Welch segment (Hann window, half overlap): 102.4 s at 0.1 s."""
MIN_CYCLES = 5
"""A band's lower edge needs this many cycles in one Welch segment to be resolved."""


@dataclass(frozen=True)
class Band:
    """A frequency band [low_hz, high_hz) and the RMS power limit on it, when one is set."""

    low_hz: float
    high_hz: float
    max_rms_w: float | None = None

    @property
    def label(self) -> str:
        return f"{self.low_hz:g}-{self.high_hz:g} Hz"


DEFAULT_BANDS: tuple[Band, ...] = tuple(Band(lo, hi) for lo, hi in DEFAULT_BANDS_HZ)


def band_rms(power_w: np.ndarray, dt_s: float, bands: Sequence[Band],
             sensor_average_s: float | None = None) -> tuple[dict[str, float | None], list[str]]:
    """RMS power in each band: √(Σ_{f ∈ [lo, hi)} S(f) · Δf).

    S is the one-sided Welch power spectral density (``scipy.signal.welch``, Hann windows of
    :data:`WELCH_SEGMENT_POINTS` points or the whole profile when shorter, half overlap, mean
    removed per segment) of the profile sampled every ``dt_s``. A band is null (with a note) when
    its upper edge is above the Nyquist frequency 1/(2Δt) or a segment holds fewer than
    :data:`MIN_CYCLES` cycles of its lower edge. When the sensor averages over a window w, power
    above 1/(2w) Hz was filtered before it was recorded: the value is kept and a note says it is
    under-reported.
    """
    from scipy.signal import welch

    out: dict[str, float | None] = {}
    notes: list[str] = []
    n = len(power_w)
    nper = min(n, WELCH_SEGMENT_POINTS)
    fs = 1.0 / dt_s
    freqs, psd = welch(power_w, fs=fs, window="hann", nperseg=nper, noverlap=nper // 2,
                       detrend="constant", scaling="density")
    df = float(freqs[1] - freqs[0]) if len(freqs) > 1 else math.inf
    for band in bands:
        if band.high_hz > fs / 2 * (1 + 1e-9):
            out[band.label] = None
            notes.append(f"band {band.label}: not resolved at Δt = {dt_s:g} s (Nyquist "
                         f"{fs / 2:g} Hz)")
            continue
        if band.low_hz * nper * dt_s < MIN_CYCLES:
            out[band.label] = None
            notes.append(f"band {band.label}: the profile is too short to resolve "
                         f"{band.low_hz:g} Hz ({nper * dt_s:g} s per spectrum segment)")
            continue
        sel = (freqs >= band.low_hz - 1e-12) & (freqs < band.high_hz - 1e-12)
        out[band.label] = math.sqrt(max(float(psd[sel].sum()) * df, 0.0))
        if sensor_average_s is not None and band.high_hz > 1.0 / (2.0 * sensor_average_s):
            notes.append(f"band {band.label}: under-reported — the input's sensor averages over "
                         f"{sensor_average_s:g} s, which filters power above "
                         f"{1.0 / (2.0 * sensor_average_s):g} Hz before it is recorded "
                         "(power_is_1s_average)")
    return out, notes


def spectral_bands(power_w: np.ndarray, dt_s: np.ndarray, bands: Sequence[Band],
                   sensor_average_s: float | None = None
                   ) -> tuple[dict[str, float | None], list[str]]:
    """:func:`band_rms` of a profile on any time base.

    A regular profile is used as it is; an irregular one through its interval means at its
    median interval, unless those would be more than :data:`MAX_WINDOWS` (a long gap among short
    steps): then every band is null, with a note, rather than an allocation sized by the gap.
    """
    res = float(np.median(dt_s))
    regular = bool(np.allclose(dt_s[:-1], res, rtol=1e-2))
    if regular:
        return band_rms(power_w, res, bands, sensor_average_s)
    n = float(dt_s.sum()) / res
    if n > MAX_WINDOWS:
        note = (f"band power not computed: the irregular time base spans {n:.3g} intervals of "
                f"its median {res:g} s, more than {MAX_WINDOWS}; resample it coarser")
        return {b.label: None for b in bands}, [note]
    out, notes = band_rms(window_means(power_w, dt_s, res), res, bands, sensor_average_s)
    notes.append(f"band power of an irregular time base: from its {res:g} s interval means")
    return out, notes


def window_means(power_w: np.ndarray, dt_s: np.ndarray, window_s: float) -> np.ndarray:
    """Means over complete consecutive windows [k·w, (k+1)·w) from the profile's start.

    P̄_k = (E((k+1)w) − E(kw)) / w, E the cumulative energy; a partial last window is dropped.
    """
    edges_t = np.concatenate(([0.0], np.cumsum(dt_s)))
    energy = np.concatenate(([0.0], np.cumsum(power_w * dt_s)))
    n = int(math.floor(edges_t[-1] / window_s + 1e-9))
    if n < 1:
        return np.zeros(0)
    at = np.interp(np.arange(n + 1) * window_s, edges_t, energy)
    return np.diff(at) / window_s


MAX_WINDOWS = 10_000_000
"""Most window means ever held at once (the profile's own sample cap): a long span of few samples
is summarised through its sample boundaries instead of window by window."""


def window_ramp_max(power_w: np.ndarray, dt_s: np.ndarray, window_s: float) -> float | None:
    """max_k |P̄_{k+1} − P̄_k| / w over consecutive complete windows of length w (None: < 2 fit).

    Sized by samples, not by the span: a window that holds no sample boundary has the mean of
    the one sample covering it, so only pairs of windows next to a boundary can differ; when the
    span holds more windows than :data:`MAX_WINDOWS` only those pairs are evaluated (exact, and
    O(samples) memory: a two-sample profile 1e10 s long needs a handful of windows, not 1.7e8).
    """
    total = float(dt_s.sum())
    n = int(math.floor(total / window_s + 1e-9))
    if n < 2:
        return None
    if n <= min(MAX_WINDOWS, 4 * len(power_w) + 1024):
        means = window_means(power_w, dt_s, window_s)
        return float(np.abs(np.diff(means)).max()) / window_s
    edges_t = np.concatenate(([0.0], np.cumsum(dt_s)))
    energy = np.concatenate(([0.0], np.cumsum(power_w * dt_s)))
    idx = np.floor(edges_t[1:-1] / window_s).astype(np.int64)
    k = np.unique(np.concatenate((idx - 1, idx)))
    k = k[(k >= 0) & (k <= n - 2)]
    if len(k) == 0:
        return 0.0
    at = np.interp(np.stack([k, k + 1, k + 2]).astype(np.float64) * window_s, edges_t, energy)
    means = np.diff(at, axis=0) / window_s
    return float(np.abs(means[1] - means[0]).max()) / window_s


def swing_p95_p5_w(power_w: np.ndarray, dt_s: np.ndarray) -> float:
    """p95 − p5 of the load, each sample weighted by how long it holds (Δt_k)."""
    order = np.argsort(power_w, kind="stable")
    cum = np.cumsum(dt_s[order])
    at = np.searchsorted(cum, np.array([0.05, 0.95]) * cum[-1])
    at = np.minimum(at, len(order) - 1)
    lo, hi = power_w[order[at]]
    return float(hi - lo)


def profile_metrics(power_w: np.ndarray, dt_s: np.ndarray, *,
                    bands: Sequence[Band] | None = None,
                    ramp_windows_s: Sequence[float] = RAMP_WINDOWS_S,
                    sensor_average_s: float | None = None) -> tuple[dict[str, Any], list[str]]:
    """Grid-facing figures of a piecewise-constant profile.

    - ``energy_j`` = Σ P_k Δt_k; ``mean_w`` = energy / Σ Δt_k; ``peak_w`` = max P; ``min_w`` =
      min P; ``range_w`` = peak − min (the dynamic range, at the profile's resolution);
      ``swing_p95_p5_w`` = p95 − p5 of the samples, time-weighted (the swing ``facility``
      reports: robust to single spikes).
    - ``ramp_up_max_w_per_s`` / ``ramp_down_max_w_per_s`` = max over k of ±(P_{k+1} − P_k) / Δt_k
      (0 when it never rises / falls).
    - ``ramp_max_w_per_s`` = {w: max_k |P̄_{k+1} − P̄_k| / w} for consecutive complete window means
      P̄ of length w (null when fewer than two windows fit).
    - ``band_rms_w`` = {band: RMS power in the band}, see :func:`band_rms`.
    """
    bands = DEFAULT_BANDS if bands is None else bands
    energy = float(np.dot(power_w, dt_s))
    total = float(dt_s.sum())
    d = np.diff(power_w) / dt_s[:-1]
    ramps: dict[str, float | None] = {}
    for w in ramp_windows_s:
        ramps[f"{w:g}"] = window_ramp_max(power_w, dt_s, w)
    bands_out, notes = spectral_bands(power_w, dt_s, bands, sensor_average_s)
    return {
        "energy_j": energy,
        "energy_mwh": energy / 3.6e9,
        "mean_w": energy / total if total else None,
        "peak_w": float(power_w.max()),
        "min_w": float(power_w.min()),
        "range_w": float(power_w.max() - power_w.min()),
        "swing_p95_p5_w": swing_p95_p5_w(power_w, dt_s),
        "ramp_up_max_w_per_s": max(0.0, float(d.max())) if len(d) else None,
        "ramp_down_max_w_per_s": max(0.0, float(-d.min())) if len(d) else None,
        "ramp_max_w_per_s": ramps,
        "band_rms_w": bands_out,
    }, notes
