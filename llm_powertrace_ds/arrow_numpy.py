"""numpy arrays to Arrow arrays and back through their buffers, without loading pandas.

``pyarrow.array(ndarray)``, ``pyarrow.array(list)`` and ``Array.to_numpy`` ask pyarrow's pandas
shim whether the object is a pandas one, and the first question imports pandas (≈ 0.2 CPU
seconds a process; ``bench/scale.py``, ``cli_import_fixed_cpu_s``). A command that only reads a
log and writes Arrow files builds its arrays here instead, straight from the buffers: the
values are the same (:func:`to_arrow`, :func:`from_python` and :func:`to_numpy` are tested equal
to pyarrow's own conversions in ``tests/llm_powertrace_ds/test_arrow_numpy.py``).

Example:
    >>> import numpy as np
    >>> to_arrow(np.array([1, 2, 3])).to_pylist()
    [1, 2, 3]
    >>> to_numpy(to_arrow(np.array([True, False])))
    array([ True, False])
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

_TYPES: dict[str, pa.DataType] = {
    "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(),
    "float16": pa.float16(), "float32": pa.float32(), "float64": pa.float64(),
}
_DTYPES: dict[pa.DataType, np.dtype] = {t: np.dtype(name) for name, t in _TYPES.items()}


def _bits(mask: np.ndarray) -> pa.Buffer:
    """A boolean array as an Arrow bitmap (least significant bit first)."""
    return pa.py_buffer(np.packbits(np.asarray(mask, dtype=bool), bitorder="little"))


def to_arrow(values: np.ndarray, type: pa.DataType | None = None,  # noqa: A002 (pyarrow's name)
             valid: np.ndarray | None = None) -> pa.Array:
    """A 1-D numeric or boolean numpy array as an Arrow array (``pa.array(values, type)``).

    Args:
        values: 1-D, of a fixed-width integer, float or bool dtype.
        type: the Arrow type (default: the dtype's); the values are converted with numpy's
            ``astype`` (as ``pa.array`` would with ``safe=False``) when it differs.
        valid: where a value is present (``False``: null); default: every value.

    Raises:
        TypeError: another dtype (strings, objects, datetimes) or type.
    """
    values = np.asarray(values)
    if values.ndim != 1:
        raise TypeError(f"a 1-D array, not {values.ndim}-D")
    if type is None:
        type = pa.bool_() if values.dtype == np.bool_ else _TYPES.get(values.dtype.name)
        if type is None:
            raise TypeError(f"no Arrow buffer layout for numpy dtype {values.dtype}")
    n = len(values)
    validity = None
    nulls = 0
    if valid is not None:
        valid = np.asarray(valid, dtype=bool)
        nulls = n - int(np.count_nonzero(valid))
        validity = _bits(valid) if nulls else None
    if pa.types.is_boolean(type):
        data = _bits(values)
    else:
        dtype = _DTYPES.get(type)
        if dtype is None:
            raise TypeError(f"no numpy buffer layout for Arrow type {type}")
        data = pa.py_buffer(np.ascontiguousarray(values, dtype=dtype))
    return pa.Array.from_buffers(type, n, [validity, data], null_count=nulls)


def strings(values: Sequence[str]) -> pa.Array:
    """A list of Python strings as an Arrow ``string`` array (``pa.array(values)``)."""
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def to_numpy(arr: pa.Array | pa.ChunkedArray, null_value: Any = None) -> np.ndarray:
    """A numeric or boolean Arrow array as a numpy array (``arr.to_numpy(zero_copy_only=False)``).

    Nulls of a float array become NaN; in another type they become ``null_value``, and without
    one a null raises ``ValueError`` (there is no numpy value for it). A single chunk without
    nulls is a read-only view of its buffer.

    Raises:
        TypeError: a type without a fixed-width numpy layout (strings, lists, ...).
        ValueError: nulls in a non-float array.
    """
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    if not chunks:
        dtype = np.dtype(bool) if pa.types.is_boolean(arr.type) else _DTYPES.get(arr.type)
        if dtype is None:
            raise TypeError(f"no numpy buffer layout for Arrow type {arr.type}")
        return np.zeros(0, dtype)
    parts = [_chunk_numpy(c, null_value) for c in chunks]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _chunk_numpy(chunk: pa.Array, null_value: Any = None) -> np.ndarray:
    n, off = len(chunk), chunk.offset
    bufs = chunk.buffers()
    if pa.types.is_boolean(chunk.type):
        out = _unpack(bufs[1], off, n)
    else:
        dtype = _DTYPES.get(chunk.type)
        if dtype is None:
            raise TypeError(f"no numpy buffer layout for Arrow type {chunk.type}")
        out = (np.frombuffer(bufs[1], dtype, count=off + n)[off:] if n
               else np.zeros(0, dtype))
    if chunk.null_count:
        floating = pa.types.is_floating(chunk.type)
        if not floating and null_value is None:
            raise ValueError(f"{chunk.null_count} nulls in a {chunk.type} array")
        out = out.copy()
        out[~_unpack(bufs[0], off, n)] = np.nan if floating else null_value
    return out


def _unpack(buf: pa.Buffer | None, offset: int, n: int) -> np.ndarray:
    """Bits ``offset`` to ``offset + n`` of an Arrow bitmap as a bool array."""
    if n == 0:
        return np.zeros(0, bool)
    raw = np.frombuffer(buf, np.uint8, count=(offset + n + 7) // 8)  # type: ignore[arg-type]
    return np.unpackbits(raw, count=offset + n, bitorder="little")[offset:].astype(bool)


class _Unbuilt(Exception):
    """A type or a value :func:`from_python` does not build itself."""


_EPOCH = dt.datetime(1970, 1, 1)
_EMPTY = object()
"""A child cell under a null struct: valid, and zero, empty or all-empty (as ``pa.array``
fills the fields of a null struct)."""
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000}


def from_python(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """``pa.array(values, type=arrow_type)`` for the plain values of a table's rows.

    Built here from the buffers: bool, integer, float, string and timestamp (``datetime``) values
    (``None`` is null), and lists and structs of those. Anything else — another type or a value
    of another Python type (a numpy scalar, an int in a float or timestamp column) — goes
    to ``pa.array`` itself, so the result and its errors are always pyarrow's.
    """
    try:
        return _build(list(values), arrow_type)
    except (_Unbuilt, OverflowError, ValueError):
        return pa.array(values, type=arrow_type)


@functools.lru_cache(maxsize=256)
def _kind(arrow_type: pa.DataType) -> str:
    """Which builder of :func:`_build` makes ``arrow_type`` (``""``: none, ``pa.array`` does)."""
    if pa.types.is_null(arrow_type):
        return "null"
    if pa.types.is_boolean(arrow_type):
        return "bool"
    if arrow_type in _DTYPES and not pa.types.is_float16(arrow_type):
        return "int" if pa.types.is_integer(arrow_type) else "float"
    if arrow_type == pa.string():
        return "string"
    if pa.types.is_timestamp(arrow_type) and arrow_type.unit in _PER_SECOND:
        return "timestamp"
    if pa.types.is_list(arrow_type):
        return "list"
    if pa.types.is_struct(arrow_type):
        return "struct"
    return ""


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,), "int": (int,), "float": (float,), "string": (str,),
    "timestamp": (dt.datetime,), "list": (list, tuple), "struct": (dict,)}
"""The exact Python types each builder takes (``type(v) in ...``: no subclasses)."""


def _build(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    kind = _kind(arrow_type)
    if not kind:
        raise _Unbuilt(arrow_type)
    n = len(values)
    if kind == "null":
        return pa.nulls(n)
    allowed = _PYTHON_TYPES[kind]
    nulls = 0
    for v in values:
        if v is None:
            nulls += 1
        elif type(v) not in allowed and v is not _EMPTY:
            raise _Unbuilt(arrow_type)
    validity = _bits(np.fromiter((v is not None for v in values), bool, n)) if nulls else None
    children: list[pa.Array] | None = None
    if kind == "bool":
        buffers = [validity, _bits(np.fromiter((v is True for v in values), bool, n))]
    elif kind in ("int", "float"):
        zero = 0 if kind == "int" else 0.0
        data = np.array([zero if v is None or v is _EMPTY else v for v in values],
                        dtype=_DTYPES[arrow_type])
        buffers = [validity, pa.py_buffer(data)]
    elif kind == "string":
        encoded = [b"" if v is None or v is _EMPTY else v.encode("utf-8") for v in values]
        buffers = [validity, _offsets([len(b) for b in encoded]),
                   pa.py_buffer(b"".join(encoded))]
    elif kind == "timestamp":
        per_s = _PER_SECOND[arrow_type.unit]
        ticks = [0 if v is None or v is _EMPTY else _ticks(v, per_s) for v in values]
        buffers = [validity, pa.py_buffer(np.array(ticks, np.int64))]
    elif kind == "list":
        buffers = [validity, _offsets([0 if v is None or v is _EMPTY else len(v)
                                       for v in values])]
        children = [_build([x for v in values if v is not None and v is not _EMPTY for x in v],
                           arrow_type.value_type)]
    else:  # struct: extra keys are pyarrow's to judge
        fields = list(arrow_type)
        names = {f.name for f in fields}
        if any(v is not None and v is not _EMPTY and not v.keys() <= names for v in values):
            raise _Unbuilt(arrow_type)
        buffers = [validity]
        children = [_build([_EMPTY if v is None or v is _EMPTY else v.get(f.name)
                            for v in values], f.type) for f in fields]
    return pa.Array.from_buffers(arrow_type, n, buffers, null_count=nulls, children=children)


def _offsets(lengths: list[int]) -> pa.Buffer:
    """The int32 offsets of cells of these lengths (too long for int32: pyarrow decides)."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise _Unbuilt("more than 2 GiB in one array")
    return pa.py_buffer(offsets.astype(np.int32))


def _ticks(stamp: dt.datetime, per_s: int) -> int:
    """A ``datetime`` in whole units since the epoch (aware: in UTC; naive: as written)."""
    if stamp.tzinfo is not None and stamp.utcoffset() is not None:
        stamp = stamp.astimezone(dt.timezone.utc).replace(tzinfo=None)
    delta = stamp.replace(tzinfo=None) - _EPOCH
    seconds = delta.days * 86_400 + delta.seconds
    return seconds * per_s + delta.microseconds * per_s // 1_000_000


_TIME_UNITS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}


