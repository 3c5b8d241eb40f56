"""The ``Run`` record: the one in-memory form of a measured or imported run.

Importers and the generator produce it; validation, metrics, plots and the shard writer consume
it. Signals are kept as ``float64`` numpy arrays in which NaN means *missing* (written as null);
a signal the source never reports is absent from ``DeviceSeries.signals`` (all-null column).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import schema
from .errors import InputError

if TYPE_CHECKING:  # for the annotation only
    from .request_rows import RequestRows

SIGNAL_KEYS = tuple(n for n in schema.SIGNAL_NAMES if n != "t_ms")


@dataclass
class Event:
    """A workload marker on the run clock.

    Attributes:
        t_ms: ms since the run's t0 (same clock as the samples).
        kind: one of ``schema.EVENT_KINDS``.
        step: optimiser step, when it applies.
        rank: the rank that recorded it; ``None`` for run-level events.
        request_id: the request, for request events.
        label: free text (the imported tool's stage name for ``stage``).
    """

    t_ms: int
    kind: str
    step: int | None = None
    rank: int | None = None
    request_id: str | None = None
    label: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the event as the struct the ``events`` column stores."""
        return {"t_ms": int(self.t_ms), "kind": self.kind, "step": self.step, "rank": self.rank,
                "request_id": self.request_id, "label": self.label}


@dataclass
class DeviceSeries:
    """One device's own timestamps and signals.

    Attributes:
        gpu_index: NVML index on its node (the rank for ``cpu_proxy``).
        t_ms: int64 ms since the run's t0, one per tick.
        signals: name -> float64 array (NaN = missing); names from ``SIGNAL_KEYS``.
        node_index: node of a multi-node run.
        rank: the workload rank whose events this device's row carries (default ``gpu_index``).
        gpu_name: name as reported.
        gpu_uuid_hash: salted hash of the UUID.
        power_limit_w: enforced power limit.
        default_power_limit_w: default power limit.
        kind: ``gpu``, or a RAPL zone of the node's CPUs (``cpu_package``, ``dram``): the
            ``device_kind`` column. Such host devices live in ``Run.host_devices``, never in
            ``Run.devices``.
        driver_t_us: the device's own (driver) power samples: µs since t0, int64; ``None`` when
            the source keeps none.
        driver_power_w: their power, W (float64, same length as ``driver_t_us``).
    """

    gpu_index: int
    t_ms: np.ndarray
    signals: dict[str, np.ndarray] = field(default_factory=dict)
    node_index: int = 0
    rank: int | None = None
    gpu_name: str | None = None
    gpu_uuid_hash: str | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    kind: str = "gpu"
    driver_t_us: np.ndarray | None = None
    driver_power_w: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.t_ms = np.asarray(self.t_ms, dtype=np.int64)
        if (self.driver_t_us is None) != (self.driver_power_w is None):
            raise ValueError("driver_t_us and driver_power_w go together")
        if self.driver_t_us is not None and self.driver_power_w is not None:
            self.driver_t_us = np.asarray(self.driver_t_us, dtype=np.int64)
            self.driver_power_w = np.asarray(self.driver_power_w, dtype=np.float64)
            if len(self.driver_t_us) != len(self.driver_power_w):
                raise ValueError(f"driver_t_us has {len(self.driver_t_us)} samples, "
                                 f"driver_power_w {len(self.driver_power_w)}")
        for key in list(self.signals):
            if key not in SIGNAL_KEYS:
                raise ValueError(f"unknown signal {key!r}; known: {', '.join(SIGNAL_KEYS)}")
            self.signals[key] = np.asarray(self.signals[key], dtype=np.float64)

    @property
    def power_w(self) -> np.ndarray:
        """Power readings in W (NaN = missing); an all-NaN array when absent."""
        return self.signals.get("power_w", np.full(len(self.t_ms), np.nan))

    def __len__(self) -> int:
        return len(self.t_ms)


@dataclass
class Run:
    """A run: metadata, one series per device, events and (inference) the request log.

    Attributes:
        meta: run-level scalar columns (see ``schema.RUN_LEVEL_FIELDS``); at least ``run_id``,
            ``workload`` and ``platform``.
        devices: one ``DeviceSeries`` per device.
        events: run-level and per-rank events.
        requests: per-request rows of ``inference_requests`` (inference only): a list of
            dicts, or a request log's :class:`~llm_powertrace_ds.request_rows.RequestRows`
            (the same rows held as columns).
        host_devices: non-GPU devices measured on the same tick (RAPL CPU package and DRAM
            zones, ``DeviceSeries.kind``): published as trace rows of their kind, never part
            of ``devices``, so no metric or GPU power total ever includes them.
    """

    meta: dict[str, Any]
    devices: list[DeviceSeries]
    events: list[Event] = field(default_factory=list)
    requests: list[dict[str, Any]] | RequestRows | None = None
    host_devices: list[DeviceSeries] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.meta["run_id"])

    @property
    def workload(self) -> str:
        return str(self.meta["workload"])

    @property
    def platform(self) -> str:
        return str(self.meta["platform"])

    @property
    def model_family(self) -> str:
        return str(self.meta.get("model_family") or "unknown")

    @property
    def sample_hold(self) -> str:
        """How readings hold between samples: ``linear`` or ``previous`` (see :func:`sample_hold`)."""
        return sample_hold(self.meta)

    @property
    def flags(self) -> list[str]:
        return list(self.meta.get("quality_flags") or [])

    def add_flags(self, *flags: str) -> None:
        """Add quality flags (kept unique, in vocabulary order)."""
        current = set(self.meta.get("quality_flags") or [])
        for flag in flags:
            if flag not in schema.QUALITY_FLAGS:
                raise ValueError(f"unknown quality flag {flag!r}")
            current.add(flag)
        self.meta["quality_flags"] = [f for f in schema.QUALITY_FLAGS if f in current]

    def device_events(self, device: DeviceSeries) -> list[Event]:
        """Events a device's row carries: run-level ones and its own rank's.

        A host device (RAPL), which belongs to no rank, carries the run-level ones.
        """
        if device.kind != "gpu":
            return [e for e in self.events if e.rank is None]
        rank = device.gpu_index if device.rank is None else device.rank
        return [e for e in self.events if e.rank is None or e.rank == rank]


