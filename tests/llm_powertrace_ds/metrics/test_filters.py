"""metrics.filters equals its SciPy counterparts (window, filter design, sosfilt, max/min, median)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy import ndimage, signal, special, stats

from llm_powertrace_ds.metrics import filters
from llm_powertrace_ds.metrics.spectral import _chi2_ppf


@pytest.mark.parametrize("n", [1, 2, 7, 200, 600, 1001])
def test_hann_is_scipys_periodic_hann_to_the_bit(n):
    assert np.array_equal(filters.hann(n), signal.get_window("hann", n))


@pytest.mark.parametrize("fc,fs", [(0.05, 10.0), (0.05, 1.0), (0.5, 10.0), (2.0, 50.0)])
def test_butterworth_section_and_steady_state_equal_scipys(fc, fs):
    sos, zi = filters.butter_highpass(fc, fs)
    ref = signal.butter(2, fc, btype="highpass", fs=fs, output="sos")
    np.testing.assert_allclose(sos, ref, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(zi, signal.sosfilt_zi(ref), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("n", [1, 5, 63, 64, 65, 640, 5_000, 70_001])
def test_highpass_equals_sosfilt_from_any_state(n):
    rng = np.random.default_rng(n)
    sos, zi = filters.butter_highpass(0.05, 10.0)
    x = 300 + 100 * np.sin(np.arange(n)[None, :] / 50.0 + np.arange(4)[:, None]) \
        + rng.normal(0, 20, (4, n))
    z0 = x[:, :1] * zi + rng.normal(0, 5, (4, 2))  # not only the steady state
    y, zf = filters.HighPass(sos)(x, z0)
    for d in range(4):
        ref, ref_zf = signal.sosfilt(sos, x[d], zi=z0[d:d + 1])
        np.testing.assert_allclose(y[d], ref, rtol=1e-9, atol=1e-9 * np.abs(x).max())
        np.testing.assert_allclose(zf[d], ref_zf[0], rtol=1e-9, atol=1e-9 * np.abs(x).max())


@pytest.mark.parametrize("fc", [0.5, 2.0])  # fast-decaying sections: carry 2 and 1 blocks
def test_highpass_of_a_fast_section_equals_sosfilt_on_a_long_input(fc):
    rng = np.random.default_rng(7)
    sos, zi = filters.butter_highpass(fc, 10.0)
    hp = filters.HighPass(sos)
    assert hp.carry == (2 if fc == 0.5 else 1)
    x = rng.normal(300, 30, (2, 20 * filters.BLOCK + 17))  # many blocks: the carried path
    z0 = x[:, :1] * zi + rng.normal(0, 5, (2, 2))
    y, zf = hp(x, z0)
    for d in range(2):
        ref, ref_zf = signal.sosfilt(sos, x[d], zi=z0[d:d + 1])
        np.testing.assert_allclose(y[d], ref, rtol=1e-9, atol=1e-9 * np.abs(x).max())
        np.testing.assert_allclose(zf[d], ref_zf[0], rtol=1e-9, atol=1e-9 * np.abs(x).max())


def test_highpass_carries_state_across_chunks():
    rng = np.random.default_rng(1)
    sos, zi = filters.butter_highpass(0.05, 10.0)
    hp = filters.HighPass(sos)
    x = rng.normal(300, 30, (2, 10_000))
    whole, _ = hp(x, x[:, :1] * zi)
    first, state = hp(x[:, :3_333], x[:, :1] * zi)
    rest, _ = hp(x[:, 3_333:], state)
    np.testing.assert_allclose(np.hstack([first, rest]), whole, rtol=1e-9, atol=1e-7)


@pytest.mark.parametrize("size", [1, 2, 3, 10, 11, 601])
def test_sliding_extremes_equal_ndimage(size):
    rng = np.random.default_rng(size)
    x = rng.normal(0, 1, 5_000)
    n, half = len(x), size // 2
    want_max = ndimage.maximum_filter1d(x, size=size, mode="nearest")[half:half + n - size + 1]
    want_min = ndimage.minimum_filter1d(x, size=size, mode="nearest")[half:half + n - size + 1]
    assert np.array_equal(filters.sliding_max(x, size), want_max)
    assert np.array_equal(filters.sliding_min(x, size), want_min)


@pytest.mark.parametrize("n", [1, 5, 21, 301, 1000])
def test_running_median_equals_median_filter(n):
    x = np.random.default_rng(n).lognormal(3, 1, n)
    assert np.array_equal(filters.running_median(x, 21),
                          ndimage.median_filter(x, size=21, mode="nearest"))
    with pytest.raises(ValueError, match="must be odd"):
        filters.running_median(x, 4)


@pytest.mark.parametrize("dof", [0.5, 1.0, 2.0, 3.0, 7.5, 11.0, 57.0, 141.0, 1001.0, 20001.0])
@pytest.mark.parametrize("p", [1e-12, 1e-6, 0.01, 0.5, 0.51, 0.9, 0.99, 1 - 0.01 / 300,
                               1 - 0.01 / 3000, 1 - 1e-10])
def test_chi2_ppf_is_scipy_stats(p, dof):
    """Equal to SciPy to 1e-12 relative (Newton's method in numpy against SciPy's Cephes)."""
    want = stats.chi2.ppf(p, dof)
    assert _chi2_ppf(p, dof) == pytest.approx(want, rel=1e-12)
    assert filters.chi2_ppf(p, dof) == pytest.approx(2 * special.gammaincinv(dof / 2, p),
                                                     rel=1e-12)


@pytest.mark.parametrize("p,dof", [(0.0, 3.0), (1.0, 3.0), (0.5, 0.0), (float("nan"), 3.0)])
def test_chi2_ppf_refuses_what_has_no_quantile(p, dof):
    with pytest.raises(ValueError, match="chi2_ppf needs"):
        filters.chi2_ppf(p, dof)


def test_metrics_import_no_scipy_signal():
    """Computing every metric of a run loads no part of SciPy."""
    code = (
        "import sys, numpy as np\n"
        "from llm_powertrace_ds.run import DeviceSeries, Run\n"
        "from llm_powertrace_ds.metrics import compute_run_metrics\n"
        "t = np.arange(3000) * 100\n"
        "devs = [DeviceSeries(g, t, {'power_w': 300 + 50 * np.sin(t / 700.0 + g)}) "
        "for g in range(2)]\n"
        "m = compute_run_metrics(Run({'run_id': 'r', 'workload': 'finetune', "
        "'platform': 'h100_sxm_80gb'}, devs))\n"
        "assert m['synchrony_index'] is not None and m['dominant_freq_hz'] is not None, m\n"
        "print(sorted(x for x in sys.modules if x.split('.')[0] == 'scipy'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
