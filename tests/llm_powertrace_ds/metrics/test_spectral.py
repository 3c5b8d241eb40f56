"""Spectral and synchrony metrics on signals with a known spectrum.

Welch's window count and one-sided scaling (as SciPy's); the dominant peak — a local maximum in
[max(0.05 Hz, 5 cycles), 5 Hz] whose ratio to the mean-scaled running median reaches
max(4, χ²_ν(1 − 0.01/m)/ν) — its threshold, band edges, bins and amplitude; band RMS and
fractions; the flatness floors; the step frequency from step events; and the synchrony index
(mean pairwise correlation of high-passed power over segments of 20 s or more), the coincidence
factor and their null reasons.
"""

from __future__ import annotations

import numpy as np
import pytest
from metric_runs import run_of_devices as _run

from llm_powertrace_ds import metrics
from llm_powertrace_ds.metrics import core


def _without(t: np.ndarray, lo_ms: int, hi_ms: int) -> np.ndarray:
    return t[(t <= lo_ms) | (t >= hi_ms)]


def _threshold_height(windows: int, m: int) -> float:
    """The smallest peak over a flat unit background that passes, from scipy.stats."""
    from scipy.stats import chi2

    dof = windows + 1.0
    threshold = max(chi2.ppf(1.0 - 0.01 / m, dof) / dof, 4.0)
    return threshold / (1.0 - 2.0 / (9.0 * dof)) ** 3


@pytest.mark.parametrize("windows", [3, 400])  # the χ² term rules; the floor of 4 rules
def test_dominant_peak_threshold_is_exact(windows):
    from llm_powertrace_ds.metrics import spectral

    freqs = np.arange(0, 601) * 0.01  # 0-6 Hz; band 0.05-5 Hz = bins 5..500
    m = 496
    h = _threshold_height(windows, m)
    for scale in (1.0, 1e-6):  # a background far below 1 W²/Hz is still a background
        psd = np.full(len(freqs), scale)
        psd[200] = scale * h * 1.001
        assert spectral._dominant_peak(freqs, psd, windows) == (200, "")
        psd[200] = scale * h * 0.999
        peak, reason = spectral._dominant_peak(freqs, psd, windows)
        assert peak is None
        shown = max(h * (1.0 - 2.0 / (9.0 * (windows + 1.0))) ** 3, 4.0)
        assert reason == (f"no spectral peak in 0.05-5 Hz stands {shown:.1f}x above its local "
                          "background (trend or broadband fluctuation only)")


def test_dominant_peak_band_edges_and_cycles():
    from llm_powertrace_ds.metrics import spectral

    freqs = np.arange(0, 601) * 0.01
    for j in (5, 500):  # 0.05 Hz and 5 Hz are inside the band
        psd = np.ones(len(freqs))
        psd[j] = 1000.0
        assert spectral._dominant_peak(freqs, psd, 50)[0] == j
    psd = np.ones(len(freqs))
    psd[550] = 1000.0  # 5.5 Hz: outside, even as the largest bin
    psd[300] = 100.0
    assert spectral._dominant_peak(freqs, psd, 50)[0] == 300
    psd = np.ones(len(freqs))
    psd[599] = 1000.0  # the bin before the last: still a local maximum candidate
    wide = np.arange(0, 601) * 0.00834  # 0-5.004 Hz: the band reaches the last bins
    assert spectral._dominant_peak(wide, psd, 50)[0] == 599
    coarse = np.arange(0, 301) * 0.02  # 5 cycles need 0.1 Hz here
    psd = np.ones(len(coarse))
    psd[4] = 1000.0  # 0.08 Hz: fewer than 5 cycles per window
    assert spectral._dominant_peak(coarse, psd, 50)[0] is None
    psd[4] = 1.0
    psd[5] = 1000.0  # 0.10 Hz: 5 cycles; a plateau's first bin is the peak
    psd[6] = 1000.0
    assert spectral._dominant_peak(coarse, psd, 50)[0] == 5
    psd = np.ones(len(freqs))
    psd[100], psd[300] = 200.0, 900.0  # two qualifying peaks: the larger one
    assert spectral._dominant_peak(freqs, psd, 50)[0] == 300
    psd = np.ones(len(freqs))
    psd[500], psd[501] = 1000.0, 2000.0  # rising out of the band at 5 Hz: not a maximum
    assert spectral._dominant_peak(freqs, psd, 50)[0] is None


