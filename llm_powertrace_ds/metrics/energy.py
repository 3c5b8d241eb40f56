"""Energy metrics and the project's one counter-vs-integral rule.

:func:`counter_energy_j`, :func:`mismatch_pct` and :func:`device_mismatch_pct` are used by the
metrics, by ``validate`` and by the generator's conversion.
"""

from __future__ import annotations

import numpy as np

from ..run import DeviceSeries, Run
from .core import (
    ENERGY_NAMES,
    _Dev,
    _device_integral,
    _EventIndex,
    _Out,
    _steady_tokens,
    _tokens,
    event_windows,
    hold_energy_j,
)


def _group_energy(run: Run, devs: list[_Dev | None], out: _Out, ev: _EventIndex) -> None:
    """Energy.

    - ``gpu_energy_j`` = per device d: Σ_i (P_d,i + P_d,i+1) / 2 · (t_d,i+1 − t_d,i) on the
      device's own timestamps, missing readings dropped, bridging gaps (trapezoid); for a run
      with ``sample_hold`` ``previous`` (a change-only source) Σ_i P_d,i · (t_d,i+1 − t_d,i),
      each reading held until the next (steps; the steady and idle integrals likewise).
    - ``gpu_energy_counter_j`` = per device: Σ_i max(0, E_d,i+1 − E_d,i) / 1000 of the energy
      counter (mJ), null when the device reports no counter.
    - ``gpu_mean_power_w`` = gpu_energy_j / (t_d,last − t_d,first).
    - ``gpu_peak_power_w`` = max_i P_d,i over the device's own readings.
    - ``energy_j`` = Σ_d gpu_energy_j (null when a device has fewer than 2 power readings).
    - ``energy_counter_j`` = Σ_d gpu_energy_counter_j (null when any device lacks a counter).
    - ``energy_mismatch_pct`` = 100 · (energy_j − energy_counter_j) / energy_counter_j.
    - ``energy_per_token_j`` = energy_j / tokens; tokens = training tokens (``tokens``) for
      fine-tuning, generated tokens (``tokens_out``, else Σ output_tokens of the request log) for
      inference — the ML.ENERGY convention.
    - ``steady_energy_j`` = Σ_d ∫ P_d dt between the first ``steady_begin`` event and the next
      ``steady_end`` (trapezoid on each device's own timestamps, ends interpolated).
    - ``steady_energy_per_token_j`` = steady_energy_j / tokens generated in the steady window;
      per request the first token counts at ``first_token_ms`` and the other output_tokens − 1
      are spread uniformly over (first_token_ms, finish_ms].
    - ``idle_power_w`` = Σ_d ∫ P_d dt / (t1 − t0) between the first ``idle_begin`` event and the
      next ``idle_end`` (the idle padding before the workload; trapezoid, ends interpolated).
    """
    energies, counters = _per_device_energy(run, devs, out)
    if not run.devices:
        out.null(ENERGY_NAMES, "the run has no devices")
        return
    missing = [i for i, e in enumerate(energies) if e is None]
    _run_energy(run, energies, counters, missing, out)
    _idle_power(devs, ev, missing, out)
    _steady_energy(run, devs, ev, missing, out)


def _per_device_energy(run: Run, devs: list[_Dev | None],
                       out: _Out) -> tuple[list[float | None], list[float | None]]:
    """Set the per-device energy columns; return (gpu_energy_j, gpu_energy_counter_j)."""
    energies: list[float | None] = []
    counters: list[float | None] = []
    means: list[float | None] = []
    peaks: list[float | None] = []
    for d, dev in zip(devs, run.devices, strict=True):
        if d is None or len(d.t_ms) < 2:
            energies.append(None)
            means.append(None)
            peaks.append(float(d.p.max()) if d is not None and len(d.p) else None)
        else:
            e = float(d.energy_j)  # type: ignore[arg-type]
            energies.append(e)
            span = (d.t_ms[-1] - d.t_ms[0]) / 1000.0
            means.append(float(e / span) if span > 0 else None)
            peaks.append(float(d.p.max()))
        counters.append(counter_energy_j(dev.t_ms, dev.signals.get("energy_mj")))
    out.set("gpu_energy_j", energies)
    out.set("gpu_energy_counter_j", counters)
    out.set("gpu_mean_power_w", means)
    out.set("gpu_peak_power_w", peaks)
    return energies, counters


def _run_energy(run: Run, energies: list[float | None], counters: list[float | None],
                missing: list[int], out: _Out) -> None:
    """Set energy_j, energy_counter_j, energy_mismatch_pct and energy_per_token_j."""
    energy = None
    if missing:
        out.null("energy_j", f"gpu {', '.join(map(str, missing))} has fewer than 2 power readings")
    else:
        energy = float(sum(energies))  # type: ignore[arg-type]
        out.set("energy_j", energy)
    if any(c is None for c in counters):
        out.null("energy_counter_j", "no energy counter")
        out.null("energy_mismatch_pct", "no energy counter")
    else:
        counter = float(sum(counters))  # type: ignore[arg-type]
        out.set("energy_counter_j", counter)
        if energy is None:
            out.null("energy_mismatch_pct", "energy_j is null")
        elif counter <= 0:
            out.null("energy_mismatch_pct", "energy counter did not advance")
        else:
            out.set("energy_mismatch_pct", mismatch_pct(energy, counter))
    tokens = _tokens(run)
    if energy is None:
        out.null("energy_per_token_j", "energy_j is null")
    elif tokens is None or tokens <= 0:
        out.null("energy_per_token_j", "no token count")
    else:
        out.set("energy_per_token_j", energy / tokens)


