"""Run assembly: per-device data, metadata completion, platform and GPU-count resolution."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import checks, schema, specs
from ..errors import InputError
from ..run import DeviceSeries, Event, Run, coerce_meta
from . import enrich
from .meta_files import _MS_PER_S, _short, family_from_name
from .timestamps import format_utc_ms
from .values import _first_row

# ---------------------------------------------------------------------------------------------
# Run assembly
# ---------------------------------------------------------------------------------------------


@dataclass
class DeviceData:
    """One device as read from a log, before it is put on the run clock.

    Attributes:
        gpu_index: device index.
        ts_ms: UTC epoch ms of each sample, in file order.
        lines: the source line of each sample (for errors).
        signals: signal name -> float64 values (NaN = missing).
        gpu_name: name as reported.
        gpu_uuid_hash: salted hash of the UUID.
        power_limit_w: enforced power limit.
        default_power_limit_w: default power limit.
    """

    gpu_index: int
    ts_ms: np.ndarray
    lines: np.ndarray
    signals: dict[str, np.ndarray] = field(default_factory=dict)
    gpu_name: str | None = None
    gpu_uuid_hash: str | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None


def check_increasing(dev: DeviceData, *, file: Path, field: str = "timestamp") -> None:
    """Raise unless the device's timestamps strictly increase in file order."""
    if len(dev.ts_ms) < 2:
        return
    bad = np.diff(dev.ts_ms) <= 0
    if bad.any():
        i = _first_row(bad)
        before, after = int(dev.ts_ms[i]), int(dev.ts_ms[i + 1])
        verb = "repeats" if before == after else "goes back from"
        raise InputError(
            f"time of GPU {dev.gpu_index} {verb} {format_utc_ms(before)} (line {int(dev.lines[i])})"
            f"{'' if before == after else ' to ' + format_utc_ms(after)}; each GPU's timestamps "
            "must increase", file=file, line=int(dev.lines[i + 1]), field=field)


def mode_of(values: np.ndarray) -> float | None:
    """The most frequent finite value (``None`` when there is none)."""
    finite = values[np.isfinite(values)]
    if len(finite) == 0:
        return None
    uniq, counts = np.unique(finite, return_counts=True)
    return float(uniq[int(np.argmax(counts))])


def median_period_ms(devices: Sequence[DeviceData]) -> float | None:
    """The median sampling interval over every device (``None`` with < 2 samples each)."""
    diffs = [np.diff(d.ts_ms) for d in devices if len(d.ts_ms) > 1]
    if not diffs:
        return None
    return float(np.median(np.concatenate(diffs)))


def base_meta(fmt: str, workload: str) -> dict[str, Any]:
    """The provenance every imported run carries."""
    return {
        "sweep": f"import:{fmt}",
        "sampler": f"import:{fmt}",
        "workload": workload,
        "model_source": "import",
        "schema_version": schema.SCHEMA_VERSION,
    }


def resolve_platform(platform: str | None, gpu_name: str | None) -> tuple[str, tuple[str, ...]]:
    """The split slug and the flags it implies: an explicit ``platform`` wins over the name."""
    if platform:
        try:
            schema.check_split_name(platform)
        except ValueError as exc:
            raise InputError(str(exc), field="platform") from None
        return platform, ()
    info = schema.platform_from_name(gpu_name)
    return info.slug, info.flags


def is_1s_average(power_field: str, gpu_name: str | None, platform: str) -> bool:
    """Whether ``power_usage`` readings are a 1 s average on this GPU (name, else slug)."""
    if power_field != "power_usage":
        return False
    if gpu_name:
        return schema.power_usage_is_1s_average(gpu_name)
    return schema.power_usage_is_1s_average(platform.replace("_", " "))


def fill_model(meta: dict[str, Any]) -> None:
    """Default the model columns: family from the name, parameter counts from the facts table.

    The family is ``unknown`` when no name is given; ``specs.fill_model_facts`` records the
    source of each filled count.
    """
    if not meta.get("model_family"):
        meta["model_family"] = family_from_name(meta.get("model_name") or meta.get("model_label"))
    specs.fill_model_facts(meta)