def test_dominant_peak_needs_three_bins_and_a_true_local_maximum():
    from llm_powertrace_ds.metrics import spectral

    freqs = np.arange(0, 10) * 0.7  # band bins 5, 6, 7 (3.5, 4.2, 4.9 Hz): just enough
    psd = np.ones(10)
    psd[6] = 100.0
    assert spectral._dominant_peak(freqs, psd, 50)[0] == 6
    short = np.arange(0, 10) * 0.8  # band bins 5, 6 only (4.0, 4.8 Hz)
    peak, reason = spectral._dominant_peak(short, psd, 50)
    assert peak is None
    assert reason == "the analysed window is too short for 5 cycles above 0.05 Hz"
    freqs = np.arange(0, 601) * 0.01
    trend = np.ones(len(freqs))
    trend[3], trend[4], trend[5] = 1.0, 1e6, 1e3  # a trend's tail entering the band falling
    assert spectral._dominant_peak(freqs, trend, 50)[0] is None
    rising = np.ones(len(freqs))
    rising[495:] = np.geomspace(10.0, 1e6, 106)  # rising through the top edge, no maximum
    assert spectral._dominant_peak(freqs, rising, 50)[0] is None


def _notes(m: dict) -> dict[str, str]:
    return dict(n.split(": ", 1) for n in m["metric_notes"])


def _aligned(valid: np.ndarray, total: np.ndarray | None = None) -> core.Aligned:
    n = len(valid)
    total = np.ones(n) if total is None else total
    return core.Aligned(np.arange(n, dtype=np.int64) * 100, [total], np.where(valid, total, np.nan),
                        valid, 0.1)


def test_welch_windows_counts_half_overlapping_windows_per_segment():
    from llm_powertrace_ds.metrics import spectral

    assert spectral.welch_windows(_aligned(np.ones(3000, bool))) == 4  # (3000 − 1024) // 512 + 1
    split = np.ones(3000, bool)
    split[1500:1600] = False  # segments of 1500 and 1400 points
    assert spectral.welch_windows(_aligned(split)) == 2
    short = np.zeros(900, bool)
    short[:500] = True  # 500 and 100 points: one window of the longest; the other too short
    short[800:] = True
    assert spectral.welch_windows(_aligned(short)) == 1
    exact = np.zeros(1000, bool)
    exact[:400] = exact[500:900] = True  # two segments as long as the window
    assert spectral.welch_windows(_aligned(exact)) == 2
    assert spectral.welch_windows(_aligned(np.zeros(50, bool))) == 0
    assert spectral.welch_windows(_aligned(np.ones(10, bool)), segment_s=0.3) == 8  # hop 1
    assert spectral.welch_windows(_aligned(np.ones(20, bool)), segment_s=0.5) == 8  # hop 2
    assert spectral.welch_windows(_aligned(np.ones(21, bool)), segment_s=0.4) == 9  # hop 2


def test_welch_psd_needs_twenty_seconds_and_scales_like_scipy_for_odd_windows():
    from scipy.signal import welch

    from llm_powertrace_ds.metrics import spectral

    rng = np.random.default_rng(5)
    assert spectral.welch_psd(_aligned(np.ones(199, bool), rng.normal(size=199))) is None
    assert spectral.welch_psd(_aligned(np.ones(200, bool), rng.normal(size=200))) is not None
    x = 300.0 + 20.0 * np.sin(np.arange(201) * 0.9) + rng.normal(size=201)
    freqs, psd = spectral.welch_psd(_aligned(np.ones(201, bool), x))
    f_ref, p_ref = welch(x, fs=10.0, window="hann", nperseg=201, detrend="linear")
    assert np.allclose(freqs, f_ref)
    assert np.allclose(psd, p_ref, rtol=1e-9, atol=1e-12 * p_ref.max())
    gapped = np.ones(1000, bool)
    gapped[400:500] = False  # 400 and 500 points: the window is the longest segment
    assert spectral.welch_psd(_aligned(gapped, x.repeat(5)[:1000]))[1].size == 251
    assert np.isfinite(spectral.welch_psd(_aligned(gapped, x.repeat(5)[:1000]))[1]).all()