def sample_hold(meta: Mapping[str, Any]) -> str:
    """The ``sample_hold`` of run metadata: ``linear`` when null (rows before schema 1.4.0).

    Raises:
        ValueError: a value outside ``schema.SAMPLE_HOLDS``.
    """
    hold = meta.get("sample_hold") or schema.DEFAULT_SAMPLE_HOLD
    if hold not in schema.SAMPLE_HOLDS:
        raise ValueError(f"unknown sample_hold {hold!r}; known: {', '.join(schema.SAMPLE_HOLDS)}")
    return str(hold)


_INT_RANGES = {"int16": 2**15, "int32": 2**31, "int64": 2**63}


def coerce_scalar(value: Any, dtype: str) -> Any:
    """Convert one non-null scalar to a column type: the one type-coercion rule of the project.

    Types: ``int*``, ``float*``, ``bool``, ``string``, ``timestamp*``. Integers keep their exact value (no float round trip); an integral float or numeric text
    becomes an integer; floats must be finite; booleans accept ``true/false/1/0/yes/no/on/off``.

    Raises:
        ValueError: the value cannot be that type; the message says why (``not an integer``,
            ``out of range for int32``, ``not a finite number``, ...).
        TypeError: the value has no conversion to that type.
    """
    if dtype.startswith("int"):
        if isinstance(value, bool):
            raise ValueError("a boolean is not an integer")
        if isinstance(value, int):
            out = value
        else:
            number = float(value)
            if not number.is_integer():
                raise ValueError("not an integer")
            out = int(number)
        if abs(out) >= _INT_RANGES[dtype]:
            raise ValueError(f"out of range for {dtype}")
        return out
    if dtype.startswith("float"):
        if isinstance(value, bool):
            raise ValueError("a boolean is not a number")
        out_f = float(value)
        if not math.isfinite(out_f):
            raise ValueError("not a finite number")
        return out_f
    if dtype == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise ValueError("not a boolean")
    if dtype == "string":
        if isinstance(value, (dict, list)):
            raise ValueError("not a scalar")
        return str(value)
    if dtype.startswith("timestamp"):
        if isinstance(value, dt.datetime):
            stamp = value
        else:
            stamp = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=dt.timezone.utc)
        return stamp.astimezone(dt.timezone.utc)
    raise TypeError(f"unsupported type {dtype}")


