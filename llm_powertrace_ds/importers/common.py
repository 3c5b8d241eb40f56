"""Shared machinery of the importers: CSV reading, value parsing, metadata and run assembly.

Every failure on bad input becomes an :class:`~llm_powertrace_ds.errors.InputError` whose
one-line message names the file, the line and the field; nothing here lets a traceback from
``csv``, ``numpy``, ``json`` or ``yaml`` escape.

Values are parsed a chunk of rows at a time and a column at a time (numpy first, a per-distinct
value Python fallback only when the fast path fails), so a log of a million lines imports in
seconds and never holds more than one chunk of strings in memory.
"""

from __future__ import annotations

import codecs
import csv
import datetime as dt
import hashlib
import json
import logging
import math
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TextIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pyarrow as pa
import yaml

from .. import checks, privacy, schema, specs
from ..errors import InputError
from ..run import DeviceSeries, Event, Run, coerce_meta
from . import arrow_values, enrich

log = logging.getLogger("llm_powertrace_ds.importers")

CHUNK_ROWS = 65_536

_MS_PER_S = 1000

# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", file=path) from None
    return digest.hexdigest()


_FAMILY_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"deepseek"), "deepseek"),
    (re.compile(r"gpt[-_ ]?j(?![a-z])"), "gptj"),
    (re.compile(r"gpt[-_ ]?2(?!\d)"), "gpt2"),
    (re.compile(r"llama"), "llama"),
    (re.compile(r"qwen"), "qwen"),
    (re.compile(r"mistral|mixtral"), "mistral"),
    (re.compile(r"(?<![a-z])phi(?![a-z])"), "phi"),
    (re.compile(r"gemma"), "gemma"),
]


def family_from_name(name: str | None) -> str:
    """Guess the model family of a model name (``Mistral-7B-v0.1`` -> ``mistral``).

    Returns ``unknown`` when no name is given and ``other`` when no known family matches.
    """
    if name is None or not str(name).strip():
        return "unknown"
    text = str(name).lower()
    for pattern, family in _FAMILY_PATTERNS:
        if pattern.search(text):
            return family
    return "other"


_IP_RE = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b|\b[0-9a-f]{1,4}(?::[0-9a-f]{0,4}){4,7}\b", re.I)
_ABS_PATH_RE = re.compile(r"^(?:/|~|\\\\|[A-Za-z]:[\\/])")


_EMBEDDED_PATH_RE = re.compile(r"(?:(?<=\s)|^)(?:~|/|[A-Za-z]:[\\/]|\\\\)[^\s]*")
_HOST_RE = re.compile(r"\b[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+){2,}\.[A-Za-z]{2,}\b|\S+@\S+")


def _local_identities() -> tuple[str, ...]:
    """This machine's host name and user name (never to be published)."""
    import getpass
    import socket

    names = []
    for get in (socket.gethostname, getpass.getuser):
        try:
            name = get()
        except (OSError, KeyError):
            continue
        if name and len(name) >= 3 and name not in ("root",):
            names.append(name)
    return tuple(names)


def scrub_text(value: str) -> str | None:
    """Remove what must never be published from a metadata string.

    An absolute path keeps only its last component (``/home/ann/models/x`` -> ``x``), also when
    it stands inside the text; a value that holds an IP address, a fully qualified host name,
    an e-mail-like ``user@host``, or this machine's host or user name is dropped (``None``).
    """
    text = value.strip()
    if _IP_RE.search(text) or _HOST_RE.search(text):
        return None
    if any(re.search(rf"\b{re.escape(n)}\b", text) for n in _local_identities()):
        return None
    if _ABS_PATH_RE.match(text) and not any(c.isspace() for c in text):
        pure = PureWindowsPath(text) if "\\" in text else PurePosixPath(text)
        return pure.name or None

    def last_part(m: re.Match[str]) -> str:
        token = m.group(0)
        pure = PureWindowsPath(token) if "\\" in token else PurePosixPath(token)
        return pure.name

    return _EMBEDDED_PATH_RE.sub(last_part, text).strip() or None


def scrub_meta(meta: dict[str, Any], *, source: str) -> dict[str, Any]:
    """Refuse metadata whose text could name a person, a machine or a path; return it unchanged.

    Free text is checked, never rewritten (issue 12, item 1): a value that looks like a path, an
    IP address, ``user@host`` or a host name, or that breaks its field's grammar, is an
    ``InputError`` naming the file and the field (``privacy.check_text``). Surrounding whitespace
    is stripped.
    """
    out = {k: v.strip() if isinstance(v, str) else v for k, v in meta.items()}
    privacy.check_meta_text(out, file=source)
    return out