def test_band_rms_and_fractions_follow_the_band_edges():
    from llm_powertrace_ds.metrics import spectral

    # 20 s of noise: one 200-point window, bins every 0.05 Hz, so 0.05, 0.1, 1, 2.5 and 5 Hz
    # are bins themselves; amplitudes small enough that band powers are below 1 W²
    rng = np.random.default_rng(11)
    t = np.arange(0, 20_000, 100)
    p = 300.0 + rng.normal(0, 0.05, len(t))
    run = _run((t, p))
    m = metrics.compute_run_metrics(run)
    freqs, psd = spectral.welch_psd(metrics.node_total(run))
    df = freqs[1] - freqs[0]
    f = np.round(freqs, 9)

    def power(sel: np.ndarray) -> float:
        return float(psd[sel].sum() * df)

    total = power((f >= 0.05) & (f <= 5.0))
    bands = {"low": (f >= 0.1) & (f < 1.0), "mid": (f >= 1.0) & (f < 2.5),
             "high": (f >= 2.5) & (f <= 5.0)}
    assert total < 1.0
    for key, sel in bands.items():
        assert m[f"band_rms_{key}_w"] == pytest.approx(np.sqrt(power(sel)), rel=1e-12), key
        assert m[f"band_fraction_{key}"] == pytest.approx(power(sel) / total, rel=1e-12), key


@pytest.mark.parametrize(("level_w", "ripple_w", "flat"), [
    (0.5, 1.5e-9, False),   # band power ≈ 1.1e-18 W² > 1e-18 · 1²
    (300.0, 1e-9, True),    # 5e-19 W² ≤ 1e-18 · 300²
    (300.0, 1e-7, True),    # 5e-15 W² ≤ 9e-14 W²
    (300.0, 1e-6, False),   # 5e-13 W² > 9e-14 W²
])
def test_a_spectrum_is_flat_below_1e18_of_the_squared_mean_level(level_w, ripple_w, flat):
    t = np.arange(0, 60_000, 100)
    p = level_w + ripple_w * np.sin(2 * np.pi * 1.0 * t / 1000.0)  # 1 Hz
    m = metrics.compute_run_metrics(_run((t, p)))
    if flat:
        assert m["dominant_freq_hz"] is None
        assert _notes(m)["dominant_freq_hz"] == "flat spectrum (no oscillation in 0.05-5 Hz)"
    else:
        assert m["dominant_freq_hz"] == pytest.approx(1.0, abs=0.01)


def test_dominant_amplitude_is_the_sinusoids_amplitude():
    from llm_powertrace_ds.metrics import spectral

    t = np.arange(0, 300_000, 100)
    p = 400.0 + 30.0 * np.sin(2 * np.pi * 0.503 * t / 1000.0)  # between two bins
    run = _run((t, p))
    m = metrics.compute_run_metrics(run)
    assert m["dominant_freq_hz"] == pytest.approx(0.503, abs=0.01)
    assert m["dominant_amplitude_w"] == pytest.approx(30.0, rel=0.02)
    freqs, psd = spectral.welch_psd(metrics.node_total(run))
    k = int(np.flatnonzero(freqs == m["dominant_freq_hz"])[0])
    df = freqs[1] - freqs[0]
    lobe = psd[k - 2:k + 3].sum() * df  # |f − f*| ≤ 2 Δf
    assert m["dominant_amplitude_w"] == pytest.approx(np.sqrt(2.0 * lobe), rel=1e-12)


