"""Oscillation metrics (Welch spectrum, dominant peak, bands) and across-device metrics."""

from __future__ import annotations

import functools
import math

import numpy as np

from . import filters
from .core import (
    _CHUNK,
    ACROSS_NAMES,
    BACKGROUND_BINS,
    BANDS_HZ,
    MIN_CYCLES,
    MIN_PEAK_RATIO,
    MIN_SPECTRUM_S,
    PEAK_FALSE_ALARM,
    PROJECTED_DEVICES,
    SPECTRUM_BAND_HZ,
    SYNC_HIGHPASS_HZ,
    WELCH_SEGMENT_S,
    Aligned,
    _EventIndex,
    _events,
    _Out,
    _percentiles,
    _sliding_range,
)


@functools.lru_cache(maxsize=64)
def _chi2_ppf(p: float, dof: float) -> float:
    """``scipy.stats.chi2.ppf`` (:func:`filters.chi2_ppf`: no SciPy import, ≈ 0.15 s a process).

    Cached: the same band and window count recur run after run.
    """
    return filters.chi2_ppf(p, dof)


@functools.lru_cache(maxsize=8)
def _highpass(fs: float) -> tuple[filters.HighPass, np.ndarray]:
    """The synchrony high-pass (one Butterworth section) and its steady state ``zi`` (cached)."""
    sos, zi = filters.butter_highpass(SYNC_HIGHPASS_HZ, fs)
    zi.flags.writeable = False
    return filters.HighPass(sos), zi