def resolve_zone(tz: str | None) -> dt.tzinfo:
    """The ``tzinfo`` of an IANA zone name (``None``/``UTC`` -> UTC)."""
    if tz is None or tz.upper() in ("UTC", "Z", "ETC/UTC"):
        return dt.timezone.utc
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InputError(f"{tz!r} is not an IANA time zone name (e.g. America/Phoenix)",
                         field="tz") from None


def one_line(text: object, limit: int = 60) -> str:
    """Text squeezed onto one line (whitespace runs become one space), cut at ``limit``."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def list_names(names: Sequence[str], limit: int = 200) -> str:
    """A one-line, comma-separated list of header names for messages."""
    return one_line(", ".join(repr(one_line(n, 40)) for n in names) or "nothing", limit)


def _short(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


# ---------------------------------------------------------------------------------------------
# Metadata files
# ---------------------------------------------------------------------------------------------


def _parse_error_line(exc: Exception) -> int | None:
    if isinstance(exc, json.JSONDecodeError):
        return exc.lineno
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return mark.line + 1 if mark is not None else None


def _one_line(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    problem = getattr(exc, "problem", None) or str(exc)
    return " ".join(str(problem).split())


MAX_META_CHARS = 1 << 20
MAX_META_NODES = 10_000
"""Most values a metadata file may expand to, YAML aliases followed (an alias bomb stops)."""


def _check_yaml_size(node: yaml.Node | None, path: Path) -> None:
    stack = [node] if node is not None else []
    seen = 0
    while stack:
        cur = stack.pop()
        seen += 1
        if seen > MAX_META_NODES:
            raise InputError(f"the file expands to more than {MAX_META_NODES} values (YAML "
                             "aliases?); refused", file=path, line=cur.start_mark.line + 1)
        if isinstance(cur, yaml.MappingNode):
            for key, value in cur.value:
                stack.extend((key, value))
        elif isinstance(cur, yaml.SequenceNode):
            stack.extend(cur.value)


def read_structured(path: str | Path) -> Any:
    """Parse a JSON or YAML file (JSON by suffix ``.json``, else YAML, which reads JSON too).

    Raises:
        InputError: the file cannot be read or parsed (naming the file and the line).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", file=path, line=1) from None
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", file=path) from None
    kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
    if len(text) > MAX_META_CHARS:
        raise InputError(f"the file is {len(text)} characters; a metadata file is at most "
                         f"{MAX_META_CHARS}", file=path, line=1)
    try:
        if kind == "JSON":
            return json.loads(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except (ValueError, yaml.YAMLError) as exc:
        raise InputError(f"not valid {kind}: {_one_line(exc)}", file=path,
                         line=_parse_error_line(exc) or 1) from None
    _check_yaml_size(node, path)
    try:
        return yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise InputError(f"not valid {kind}: {_one_line(exc)}", file=path,
                         line=_parse_error_line(exc) or 1) from None


def load_meta_file(path: str | Path) -> dict[str, Any]:
    """Load a flat metadata mapping from a JSON or YAML file.

    Args:
        path: a ``.json``, ``.yaml`` or ``.yml`` file holding one mapping.

    Returns:
        The mapping (keys as strings).

    Raises:
        InputError: unreadable or unparsable file, or a document that is not a mapping.
    """
    data = read_structured(path)
    if not isinstance(data, Mapping):
        got = "nothing" if data is None else type(data).__name__
        raise InputError(f"expected a mapping of column names to values, got {got}",
                         file=path, line=1)
    return {str(k): v for k, v in data.items()}


# ---------------------------------------------------------------------------------------------
# CSV reading
# ---------------------------------------------------------------------------------------------

def sniff_encoding(path: Path) -> str:
    """``utf-16`` when the file starts with a UTF-16 byte-order mark, else ``utf-8-sig``.

    PowerShell's ``>`` writes nvidia-smi output with a UTF-16 byte-order mark.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
    except OSError:
        return "utf-8-sig"
    return "utf-16" if head in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) else "utf-8-sig"


Converter = Callable[[Any, np.ndarray], np.ndarray]
"""Turns a column (its cells — a sequence of strings, or a ``pyarrow`` string array from the
vectorised reader — and their 1-based line numbers) into an array."""


def _cells(values: Any) -> Sequence[str]:
    """The cells as Python strings (the exact per-value path after a vectorised miss)."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.to_pylist()
    return values


@dataclass
class _LineState:
    line_no: int = 0
    is_last: bool = False
    terminated: bool = True


@dataclass
class Table:
    """Columns read from a CSV file.

    Attributes:
        header: the header cells (stripped).
        header_line: the header's 1-based line number.
        lines: 1-based line number of each data row.
        segments: 0 for rows before the first repeated header line, then 1, 2, ...
        columns: name -> converted array, one entry per data row.
        last_line: the last line number read.
    """

    header: list[str]
    header_line: int
    lines: np.ndarray
    segments: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    last_line: int = 0


class CsvReader:
    """Reads a CSV log row by row and converts the wanted columns a chunk at a time.

    Blank lines are skipped, repeated header lines (appended logs) are skipped and counted as
    segment starts, and a line whose field count differs from the header's is an error, except
    a cut-off last line when ``cut_last="drop"`` (then it is dropped with a warning).

    Args:
        path: the CSV file.
        cut_last: ``drop`` (logs that a killed logger cut off: a last line without its newline,
            or with too few fields, is dropped) or ``error`` (such a line is an error).
    """

    def __init__(self, path: str | Path, *, cut_last: str = "drop") -> None:
        self.path = Path(path)
        self.cut_last = cut_last
        self._state = _LineState()
        try:
            self._fh: TextIO = open(self.path, encoding=sniff_encoding(self.path),
                                    errors="replace", newline="")
        except OSError as exc:
            raise InputError(f"cannot read the file ({exc.strerror or exc})",
                             file=self.path) from None
        self._reader = csv.reader(self._lines(), skipinitialspace=True)
        self.header: list[str] = []
        self.header_line = 0

    def __enter__(self) -> CsvReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()

    def _lines(self) -> Iterator[str]:
        st = self._state
        it = iter(self._fh)
        cur = next(it, None)
        while cur is not None:
            nxt = next(it, None)
            st.line_no += 1
            st.is_last = nxt is None
            st.terminated = cur.endswith(("\n", "\r"))
            yield cur
            cur = nxt

    def _next_row(self) -> list[str] | None:
        try:
            return next(self._reader)
        except StopIteration:
            return None
        except csv.Error as exc:
            raise InputError(f"not a readable CSV line ({exc})", file=self.path,
                             line=self._state.line_no or 1) from None

    def read_header(self) -> list[str]:
        """Read and return the header (first non-blank line), cells stripped.

        Raises:
            InputError: the file is empty (or blank).
        """
        while True:
            row = self._next_row()
            if row is None:
                raise InputError("the file is empty; expected a header line", file=self.path,
                                 line=max(1, self._state.line_no), field="header")
            if any(cell.strip() for cell in row):
                break
        self.header = [cell.strip() for cell in row]
        self.header_line = self._state.line_no
        return self.header

    def _bad_count(self, row: list[str]) -> InputError:
        n, width = len(row), len(self.header)
        name = one_line(self.header[n]) if n < width else f"column {width + 1}"
        return InputError(f"the line has {n} fields, the header has {width}", file=self.path,
                          line=self._state.line_no, field=name)

    def _cut_off(self, row: list[str]) -> bool:
        st = self._state
        if not st.is_last or self.cut_last != "drop":
            return False
        return not st.terminated or len(row) < len(self.header)

    def _classify(self, row: list[str], width: int) -> str:
        """``data``, ``header`` (a repeated header line) or ``skip`` (blank, cut off).

        Raises on a line whose field count differs from the header's.
        """
        if len(row) <= 1 and not "".join(row).strip():
            return "skip"
        if (row[0].strip() == self.header[0] and len(row) == width
                and [c.strip() for c in row] == self.header):
            return "header"
        if self._cut_off(row):
            log.warning("%s: line %d is cut off (a killed logger?); dropped it", self.path,
                        self._state.line_no)
            return "skip"
        if len(row) != width:
            raise self._bad_count(row)
        return "data"

    def read(self, converters: Mapping[str, tuple[int, Converter]],
             chunk_rows: int = CHUNK_ROWS) -> Table:
        """Read every data row and convert the wanted columns.

        Args:
            converters: output name -> (column index in the header, converter).
            chunk_rows: rows converted at a time.

        Returns:
            A :class:`Table`.
        """
        st = self._state
        width = len(self.header)
        chunk: list[list[str]] = []
        lines: list[int] = []
        segs: list[int] = []
        parts: dict[str, list[np.ndarray]] = {name: [] for name in converters}
        all_lines: list[np.ndarray] = []
        all_segs: list[np.ndarray] = []
        segment = 0

        def flush() -> None:
            if not chunk:
                return
            line_arr = np.asarray(lines, dtype=np.int64)
            cols = list(zip(*chunk, strict=True))
            for name, (index, conv) in converters.items():
                parts[name].append(conv(cols[index], line_arr))
            all_lines.append(line_arr)
            all_segs.append(np.asarray(segs, dtype=np.int32))
            chunk.clear()
            lines.clear()
            segs.clear()

        while (row := self._next_row()) is not None:
            kind = self._classify(row, width)
            if kind == "header":
                segment += 1
            elif kind == "data":
                chunk.append(row)
                lines.append(st.line_no)
                segs.append(segment)
                if len(chunk) >= chunk_rows:
                    flush()
        flush()
        table = Table(
            header=self.header, header_line=self.header_line,
            lines=np.concatenate(all_lines) if all_lines else np.zeros(0, np.int64),
            segments=np.concatenate(all_segs) if all_segs else np.zeros(0, np.int32),
            last_line=st.line_no,
        )
        for name, arrays in parts.items():
            table.columns[name] = np.concatenate(arrays) if arrays else np.zeros(0)
        return table


# ---------------------------------------------------------------------------------------------
# Value parsing
# ---------------------------------------------------------------------------------------------

_NUMBER_RE = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%°]+)?$")
_NULL_WORDS = {"", "n/a", "na", "nan", "none", "null", "unknown"}