def test_step_frequency_from_step_begin_else_step_end_events():
    from llm_powertrace_ds.run import Event

    run = _run((np.arange(0, 5001, 100), np.full(51, 100.0)))
    run.events = [Event(1000, "step_end"), Event(1500, "step_end")]
    assert metrics.compute_run_metrics(run)["step_freq_hz"] == pytest.approx(2.0)
    run.events += [Event(1000, "step_begin"), Event(3000, "step_begin"), Event(4000, "step_begin")]
    assert metrics.compute_run_metrics(run)["step_freq_hz"] == pytest.approx(1 / 1.5)


def _reference_synchrony(rows: list[np.ndarray], segments: list[tuple[int, int]]) -> float:
    """ρ̄ by scipy, from the docstring's definition.

    Each segment of ≥ 200 points is high-passed from its steady state; ρ̄ is the Pearson
    correlation of the concatenated outputs, averaged over device pairs.
    """
    from scipy.signal import butter, sosfilt, sosfilt_zi

    sos = butter(2, 0.05, "highpass", fs=10.0, output="sos")
    out = []
    for row in rows:
        parts = [sosfilt(sos, row[a:b], zi=sosfilt_zi(sos) * row[a])[0]
                 for a, b in segments if b - a >= 200]
        out.append(np.concatenate(parts))
    corr = np.corrcoef(np.vstack(out))
    return float(corr[np.triu_indices(len(rows), k=1)].mean())


def test_synchrony_index_is_the_mean_pairwise_correlation_of_high_passed_power():
    rng = np.random.default_rng(23)
    n = 3000  # 300 s on the grid
    t = np.arange(n) * 100
    common = 40.0 * np.sin(2 * np.pi * t / 4000.0)
    rows = [300.0 + common + rng.normal(0, 30.0, n), 280.0 + common + rng.normal(0, 10.0, n),
            250.0 - common + rng.normal(0, 20.0, n)]  # the third swings against the others
    m = metrics.compute_run_metrics(_run(*[(t, r) for r in rows]))
    expected = _reference_synchrony(rows, [(0, n)])
    assert -0.5 < expected < 0.5  # mixed signs: not a case clipping or |ρ| would hide
    assert m["synchrony_index"] == pytest.approx(expected, rel=1e-6)
    swings = [np.percentile(r, 95) - np.percentile(r, 5) for r in rows]
    assert m["projected_swing_1000_w"] == pytest.approx(
        np.mean(swings) * np.sqrt(1000 * (1 + 999 * max(expected, 0.0))), rel=1e-6)


def test_synchrony_skips_segments_shorter_than_20_seconds():
    rng = np.random.default_rng(29)
    t_all = np.arange(0, 600_000, 100)
    # holes at 250-260 s, 275-280 s and 300-310 s: segments of 250 s, 15 s (too short), exactly
    # 20 s (200 points: long enough) and 290 s
    t = _without(_without(_without(t_all, 250_000, 260_000), 275_000, 280_000), 299_900, 310_000)
    a = 300.0 + rng.normal(0, 20.0, len(t))
    b = 0.5 * a + rng.normal(0, 20.0, len(t))
    m = metrics.compute_run_metrics(_run((t, a), (t, b)))
    grid = np.arange(0, 600_000, 100)
    rows = [np.interp(grid, t, x) for x in (a, b)]
    segments = [(0, 2501), (2600, 2751), (2800, 3000), (3100, 6000)]
    assert m["synchrony_index"] == pytest.approx(_reference_synchrony(rows, segments), rel=1e-6)


def test_synchrony_needs_two_fluctuating_devices():
    t = np.arange(0, 60_000, 100)
    rng = np.random.default_rng(31)
    m = metrics.compute_run_metrics(_run((t, 300.0 + rng.normal(0, 5.0, len(t))),
                                         (t, np.full(len(t), 200.0))))
    assert m["synchrony_index"] is None
    assert _notes(m)["synchrony_index"] == "fewer than 2 devices with fluctuating power"
    assert _notes(m)["projected_swing_1000_w"] == "fewer than 2 devices with fluctuating power"