def table_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``table.to_pylist()``: one dict per row, without loading pandas.

    ``to_pylist`` asks the pandas shim about every time-zoned timestamp cell (a nanosecond one
    may become a ``pandas.Timestamp``), so a table with a ``start_time`` column imports pandas.
    Here a top-level timestamp column of seconds, milliseconds or microseconds becomes
    ``datetime`` values as pyarrow makes them (UTC instant, shown in the column's zone); any other
    table goes to ``to_pylist`` itself.
    """
    if not any(pa.types.is_timestamp(f.type) for f in table.schema):
        return table.to_pylist()
    if any(_nested_time(f.type) for f in table.schema) or any(
            pa.types.is_timestamp(f.type) and f.type.unit not in _TIME_UNITS
            for f in table.schema):
        return table.to_pylist()
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_timestamp(field.type):
            zone = pa.lib.string_to_tzinfo(field.type.tz) if field.type.tz else None
            unit = _TIME_UNITS[field.type.unit]
            columns.append([None if v is None else _stamp(v, unit, zone)
                            for v in column.cast(pa.int64()).to_pylist()])
        else:
            columns.append(column.to_pylist())
    names = table.column_names
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def _nested_time(arrow_type: pa.DataType) -> bool:
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _nested_time(arrow_type.value_type) or pa.types.is_timestamp(
            arrow_type.value_type)
    if pa.types.is_struct(arrow_type):
        return any(pa.types.is_timestamp(f.type) or _nested_time(f.type) for f in arrow_type)
    return False


def _stamp(value: int, unit: str, zone: dt.tzinfo | None) -> dt.datetime:
    stamp = _EPOCH + dt.timedelta(**{unit: value})
    if zone is None:
        return stamp
    return stamp.replace(tzinfo=dt.timezone.utc).astimezone(zone)