def finish_meta(devices: list[DeviceData], meta: dict[str, Any], *, platform: str | None,
                num_gpus: int | None, file: Path) -> list[str]:
    """Resolve device defaults, platform and GPU count into ``meta``; return the implied flags.

    Device-level keys of ``meta`` (``gpu_name``, power limits) fill devices that lack them; the
    platform comes from ``platform`` (``--platform``), else the metadata, else the GPU name;
    ``power_is_1s_average`` is added when ``meta["power_field"]`` is ``power_usage`` on a GPU
    whose ``power.draw`` is a 1 s average.
    """
    apply_device_defaults(devices, split_device_meta(meta))
    gpu_name = next((d.gpu_name for d in devices if d.gpu_name), None)
    slug, flags = resolve_platform(platform or meta.pop("platform", None), gpu_name)
    meta["platform"] = slug
    out = list(flags)
    declared = _num_or_none(meta.get("num_gpus"))
    if num_gpus is None and declared is not None and declared < len(devices):
        # the metadata undercounts the GPUs the log holds: keep every GPU, flag it (the seed
        # authors' gpu_count_mismatch, which fires in either direction); --num-gpus stays strict
        meta["num_gpus"] = len(devices)
        out.append("gpu_count_mismatch")
    else:
        meta["num_gpus"] = resolve_num_gpus(num_gpus, meta.get("num_gpus"), len(devices),
                                            file=file)
    if is_1s_average(meta["power_field"], gpu_name, slug):
        out.append("power_is_1s_average")
    return out


def assemble_run(devices: list[DeviceData], meta: dict[str, Any], *, file: Path,
                 flags: Sequence[str] = (), events: Sequence[tuple[int, Event]] = (),
                 fields: Mapping[str, str] | None = None) -> Run:
    """Put devices on the run clock and build the checked :class:`Run`.

    ``t0`` is the earliest timestamp of any device; ``t_ms = ts - t0``; ``start_time`` is ``t0``
    in UTC. Metadata is checked against the column contract (``run.coerce_meta``).

    Args:
        devices: the devices, each with strictly increasing UTC timestamps.
        meta: run-level metadata (column names of the workload's trace config).
        file: the source file, for errors.
        flags: quality flags to add.
        events: ``(utc_ms, event)`` pairs; the event's ``t_ms`` is set on the run clock.
        fields: signal name -> the file's column, so that a range error names the column.
    """
    checks.check_import(devices, meta, file=file, lines=[d.lines for d in devices],
                        fields=fields, labels=[("label", e.label) for _, e in events])
    t0 = min(int(d.ts_ms[0]) for d in devices)
    meta = dict(meta)
    meta["start_time"] = dt.datetime.fromtimestamp(t0 / _MS_PER_S, tz=dt.timezone.utc)
    if meta.get("sample_period_ms") is None:
        meta["sample_period_ms"] = median_period_ms(devices)
    meta.setdefault("num_gpus", len(devices))
    fill_model(meta)
    clean = coerce_meta({k: v for k, v in meta.items() if v is not None}, meta["workload"],
                        file=file)
    series = [
        DeviceSeries(gpu_index=d.gpu_index, t_ms=d.ts_ms - t0, signals=d.signals,
                     gpu_name=d.gpu_name, gpu_uuid_hash=d.gpu_uuid_hash,
                     power_limit_w=d.power_limit_w, default_power_limit_w=d.default_power_limit_w)
        for d in sorted(devices, key=lambda d: d.gpu_index)
    ]
    run_events = []
    for utc_ms, event in events:
        event.t_ms = int(utc_ms) - t0
        run_events.append(event)
    run = Run(meta=clean, devices=series, events=run_events)
    run.add_flags(*flags)
    return enrich.finish_imported_run(run)


_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]{0,199}$")


def check_run_id(run_id: str, *, file: Path, line: int | None = None) -> str:
    """Return ``run_id`` if it is safe as a file name (letters, digits, ``._=+-``), else raise."""
    if not _RUN_ID_RE.match(run_id) or ".." in run_id:
        raise InputError(f"value {_short(run_id)} is not a usable run id (letters, digits and "
                         "._=+- only)", file=file, line=line, field="run_id")
    return run_id


def split_device_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """Pop the per-device columns (``gpu_name``, power limits) out of run metadata."""
    keys = ("gpu_name", "power_limit_w", "default_power_limit_w")
    return {k: meta.pop(k) for k in keys if k in meta}


def apply_device_defaults(devices: Sequence[DeviceData], defaults: Mapping[str, Any]) -> None:
    """Give devices the metadata's name and limits where the log has none."""
    for dev in devices:
        for key, value in defaults.items():
            if value is not None and getattr(dev, key) is None:
                setattr(dev, key, value)


def _num_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def resolve_num_gpus(given: int | None, declared: Any, found: int, *, file: Path) -> int:
    """Devices in the run: ``--num-gpus``, else the metadata's, else the GPUs in the log.

    A count below the GPUs actually in the log is an error; a larger one is kept (validation
    then flags ``missing_gpu``).
    """
    count = given if given is not None else declared
    if count is None:
        return found
    if int(count) < found:
        source = "--num-gpus" if given is not None else "the metadata's num_gpus"
        raise InputError(f"{source} is {int(count)} but the log holds {found} GPUs", file=file,
                         field="num_gpus")
    return int(count)