def test_coincidence_factor_with_tiny_and_zero_power():
    t = np.arange(0, 20_001, 100)
    tiny = metrics.compute_run_metrics(_run((t, np.full(len(t), 0.2)), (t, np.full(len(t), 0.2))))
    assert tiny["coincidence_factor"] == pytest.approx(1.0)
    assert tiny["diversity_factor"] == pytest.approx(1.0)
    zero = metrics.compute_run_metrics(_run((t, np.zeros(len(t))), (t, np.zeros(len(t)))))
    assert zero["coincidence_factor"] is None and zero["diversity_factor"] is None
    assert _notes(zero)["coincidence_factor"] == "peak power is not positive"
    assert _notes(zero)["diversity_factor"] == "peak power is not positive"


def test_broadband_noise_has_no_dominant_peak_and_says_why():
    rng = np.random.default_rng(53)
    t = np.arange(0, 300_000, 100)
    m = metrics.compute_run_metrics(_run((t, 300.0 + rng.normal(0, 10.0, len(t)))))
    notes = _notes(m)
    assert m["dominant_freq_hz"] is None and m["dominant_amplitude_w"] is None
    assert notes["dominant_freq_hz"].startswith("no spectral peak in 0.05-5 Hz stands ")
    assert notes["dominant_amplitude_w"] == notes["dominant_freq_hz"]


@pytest.mark.parametrize(("level_w", "sigma_w", "live"), [
    (300.0, 1e-4, False),  # variance 1e-8 W² ≤ 1e-12 · 300²
    (300.0, 4e-4, True),   # 1.6e-7 W² > 9e-8 W²
    (1.0, 1.4e-6, True),   # 2e-12 W² > 1e-12 · max(1, 1 W)²
])
def test_a_device_fluctuates_above_1e12_of_its_squared_mean_level(level_w, sigma_w, live):
    rng = np.random.default_rng(59)
    t = np.arange(0, 300_000, 100)
    a = level_w + rng.normal(0, level_w / 300.0, len(t))
    b = level_w + rng.normal(0, sigma_w, len(t))
    m = metrics.compute_run_metrics(_run((t, a), (t, b)))
    if live:
        assert m["synchrony_index"] is not None
    else:
        assert _notes(m)["synchrony_index"] == "fewer than 2 devices with fluctuating power"


def test_synchrony_reasons_and_a_flat_device_among_three():
    t = np.arange(0, 10_001, 100)
    rng = np.random.default_rng(61)
    short = metrics.compute_run_metrics(_run((t, 300 + rng.normal(0, 5, len(t))),
                                             (t, 300 + rng.normal(0, 5, len(t)))))
    assert _notes(short)["synchrony_index"] == "no gap-free stretch of 20 s"
    t = np.arange(0, 120_000, 100)
    common = 30.0 * np.sin(2 * np.pi * t / 5000.0)
    rows = [300 + common + rng.normal(0, 5, len(t)), np.full(len(t), 200.0),
            280 + common + rng.normal(0, 5, len(t))]
    m = metrics.compute_run_metrics(_run(*[(t, r) for r in rows]))
    assert m["synchrony_index"] == pytest.approx(_reference_synchrony([rows[0], rows[2]],
                                                                      [(0, len(t))]), rel=1e-6)


def test_synchrony_of_trending_devices_over_several_segments():
    # ramps leave a steady offset after the high-pass (slope / ω0²): the outputs' means are far
    # from 0, so the mean term of the covariance and the point count must be right
    rng = np.random.default_rng(73)
    t_all = np.arange(0, 200_000, 100)
    t = _without(t_all, 80_000, 90_000)
    a = 300.0 + 2.0 * t / 1000.0 + rng.normal(0, 3.0, len(t))
    b = 500.0 - 1.5 * t / 1000.0 + 0.5 * a + rng.normal(0, 3.0, len(t))
    m = metrics.compute_run_metrics(_run((t, a), (t, b)))
    grid = np.arange(0, 200_000, 100)
    rows = [np.interp(grid, t, x) for x in (a, b)]
    expected = _reference_synchrony(rows, [(0, 801), (900, 2000)])
    assert m["synchrony_index"] == pytest.approx(expected, rel=1e-6)
