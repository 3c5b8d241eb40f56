"""Vectorised cell parsing with ``pyarrow.compute``: numbers, units, null tokens, timestamps.

Each function takes a whole column of CSV cells as a ``pyarrow`` string array and either returns
the parsed values or ``None`` when the column holds something the fast path does not decide
(a malformed cell, an unknown unit, mixed time zones): the caller then runs the exact per-value
parser of ``common`` on that column, which names the offending line. The fast path never
accepts a cell that the per-value parser would reject.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arrow_numpy import strings, to_arrow, to_numpy

NULL_WORDS = ("", "n/a", "na", "nan", "none", "null", "unknown")
"""Cells that mean *not reported* (besides nvidia-smi's ``[...]`` notes); as in ``common``."""
NUMBER_PATTERN = (r"^(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*"
                  r"(?P<unit>[A-Za-z%°]+)?$")
TIMESTAMP_PATTERN = (r"^\d{4}[-/]\d{1,2}[-/]\d{1,2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
                     r"(Z|[+-]\d{2}:?\d{2})?$")
_ZONE_PATTERN = r"(Z|[+-]\d{2}:?\d{2})$"


Cells: TypeAlias = "pa.Array | pa.ChunkedArray"


def as_array(values: Cells) -> Cells:
    """The column as given: every function here works on chunked arrays without a copy."""
    return values


def trimmed(values: Cells) -> Cells:
    """Cells without leading/trailing whitespace."""
    return pc.utf8_trim_whitespace(values)


def null_mask(cells: Cells) -> np.ndarray:
    """Whether each (trimmed) cell means *not reported*: a null word or ``[...]``."""
    words = pc.is_in(pc.utf8_lower(cells), value_set=strings(NULL_WORDS))
    note = pc.and_(pc.starts_with(cells, "["), pc.ends_with(cells, "]"))
    return to_numpy(pc.or_(words, note), null_value=False)  # a null cell: not a null word


def float_view(chunk: pa.Array) -> np.ndarray:
    """The values of a float64 array without nulls as a read-only numpy view (no copy).

    ``pyarrow.Array.to_numpy`` does the same but imports ``pandas`` the first time (≈ 0.2 s a
    process; ``llm_powertrace_ds.arrow_numpy``).
    """
    if not pa.types.is_float64(chunk.type) or chunk.null_count:
        raise ValueError(f"a float64 array without nulls, not {chunk.type} with "
                         f"{chunk.null_count} nulls")
    n = len(chunk)
    if n == 0:
        return np.zeros(0)
    return np.frombuffer(chunk.buffers()[1], np.float64, count=chunk.offset + n)[chunk.offset:]


def _to_float(arr: Cells) -> np.ndarray:
    """A float64 column (chunked or not) as one writable numpy array, NaN for nulls.

    Chunk by chunk into one preallocated array: a chunk without nulls is copied straight from
    its value buffer, an all-null chunk is filled with NaN, only a chunk with some nulls goes
    through ``to_numpy`` (≈ 3× faster than ``ChunkedArray.to_numpy`` on an imported column).
    """
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    if not all(pa.types.is_float64(c.type) for c in chunks):
        out = to_numpy(pc.cast(arr, pa.float64()))  # nulls become NaN
        return out if out.flags.writeable else out.copy()  # writable, copied only when needed
    out = np.empty(len(arr), np.float64)
    pos = 0
    for chunk in chunks:
        n = len(chunk)
        if n == 0:
            continue
        if chunk.null_count == n:
            out[pos:pos + n] = np.nan
        elif chunk.null_count == 0:
            out[pos:pos + n] = float_view(chunk)
        else:
            out[pos:pos + n] = to_numpy(chunk)  # NaN at the nulls
        pos += n
    return out


def numbers(values: Cells, units: frozenset[str] | None) -> np.ndarray | None:
    """Numbers (optionally followed by a unit in ``units``) to float64, NaN where not reported.

    Returns:
        The values, or ``None`` when a cell is not a finite number with an accepted unit.
    """
    raw = as_array(values)
    if pa.types.is_floating(raw.type):  # parsed by the CSV reader (plain finite numbers >= 0)
        return _to_float(raw)  # a null (empty cell) becomes NaN
    if len(raw) and pc.max(pc.binary_length(raw)).as_py() == 0:
        return np.full(len(raw), np.nan)  # a column the source never filled
    try:  # the common case: plain numbers, nothing to strip
        plain = _to_float(pc.cast(raw, pa.float64()))
        if np.isfinite(plain).all():
            return plain
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    cells = trimmed(raw)
    nulls = null_mask(cells)
    kept = pc.if_else(to_arrow(nulls), pa.scalar(None, pa.string()),
                      cells.combine_chunks() if isinstance(cells, pa.ChunkedArray) else cells)
    try:
        out = _to_float(pc.cast(kept, pa.float64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        parts = pc.extract_regex(kept, NUMBER_PATTERN)
        if (to_numpy(parts.is_null(), null_value=False) & ~nulls).any():
            return None
        found = {u for u in pc.unique(parts.field("unit")).to_pylist() if u}
        if units is not None and not found <= units:
            return None
        try:
            out = _to_float(pc.cast(parts.field("num"), pa.float64()))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
    if not np.isfinite(out[~nulls]).all():
        return None
    out[nulls] = np.nan
    return out


def naive_ms(values: Cells) -> np.ndarray | None:
    """Zone-less or all-``Z`` timestamps to int64 ms (as written), with whether they were ``Z``.

    Returns:
        ``(ms, all_z)``-free form: ms since the naive epoch, or ``None`` when a cell is not a
        timestamp, some cells carry a zone and others not, or a cell has a ``+HH:MM`` offset
        (the per-value parser handles those).
    """
    cells = trimmed(as_array(values))
    if len(cells) == 0:
        return np.zeros(0, np.int64)
    if pc.any(pc.ends_with(cells, "Z")).as_py() or not _shape_ok(cells):
        return None
    if pc.any(pc.match_substring_regex(cells, _ZONE_PATTERN)).as_py():
        return None
    return _cast_ms(cells)


def utc_z_ms(values: Cells) -> np.ndarray | None:
    """Timestamps that all end in ``Z`` to int64 UTC epoch ms (``None`` otherwise)."""
    cells = trimmed(as_array(values))
    if len(cells) == 0 or not pc.all(pc.ends_with(cells, "Z")).as_py():
        return None
    plain = pc.utf8_slice_codeunits(cells, 0, -1)
    if not _shape_ok(plain):
        return None
    return _cast_ms(plain)


def _shape_ok(cells: Cells) -> bool:
    """Whether every zone-less cell has the per-value parser's shape.

    Arrow's ISO-8601 cast accepts what the per-value pattern (``TIMESTAMP_PATTERN``) accepts
    with two-digit month, day and hour, and also a bare date or an hour without minutes; those
    two are the only forms to exclude, which a fixed-position check does without a regex:
    ``YYYY?MM?DD?hh:mm`` with the date-time separator a ``T`` or a space.
    """
    sep = pc.utf8_slice_codeunits(cells, 10, 11)
    ok = pc.and_(pc.equal(pc.utf8_slice_codeunits(cells, 13, 14), ":"),
                 pc.or_(pc.equal(sep, "T"), pc.equal(sep, " ")))
    return bool(pc.all(ok).as_py())


def _cast_ms(cells: Cells) -> np.ndarray | None:
    text = pc.replace_substring(cells, "/", "-")
    try:
        stamps = pc.cast(text, pa.timestamp("ns"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    # a null cell reads as the smallest int64 (what its NaN became through float64 before);
    # the exact int64 values otherwise, no float round trip
    return to_numpy(stamps.cast(pa.int64()), null_value=np.iinfo(np.int64).min) // 1_000_000


def _offsets(chunk: pa.Array) -> np.ndarray:
    """The n + 1 int32 offsets of a string or binary chunk (a view; sliced chunks included)."""
    n = len(chunk)
    return np.frombuffer(chunk.buffers()[1], dtype=np.int32,
                         count=chunk.offset + n + 1)[chunk.offset:] if n else np.zeros(1, np.int32)


def _cell_matrix(chunk: pa.Array) -> np.ndarray | None:
    """A string/binary chunk without nulls as an (n, width) uint8 matrix, if all share a width."""
    if chunk.null_count or not (pa.types.is_string(chunk.type) or pa.types.is_binary(chunk.type)):
        return None
    n = len(chunk)
    bufs = chunk.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=chunk.offset + n + 1)[chunk.offset:]
    width = int(offsets[1] - offsets[0])
    if int(offsets[-1] - offsets[0]) != n * width or (np.diff(offsets) != width).any():
        return None
    if width == 0:
        return np.zeros((n, 0), np.uint8)
    data = np.frombuffer(bufs[2], dtype=np.uint8, count=int(offsets[-1]))
    return data[int(offsets[0]):int(offsets[-1])].reshape(n, width)


def constant(values: Cells) -> str | None:
    """The one value of a column whose cells are all the same string (``None`` otherwise).

    Decided on the array's bytes with numpy (equal offsets, then every row's bytes equal the
    first row's): a run-id column is checked at memory speed instead of hashing every cell.
    """
    chunks = [c for c in (values.chunks if isinstance(values, pa.ChunkedArray) else [values])
              if len(c)]
    first: bytes | None = None
    for chunk in chunks:
        m = _cell_matrix(chunk)
        if m is None:
            return None
        row = m[0].tobytes()
        flat = m.reshape(-1)  # every row equals the one before it: one pass over the bytes
        if (first is not None and row != first) or \
                not np.array_equal(flat[m.shape[1]:], flat[:len(flat) - m.shape[1]]):
            return None
        first = row
    if first is None:
        return None
    try:
        return first.decode("utf-8")
    except UnicodeDecodeError:
        return None


def distinct(values: Cells) -> tuple[list[str], np.ndarray]:
    """The distinct cells (in order of first appearance) and each row's index into them.

    Two shortcuts with the same answer as the general hash pass: a column of one repeated
    value (:func:`constant`), and a column of mostly empty cells (a ``stage`` column labels a
    few rows), whose non-empty cells alone are hashed.
    """
    one = constant(values)
    if one is not None:
        return [one], np.zeros(len(values), np.int64)
    sparse = _mostly_empty(values)
    if sparse is not None:
        return sparse
    return _hashed(values)


def _hashed(values: Cells) -> tuple[list[str], np.ndarray]:
    uniq = pc.unique(values)
    index = pc.index_in(values, value_set=uniq)
    inverse = (np.asarray(index.to_numpy(zero_copy_only=False), dtype=np.int64)
               if index.null_count else to_numpy(index).astype(np.int64))
    return uniq.to_pylist(), inverse


def _mostly_empty(values: Cells) -> tuple[list[str], np.ndarray] | None:
    """:func:`distinct` of a column whose cells are mostly ``""`` (``None`` for other columns)."""
    if values.null_count or not (pa.types.is_string(values.type)
                                 or pa.types.is_binary(values.type)):
        return None
    n = len(values)
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    filled = np.concatenate([np.diff(_offsets(c)) > 0 for c in chunks] or [np.zeros(0, bool)])
    rows = np.flatnonzero(filled)
    if n == 0 or len(rows) == n or len(rows) > n // 4:
        return None
    inverse = np.empty(n, np.int64)
    if len(rows) == 0:
        inverse[:] = 0
        return [""], inverse
    levels, sub = _hashed(values.take(to_arrow(rows)))
    first_rows = rows[np.unique(sub, return_index=True)[1]]  # row where each level first shows
    rank = int(np.searchsorted(first_rows, int(np.argmin(filled))))  # levels before the first ""
    levels.insert(rank, "")
    inverse[:] = rank
    inverse[rows] = sub + (sub >= rank)
    return levels, inverse


# Fixed-width timestamps (every cell the same length: what loggers write) are parsed straight
# from the string array's bytes with numpy: a digit matrix, no per-cell string work.
_DIGITS_DATE = (0, 1, 2, 3, 5, 6, 8, 9)
_YEAR_MIN, _YEAR_MAX = 1678, 2261  # inside Arrow's timestamp[ns] range, like the cast path
_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)


def fixed_width_ms(values: Cells) -> tuple[np.ndarray, bool] | None:
    """Fixed-width ``YYYY?MM?DD[T ]hh:mm:ss[.f…][Z]`` cells to int64 ms; whether they end in Z.

    ``?`` is ``-`` or ``/``; 1 to 9 fraction digits, truncated to ms (as the cast path does).
    Returns ``None`` for anything else — cells of different lengths, surrounding whitespace, a
    zone offset, a date or time out of range — and the caller takes the general path, which
    decides those cells (so this path accepts a subset of what that one accepts, with the same
    values).
    """
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    parts: list[np.ndarray] = []
    zulu: bool | None = None
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        got = _fixed_chunk(chunk)
        if got is None or (zulu is not None and got[1] != zulu):
            return None
        parts.append(got[0])
        zulu = got[1]
    if zulu is None:
        return None
    return (np.concatenate(parts) if len(parts) > 1 else parts[0]), zulu


def _fixed_matrix(chunk: pa.Array) -> np.ndarray | None:
    """The cells of a string chunk as an (n, width) uint8 matrix, if they share one width."""
    if chunk.null_count or chunk.type != pa.string():
        return None
    n = len(chunk)
    bufs = chunk.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=chunk.offset + n + 1)[chunk.offset:]
    width = int(offsets[1] - offsets[0])
    if width < 19 or int(offsets[-1] - offsets[0]) != n * width \
            or (np.diff(offsets) != width).any():
        return None
    data = np.frombuffer(bufs[2], dtype=np.uint8, count=int(offsets[-1]))
    return data[int(offsets[0]):int(offsets[-1])].reshape(n, width)


def _number(d: np.ndarray, cols: range | tuple[int, ...]) -> np.ndarray:
    out = np.zeros(len(d), np.int64)
    for c in cols:
        out = out * 10 + d[:, c]
    return out


def _fixed_chunk(chunk: pa.Array) -> tuple[np.ndarray, bool] | None:
    """One chunk of fixed-width cells: the minute prefix once per run, the rest per cell.

    A logger writes many cells per minute, so the bytes ``YYYY?MM?DD?hh:mm`` (0-15) repeat in
    runs: each run's first cell is checked and parsed (:func:`_minute_ms`), which decides every
    cell of the run (same bytes), and only seconds, fraction and zone are parsed per cell.
    """
    m = _fixed_matrix(chunk)
    if m is None:
        return None
    n, width = m.shape
    zulu = m[0, -1] == ord("Z")
    end = width - 1 if zulu else width  # bytes before the zone
    frac = end - 20  # fraction digits after "ss."
    if not (frac == -1 or 1 <= frac <= 9):
        return None
    if zulu and (m[:, -1] != ord("Z")).any():
        return None
    if frac > 0 and (m[:, 19] != ord(".")).any():
        return None
    if (m[:, 16] != ord(":")).any():
        return None
    # milliseconds within the minute, one byte column at a time (1-D strided views: numpy's
    # loops over an (n, 7) block of a wide matrix cost ~4x more): "ss" then up to 3 fraction
    # digits weighted, further fraction digits only checked (truncated, as the cast path does)
    weights = {17: 10_000, 18: 1_000, 20: 100, 21: 10, 22: 1}
    within = np.zeros(n, np.int32)
    for col in (17, 18, *range(20, end)):
        digit = m[:, col] - np.uint8(48)  # a non-digit wraps to > 9
        if (digit > 9).any():
            return None
        if weights.get(col, 0):
            within += digit.astype(np.int32) * np.int32(weights[col])
    if (within >= 60_000).any():  # seconds > 59 (the fraction adds at most 999 ms)
        return None
    prefix = m[:, :16].view(np.uint64)  # two words per cell (numpy allows the unaligned view)
    change = np.empty(n, dtype=bool)
    change[0] = True
    np.not_equal(prefix[1:, 0], prefix[:-1, 0], out=change[1:])
    change[1:] |= prefix[1:, 1] != prefix[:-1, 1]
    starts = np.flatnonzero(change)
    minute = _minute_ms(m[starts])
    if minute is None:
        return None
    out = np.repeat(minute, np.diff(np.r_[starts, n]))
    out += within
    return out, bool(zulu)


def _minute_ms(m: np.ndarray) -> np.ndarray | None:
    """``YYYY?MM?DD[T ]hh:mm`` (bytes 0-15 of each row) to epoch ms, ``None`` if one is not."""
    d = m[:, :16] - np.uint8(48)  # digits are 0..9; every other byte wraps to > 9
    digit_cols = [*_DIGITS_DATE, 11, 12, 14, 15]
    if (d[:, digit_cols] > 9).any():
        return None
    dash, slash = ord("-"), ord("/")
    for c, (one, other) in ((4, (dash, slash)), (7, (dash, slash)), (10, (ord("T"), ord(" "))),
                            (13, (ord(":"), ord(":")))):
        col = m[:, c]
        if not ((col == one) | (col == other)).all():
            return None
    year, month, day = _number(d, (0, 1, 2, 3)), _number(d, (5, 6)), _number(d, (8, 9))
    hour, minute = _number(d, (11, 12)), _number(d, (14, 15))
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    if ((year < _YEAR_MIN) | (year > _YEAR_MAX) | (month < 1) | (month > 12)).any():
        return None
    month_days = _MONTH_DAYS[month] + ((month == 2) & leap)
    if ((day < 1) | (day > month_days) | (hour > 23) | (minute > 59)).any():
        return None
    return _days_from_civil(year, month, day) * 86_400_000 + hour * 3_600_000 + minute * 60_000


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's ``days_from_civil``)."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468
