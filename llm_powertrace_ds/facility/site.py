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
JSON_SHAPE = "llm-powertrace/facility/2"
"""2: metrics in SI named by unit (``_w``, ``_j``, ``_w_per_s``), ``jobs`` and ``events``."""


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
    """Grid metrics of the site's facility profile, in SI units named in each key.

    The 0.1 s profile is passed as one series to
    :func:`llm_powertrace_ds.metrics.compute_run_metrics` (its formulas, in ``metric_formulas()``):

    - ``energy_j`` = Σ_i P_i · Δ (Δ = 0.1 s); the same at every resolution.
    - ``mean_w``, ``peak_w``, ``p5_w`` … ``p99_w``: level and percentiles of the 0.1 s profile.
    - ``par`` = peak_w / mean_w; ``load_factor`` = mean_w / peak_w.
    - ``swing_p95_p5_w`` = p95 − p5 of the 0.1 s profile; ``range_w`` = max − min (the names
      ``mitigate`` uses for the same definitions).
    - ``ramp_up_max_1s_w_per_s``, ``ramp_down_max_1s_w_per_s``, ``ramp_abs_p99_1s_w_per_s`` =
      the metrics' 1 s ramps r(t) = (P(t + 1 s) − P(t)) / 1 s on the 0.1 s grid.
    - ``ramp_up_max_60s_w_per_s``, ``ramp_down_max_60s_w_per_s`` = largest rise / fall between
      consecutive complete 60 s means, / 60 s (likewise ``_900s_``).
    - ``band_rms_low_w``, ``band_rms_mid_w``, ``band_rms_high_w`` = RMS of the Welch spectrum
      in 0.1–1, 1–2.5, 2.5–5 Hz; ``dominant_freq_hz`` its peak.
    - ``peak_60s_w`` = max complete 60 s mean; ``demand_peak_900s_w`` = max complete 15-min
      mean, the utility's billing demand (null when the horizon holds no complete interval).
    - ``it_mean_w``, ``it_peak_w``, ``gpu_mean_w``, ``gpu_peak_w`` = the same for IT and GPU
      power; ``rack_peak_w`` = max over racks and samples of rack IT power.

    Tables print these in MW, MWh and MW/min (:mod:`llm_powertrace_ds.units`).

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
        notes += [f"band_rms_{b}_w: from sources with 1 s-averaged power "
                  "(power_is_1s_average): oscillation above about 0.5 Hz was filtered away by "
                  "the sensor, so this under-reports" for b in ("low", "mid", "high")]
    energy_j = float(result.facility_w.sum()) * step
    mean_w = energy_j / (n * step) if n else None
    out: dict[str, Any] = {
        "duration_s": n * step, "energy_j": energy_j, "mean_w": mean_w,
        "peak_w": m.get("peak_power_w"), "p5_w": m.get("p5_power_w"),
        "p50_w": m.get("p50_power_w"), "p95_w": m.get("p95_power_w"),
        "p99_w": m.get("p99_power_w"),
    }
    out["par"] = (out["peak_w"] / mean_w) if out["peak_w"] and mean_w else None
    out["load_factor"] = (mean_w / out["peak_w"]) if out["peak_w"] and mean_w else None
    out["swing_p95_p5_w"] = m.get("swing_w")
    out["range_w"] = float(result.facility_w.max() - result.facility_w.min()) if n else None
    for key in ("ramp_up_max_1s_w_per_s", "ramp_down_max_1s_w_per_s",
                "ramp_abs_p99_1s_w_per_s"):
        out[key] = m.get(key)
    for res in (60.0, 900.0):
        tag = f"{res:g}s"
        _, length, mean = resample(result.facility_w, step, res)
        up, down = _interval_ramps(mean, length, res)
        out[f"ramp_up_max_{tag}_w_per_s"] = None if up is None else up / res
        out[f"ramp_down_max_{tag}_w_per_s"] = None if down is None else down / res
        full = mean[np.isclose(length, res)]
        key = "peak_60s_w" if res == 60.0 else "demand_peak_900s_w"
        out[key] = float(full.max()) if full.size else None
        if up is None:
            notes.append(f"{tag} ramps: fewer than 2 complete {tag} intervals")
        if not full.size:
            notes.append(f"{key}: no complete {tag} interval in {n * step:g} s")
    for band in ("low", "mid", "high"):
        out[f"band_rms_{band}_w"] = m.get(f"band_rms_{band}_w")
    out["dominant_freq_hz"] = m.get("dominant_freq_hz")
    out["it_mean_w"] = float(result.it_w.mean())
    out["it_peak_w"] = float(result.it_w.max())
    out["gpu_mean_w"] = float(result.gpu_w.mean())
    out["gpu_peak_w"] = float(result.gpu_w.max())
    out["rack_peak_w"] = float(result.rack_peak_it_w.max())
    return out, notes


def events(result: FacilityResult) -> list[dict[str, Any]]:
    """Job starts and stops on the site's clock, grouped by time: the ramps a utility sees.

    Each event: ``t_s`` (when the measured ramp begins), ``kind`` (``start``/``stop``),
    ``jobs``, ``gpus``, ``ramp_s`` (how long the measured ramp lasts), ``step_w`` = mean facility
    power over the 1 s after the ramp − over the 1 s before it (negative for a stop; other
    jobs' changes in those seconds included), and ``ramp_max_1s_w_per_s`` = the largest
    |P(t + 1 s) − P(t)| / 1 s of the site profile with t in [ramp start − 1 s, ramp end].
    """
    step = result.step_s
    x = result.facility_w
    n = len(x)
    w = max(1, int(round(1.0 / step)))
    r1 = np.abs(x[w:] - x[:-w]) / (w * step) if n > w else np.zeros(0)
    gpn = result.config.gpus_per_node
    groups: dict[tuple[int, int, str], list[Job]] = {}
    for j in result.jobs:
        if j.ramp_up is not None:
            groups.setdefault((j.ramp_up[0], j.ramp_up[1], "start"), []).append(j)
        if j.ramp_down is not None:
            groups.setdefault((j.ramp_down[0], j.ramp_down[1], "stop"), []).append(j)
    out = []
    for (a, b, kind), jobs in sorted(groups.items()):
        before = x[max(0, a - w):a]
        after = x[b:min(n, b + w)]
        step_w = (float(after.mean() - before.mean())
                  if len(before) and len(after) else None)
        lo, hi = max(0, a - w), min(len(r1), b)
        out.append({"t_s": a * step, "kind": kind, "jobs": len(jobs),
                    "gpus": sum(j.nodes for j in jobs) * gpn, "ramp_s": (b - a) * step,
                    "step_w": step_w,
                    "ramp_max_1s_w_per_s": float(r1[lo:hi].max()) if hi > lo else None,
                    "names": sorted({j.name for j in jobs if j.name})[:20]})
    return out


def job_groups(result: FacilityResult) -> list[dict[str, Any]]:
    """The jobs, those of one source with the same start and end counted once."""
    step = result.step_s
    groups: dict[tuple[int, int, int | None, str], list[Job]] = {}
    for j in result.jobs:
        groups.setdefault((j.source, j.start, j.end, j.name), []).append(j)
    gpn = result.config.gpus_per_node
    return [{"job": name or None, "run_id": result.sources[si].run_id, "jobs": len(js),
             "gpus": sum(j.nodes for j in js) * gpn, "start_s": start * step,
             "end_s": None if end is None else end * step,
             "steady_s": [(js[0].ramp_up[1] if js[0].ramp_up else start) * step,
                          (js[0].ramp_down[0] if js[0].ramp_down else len(result.facility_w))
                          * step],
             "waited_s": js[0].waited_s}
            for (si, start, end, name), js in sorted(groups.items(),
                                                      key=lambda kv: (kv[0][1], kv[0][0]))]


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
        "sync": cfg.sync if result.timing == "horizon" else result.timing,
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
                "design_it_w": result.design_it_w},
        "sources": [{"run_id": s.run_id, "platform": s.platform, "devices": s.num_devices,
                     "share": s.share, "jobs": len(per_source.get(i, [])),
                     "nodes": sum(j.nodes for j in per_source.get(i, [])),
                     "duration_s": s.length * result.step_s, "tile": s.tile,
                     "tile_s": [s.block[0] * result.step_s, s.block[1] * result.step_s],
                     "steady_window_s": [s.sh.steady[0] * result.step_s,
                                         s.sh.steady[1] * result.step_s],
                     "period_s": s.sh.period_s, "repeat": s.sh.how,
                     "synchrony_index": s.synchrony_index, "cpu_proxy": s.cpu_proxy,
                     "window": s.window, "power_is_1s_average": s.one_s_average}
                    for i, s in enumerate(result.sources)],
        "metrics": metrics,
        "jobs": job_groups(result),
        "events": events(result),
        "load_duration_w": [{"percent_of_time": p, "w": v}
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
