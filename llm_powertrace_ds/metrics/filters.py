"""The few signal-processing pieces the metrics need, in numpy (no ``scipy.signal`` import).

``scipy.signal`` costs ≈ 0.8 s of imports per process with SciPy 1.17 (most of it building
docstrings), about 40 % of a one-file ``import`` command; the metrics need only a Hann window, one
2nd-order Butterworth high-pass, sliding max/min and a running median, all short in numpy. The
tests check each against its SciPy counterpart (``tests/llm_powertrace_ds/metrics/test_filters.py``):
the window, the max/min and the median are exact; the filter's output agrees to 1e-9 relative or
better (floating-point summation order), far inside what the synchrony metrics resolve.

- :func:`hann` — ``scipy.signal.get_window("hann", n)`` (periodic), same arithmetic.
- :func:`butter_highpass` — ``butter(2, fc, "highpass", fs=fs, output="sos")`` (one section) and
  its ``sosfilt_zi`` steady state, by the bilinear transform with pre-warping in closed form.
- :class:`HighPass` — ``sosfilt`` of that section over many devices at once, in blocks: within a
  block the zero-state response is a Toeplitz matrix product with the impulse response, and the
  state carried between blocks is a short sum (the filter forgets its state geometrically: after
  ``HighPass.carry`` blocks its weight is below 1e-20).
- :func:`sliding_max`, :func:`sliding_min` — window extremes in O(n) (van Herk / Gil–Werman).
- :func:`running_median` — ``scipy.ndimage.median_filter(x, size, mode="nearest")``.
- :func:`chi2_ppf` — ``scipy.stats.chi2.ppf`` (the spectral peak's threshold), by Newton's
  method on the incomplete gamma function: ``scipy.special`` alone costs ≈ 0.15 s of imports.
"""

from __future__ import annotations

import functools
import math
import statistics

import numpy as np

BLOCK = 128
"""Samples per block of :class:`HighPass` (its Toeplitz product costs BLOCK flops a sample;
128 measured fastest here, ≈ 2.5× the time of `sosfilt`, ≈ 1 % of an import)."""