def coerce_value(name: str, value: Any, dtype: str, *, file: str | Path | None = None,
                 line: int | None = None) -> Any:
    """Coerce one scalar to a column's type, or raise ``InputError`` naming field and value.

    ``None`` and NaN are null (a value the source does not report); everything else goes
    through :func:`coerce_scalar`.
    """
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if not (dtype.startswith(("int", "float", "timestamp")) or dtype in ("bool", "string")):
        raise InputError(f"unsupported type {dtype}", file=file, field=name)
    try:
        return coerce_scalar(value, dtype)
    except (TypeError, ValueError) as exc:
        raise InputError(f"value {value!r} is not a valid {dtype} ({exc})", file=file, line=line,
                         field=name) from None


def _scalar_dtypes(workload: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for col in schema.COLUMNS[workload]:
        if col.name in schema.RUN_LEVEL_FIELDS[workload] and col.dtype is not None:
            out[col.name] = col.dtype
    return out


def _string_list_fields(workload: str) -> frozenset[str]:
    """Run-level list-of-strings columns (``quality_flags``, ``source_quality_flags``)."""
    return frozenset(c.name for c in schema.COLUMNS[workload]
                     if c.name in schema.RUN_LEVEL_FIELDS[workload] and c.item_dtype == "string")


def meta_keys(workload: str) -> frozenset[str]:
    """The run-level column names :func:`coerce_meta` accepts for ``workload``."""
    return frozenset(_scalar_dtypes(workload)) | _string_list_fields(workload)


def coerce_meta(meta: Mapping[str, Any], workload: str, *,
                file: str | Path | None = None) -> dict[str, Any]:
    """Check and coerce run metadata against the workload's column contract.

    Args:
        meta: column name -> value.
        workload: ``finetune`` or ``inference``.
        file: where the metadata came from, for error messages.

    Returns:
        A new dict with every value coerced to its column type.

    Raises:
        InputError: unknown keys (listing the accepted ones) or values of the wrong type.
    """
    if workload not in schema.WORKLOADS:
        raise InputError(f"workload {workload!r} is not one of {', '.join(schema.WORKLOADS)}",
                         file=file, field="workload")
    dtypes = _scalar_dtypes(workload)
    lists = _string_list_fields(workload)
    unknown = sorted(k for k in meta if k not in dtypes and k not in lists)
    if unknown:
        raise InputError(f"unknown keys {', '.join(map(repr, unknown))}; accepted: "
                         f"{', '.join(sorted(dtypes))}", file=file, field=unknown[0])
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if key in lists:
            if value is not None and not isinstance(value, (list, tuple)):
                raise InputError(f"value {str(value)[:40]!r} is not a list", file=file, field=key)
            out[key] = [str(v) for v in (value or [])]
            continue
        out[key] = coerce_value(key, value, dtypes[key], file=file)
    hold = out.get("sample_hold")
    if hold is not None and hold not in schema.SAMPLE_HOLDS:
        raise InputError(f"value {hold!r} is not a sample hold ({', '.join(schema.SAMPLE_HOLDS)})",
                         file=file, field="sample_hold")
    fam = out.get("model_family")
    if fam is not None and fam not in schema.MODEL_FAMILIES:
        raise InputError(f"value {fam!r} is not a model family ({', '.join(schema.MODEL_FAMILIES)})",
                         file=file, field="model_family")
    return out


def events_from_dicts(rows: Iterable[Mapping[str, Any]]) -> list[Event]:
    """Build events from ``events``-column structs."""
    return [Event(int(r["t_ms"]), str(r["kind"]), r.get("step"), r.get("rank"),
                  r.get("request_id"), r.get("label")) for r in rows]