def is_null_token(text: str) -> bool:
    """Whether a cell means *not reported*: empty, ``N/A``, or nvidia-smi's ``[...]`` notes."""
    t = text.strip()
    return t.lower() in _NULL_WORDS or (t.startswith("[") and t.endswith("]"))


def _number(text: str, units: frozenset[str] | None) -> tuple[float, str | None]:
    """Parse one cell: (value, None) or (nan, reason)."""
    t = text.strip()
    if is_null_token(t):
        return math.nan, None
    match = _NUMBER_RE.match(t)
    if not match:
        return math.nan, "is not a number"
    unit = match.group(2)
    if unit and units is not None and unit not in units:
        expected = " or ".join(sorted(units)) or "no unit"
        return math.nan, f"has unit {unit!r}, expected {expected}"
    value = float(match.group(1))
    if not math.isfinite(value):
        return math.nan, "is not finite"
    return value, None


def _first_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _by_distinct(values: Any, lines: np.ndarray, parse: Callable[[str], tuple[float, str | None]],
                 *, file: Path, field: str) -> np.ndarray:
    """Parse each distinct string once; raise on the earliest bad row."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        uniq_list, inverse = arrow_values.distinct(values)
    else:
        arr = np.asarray(values, dtype=str)
        uniq_arr, inverse = np.unique(arr, return_inverse=True)
        uniq_list = uniq_arr.tolist()
    out = np.empty(len(uniq_list), dtype=np.float64)
    reasons: dict[int, str] = {}
    for k, text in enumerate(uniq_list):
        out[k], reason = parse(text)
        if reason is not None:
            reasons[k] = reason
    if reasons:
        row = _first_row(np.isin(inverse, list(reasons)))
        k = int(inverse[row])
        raise InputError(f"value {_short(str(uniq_list[k]))} {reasons[k]}", file=file,
                         line=int(lines[row]), field=field)
    return out[inverse.reshape(-1)]


def numeric_converter(*, file: Path, field: str, units: frozenset[str] | None = None,
                      nonnegative: bool = False) -> Converter:
    """A converter of a numeric column to float64 (NaN = not reported).

    Accepts plain numbers, numbers followed by a unit (``34.44 W``; the unit must be one of
    ``units`` when given), and null tokens (``[N/A]``, ``[Not Supported]``, empty).

    Args:
        file: the file, for errors.
        field: the column name, for errors.
        units: accepted unit suffixes (``None``: any).
        nonnegative: a value below 0 is an error.
    """

    def convert(values: Any, lines: np.ndarray) -> np.ndarray:
        out: np.ndarray | None = None
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            out = arrow_values.numbers(values, units)
            if out is None:  # a cell the fast path does not decide: the exact parser names it
                values = _cells(values)
            else:
                return _check_nonnegative(out, values, lines, nonnegative, file=file, field=field)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = np.asarray(values, dtype=str).astype(np.float64)
        except (ValueError, TypeError):
            out = None
        if out is None or not np.isfinite(out).all():
            out = _by_distinct(values, lines, lambda t: _number(t, units), file=file, field=field)
        return _check_nonnegative(out, values, lines, nonnegative, file=file, field=field)

    return convert


def _check_nonnegative(out: np.ndarray, values: Any, lines: np.ndarray, nonnegative: bool, *,
                       file: Path, field: str) -> np.ndarray:
    if nonnegative and (out < 0).any():
        row = _first_row(out < 0)
        cell = values[row]
        text = cell.as_py() if isinstance(cell, pa.Scalar) else cell
        raise InputError(f"value {_short(str(text).strip())} is negative", file=file,
                         line=int(lines[row]), field=field)
    return out


def _reason_mask(text: str) -> tuple[float, str | None]:
    t = text.strip()
    if is_null_token(t):
        return math.nan, None
    try:
        return float(int(t, 16) if t.lower().startswith("0x") else int(t)), None
    except ValueError:
        return math.nan, "is not a clock-event-reasons bitmask (e.g. 0x0000000000000004)"


def reasons_converter(*, file: Path, field: str) -> Converter:
    """A converter of a ``clocks_event_reasons.active`` column (hex bitmask) to float64."""

    def convert(values: Any, lines: np.ndarray) -> np.ndarray:
        return _by_distinct(values, lines, _reason_mask, file=file, field=field)

    return convert


def _active(text: str) -> tuple[float, str | None]:
    t = text.strip().lower()
    if t == "active":
        return 1.0, None
    if t == "not active":
        return 0.0, None
    if is_null_token(t):
        return math.nan, None
    return math.nan, "is neither 'Active' nor 'Not Active'"


def active_converter(*, file: Path, field: str) -> Converter:
    """A converter of one per-reason column (``Active``/``Not Active``) to 1/0/NaN."""

    def convert(values: Any, lines: np.ndarray) -> np.ndarray:
        return _by_distinct(values, lines, _active, file=file, field=field)

    return convert


class Factorizer:
    """Maps the strings of a text column to integer codes (-1 = null), keeping the levels."""

    def __init__(self) -> None:
        self.levels: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, text: str) -> int:
        t = text.strip()
        if is_null_token(t):
            return -1
        found = self._codes.get(t)
        if found is None:
            found = self._codes[t] = len(self.levels)
            self.levels.append(t)
        return found

    def converter(self) -> Converter:
        """A converter of a text column to int64 codes."""

        def convert(values: Any, lines: np.ndarray) -> np.ndarray:
            if isinstance(values, (pa.Array, pa.ChunkedArray)):
                uniq, inverse = arrow_values.distinct(values)
                codes = np.array([self.code(v) for v in uniq], dtype=np.int64)
                return codes[inverse] if len(uniq) else np.zeros(0, np.int64)
            return np.fromiter((self.code(v) for v in values), dtype=np.int64, count=len(values))

        return convert


_TS_RE = re.compile(
    r"\d{4}[-/]\d{1,2}[-/]\d{1,2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?")
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_OFFSET_BUCKET_MS = 15 * 60 * _MS_PER_S


def _offset_ms(local_ms: int, zone: dt.tzinfo) -> int:
    naive = _EPOCH_NAIVE + dt.timedelta(milliseconds=local_ms)
    offset = naive.replace(tzinfo=zone).utcoffset() or dt.timedelta(0)
    return int(offset.total_seconds() * _MS_PER_S)


def local_to_utc_ms(local_ms: np.ndarray, zone: dt.tzinfo) -> np.ndarray:
    """Convert naive local wall-clock ms (since the naive epoch) to UTC epoch ms.

    The zone's offset is looked up once per 15-minute bucket (DST changes fall on those);
    ambiguous wall times (the repeated hour when clocks go back) take the first occurrence.
    """
    if zone is dt.timezone.utc or len(local_ms) == 0:
        return local_ms
    buckets = local_ms // _OFFSET_BUCKET_MS
    uniq, inverse = np.unique(buckets, return_inverse=True)
    offsets = np.array([_offset_ms(int(b) * _OFFSET_BUCKET_MS, zone) for b in uniq], np.int64)
    return local_ms - offsets[inverse.reshape(-1)]


def _explicit_utc_ms(text: str) -> int:
    stamp = dt.datetime.fromisoformat(text.replace("/", "-").replace("Z", "+00:00"))
    return int(round(stamp.timestamp() * _MS_PER_S))


def timestamp_converter(*, file: Path, field: str, zone: dt.tzinfo) -> Converter:
    """A converter of a timestamp column to int64 UTC epoch milliseconds.

    Accepts ``YYYY/MM/DD HH:MM:SS.mmm`` (nvidia-smi) and ISO-8601 (``T`` or space, any number of
    fraction digits, truncated to ms). Zone-less stamps are local time in ``zone``; a trailing
    ``Z`` or ``+HH:MM`` is honoured.
    """

    def convert(values: Any, lines: np.ndarray) -> np.ndarray:
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            fixed = arrow_values.fixed_width_ms(values)
            if fixed is not None:
                return fixed[0] if fixed[1] else local_to_utc_ms(fixed[0], zone)
            utc = arrow_values.utc_z_ms(values)
            if utc is not None:
                return utc
            local = arrow_values.naive_ms(values)
            if local is not None:
                return local_to_utc_ms(local, zone)
            values = _cells(values)  # offsets, mixed zones or a bad cell: the exact path
        texts = [v.strip() for v in values]
        zones: list[str | None] = []
        for row, text in enumerate(texts):
            match = _TS_RE.fullmatch(text)
            if match is None:
                raise InputError(f"value {_short(text)} is not a timestamp "
                                 "(YYYY/MM/DD HH:MM:SS.mmm or ISO-8601)", file=file,
                                 line=int(lines[row]), field=field)
            zones.append(match.group(1))
        return _to_utc_ms(texts, zones, lines, file=file, field=field, zone=zone)

    return convert


def _to_utc_ms(texts: list[str], zones: list[str | None], lines: np.ndarray, *, file: Path,
               field: str, zone: dt.tzinfo) -> np.ndarray:
    has_offset = np.array([z is not None and z != "Z" for z in zones], dtype=bool)
    is_z = np.array([z == "Z" for z in zones], dtype=bool)
    plain = [t[:-1] if z == "Z" else (t if z is None else "1970-01-01") for t, z in zip(texts, zones, strict=True)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            naive = np.array([p.replace("/", "-") for p in plain]).astype("datetime64[ms]")
    except ValueError:
        naive = None
    if naive is None:
        for row, text in enumerate(plain):
            try:
                np.datetime64(text.replace("/", "-"), "ms")
            except ValueError:
                raise InputError(f"value {_short(texts[row])} is not a valid date and time",
                                 file=file, line=int(lines[row]), field=field) from None
        raise InputError("unparsable timestamps", file=file, line=int(lines[0]), field=field)
    ms = naive.astype(np.int64)
    local = ~(is_z | has_offset)
    if local.any():
        ms[local] = local_to_utc_ms(ms[local], zone)
    for offset_row in np.flatnonzero(has_offset):
        try:
            ms[offset_row] = _explicit_utc_ms(texts[offset_row])
        except ValueError:
            raise InputError(f"value {_short(texts[offset_row])} is not a valid date and time",
                             file=file, line=int(lines[offset_row]), field=field) from None
    return ms


def format_utc_ms(ms: int) -> str:
    """``2024-04-03T10:55:35.013Z`` for an epoch-ms value (for messages)."""
    stamp = dt.datetime.fromtimestamp(ms / _MS_PER_S, tz=dt.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % _MS_PER_S:03d}Z"


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
                 flags: Sequence[str] = (), events: Sequence[tuple[int, Event]] = ()) -> Run:
    """Put devices on the run clock and build the checked :class:`Run`.

    ``t0`` is the earliest timestamp of any device; ``t_ms = ts - t0``; ``start_time`` is ``t0``
    in UTC. Metadata is checked against the column contract (``run.coerce_meta``).

    Args:
        devices: the devices, each with strictly increasing UTC timestamps.
        meta: run-level metadata (column names of the workload's trace config).
        file: the source file, for errors.
        flags: quality flags to add.
        events: ``(utc_ms, event)`` pairs; the event's ``t_ms`` is set on the run clock.
    """
    checks.check_import(devices, meta, file=file, lines=[d.lines for d in devices],
                        labels=[("label", e.label) for _, e in events])
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
