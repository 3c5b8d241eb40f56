"""Encode a ``Run`` to Arrow tables in the configs' ``schema.arrow_schema``."""

from __future__ import annotations

import datetime as dt
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from .. import layout, numbers, schema
from ..arrow_numpy import from_python, strings, to_arrow, to_numpy
from ..request_rows import RequestRows, SpilledRequests
from ..run import DeviceSeries, Run

if TYPE_CHECKING:  # imported on first encode: `datasets` takes ~0.6 s to import
    from datasets import Features

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 600.0
PACKED_RE = layout.PACKED_RE
"""Names of ``pack``'s shards (``<platform>-NNNNN-of-MMMMM.arrow``; ``layout.PACKED_RE``)."""
DEFAULT_MAX_SHARD_BYTES = 500 * 1024 * 1024
SHARD_COMPRESSION = "zstd" if pa.Codec.is_available("zstd") else None
"""Buffer compression of every shard written (Arrow IPC's own, read transparently by pyarrow and
``datasets``): per-tick lists of regularly spaced ``t_ms`` and slowly varying signals shrink
2-3x, which is what brings an import below 12 bytes per sample (issue 13)."""


COMPRESS_MIN_BYTES = 256 * 1024
"""Tables smaller than this (a runs row, a request log) are written uncompressed: their hundred
small column buffers cost more to decompress on every read than they save on disk."""


def ipc_options(nbytes: int | None = None) -> ipc.IpcWriteOptions:
    """The IPC write options of a shard of ``nbytes`` (``SHARD_COMPRESSION`` unless small)."""
    small = nbytes is not None and nbytes < COMPRESS_MIN_BYTES
    return ipc.IpcWriteOptions(compression=None if small else SHARD_COMPRESSION)

_ARROW_TYPES = {
    "float32": pa.float32(), "float64": pa.float64(), "int16": pa.int16(), "int32": pa.int32(),
    "int64": pa.int64(),
}


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------

