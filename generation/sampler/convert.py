"""From a spool (and the workload's events) to a ``Run`` of the dataset core (report layer).

``t_ms`` of every device is ``floor((t_after_ns - t0_ns) / 1e6)`` where t0 is the run's first
tick (CLOCK_MONOTONIC); events use the same formula, so samples and events align to the
millisecond. Should two samples of one device fall in the same millisecond (a late tick followed
at once by the next), the later one is moved 1 ms later so ``t_ms`` stays strictly increasing.
``energy_mj`` is the counter minus its first reading (energy since t0).

The driver's own power samples (``driver_samples.bin``) become each device's second series:
``driver_power_t_us = ts_us - utc(t0) / 1000``, the driver's CPU wall-clock timestamps placed on
the run clock through the start anchor (UTC of t0 = anchor UTC + (t0 - anchor monotonic));
samples before t0 are dropped. Devices of another kind than ``gpu`` (RAPL zones) become the
run's ``host_devices``: published with their ``device_kind``, never among the GPUs.

The dataset core (and so ``datasets``) is imported inside the functions: the sampler process
imports this package but must not import ``datasets``.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import SamplerError
from .spool import SPOOL_SIGNALS, Spool, read_spool, spool_dir

if TYPE_CHECKING:
    from llm_powertrace_ds.run import Run

log = logging.getLogger(__name__)


def t_ms_of(t_ns: np.ndarray, t0_ns: int) -> np.ndarray:
    """Monotonic ns -> ms since t0 (floor), as int64."""
    return np.floor_divide(np.asarray(t_ns, dtype=np.int64) - np.int64(t0_ns), 1_000_000)


def _strictly_increasing(t: np.ndarray) -> tuple[np.ndarray, int]:
    out = t.copy()
    nudged = 0
    for i in range(1, len(out)):
        if out[i] <= out[i - 1]:
            out[i] = out[i - 1] + 1
            nudged += 1
    return out, nudged


def _start_time(spool: Spool, t0_ns: int) -> dt.datetime | None:
    utc_ns = _t0_utc_ns(spool, t0_ns)
    if utc_ns is None:
        return None
    return dt.datetime.fromtimestamp(utc_ns / 1e9, dt.timezone.utc)


def _t0_utc_ns(spool: Spool, t0_ns: int) -> int | None:
    anchor = spool.anchors.get("start") or spool.anchors.get("stop")
    if not anchor:
        return None
    return int(anchor["utc_ns"]) + (t0_ns - int(anchor["monotonic_ns"]))


def _driver_series(spool: Spool, slot: int, t0_utc_ns: int | None
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """A device's driver samples on the run clock (µs since t0, W); ``None`` without any."""
    d = spool.driver_samples
    if t0_utc_ns is None or len(d) == 0:
        return None
    mine = d[d["slot"] == slot]
    if len(mine) == 0:
        return None
    mine = mine[np.argsort(mine["ts_us"], kind="stable")]
    t_us = mine["ts_us"].astype(np.int64) - np.int64(t0_utc_ns // 1000)
    keep = t_us >= 0
    return t_us[keep], np.asarray(mine["power_w"], dtype=np.float64)[keep]


def _median_interval_ms(series: list[np.ndarray]) -> float | None:
    """Median interval of the driver samples over all devices, ms (``None``: too few)."""
    gaps = [np.diff(t) for t in series if len(t) > 1]
    flat = np.concatenate(gaps) if gaps else np.zeros(0)
    flat = flat[flat > 0]
    return float(np.median(flat)) / 1000.0 if len(flat) else None


def _is_incomplete(spool: Spool) -> bool:
    from llm_powertrace_ds.staging import RunStatus, status_at

    if status_at(spool.directory) == RunStatus.INCOMPLETE:  # an archived attempt
        return True
    return not spool.summary.complete


def provenance_meta(path_or_spool: str | os.PathLike[str] | Spool) -> dict[str, Any]:
    """The run-metadata columns the sampler owns, from a spool.

    Returns ``sampler``, ``power_field``, ``sample_period_ms``, ``driver_version``,
    ``nvml_version``, ``cuda_version``, ``start_time`` (UTC of the first tick), ``platform``
    (from the first device's name), ``num_gpus`` and ``quality_flags`` (``cpu_proxy``,
    ``power_is_1s_average``, ``incomplete``, ``platform_unknown``/``form_factor_unknown`` as
    they apply). ``cpu_proxy``'s ``idle_w``/``max_w`` have no column: they are in
    ``provenance.json``, and ``power_limit_w`` of its devices is ``max_w``.
    """
    from llm_powertrace_ds import schema

    spool = path_or_spool if isinstance(path_or_spool, Spool) else read_spool(path_or_spool)
    prov = spool.provenance
    sampler = prov.get("sampler") or spool.header.get("source")
    power_field = prov.get("power_field")
    flags: list[str] = []
    names = [d.get("name") for d in spool.devices if d.get("kind", "gpu") == "gpu"]
    if sampler == "cpu_proxy":
        platform = "cpu_proxy"
        flags.append("cpu_proxy")
    else:
        info = schema.platform_from_name(names[0] if names else None)
        platform = info.slug
        flags.extend(info.flags)
        if power_field == "average" or (power_field == "power_usage" and any(
                schema.power_usage_is_1s_average(n) for n in names)):
            flags.append("power_is_1s_average")
    if _is_incomplete(spool):
        flags.append("incomplete")
    t0 = spool.t0_ns
    period_ms = spool.header.get("period_ms") or prov.get("sample_period_ms")
    if period_ms is None:
        raise SamplerError(f"'{spool_dir(spool.directory) / 'header.json'}': field 'period_ms' is "
                           "missing")
    meta: dict[str, Any] = {
        "sampler": sampler,
        "power_field": power_field,
        "sample_period_ms": float(period_ms),
        "driver_version": prov.get("driver_version"),
        "nvml_version": prov.get("nvml_version"),
        "cuda_version": prov.get("cuda_version"),
        "platform": platform,
        "num_gpus": len(names),
        "quality_flags": flags,
    }
    if t0 is not None:
        meta["start_time"] = _start_time(spool, t0)
    return meta


def spool_to_run(path: str | os.PathLike[str], meta: dict[str, Any] | None = None, *,
                 incomplete: bool | None = None, node_index: int = 0) -> Run:
    """Turn a spool and its events into a ``Run`` (one series per device).

    Args:
        path: the staging folder (``.staging/<run_id>/``) or an ``attempt-N`` folder.
        meta: the runner's run metadata (``run_id``, ``workload``, model and axis columns,
            ...); it wins over the sampler's :func:`provenance_meta` for keys it sets, and its
            ``quality_flags`` are merged.
        incomplete: force (True) or suppress (False) the ``incomplete`` flag; ``None`` = the
            spool decides (an ``attempt-N`` folder, or a sampler that did not stop on request).
        node_index: the node of a multi-node run.

    Returns:
        A ``Run`` whose metadata passed ``coerce_meta``; flags include ``cpu_proxy``,
        ``incomplete`` and ``energy_mismatch`` (counter vs integrated power > 5 %) as they apply.

    Raises:
        SamplerError: no spool, or a spool without samples.
        InputError: metadata that does not fit the column contract.
    """
    from generation.events import load_events
    from llm_powertrace_ds.run import DeviceSeries, Run, coerce_meta

    spool = read_spool(path)
    t0 = spool.t0_ns
    if t0 is None:
        raise SamplerError(f"the spool in '{spool.directory}' has no samples")
    devices: list[DeviceSeries] = []
    host_devices: list[DeviceSeries] = []
    driver_t: list[np.ndarray] = []
    t0_utc = _t0_utc_ns(spool, t0)
    nudged_total = 0
    for info in spool.devices:
        rows = spool.device_samples(int(info["slot"]))
        if len(rows) == 0:
            log.warning("device slot %s has no samples", info["slot"])
        t_ms, nudged = _strictly_increasing(t_ms_of(rows["t_after_ns"], t0))
        nudged_total += nudged
        signals: dict[str, np.ndarray] = {}
        for name in SPOOL_SIGNALS:
            values = np.asarray(rows[name], dtype=np.float64)
            if not np.isfinite(values).any():
                continue  # never reported: an all-null column
            if name == "energy_mj":
                values = values - values[np.isfinite(values)][0]
            signals[name] = values
        kind = str(info.get("kind") or "gpu")
        driver = _driver_series(spool, int(info["slot"]), t0_utc) if kind == "gpu" else None
        if driver is not None:
            driver_t.append(driver[0])
        series = DeviceSeries(
            gpu_index=int(info["gpu_index"]), t_ms=t_ms, signals=signals,
            node_index=node_index, rank=info.get("rank"), gpu_name=info.get("name"),
            gpu_uuid_hash=info.get("uuid_hash"), power_limit_w=info.get("power_limit_w"),
            default_power_limit_w=info.get("default_power_limit_w"), kind=kind,
            driver_t_us=driver[0] if driver else None,
            driver_power_w=driver[1] if driver else None)
        (devices if kind == "gpu" else host_devices).append(series)
    if nudged_total:
        log.info("%d samples shared a millisecond with the previous one and were moved 1 ms",
                 nudged_total)
    prov = provenance_meta(spool)
    prov["driver_power_period_ms"] = _median_interval_ms(driver_t)
    meta = dict(meta or {})
    flags = list(dict.fromkeys(list(prov.pop("quality_flags")) + list(meta.pop("quality_flags",
                                                                                []) or [])))
    if incomplete is True and "incomplete" not in flags:
        flags.append("incomplete")
    elif incomplete is False and "incomplete" in flags:
        flags.remove("incomplete")
    merged = {**prov, **meta}
    workload = merged.get("workload")
    if workload is not None:
        merged = coerce_meta(merged, str(workload), file=str(spool.directory))
    events = load_events(spool.directory, t0)
    run = Run(meta=merged, devices=devices, events=events, host_devices=host_devices)
    run.meta["quality_flags"] = []
    run.add_flags(*flags)
    if spool.summary.faults.get("stale_power"):  # the driver measured nothing new
        run.add_flags("stale_power")
    if spool.summary.faults.get("gpu_lost"):  # a series ended at its device's loss
        run.add_flags("gpu_lost")
    from llm_powertrace_ds.schema import ENERGY_MISMATCH_PCT

    mismatches = [energy_mismatch_pct(d) for d in devices]
    if any(m is not None and abs(m) > ENERGY_MISMATCH_PCT for m in mismatches):
        run.add_flags("energy_mismatch")
    return run


def energy_mismatch_pct(device: Any) -> float | None:
    """100 * (integral of power - counter energy) / counter energy of one device, or ``None``.

    The library's one rule (:func:`llm_powertrace_ds.metrics.device_mismatch_pct`: trapezoid of
    the finite ``power_w`` against the ``energy_mj`` counter, a counter reset losing its
    interval), imported here lazily so the sampler process never loads ``datasets``.
    """
    from llm_powertrace_ds.metrics import device_mismatch_pct

    return device_mismatch_pct(device)


__all__ = ["energy_mismatch_pct", "provenance_meta", "spool_to_run", "t_ms_of"]
