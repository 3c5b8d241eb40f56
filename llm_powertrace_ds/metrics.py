"""Per-run power metrics (core set; the grid-metrics issue extends it).

Every metric has its formula in its docstring. A metric that cannot be computed is null and the
reason goes into ``metric_notes`` as ``"<metric>: <reason>"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .run import DeviceSeries, Run

GRID_MS = 100
GAP_PERIODS = 3.0


def device_energy_j(dev: DeviceSeries) -> float | None:
    """Trapezoid energy of one device on its own timestamps: E = sum((P_i + P_{i+1})/2 * dt_i).

    Missing readings are dropped first, so the integral bridges them (and gaps).
    """
    p = dev.power_w
    ok = np.isfinite(p)
    if ok.sum() < 2:
        return None
    return float(np.trapezoid(p[ok], dev.t_ms[ok] / 1000.0))


def compute_run_metrics(run: Run) -> dict[str, Any]:
    """Node-total metrics of a run (scalar columns of the runs tables).

    ``energy_j`` = sum over devices of :func:`device_energy_j`; ``mean_power_w`` = energy_j /
    duration_s (time-weighted); ``peak_power_w`` and ``p99_power_w`` on the node total formed by
    interpolating each device onto a common 0.1 s grid over the span where all are present.
    """
    notes: list[str] = []
    out: dict[str, Any] = {}
    energies = [device_energy_j(d) for d in run.devices]
    out["gpu_energy_j"] = energies
    out["gpu_peak_power_w"] = [float(np.nanmax(d.power_w)) if np.isfinite(d.power_w).any()
                               else None for d in run.devices]
    spans = [(d.t_ms[np.isfinite(d.power_w)]) for d in run.devices]
    out["gpu_mean_power_w"] = [
        (e / ((s[-1] - s[0]) / 1000.0) if e is not None and len(s) > 1 and s[-1] > s[0] else None)
        for e, s in zip(energies, spans, strict=True)]
    if not run.devices or any(e is None for e in energies):
        for k in ("energy_j", "mean_power_w", "peak_power_w", "p99_power_w", "duration_s"):
            out[k] = None
            notes.append(f"{k}: a device has fewer than 2 power readings")
        out["metric_notes"] = notes
        return out
    start = max(int(s[0]) for s in spans)
    end = min(int(s[-1]) for s in spans)
    out["energy_j"] = float(sum(energies))  # type: ignore[arg-type]
    out["duration_s"] = (max(int(s[-1]) for s in spans) - min(int(s[0]) for s in spans)) / 1000.0
    out["mean_power_w"] = out["energy_j"] / out["duration_s"] if out["duration_s"] > 0 else None
    gap_count = 0
    gap_ms = 0
    for d in run.devices:
        dt = np.diff(d.t_ms)
        period = run.meta.get("sample_period_ms") or (np.median(dt) if len(dt) else 0)
        gaps = dt[dt > GAP_PERIODS * period]
        gap_count += len(gaps)
        gap_ms += int(gaps.sum())
    out["gap_count"] = gap_count
    out["gap_s"] = gap_ms / 1000.0
    if end > start:
        grid = np.arange(start, end + 1, GRID_MS)
        total = np.zeros(len(grid))
        for d in run.devices:
            ok = np.isfinite(d.power_w)
            total += np.interp(grid, d.t_ms[ok], d.power_w[ok])
        out["peak_power_w"] = float(total.max())
        out["p99_power_w"] = float(np.percentile(total, 99))
    else:
        out["peak_power_w"] = out["p99_power_w"] = None
        notes.append("peak_power_w: devices share no common time span")
    counters = []
    for d in run.devices:
        e = d.signals.get("energy_mj")
        if e is None or np.isfinite(e).sum() < 2:
            counters = []
            break
        ok = np.isfinite(e)
        counters.append((e[ok][-1] - e[ok][0]) / 1000.0)
    if counters:
        out["energy_counter_j"] = float(sum(counters))
        out["energy_mismatch_pct"] = (100.0 * (out["energy_j"] - out["energy_counter_j"])
                                      / out["energy_counter_j"] if out["energy_counter_j"] else None)
    else:
        out["energy_counter_j"] = out["energy_mismatch_pct"] = None
        notes.append("energy_counter_j: no energy counter")
    tokens = run.meta.get("tokens") if run.workload == "finetune" else run.meta.get("tokens_out")
    if tokens:
        out["energy_per_token_j"] = out["energy_j"] / tokens
    else:
        out["energy_per_token_j"] = None
        notes.append("energy_per_token_j: no token count")
    out["metric_notes"] = notes
    return out