def _signal_array(devices: list[DeviceSeries], name: str, dtype: str) -> pa.Array:
    """A ``list<dtype>`` column: one list per device, nulls where NaN.

    A device whose source never reported the signal (absent, or NaN at every tick) gets a
    **null cell**, not a list of nulls: the cell costs its validity bit and no value buffer, so
    an all-null signal column costs nothing on disk (issue 13). Readers treat a null cell as
    "every tick null" (``run_from_rows``; ``traces.align_signal`` for Arrow consumers).
    """
    lengths = np.array([len(d.t_ms) for d in devices], dtype=np.int64)
    parts: list[np.ndarray] = []
    if name == "t_ms":
        valid = np.ones(len(devices), dtype=bool)
        parts = [np.asarray(d.t_ms, dtype=np.int64) for d in devices]
    else:
        found = [d.signals.get(name) for d in devices]
        # fmax skips NaN: NaN only when every value is NaN (one pass, no temporary array)
        valid = np.array([p is not None and len(p) > 0 and not np.isnan(np.fmax.reduce(p))
                          for p in found], dtype=bool)
        lengths = np.where(valid, lengths, 0)
        parts = [p for p, ok in zip(found, valid, strict=True) if ok and p is not None]
    offsets = np.zeros(len(devices) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    if name == "t_ms":
        values = to_arrow(np.concatenate(parts) if parts else np.zeros(0, np.int64),
                          pa.int64())
    else:
        # a float column is concatenated straight into its dtype (astype's rounding, one copy
        # fewer); an integer one is rounded from the float64 values first
        floating = not dtype.startswith("int")
        raw = (np.concatenate(parts, dtype=dtype if floating else None) if parts
               else np.zeros(0, dtype if floating else np.float64))
        # a sum is NaN when any value is: the mask is built only for a column with gaps
        mask = np.isnan(raw) if raw.size and np.isnan(np.add.reduce(raw)) else None
        if not floating:
            raw = np.rint(raw) if mask is None else np.where(mask, 0, np.rint(raw))
        arr_np = raw.astype(dtype, copy=False)
        values = to_arrow(arr_np, _ARROW_TYPES[dtype],
                          valid=~mask if mask is not None and mask.any() else None)
    return pa.ListArray.from_arrays(to_arrow(offsets, pa.int32()), values,
                                    mask=None if valid.all() else to_arrow(~valid))


def _driver_arrays(devices: list[DeviceSeries]) -> dict[str, pa.Array]:
    """``driver_power_t_us`` / ``driver_power_w``: a list per device, a null cell without them."""
    valid = np.array([d.driver_t_us is not None for d in devices], dtype=bool)
    lengths = np.array([len(d.driver_t_us) if d.driver_t_us is not None else 0
                        for d in devices], dtype=np.int64)
    offsets = np.zeros(len(devices) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    mask = None if valid.all() else to_arrow(~valid)  # arrow_numpy: pa.array loads pandas
    t = [d.driver_t_us for d in devices if d.driver_t_us is not None]
    w = [d.driver_power_w for d in devices if d.driver_power_w is not None]
    t_values = to_arrow(np.concatenate(t) if t else np.zeros(0, np.int64), pa.int64())
    w_values = to_arrow((np.concatenate(w) if w else np.zeros(0)).astype(np.float32),
                        pa.float32())
    off = to_arrow(offsets, pa.int32())
    return {"driver_power_t_us": pa.ListArray.from_arrays(off, t_values, mask=mask),
            "driver_power_w": pa.ListArray.from_arrays(off, w_values, mask=mask)}


@functools.lru_cache(maxsize=64)
def _restricted_features(config: str, names: tuple[str, ...]) -> Features:
    """The config's ``Features`` restricted to ``names`` (built once: construction deep-copies)."""
    from datasets import Features

    features = schema.FEATURES[config]
    return Features({k: features[k] for k in names})


def _arrow_schema(config: str) -> pa.Schema:
    """The config's on-disk schema (``schema.arrow_schema``: no ``datasets``)."""
    return schema.arrow_schema(config)


# The scalar and list cells of a table (a handful of rows) are encoded as ``datasets`` does it —
# ``Features.encode_batch``: ``cast_to_python_objects`` on each column, then
# ``encode_nested_example`` on each cell — ported below for the plain values a ``Run`` holds
# (None, bool, int, float, str, datetimes, numpy scalars and arrays, dicts, lists, tuples), so an import
# does not import ``datasets`` (about 0.5 s) nor pay its per-cell dispatch. A value of any other
# type makes the table go through ``datasets`` itself (:class:`_Foreign`), so the bytes written
# are the same either way (``tests/llm_powertrace_ds/shards`` compares the two on every config).

_PLAIN = (type(None), bool, int, float, str, bytes, np.generic)
_DATETIMES = (dt.datetime, dt.date, dt.time, dt.timedelta)  # exact types: pandas' subclass them


class _Foreign(Exception):
    """A value the port does not cover: encode the table with ``datasets``."""


def _first_non_null(obj: Any, spec: Any = None) -> bool:
    """``datasets``' ``_check_non_null_non_empty_recursive`` (``spec`` a schema spec or None)."""
    if obj is None:
        return False
    if isinstance(obj, (list, tuple)) and (spec is None or isinstance(spec, schema._List)):
        if len(obj) > 0:
            return _first_non_null(obj[0], None if spec is None else spec.inner)
        return False
    return True


def _cast(obj: Any) -> tuple[Any, bool]:
    """``datasets``' ``_cast_to_python_objects`` (defaults) for plain values."""
    if isinstance(obj, np.ndarray):
        return (obj[()], True) if obj.ndim == 0 else (obj, False)
    if isinstance(obj, _PLAIN) or type(obj) in _DATETIMES:
        return obj, False
    if type(obj) is dict:
        changed = False
        out = {}
        for k, v in obj.items():
            out[k], changed_v = _cast(v)
            changed |= changed_v
        return (out if changed else obj), changed
    if isinstance(obj, (list, tuple)):
        if len(obj) == 0:
            return obj, False
        for first in obj:
            if _first_non_null(first):
                break
        if _cast(first)[1]:
            return [_cast(x)[0] for x in obj], True
        return obj, False
    raise _Foreign(type(obj).__name__)


def _encode_value(dtype: str, value: Any) -> Any:
    """``datasets.Value(dtype).encode_example``."""
    if dtype == "bool":
        return bool(value)
    if dtype.startswith("int"):
        return int(value)
    if dtype.startswith("float"):
        return float(value)
    if dtype == "string":
        return str(value)
    return value


def _encode(spec: Any, obj: Any) -> Any:
    """``datasets``' ``encode_nested_example`` at level >= 1."""
    if isinstance(spec, schema._Value):
        return _encode_value(spec.dtype, obj) if obj is not None else None
    if isinstance(spec, schema._List):
        if obj is None:
            return None
        if len(obj) > 0:
            for first in obj:
                if _first_non_null(first, spec.inner):
                    break
            try:
                changed = bool(_encode(spec.inner, first) != first)
            except ValueError:  # comparing arrays
                changed = False
            if changed:
                return [_encode(spec.inner, o) for o in obj]
        return list(obj)
    if obj is None:  # a struct
        return None
    return {k: _encode(sub, obj.get(k)) for k, sub in spec}


def _encode_batch(config: str, full: dict[str, list]) -> dict[str, list]:
    """``Features.encode_batch`` of the config's features restricted to ``full``'s columns."""
    specs = {c.name: c.spec for c in schema.COLUMNS[config]}
    try:
        return {name: [_encode(specs[name], cell) for cell in _cast(column)[0]]
                for name, column in full.items()}
    except _Foreign:
        return _restricted_features(config, tuple(full)).encode_batch(full)


def _table(config: str, rows: dict[str, list], extra: dict[str, pa.Array] | None = None) -> pa.Table:
    arrow_schema = _arrow_schema(config)
    n = len(next(iter(rows.values()))) if rows else 0
    full = {name: rows.get(name, [None] * n) for name in arrow_schema.names
            if name not in (extra or {})}
    encoded = _encode_batch(config, full) if full else {}
    converted = _converted(arrow_schema, encoded, n)
    arrays = []
    for fld in arrow_schema:
        if extra and fld.name in extra:
            arrays.append(extra[fld.name].cast(fld.type))
        elif fld.name in converted:
            arrays.append(converted[fld.name])
        else:
            arrays.append(pa.nulls(n, type=fld.type))
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


def _converted(arrow_schema: pa.Schema, encoded: dict[str, list], n: int) -> dict[str, pa.Array]:
    """The encoded columns as Arrow arrays of their schema types.

    Each column is built from its cells' buffers (``arrow_numpy.from_python``: the arrays
    ``pa.array(cells, type)`` makes, tested byte for byte), because any ``pa.array`` call on
    Python values loads pandas (≈ 0.2 s, the largest part of an import command's fixed cost).
    """
    out = {}
    for fld in arrow_schema:
        if fld.name in encoded:
            cells = encoded[fld.name]
            if len(cells) != n:
                raise ValueError(f"{len(cells)} encoded rows for a table of {n}")
            out[fld.name] = from_python(cells, fld.type)
    return out


def _scalar_meta(run: Run, config: str) -> dict[str, Any]:
    names = {c.name for c in schema.COLUMNS[config]}
    meta = {k: v for k, v in run.meta.items() if k in names}
    meta.setdefault("schema_version", schema.SCHEMA_VERSION)
    if meta.get("sample_hold") is None:
        meta["sample_hold"] = schema.DEFAULT_SAMPLE_HOLD
    meta.setdefault("num_gpus", len(run.devices))
    meta.setdefault("quality_flags", [])
    return meta


def trace_table(run: Run) -> pa.Table:
    """The trace-config rows of a run: one row per device."""
    config = run.workload
    meta = _scalar_meta(run, config)
    numbers.check_row(config, meta, where=f"run {run.run_id}")
    devices = run.devices + run.host_devices  # host (RAPL) rows after the GPUs, by kind
    n = len(devices)
    rows: dict[str, list] = {k: [v] * n for k, v in meta.items()}
    for key in ("node_index", "gpu_index", "gpu_name", "gpu_uuid_hash", "power_limit_w",
                "default_power_limit_w"):
        rows[key] = [getattr(d, key) for d in devices]
    rows["device_kind"] = [d.kind for d in devices]
    rows["events"] = [[e.as_dict() for e in run.device_events(d)] for d in devices]
    extra = {}
    for col in schema.SIGNALS:
        dtype = col.item_dtype
        assert dtype is not None, f"{col.name} is not a list of scalars"
        extra[col.name] = _signal_array(devices, col.name, dtype)
    extra.update(_driver_arrays(devices))
    rows.update({k: [None] * n for k in extra})
    return _table(config, rows, extra)


def runs_table(run: Run, metrics: dict[str, Any]) -> pa.Table:
    """The runs-config row of a run: its scalar metadata and its metrics."""
    config = f"{run.workload}_runs"
    meta = _scalar_meta(run, config)
    limits = {d.power_limit_w for d in run.devices}
    defaults = {d.default_power_limit_w for d in run.devices}
    names = {d.gpu_name for d in run.devices}
    meta.setdefault("gpu_name", names.pop() if len(names) == 1 else None)
    meta["power_limit_w"] = limits.pop() if len(limits) == 1 else None
    meta["default_power_limit_w"] = defaults.pop() if len(defaults) == 1 else None
    valid = {c.name for c in schema.COLUMNS[config]}
    meta.update({k: v for k, v in metrics.items() if k in valid})
    numbers.check_row(config, meta, where=f"run {run.run_id}")
    return _table(config, {k: [v] for k, v in meta.items()})


def requests_table(run: Run) -> pa.Table | Path:
    """The ``inference_requests`` rows of a run.

    Requests already written as the shard (:class:`~..request_rows.SpilledRequests`, built
    block by block with :func:`requests_block`) are that file, which publishing renames.
    """
    reqs = run.requests or []
    if isinstance(reqs, SpilledRequests):
        return reqs.path
    if isinstance(reqs, RequestRows):
        return _requests_columns(run, reqs)
    names = [c.name for c in schema.REQUEST_COLUMNS]
    rows: dict[str, list] = {k: [] for k in names}
    for r in reqs:
        r = {**r, "run_id": run.run_id, "platform": run.platform}
        numbers.check_row(schema.REQUESTS_CONFIG, r, where=f"run {run.run_id}")
        for k in names:
            rows[k].append(r.get(k))
    return _table(schema.REQUESTS_CONFIG, rows)


def requests_block(run: Run, reqs: RequestRows) -> pa.Table:
    """The shard's rows of a block of a run's requests (one block of a log written in parts)."""
    return _requests_columns(run, reqs)


def _requests_columns(run: Run, reqs: RequestRows) -> pa.Table:
    """:func:`requests_table` of requests held as columns, column by column.

    The number gate (:func:`numbers.check_row`) runs on whole integer columns; the first row
    with a value outside its column's range is checked alone, which raises the error naming it.
    """
    config = schema.REQUESTS_CONFIG
    arrow_schema = _arrow_schema(config)
    dtypes = {c.name: c.dtype for c in schema.REQUEST_COLUMNS}
    table = reqs.table
    n = table.num_rows
    bad = np.zeros(n, dtype=bool)
    for name in table.column_names:
        bounds = numbers.INT_RANGES.get(str(dtypes.get(name)))
        if bounds is None or not pa.types.is_integer(table.column(name).type):
            continue
        values = np.asarray(to_numpy(table.column(name).cast(pa.int64()), null_value=0))
        bad |= (values < bounds[0]) | (values > bounds[1])
    if bad.any():
        row = {**reqs[int(np.flatnonzero(bad)[0])], "run_id": run.run_id,
               "platform": run.platform}
        numbers.check_row(config, row, where=f"run {run.run_id}")
    constant = to_arrow(np.zeros(n, dtype=np.int32))
    arrays = []
    for fld in arrow_schema:
        if fld.name in ("run_id", "platform"):
            value = run.run_id if fld.name == "run_id" else run.platform
            arrays.append(pa.DictionaryArray.from_arrays(constant, strings([value]))
                          .cast(fld.type))
        elif fld.name in table.column_names:
            arrays.append(table.column(fld.name).cast(fld.type))
        else:
            arrays.append(pa.nulls(n, type=fld.type))
    return pa.Table.from_arrays(arrays, schema=arrow_schema)