def _idle_power(devs: list[_Dev | None], ev: _EventIndex, missing: list[int], out: _Out) -> None:
    """Set idle_power_w from the first idle_begin/idle_end window."""
    idle = event_windows(ev, "idle_begin", "idle_end")
    if not idle or idle[0][1] <= idle[0][0]:
        out.null("idle_power_w", "no idle_begin/idle_end events")
    elif missing:
        out.null("idle_power_w", "a device has fewer than 2 power readings")
    else:
        a, b = idle[0]
        out.set("idle_power_w", float(sum(_device_integral(d, a, b) for d in devs
                                          if d is not None)) / ((b - a) / 1000.0))


def _steady_energy(run: Run, devs: list[_Dev | None], ev: _EventIndex, missing: list[int],
                   out: _Out) -> None:
    """Set steady_energy_j and steady_energy_per_token_j from the first steady window."""
    windows = event_windows(ev, "steady_begin", "steady_end")
    if not windows:
        out.null(("steady_energy_j", "steady_energy_per_token_j"),
                 "no steady_begin/steady_end events")
        return
    if missing:
        out.null(("steady_energy_j", "steady_energy_per_token_j"),
                 "a device has fewer than 2 power readings")
        return
    t0, t1 = windows[0]
    steady = float(sum(_device_integral(d, t0, t1) for d in devs if d is not None))
    out.set("steady_energy_j", steady)
    st = _steady_tokens(run, t0, t1)
    if st is None or st <= 0:
        out.null("steady_energy_per_token_j", "no request log with tokens in the steady window")
    else:
        out.set("steady_energy_per_token_j", steady / st)


def device_energy_j(dev: DeviceSeries, hold: str = "linear") -> float | None:
    """Energy of one device on its own timestamps under the run's ``sample_hold``.

    ``linear``: E = Σ (P_i + P_i+1)/2 · Δt_i (trapezoid); ``previous``: E = Σ P_i · Δt_i
    (each reading held until the next). Missing readings are dropped first, so the integral
    bridges them (and gaps). ``None`` with fewer than 2 finite power readings.
    """
    p = dev.power_w
    ok = np.isfinite(p)
    if ok.sum() < 2:
        return None
    return hold_energy_j(dev.t_ms[ok], p[ok], hold)


def counter_energy_j(t_ms: np.ndarray, energy_mj: np.ndarray | None) -> float | None:
    """Energy the device's cumulative counter reports (J), or ``None``.

    E_counter = Σ_i max(0, E_i+1 − E_i) / 1000 over the finite counter readings (mJ) in time
    order: a counter reset (a step down) loses its interval, it never adds. ``None`` when there
    is no counter, its length differs from ``t_ms``, or it has fewer than 2 finite readings.
    The one counter rule of the project: metrics, ``validate`` and the generator's conversion
    all call it.
    """
    if energy_mj is None or len(energy_mj) != len(t_ms):
        return None
    ok = np.isfinite(energy_mj)
    if np.count_nonzero(ok) < 2:
        return None
    ct, cv = (t_ms, energy_mj) if ok.all() else (t_ms[ok], energy_mj[ok])
    if not np.all(ct[1:] > ct[:-1]):
        cv = cv[np.argsort(ct, kind="stable")]
    steps = np.diff(cv)
    resets = steps[steps < 0]
    return float((cv[-1] - cv[0] - resets.sum()) / 1000.0)


def mismatch_pct(energy_j: float | None, counter_j: float | None) -> float | None:
    """Signed mismatch 100 · (energy_j − counter_j) / counter_j (%), or ``None``.

    ``None`` when either energy is ``None`` or the counter did not advance (counter_j ≤ 0).
    """
    if energy_j is None or counter_j is None or counter_j <= 0:
        return None
    return 100.0 * (energy_j - counter_j) / counter_j


def device_mismatch_pct(dev: DeviceSeries) -> float | None:
    """:func:`mismatch_pct` of one device: its power integral against its energy counter.

    mismatch = 100 · (device_energy_j − counter_energy_j) / counter_energy_j; ``None`` as in
    :func:`device_energy_j`, :func:`counter_energy_j` and :func:`mismatch_pct`.
    """
    counter_j = counter_energy_j(dev.t_ms, dev.signals.get("energy_mj"))
    if counter_j is None:
        return None
    return mismatch_pct(device_energy_j(dev), counter_j)