@functools.lru_cache(maxsize=8)
def hann(n: int) -> np.ndarray:
    """The periodic Hann window of length ``n``: w[k] = 0.5 − 0.5 cos(2πk / n), k < n.

    Computed as SciPy does (a symmetric window of n + 1 points, ``linspace(-π, π)``, the last
    point dropped), so the values are the same to the bit. Read-only (cached).
    """
    if n <= 1:  # SciPy's guard: a window of one point is [1.0]
        out = np.ones(max(n, 0))
    else:
        fac = np.linspace(-np.pi, np.pi, n + 1)
        w = np.zeros(n + 1)
        for k, a in enumerate((0.5, 0.5)):
            w += a * np.cos(k * fac)
        out = w[:-1].copy()
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=8)
def butter_highpass(fc_hz: float, fs_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """A 2nd-order Butterworth high-pass as one second-order section, and its steady state.

    With K = tan(π fc / fs) (pre-warped bilinear transform) and g = 1 / (1 + √2 K + K²):
    b = g · (1, −2, 1), a = (1, 2 (K² − 1) g, (1 − √2 K + K²) g).

    Returns:
        ``(sos, zi)``: ``sos`` = [b0, b1, b2, 1, a1, a2] (shape (1, 6)); ``zi`` (shape (1, 2))
        the transposed-direct-form-II state in steady state for a unit step input
        (``scipy.signal.sosfilt_zi``), to be scaled by a segment's first value.
    """
    k = math.tan(math.pi * fc_hz / fs_hz)
    g = 1.0 / (1.0 + math.sqrt(2.0) * k + k * k)
    b0, b1, b2 = g, -2.0 * g, g
    a1, a2 = 2.0 * (k * k - 1.0) * g, (1.0 - math.sqrt(2.0) * k + k * k) * g
    sos = np.array([[b0, b1, b2, 1.0, a1, a2]])
    # lfilter_zi: (I - companion(a).T) zi = b[1:] - a[1:] b0
    i_minus_a = np.array([[1.0 + a1, -1.0], [a2, 1.0]])
    zi = np.linalg.solve(i_minus_a, np.array([b1 - a1 * b0, b2 - a2 * b0]))
    return sos, zi.reshape(1, 2)


class HighPass:
    """``sosfilt`` of one second-order section, for a block of devices at once.

    The section in state-space form (transposed direct form II, as ``sosfilt``): with state
    z = (z₀, z₁), y[n] = b₀ x[n] + z₀[n] and z[n+1] = A z[n] + B x[n], where
    A = [[−a₁, 1], [−a₂, 0]] and B = (b₁ − a₁ b₀, b₂ − a₂ b₀). A block of L = :data:`BLOCK`
    samples starting in state z gives y = T x + G z (T the L×L lower-triangular Toeplitz
    matrix of the impulse response h[0] = b₀, h[t] = (A^(t−1) B)₀; G[t] = (A^t)₀) and ends in
    state A^L z + K x (K[j] = A^(L−1−j) B).

    Args:
        sos: the section, shape (1, 6), ``sos[0, 3] == 1``.
    """

    def __init__(self, sos: np.ndarray) -> None:
        b0, b1, b2, _, a1, a2 = (float(v) for v in sos[0])
        a = np.array([[-a1, 1.0], [-a2, 0.0]])
        bv = np.array([b1 - a1 * b0, b2 - a2 * b0])
        L = BLOCK
        powers = np.empty((L + 1, 2, 2))  # A^t, t = 0..L
        powers[0] = np.eye(2)
        for t in range(1, L + 1):
            powers[t] = a @ powers[t - 1]
        h = np.empty(L)
        h[0] = b0
        h[1:] = (powers[:L - 1] @ bv)[:, 0]
        idx = np.arange(L)
        lag = idx[None, :] - idx[:, None]  # T[j, t] = h[t - j] for t >= j (x @ T)
        self.toeplitz = np.where(lag >= 0, h[np.clip(lag, 0, L - 1)], 0.0)
        self.g = powers[:L, 0, :]  # (L, 2): y[t] += G[t] · z
        self.k = (powers[L - 1 - idx] @ bv)  # (L, 2): state += x[j] K[j]
        self.powers = powers  # A^t, t = 0..L
        radius = max(abs(np.linalg.eigvals(a)))
        # blocks after which the carried state's weight ||A^(L m)|| is below 1e-20
        self.carry = max(1, math.ceil(-20.0 / (L * math.log10(max(radius, 1e-300))))) \
            if radius < 1.0 else None

    def __call__(self, x: np.ndarray, z0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Filter each row of ``x`` (devices × samples) from its state ``z0`` (devices × 2).

        Returns:
            ``(y, z)``: the output, the same shape as ``x``, and the state after the last sample
            (to continue with the next samples, as ``sosfilt``'s ``zf``).
        """
        L = len(self.toeplitz)  # the block length this filter was built with
        ndev, n = x.shape
        nb = -(-n // L)
        xb = np.zeros((ndev, nb * L))
        xb[:, :n] = x
        xb = xb.reshape(ndev, nb, L)
        y = xb @ self.toeplitz  # zero-state response of every block
        u = xb @ self.k  # (ndev, nb, 2): each block's input contribution to its end state
        # state at the start of block b: A^(Lb) z0 + sum_{c<b} A^(L(b-1-c)) u_c
        z = np.empty((ndev, nb, 2))
        if self.carry is None or nb <= 2 * self.carry:  # short or not decaying: block by block
            state = z0.copy()
            for b in range(nb):
                z[:, b] = state
                state = state @ self.powers[L].T + u[:, b]
        else:
            z[:] = 0.0
            pk = np.eye(2)
            for m in range(self.carry):  # z_b += A^(L m) u_(b-1-m)
                z[:, m + 1:] += u[:, :nb - m - 1] @ pk.T
                pk = self.powers[L] @ pk
            lead = np.eye(2)
            for b in range(min(nb, self.carry + 1)):  # the initial state's weight A^(L b) z0
                z[:, b] += z0 @ lead.T
                lead = self.powers[L] @ lead
        y += z @ self.g.T
        m = n - L * (nb - 1)  # samples in the last block
        end = z[:, -1] @ self.powers[m].T + xb[:, -1, :m] @ self.k[L - m:]
        return y.reshape(ndev, nb * L)[:, :n], end


def _window_extreme(x: np.ndarray, size: int, fill: float, acc: np.ufunc) -> np.ndarray:
    """``acc`` (maximum or minimum) over every window x[j : j + size], j = 0..n − size."""
    n = len(x)
    m = -(-n // size) * size
    pad = np.full(m, fill)
    pad[:n] = x
    blocks = pad.reshape(-1, size)
    prefix = acc.accumulate(blocks, axis=1).ravel()  # from each block's start to i
    suffix = acc.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].ravel()  # from i to block's end
    # window j is suffix[j] (its first block's part) with prefix[j + size - 1] (the rest):
    # two aligned slices of the n − size + 1 windows (none when n < size), no index arrays
    count = max(n - size + 1, 0)
    return acc(suffix[:count], prefix[size - 1:size - 1 + count])


def sliding_max(x: np.ndarray, size: int) -> np.ndarray:
    """max(x[j : j + size]) for every j = 0..n − size (exact; O(n))."""
    return _window_extreme(x, size, -np.inf, np.maximum)


def sliding_min(x: np.ndarray, size: int) -> np.ndarray:
    """min(x[j : j + size]) for every j = 0..n − size (exact; O(n))."""
    return _window_extreme(x, size, np.inf, np.minimum)


def running_median(x: np.ndarray, size: int) -> np.ndarray:
    """The median of the ``size`` (odd) values centred on each point, edges repeated.

    ``scipy.ndimage.median_filter(x, size=size, mode="nearest")`` for odd ``size``: the
    middle order statistic of each window, so the values are the same.
    """
    if size % 2 != 1:
        raise ValueError(f"size {size} must be odd")
    half = size // 2
    padded = np.concatenate([np.full(half, x[0]), x, np.full(half, x[-1])])
    windows = np.lib.stride_tricks.sliding_window_view(padded, size)
    return np.partition(windows, half, axis=1)[:, half].copy()


def chi2_ppf(p: float, dof: float) -> float:
    """The ``p`` quantile of the chi-square distribution with ``dof`` degrees of freedom.

    ``scipy.stats.chi2.ppf(p, dof)`` = 2·y where P(dof/2, y) = p, P the regularised lower
    incomplete gamma function. Solved by Newton's method on P (safeguarded by bisection) from
    the Wilson–Hilferty start x ≈ dof·(1 − 2/(9 dof) + z·√(2/(9 dof)))³, z the normal
    quantile; for ``p`` > 0.5 on the upper tail Q = 1 − P, which keeps the digits of a small
    1 − p (a false-alarm rate). P and Q are :func:`_gamma_p_q`. Agrees with SciPy to 1e-12
    relative or better over the thresholds the spectrum uses (tested).

    Raises:
        ValueError: ``p`` outside (0, 1) or ``dof`` <= 0.
    """
    if not (0.0 < p < 1.0) or not dof > 0.0:
        raise ValueError(f"chi2_ppf needs 0 < p < 1 and dof > 0, not p={p}, dof={dof}")
    a = dof / 2.0
    upper = p > 0.5
    target = 1.0 - p if upper else p  # exact for p in (0.5, 1) (Sterbenz)
    lgamma_a = math.lgamma(a)
    z = statistics.NormalDist().inv_cdf(p)
    c = 2.0 / (9.0 * dof)
    y = max(a * (1.0 - c + z * math.sqrt(c)) ** 3, 1e-300)
    lo, hi = 0.0, math.inf  # a bracket of the root, narrowed at every step
    for _ in range(200):
        lower_p, upper_q = _gamma_p_q(a, y, lgamma_a)
        f = (target - upper_q) if upper else (lower_p - target)  # increasing in y
        if f > 0:
            hi = y
        else:
            lo = y
        if f == 0.0:
            break
        density = math.exp((a - 1.0) * math.log(y) - y - lgamma_a)  # dP/dy
        step = f / density if density > 0 else math.inf
        new = min(y - step, 2.0 * max(y, 1.0))  # at most doubling while no upper bound is known
        if not (lo < new < hi):  # Newton left the bracket: grow it, or bisect it
            if not math.isfinite(hi):
                new = 2.0 * max(y, 1.0)
            else:  # geometrically while it spans orders of magnitude
                new = math.sqrt(lo * hi) if 0.0 < 4.0 * lo < hi else 0.5 * (lo + hi)
        if abs(new - y) <= 1e-15 * y:
            y = new
            break
        y = new
    return 2.0 * y


def _gamma_p_q(a: float, x: float, lgamma_a: float) -> tuple[float, float]:
    """Regularised incomplete gamma functions (P(a, x), Q(a, x)), P + Q = 1.

    Below x = a + 1 the power series P = xᵃe⁻ˣ/Γ(a+1) · Σₖ xᵏ / ((a+1)…(a+k)) converges fast;
    above, Q = xᵃe⁻ˣ/Γ(a) · 1/(x+1−a− 1(1−a)/(x+3−a− 2(2−a)/(x+5−a− …))), the continued
    fraction of the upper function, evaluated by the modified Lentz method. The other one is 1
    minus it.
    """
    if x <= 0.0:
        return 0.0, 1.0
    log_front = a * math.log(x) - x - lgamma_a  # log of xᵃe⁻ˣ/Γ(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        k = a
        for _ in range(10_000):
            k += 1.0
            term *= x / k
            total += term
            if term < total * 1e-17:
                break
        lower = math.exp(log_front) * total
        return lower, 1.0 - lower
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-17:
            break
    upper = math.exp(log_front) * h
    return 1.0 - upper, upper