def welch_windows(al: Aligned, segment_s: float = WELCH_SEGMENT_S) -> int:
    """Number of Welch windows :func:`welch_psd` averages (0 when none fits)."""
    starts, stops = al.segments()
    lengths = stops - starts
    if not lengths.size:
        return 0
    nper = int(min(round(segment_s / al.step_s), lengths.max()))
    hop = max(1, nper // 2)
    use = lengths >= nper
    return int(((lengths[use] - nper) // hop + 1).sum())


def welch_psd(al: Aligned, segment_s: float = WELCH_SEGMENT_S,
              min_s: float = MIN_SPECTRUM_S) -> tuple[np.ndarray, np.ndarray] | None:
    """Welch power spectral density (W²/Hz) of the node total over its gap-free segments.

    Hann windows of ``min(segment_s, longest segment)`` with 50 % overlap, each linearly
    detrended, are taken inside every segment long enough and averaged (what
    ``scipy.signal.welch(..., detrend="linear")`` does on one segment). Returns ``None`` when no
    segment is at least ``min_s`` long.
    """
    starts, stops = al.segments()
    lengths = stops - starts
    nmin = int(math.ceil(min_s / al.step_s))
    if not lengths.size or lengths.max() < nmin:
        return None
    nper = int(min(round(segment_s / al.step_s), lengths.max()))
    hop = nper // 2
    use = lengths >= nper
    counts = (lengths[use] - nper) // hop + 1
    first = np.repeat(starts[use], counts)
    offset = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    wstart = first + hop * offset
    frames = np.lib.stride_tricks.sliding_window_view(al.total, nper)[wstart]
    tc = np.arange(nper) - (nper - 1) / 2.0  # linear detrend by projection on (1, t)
    frames -= frames.mean(axis=1, keepdims=True)
    frames -= np.outer(frames @ tc / float(tc @ tc), tc)
    win = filters.hann(nper)
    fs = 1.0 / al.step_s
    spec = np.abs(np.fft.rfft(frames * win, axis=1)) ** 2
    psd = spec.mean(axis=0) / (fs * np.sum(win ** 2))
    if nper % 2 == 0:
        psd[1:-1] *= 2
    else:
        psd[1:] *= 2
    freqs = np.fft.rfftfreq(nper, d=al.step_s)
    return freqs, psd


def _dominant_peak(freqs: np.ndarray, psd: np.ndarray, windows: int) -> tuple[int | None, str]:
    """Index of the dominant spectral peak, or ``None`` and the reason (see ``dominant_freq_hz``)."""
    df = float(freqs[1] - freqs[0])
    lo = max(SPECTRUM_BAND_HZ[0], MIN_CYCLES * df)  # MIN_CYCLES full cycles per Welch window
    hi = SPECTRUM_BAND_HZ[1]
    band = np.flatnonzero((freqs >= lo - 1e-9) & (freqs <= hi + 1e-9))
    if band.size < 3:
        return None, f"the analysed window is too short for {MIN_CYCLES} cycles above 0.05 Hz"
    dof = windows + 1.0  # conservative for 50 %-overlapping Hann windows
    background = filters.running_median(psd, BACKGROUND_BINS)
    background = background / (1.0 - 2.0 / (9.0 * dof)) ** 3  # median -> mean of chi2/dof
    ratio = psd / np.maximum(background, 1e-300)
    threshold = max(_chi2_ppf(1.0 - PEAK_FALSE_ALARM / band.size, dof) / dof,
                    MIN_PEAK_RATIO)
    inner = band[(band > 0) & (band < len(psd) - 1)]
    local = inner[(psd[inner] > psd[inner - 1]) & (psd[inner] >= psd[inner + 1])]
    good = local[ratio[local] >= threshold]
    if not good.size:
        return None, (f"no spectral peak in {lo:.3g}-{hi:g} Hz stands {threshold:.1f}x above its "
                      "local background (trend or broadband fluctuation only)")
    return int(good[np.argmax(psd[good])]), ""


def _group_oscillations(ev: _EventIndex, al: Aligned | None, out: _Out,
                        step: tuple[float | None, float, str] | None = None,
                        one_s_average: bool = False) -> None:
    """Swings and oscillations.

    - ``swing_w`` = p95_power_w − p5_power_w.
    - ``dynamic_range_1s_w`` = max over windows [t, t + 1 s] inside one gap-free segment of
      (max P − min P) in the window (sliding, stride 0.1 s).
    - ``dynamic_range_10s_w`` = max over windows [t, t + 10 s] inside one gap-free segment of
      (max P − min P) in the window.
    - ``dominant_freq_hz`` = the frequency of the highest local maximum f* of S(f) in
      [f_lo, 5 Hz] that stands out of the background: S(f*) / B(f*) ≥ max(4, χ²_ν(1 − 0.01/m)/ν),
      B the running median of S over 21 bins (≈ 0.2 Hz) scaled from median to mean, ν = K + 1
      for K averaged windows, m the bins searched (a 1 % chance that noise alone passes
      anywhere in the band). S is the Welch PSD of the node total (Hann windows of 102.4 s,
      50 % overlap, each linearly detrended, gap-free segments only), f_lo = max(0.05 Hz,
      5 cycles per window). Null when no peak qualifies: a trend or broadband fluctuation is
      not an oscillation. 5 Hz is the Nyquist frequency of the 0.1 s grid (faster ones alias).
    - ``dominant_amplitude_w`` = √(2 · Σ_{|f − f*| ≤ 2 Δf} S(f) Δf), the amplitude of the sinusoid
      at the peak f* (the power in the Hann main lobe; Δf the bin width).
    - ``band_rms_low_w``, ``band_rms_mid_w``, ``band_rms_high_w`` = √(Σ_{f ∈ band} S(f) Δf) for
      the bands [0.1, 1), [1, 2.5) and [2.5, 5] Hz.
    - ``band_fraction_low``, ``band_fraction_mid``, ``band_fraction_high`` = Σ_{band} S /
      Σ_{0.05 ≤ f ≤ 5 Hz} S (share of the oscillation power between 0.05 and 5 Hz).
    - ``step_freq_hz`` = 1 / median(Δt between consecutive ``step_begin`` events) of one rank
      (run-level events, else the lowest rank; ``step_end`` when there is no ``step_begin``).
      Without step events: 1 / T, T the step period detected from the autocorrelation of P in
      the work window (``metrics.detect``; flagged ``step_period_detected``).

    When the run's power_w is a 1 s average (flag ``power_is_1s_average``), the sensor has
    already filtered oscillation above about 0.5 Hz away: the band metrics and the dominant
    frequency are then lower bounds of what the GPUs drew, and ``metric_notes`` says so.
    """
    p5, p95 = out.values.get("p5_power_w"), out.values.get("p95_power_w")
    if p5 is None or p95 is None:
        out.null("swing_w", "percentiles are null")
    else:
        out.set("swing_w", p95 - p5)
    for name, seconds in (("dynamic_range_1s_w", 1.0), ("dynamic_range_10s_w", 10.0)):
        value = None
        if al is not None:
            value = _sliding_range(al, max(1, int(round(seconds / al.step_s))))
        if value is None:
            out.null(name, f"no gap-free {seconds:g} s window")
        else:
            out.set(name, value)

    _spectrum_metrics(al, out)
    if one_s_average and out.values.get("band_rms_low_w") is not None:
        out.notes.extend(f"{name}: {ONE_S_AVERAGE_NOTE}" for name in ONE_S_AVERAGE_NAMES)

    steps = _events(ev, "step_begin") or _events(ev, "step_end")
    if len(steps) < 2 and step is not None and step[0] is not None:
        out.set("step_freq_hz", 1.0 / step[0])
    elif len(steps) < 2:
        reason = "fewer than 2 step events"
        if step is not None:
            reason += f"; none detected from power ({step[2]})"
        out.null("step_freq_hz", reason)
    else:
        dt = np.diff([e.t_ms for e in steps]) / 1000.0
        med = float(np.median(dt))
        if med > 0:
            out.set("step_freq_hz", 1.0 / med)
        else:
            out.null("step_freq_hz", "step events share one time")



ONE_S_AVERAGE_NOTE = (
    "power_w is a 1 s average (power_is_1s_average): oscillation above about 0.5 Hz was "
    "filtered away by the sensor, not measured, so the 0.2-3 Hz band is under-reported")
"""Why the band metrics of a run with 1 s-averaged power are lower bounds."""
ONE_S_AVERAGE_NAMES = ("band_rms_low_w", "band_rms_mid_w", "band_rms_high_w")


def _spectrum_metrics(al: Aligned | None, out: _Out) -> None:
    """Set the Welch-spectrum metrics of :func:`_group_oscillations` (formulas there)."""
    spectral = ("dominant_freq_hz", "dominant_amplitude_w", "band_rms_low_w", "band_rms_mid_w",
                "band_rms_high_w", "band_fraction_low", "band_fraction_mid", "band_fraction_high")
    spec = None
    if al is not None:  # once per total (Aligned.memo): the work window may be this total
        if "welch_psd" not in al.memo:
            al.memo["welch_psd"] = welch_psd(al)
        spec = al.memo["welch_psd"]
    if spec is None:
        out.null(spectral, f"no gap-free stretch of {MIN_SPECTRUM_S:g} s")
    else:
        freqs, psd = spec
        df = freqs[1] - freqs[0]
        lo, hi = SPECTRUM_BAND_HZ
        band = (freqs >= lo - 1e-9) & (freqs <= hi + 1e-9)
        band_power = float(psd[band].sum() * df)
        for key, (b0, b1) in BANDS_HZ.items():
            last = b1 >= hi
            sel = (freqs >= b0 - 1e-9) & ((freqs <= b1 + 1e-9) if last else (freqs < b1 - 1e-9))
            power = float(psd[sel].sum() * df)
            out.set(f"band_rms_{key}_w", math.sqrt(max(power, 0.0)))
            if band_power > 0:
                out.set(f"band_fraction_{key}", power / band_power)
            else:
                out.null(f"band_fraction_{key}", "no oscillation power in 0.05-5 Hz")
        scale = max(1.0, float(np.mean(np.abs(al.values())))) if al is not None else 1.0
        if not band.any() or band_power <= 1e-18 * scale ** 2:
            out.null(("dominant_freq_hz", "dominant_amplitude_w"),
                     "flat spectrum (no oscillation in 0.05-5 Hz)")
        else:
            if al is None:
                peak, reason = _dominant_peak(freqs, psd, 1)
            else:
                if "dominant_peak" not in al.memo:
                    al.memo["dominant_peak"] = _dominant_peak(freqs, psd, welch_windows(al))
                peak, reason = al.memo["dominant_peak"]
            if peak is None:
                out.null(("dominant_freq_hz", "dominant_amplitude_w"), reason)
            else:
                lobe = psd[max(0, peak - 2):peak + 3].sum() * df
                out.set("dominant_freq_hz", freqs[peak])
                out.set("dominant_amplitude_w", math.sqrt(2.0 * lobe))


def _group_across(al: Aligned | None, out: _Out) -> None:
    """Across devices (on the gap-free points of the 0.1 s grid).

    - ``coincidence_factor`` = max_k Σ_d P_d,k / Σ_d max_i P_d,i (1 when all peaks coincide):
      the node total and each device's readings at the sampling instants, over the span where
      all devices are present (as ``peak_power_w``).
    - ``diversity_factor`` = 1 / coincidence_factor.
    - ``synchrony_index`` = ρ̄, the mean over device pairs of the Pearson correlation of
      band-passed per-device power (2nd-order Butterworth high-pass at 0.05 Hz, started in
      its steady state, applied per gap-free segment of at least 20 s; the band extends to the 5 Hz Nyquist
      frequency). Needs ≥ 2 devices.
    - ``projected_swing_1000_w`` = s̄ · √(M (1 + (M − 1) max(ρ̄, 0))) with M = 1000, s̄ the mean
      per-device swing (p95 − p5 of P_d): the swing of 1,000 such devices whose pairwise
      correlation is ρ̄ (M · s̄ when fully synchronous, √M · s̄ when independent).
    """
    if al is None or not al.valid.any():
        out.null(ACROSS_NAMES, "no gap-free node total")
        return
    allvalid = bool(al.valid.all())
    peaks, swings = [], []
    for row in al.devices:  # one copy per device, partitioned in place for its percentiles
        v = row.copy() if allvalid else row[al.valid]
        peaks.append(float(v.max()))
        q5, q95 = _percentiles(v, (5, 95))
        swings.append(float(q95 - q5))
    sum_peaks = float(sum(peaks))
    peak_total = float(al.values().max())
    if al.levels is not None:  # at the sampling instants, as peak_power_w
        sum_peaks = float(sum(al.levels.device_peaks))
        peak_total = float(al.levels.values.max())
    if sum_peaks > 0 and peak_total > 0:
        cf = peak_total / sum_peaks
        out.set("coincidence_factor", cf)
        out.set("diversity_factor", 1.0 / cf)
    else:
        out.null(("coincidence_factor", "diversity_factor"), "peak power is not positive")
    ndev = len(al.devices)
    if ndev < 2:
        out.null(("synchrony_index", "projected_swing_1000_w"), "needs at least 2 devices")
        return
    highpass, zi = _highpass(1.0 / al.step_s)  # zi (1, 2): each device starts in steady state
    starts, stops = al.segments()
    nmin = int(math.ceil(MIN_SPECTRUM_S / al.step_s))
    s1 = np.zeros(ndev)
    s2 = np.zeros((ndev, ndev))
    count = 0
    for a, b in zip(starts, stops, strict=True):
        if b - a < nmin:
            continue
        state = np.array([[row[a]] for row in al.devices]) * zi  # (ndev, 2)
        for c0 in range(a, b, _CHUNK):  # cache-sized chunks; the filter state carries over
            c1 = min(b, c0 + _CHUNK)
            y, state = highpass(np.stack([row[c0:c1] for row in al.devices]), state)
            s1 += y.sum(axis=1)
            s2 += y @ y.T
        count += b - a
    if count < 2:
        out.null(("synchrony_index", "projected_swing_1000_w"),
                 f"no gap-free stretch of {MIN_SPECTRUM_S:g} s")
        return
    mean = s1 / count
    cov = s2 / count - np.outer(mean, mean)
    var = np.diag(cov).copy()
    scale = max(1.0, float(np.mean(np.abs(al.values()))) / ndev) ** 2
    live = var > 1e-12 * scale
    if live.sum() < 2:
        out.null(("synchrony_index", "projected_swing_1000_w"),
                 "fewer than 2 devices with fluctuating power")
        return
    c = cov[np.ix_(live, live)]
    sd = np.sqrt(np.diag(c))
    corr = np.clip(c / np.outer(sd, sd), -1.0, 1.0)
    iu = np.triu_indices(len(sd), k=1)
    rho = float(corr[iu].mean())
    out.set("synchrony_index", rho)
    swing = float(np.mean(swings))
    m = PROJECTED_DEVICES
    out.set("projected_swing_1000_w", swing * math.sqrt(m * (1 + (m - 1) * max(rho, 0.0))))


