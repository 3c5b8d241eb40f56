"""Site outputs of ``facility``: profiles at four resolutions, grid metrics, JSON, Parquet."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import metrics as metrics_mod
from ..atomic import atomic_path
from ..run import DeviceSeries, Run
from .compose import FacilityResult, Job
from .sources import GRID_MS

RESOLUTIONS_S: tuple[float, ...] = (0.1, 1.0, 60.0, 900.0)
"""Profile resolutions (s): the sampler's grid, 1 s, 1 min, and the 15-min utility demand interval."""
LDC_PERCENT: tuple[float, ...] = (0, 1, 5, 10, 25, 50, 75, 90, 95, 99, 100)
"""Points of the load-duration curve: the load exceeded during this % of the horizon."""
JSON_SHAPE = "llm-powertrace/facility/1"


def resample(power_w: np.ndarray, step_s: float, resolution_s: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Interval means: (start_s, length_s, mean_w) of consecutive ``resolution_s`` intervals.

    P̄_k = mean of the 0.1 s samples in [k·R, (k+1)·R); the last interval may be partial (its
    length says so), so Σ_k P̄_k · length_k = Σ_i P_i · Δ at every resolution (energy is
    conserved).
    """
    w = max(1, int(round(resolution_s / step_s)))
    n = len(power_w)
    starts = np.arange(0, n, w)
    counts = np.minimum(w, n - starts)
    sums = np.add.reduceat(power_w, starts) if n else np.zeros(0)
    return starts * step_s, counts * step_s, sums / counts


def _interval_ramps(mean_w: np.ndarray, length_s: np.ndarray, resolution_s: float
                    ) -> tuple[float | None, float | None]:
    """Largest rise and fall between consecutive complete interval means (W per interval)."""
    full = mean_w[np.isclose(length_s, resolution_s)]
    if len(full) < 2:
        return None, None
    d = np.diff(full)
    return max(0.0, float(d.max())), max(0.0, float(-d.min()))


def site_metrics(result: FacilityResult) -> tuple[dict[str, Any], list[str]]:
    """Grid metrics of the site's facility profile, in kW and MW.

    The 0.1 s profile is passed as one series to
    :func:`llm_powertrace_ds.metrics.compute_run_metrics` (its formulas, in ``metric_formulas()``),
    then converted:

    - ``energy_mwh`` = Σ_i P_i · Δ / 3.6e9 (Δ = 0.1 s); the same at every resolution.
    - ``mean_kw``, ``peak_kw``, ``p5_kw`` … ``p99_kw`` = ``mean_power_w``, ``peak_power_w``, … / 1000.
    - ``par`` = peak_kw / mean_kw; ``load_factor`` = mean_kw / peak_kw.
    - ``swing_kw`` = p95 − p5 of the 0.1 s profile (``swing_w`` / 1000).
    - ``ramp_up_max_1s_mw_per_s``, ``ramp_down_max_1s_mw_per_s``, ``ramp_abs_p99_1s_mw_per_s`` =
      the metrics' 1 s ramps r(t) = (P(t + 1 s) − P(t)) / 1 s on the 0.1 s grid, / 1e6.
    - ``ramp_up_max_1min_mw_per_min``, ``ramp_down_max_1min_mw_per_min`` = largest rise / fall
      between consecutive complete 1-min means, / 1e6 (likewise ``_15min_mw_per_15min``).
    - ``band_rms_low_kw``, ``band_rms_mid_kw``, ``band_rms_high_kw`` = RMS of the Welch spectrum
      in 0.1–1, 1–2.5, 2.5–5 Hz, / 1000; ``dominant_freq_hz`` its peak.
    - ``peak_1min_kw`` = max complete 1-min mean; ``demand_peak_15min_kw`` = max complete 15-min
      mean, the utility's billing demand (null when the horizon holds no complete interval).
    - ``it_mean_kw``, ``it_peak_kw``, ``gpu_mean_kw``, ``gpu_peak_kw`` = the same for IT and GPU
      power; ``rack_peak_kw`` = max over racks and samples of rack IT power.

    Returns:
        (metrics, notes): a metric that cannot be computed is ``None`` with its reason in notes.
    """
    step = result.step_s
    n = len(result.facility_w)
    t_ms = np.arange(n, dtype=np.int64) * GRID_MS
    run = Run({"run_id": "site", "workload": "finetune", "platform": "site",
               "sample_period_ms": float(GRID_MS)},
              [DeviceSeries(0, t_ms, {"power_w": result.facility_w})])
    m = metrics_mod.compute_run_metrics(run)
    notes = [n_ for n_ in m["metric_notes"]  # why a metric is null
             if n_.split(":")[0] in ("peak_power_w", "swing_w", "band_rms_low_w",
                                     "dominant_freq_hz", "ramp_up_max_1s_w_per_s")
             and m.get(n_.split(":")[0]) is None]
    if any(s.one_s_average for s in result.sources):
        notes += [f"band_rms_{b}_kw: from sources with 1 s-averaged power "
                  "(power_is_1s_average): oscillation above about 0.5 Hz was filtered away by "
                  "the sensor, so this under-reports" for b in ("low", "mid", "high")]

    def kw(name: str) -> float | None:
        v = m.get(name)
        return None if v is None else v / 1e3

    def mw(name: str) -> float | None:
        v = m.get(name)
        return None if v is None else v / 1e6

    energy_j = float(result.facility_w.sum()) * step
    mean_kw = energy_j / (n * step) / 1e3 if n else None
    out: dict[str, Any] = {
        "duration_s": n * step, "energy_mwh": energy_j / 3.6e9, "mean_kw": mean_kw,
        "peak_kw": kw("peak_power_w"), "p5_kw": kw("p5_power_w"), "p50_kw": kw("p50_power_w"),
        "p95_kw": kw("p95_power_w"), "p99_kw": kw("p99_power_w"),
    }
    out["par"] = (out["peak_kw"] / mean_kw) if out["peak_kw"] and mean_kw else None
    out["load_factor"] = (mean_kw / out["peak_kw"]) if out["peak_kw"] and mean_kw else None
    out["swing_kw"] = kw("swing_w")
    out["ramp_up_max_1s_mw_per_s"] = mw("ramp_up_max_1s_w_per_s")
    out["ramp_down_max_1s_mw_per_s"] = mw("ramp_down_max_1s_w_per_s")
    out["ramp_abs_p99_1s_mw_per_s"] = mw("ramp_abs_p99_1s_w_per_s")
    for tag, res in (("1min", 60.0), ("15min", 900.0)):
        _, length, mean = resample(result.facility_w, step, res)
        up, down = _interval_ramps(mean, length, res)
        out[f"ramp_up_max_{tag}_mw_per_{tag.replace('1min', 'min')}"] = (
            None if up is None else up / 1e6)
        out[f"ramp_down_max_{tag}_mw_per_{tag.replace('1min', 'min')}"] = (
            None if down is None else down / 1e6)
        full = mean[np.isclose(length, res)]
        key = "peak_1min_kw" if tag == "1min" else "demand_peak_15min_kw"
        out[key] = float(full.max()) / 1e3 if full.size else None
        if up is None:
            notes.append(f"{tag} ramps: fewer than 2 complete {tag} intervals")
        if not full.size:
            notes.append(f"{key}: no complete {tag} interval in {n * step:g} s")
    for band in ("low", "mid", "high"):
        out[f"band_rms_{band}_kw"] = kw(f"band_rms_{band}_w")
    out["dominant_freq_hz"] = m.get("dominant_freq_hz")
    out["it_mean_kw"] = float(result.it_w.mean()) / 1e3
    out["it_peak_kw"] = float(result.it_w.max()) / 1e3
    out["gpu_mean_kw"] = float(result.gpu_w.mean()) / 1e3
    out["gpu_peak_kw"] = float(result.gpu_w.max()) / 1e3
    out["rack_peak_kw"] = float(result.rack_peak_it_w.max()) / 1e3
    return out, notes


def load_duration_curve(power_w: np.ndarray, percent: Sequence[float] = LDC_PERCENT
                        ) -> list[tuple[float, float]]:
    """(p, load) pairs: the load (W) exceeded during p % of the horizon (sorted descending)."""
    values = np.percentile(power_w, [100.0 - p for p in percent])
    return [(float(p), float(v)) for p, v in zip(percent, values, strict=True)]


def profiles(result: FacilityResult) -> dict[float, dict[str, np.ndarray]]:
    """Site profiles at :data:`RESOLUTIONS_S` (interval means, see :func:`resample`).

    Each is ``{"start_s", "length_s", "gpu_w", "it_w", "facility_w"}``.
    """
    out = {}
    for res in RESOLUTIONS_S:
        start, length, fac = resample(result.facility_w, result.step_s, res)
        out[res] = {"start_s": start, "length_s": length,
                    "gpu_w": resample(result.gpu_w, result.step_s, res)[2],
                    "it_w": resample(result.it_w, result.step_s, res)[2], "facility_w": fac}
    return out


def to_json(result: FacilityResult) -> dict[str, Any]:
    """The ``--format json`` object (shape documented in docs/facility.md)."""
    cfg = result.config
    metrics, notes = site_metrics(result)
    per_source: dict[int, list[Job]] = {}
    for j in result.jobs:
        per_source.setdefault(j.source, []).append(j)
    return {
        "shape": JSON_SHAPE,
        "sync": cfg.sync,
        "measured": False,
        "site": {"gpus": cfg.gpus, "gpus_per_node": cfg.gpus_per_node, "nodes": cfg.nodes,
                 "nodes_per_rack": cfg.nodes_per_rack, "racks": len(result.rack_peak_it_w),
                 "jobs": len(result.jobs), "duration_s": result.duration_s,
                 "step_s": result.step_s, "seed": cfg.seed},
        "node_overhead": (None if cfg.overhead is None else
                          {"model": cfg.overhead.name, "idle_w": cfg.overhead.idle_w,
                           "fraction": cfg.overhead.fraction, "source": cfg.overhead.source}),
        "pue": {"model": cfg.pue.describe(), "constant": cfg.pue.constant,
                "curve": ({"x_name": cfg.pue.x_name, "x": list(cfg.pue.x), "pue": list(cfg.pue.y)}
                          if cfg.pue.constant is None else None),
                "design_it_kw": None if result.design_it_w is None
                else result.design_it_w / 1e3},
        "sources": [{"run_id": s.run_id, "platform": s.platform, "devices": s.num_devices,
                     "share": s.share, "jobs": len(per_source.get(i, [])),
                     "nodes": sum(j.nodes for j in per_source.get(i, [])),
                     "duration_s": s.length * result.step_s, "tile": s.tile,
                     "tile_s": [s.block[0] * result.step_s, s.block[1] * result.step_s],
                     "synchrony_index": s.synchrony_index, "cpu_proxy": s.cpu_proxy,
                     "window": s.window, "power_is_1s_average": s.one_s_average}
                    for i, s in enumerate(result.sources)],
        "metrics": metrics,
        "load_duration_kw": [{"percent_of_time": p, "kw": v / 1e3}
                             for p, v in load_duration_curve(result.facility_w)],
        "limits": result.limits,
        "notes": result.notes + notes,
    }


def write_profile(result: FacilityResult, path: str | Path,
                  summary: dict[str, Any] | None = None) -> Path:
    """Write the four profiles as one Parquet table, long format, atomically.

    Columns: ``resolution_s`` (0.1, 1, 60, 900), ``start_s``, ``length_s`` (the last interval
    may be partial), ``gpu_kw``, ``it_kw``, ``facility_kw``. The file's key-value metadata
    ``llm_powertrace_facility`` holds the JSON of :func:`to_json` (mode, models, limits);
    pass it as ``summary`` when it is already computed.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("resolution_s", "start_s", "length_s",
                                                          "gpu_kw", "it_kw", "facility_kw")}
    for res, prof in profiles(result).items():
        cols["resolution_s"].append(np.full(len(prof["start_s"]), res))
        cols["start_s"].append(prof["start_s"])
        cols["length_s"].append(prof["length_s"])
        for key in ("gpu", "it", "facility"):
            cols[f"{key}_kw"].append(prof[f"{key}_w"] / 1e3)
    table = pa.table({k: np.concatenate(v) for k, v in cols.items()})
    meta = {b"llm_powertrace_facility": json.dumps(summary or to_json(result), allow_nan=False).encode()}
    table = table.replace_schema_metadata(meta)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path
