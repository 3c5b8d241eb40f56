"""The vectorised CSV front-end of the importers: ``pyarrow.csv`` with every cell as a string.

:class:`ArrowCsvReader` has :class:`~llm_powertrace_ds.importers.common.CsvReader`'s interface
and result (a ``common.Table``), at Arrow speed: the file is parsed by ``pyarrow.csv.read_csv``
(only the wanted columns, every one typed ``string``), the line number of every row is computed
from the bytes with numpy, repeated header lines are found column-wise, and each column goes to
its converter as one ``pyarrow`` array (``arrow_values`` parses numbers, units, ``[N/A]`` and
timestamps vectorised).

Every guarantee of the row reader holds because the row reader is the fallback: when the
vectorised parse fails (a line with the wrong number of fields, invalid UTF-8, a cut-off last
line with too few fields) or the file is one the fast path does not handle (quoted cells, bare
carriage-return line ends), the file is read again by ``CsvReader``, which reads it or raises the
one-line error naming the file, the line and the field. A converter that meets a cell it cannot
decide runs the exact per-value parser on that column, which names the offending line.
"""

from __future__ import annotations

import codecs
import logging
import math
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..arrow_numpy import to_arrow
from ..errors import InputError
from . import arrow_values
from .common import Converter, CsvReader, Table, one_line, sniff_encoding
from .values import TYPED_ATTR

log = logging.getLogger("llm_powertrace_ds.importers")

_NL, _CR, _QUOTE = 10, 13, 34


_PLAIN = re.compile(rb"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _plain(col: pa.ChunkedArray) -> bool:
    """Whether a float64 column parsed by Arrow holds only finite values >= 0 (nulls allowed).

    Anything else (NaN or infinity, which the parser reads from ``nan``, ``-nan``, ``inf``; a
    negative value) goes to the text path, whose converters decide it and word their errors
    from the cell's own text.
    """
    if col.null_count == len(col):
        return True
    if col.null_count:  # empty cells among numbers: rare, Arrow's kernels skip the nulls
        lo, hi = pc.min_max(col).values()
        return (lo.as_py() is not None and lo.as_py() >= 0.0 and math.isfinite(hi.as_py())
                and not pc.any(pc.is_nan(col)).as_py())
    for chunk in col.chunks:  # the value buffers as numpy views (to_numpy imports pandas)
        values = arrow_values.float_view(chunk)
        if len(values) and not (values.min() >= 0.0 and values.max() < np.inf):  # NaN fails both
            return False
    return True


CSV_BLOCK_BYTES = 4 << 20
"""Bytes of CSV text per parsed block, so per Arrow chunk of every column. Not small: each
column converter pays a fixed cost per chunk (a dozen numpy calls), and at ``pyarrow``'s
default of 1 MiB a 6 MB log is 7 chunks. Not large either: the parser's working buffers are
a block's size, so a block as large as the file (64 MiB was tried) makes a 20 MB log's parse
touch ≈ 30 MB more fresh memory (74 against 37 MiB at the pool's peak) and cost ≈ 30 % more
CPU, page faults included (``bench/scale.py``, ``cli_import_marginal_samples_per_cpu_s``).
Bounded, so that no string column's chunk comes near the 2 GiB of a 32-bit offset."""


def _count_newlines(data: bytes, part_bytes: int = 1 << 20) -> int:
    """LF bytes in ``data``, compared 1 MiB at a time into one reused mask.

    SIMD, and no temporary of the file's size (a 20 MB mask's fresh pages cost as much as the
    comparison); ``bytes.count`` is 4× slower.
    """
    raw = np.frombuffer(data, dtype=np.uint8)
    mask = np.empty(min(len(raw), part_bytes), dtype=bool)
    count = 0
    for start in range(0, len(raw), part_bytes):
        part = raw[start:start + part_bytes]
        count += int(np.count_nonzero(np.equal(part, _NL, out=mask[:len(part)])))
    return count


class _Fallback(Exception):
    """The fast path does not handle this file; read it with ``CsvReader``."""


class ArrowCsvReader:
    """Reads a CSV log with ``pyarrow.csv``; same interface and result as ``CsvReader``.

    Args:
        path: the CSV file.
        cut_last: ``drop`` or ``error``, as for ``CsvReader``.
    """

    def __init__(self, path: str | Path, *, cut_last: str = "drop") -> None:
        self.path = Path(path)
        self.cut_last = cut_last
        self._rows = CsvReader(self.path, cut_last=cut_last)  # reads the header, and falls back
        self.header: list[str] = []
        self.header_line = 0

    def __enter__(self) -> ArrowCsvReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._rows.__exit__(*exc)

    def read_header(self) -> list[str]:
        """Read and return the header (first non-blank line), cells stripped."""
        self.header = self._rows.read_header()
        self.header_line = self._rows.header_line
        return self.header

    def read(self, converters: Mapping[str, tuple[int, Converter]]) -> Table:
        """Read every data row and convert the wanted columns (see ``CsvReader.read``)."""
        try:
            return self._read_fast(converters)
        except _Fallback as why:
            log.debug("%s: row reader (%s)", self.path, why)
            return self._rows.read(converters)

    # -----------------------------------------------------------------------------------------

    def _bytes(self) -> bytes:
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read the file ({exc.strerror or exc})",
                             file=self.path) from None
        if sniff_encoding(self.path) == "utf-16":
            data = data.decode("utf-16", errors="replace").encode("utf-8")
        elif data.startswith(codecs.BOM_UTF8):
            data = data[len(codecs.BOM_UTF8):]
        return data

    def _read_fast(self, converters: Mapping[str, tuple[int, Converter]]) -> Table:
        # the file's bytes in a holder that :meth:`_parse` empties once the rows are parsed,
        # so that the columns' arrays reuse their memory (not a file's size of fresh pages)
        held = [self._bytes()]
        has_cr = b"\r" in held[0]  # memchr: no numpy pass over the bytes for the usual LF file
        if has_cr:
            return self._parse(held, *self._scanned_lines(held[0], has_cr), converters)
        # no CR: assume no blank line either (the usual logger file); when the parser finds
        # fewer rows than lines, blank lines were skipped and the numpy scan numbers the rows
        return self._parse(held, *self._plain_lines(held[0]), converters)

    def _plain_lines(self, data: bytes) -> tuple[np.ndarray, int, int, int]:
        """The body's line numbers and byte span of a file without CR, if it has no blank line.

        The usual logger file: every line after the header is a data row, so the line numbers
        are a range and the byte span comes from a vectorised newline count and ``find`` (no
        array of line offsets, no search for blank lines). Returns ``(lines, lo, hi, last_line)`` as
        :meth:`_scanned_lines`; :meth:`_parse` checks the row count and numbers the rows with
        :meth:`_scanned_lines` when blank lines were skipped.
        """
        terminated = data.endswith(b"\n")
        newlines = _count_newlines(data)
        total = newlines + (0 if terminated or not data else 1)
        first = self.header_line  # 1-based header line = 0-based first body line
        end = total  # body lines are [first, end), 0-based
        if self.cut_last == "drop" and end > first and not terminated:
            log.warning("%s: line %d is cut off (a killed logger?); dropped it", self.path, total)
            end -= 1
        lines = np.arange(first + 1, end + 1, dtype=np.int64)
        if end <= first:
            return lines, 0, 0, total
        lo = 0
        for _ in range(first):  # the header is line ``first`` (1-based): rows start after it
            lo = data.index(b"\n", lo) + 1
        hi = len(data) - 1 if end == total and terminated else (
            len(data) if end == total else data.rindex(b"\n"))
        return lines, lo, hi, total

    @staticmethod
    def _spans(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Start and end (without its terminator) of every line, 0-based, and the LF offsets."""
        raw = np.frombuffer(data, dtype=np.uint8)
        newline = np.flatnonzero(raw == _NL)
        starts = np.r_[0, newline + 1]
        ends = np.r_[newline, len(data)]
        if starts[-1] == len(data):  # the file ends with a newline: no unterminated last line
            starts, ends = starts[:-1], ends[:-1]
        return starts, ends, newline

    def _scanned_lines(self, data: bytes, has_cr: bool, *, warn: bool = True
                       ) -> tuple[np.ndarray, int, int, int]:
        """The body's line numbers and byte span, blank lines and CR LF ends found with numpy.

        Returns:
            ``(lines, lo, hi, last_line)``: 1-based line numbers of the data rows, the byte span
            ``[lo, hi)`` from the first row's start to the last row's end, and the file's
            number of lines.
        """
        raw = np.frombuffer(data, dtype=np.uint8)
        starts, ends, newline = self._spans(data)
        if has_cr and not np.isin(np.flatnonzero(raw == _CR) + 1, newline).all():
            raise _Fallback("bare carriage returns")
        terminated = len(ends) and ends[-1] < len(data)
        lengths = ends - starts
        crlf = lengths > 0
        if has_cr:
            crlf[crlf] = raw[ends[crlf] - 1] == _CR
        else:
            crlf[:] = False
        blank = (lengths - crlf) == 0
        first = self.header_line  # lines after the header (1-based header_line = 0-based first)
        body = np.arange(first, len(starts))
        if (self.cut_last == "drop" and len(body) and not terminated
                and not blank[len(starts) - 1]):
            if warn:
                log.warning("%s: line %d is cut off (a killed logger?); dropped it",
                            self.path, len(starts))
            body = body[:-1]
        rows = body[~blank[body]]
        if len(rows) == 0:
            return rows + 1, 0, 0, len(starts)
        return rows + 1, int(starts[rows[0]]), int(ends[rows[-1]]), len(starts)

    def _parse(self, held: bytes | list[bytes], lines: np.ndarray, lo: int, hi: int,
               last_line: int, converters: Mapping[str, tuple[int, Converter]]) -> Table:
        """Parse the rows in ``data[lo:hi]`` (one per entry of ``lines``) and convert them.

        ``held`` is ``data``, the file's bytes, or a one-item list holding them, which is
        emptied before the conversion (the bytes are freed when nothing else holds them).
        """
        data = held[0] if isinstance(held, list) else held
        width = len(self.header)
        if len(lines) == 0:
            return self._table(lines, np.zeros(0, np.int32), {}, converters, last_line)
        if data.find(b'"', lo, hi) != -1:  # the header was read already
            raise _Fallback("quoted cells")
        chunk = pa.py_buffer(data).slice(lo, hi - lo)  # no copy of the file's bytes
        wanted = sorted({0, *(index for index, _ in converters.values())})
        names = [f"f{i}" for i in range(width)]
        # ASCII bytes are valid UTF-8: read them as binary (no per-cell UTF-8 validation, ~15 %
        # of the parse) and view the columns as strings; other bytes are validated as strings
        ascii_only = data.isascii()
        cell_type = pa.binary() if ascii_only else pa.string()
        typed = self._typed_columns(data, lo, hi, converters)
        table = None
        if typed:
            try:
                table = self._read_csv(chunk, names, wanted, cell_type, typed)
            except (pa.ArrowInvalid, UnicodeDecodeError):
                table = None  # a cell that is not a plain number: every column as text
            if table is not None and not all(_plain(table.column(names[i])) for i in typed):
                table = None
        if table is None:
            try:
                table = self._read_csv(chunk, names, wanted, cell_type, set())
            except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
                raise _Fallback(one_line(exc)) from None
            typed = set()
        if table.num_rows != len(lines) and b"\r" not in data:
            # blank lines (the parser skips them): number the rows by scanning the bytes; the
            # parsed span is the same, as blank lines around it are skipped all the same
            lines, _, _, last_line = self._scanned_lines(data, False, warn=False)
        if table.num_rows != len(lines):
            raise _Fallback("row count differs from the line count")
        columns = {i: table.column(names[i]) for i in wanted}  # chunked: no copy
        if ascii_only:
            columns = {i: col if i in typed else pa.chunked_array(
                [c.view(pa.string()) for c in col.chunks], type=pa.string())
                for i, col in columns.items()}
        repeated = self._repeated_headers(columns[0], data, lines)
        if isinstance(held, list):
            held.clear()  # the parsed columns hold copies: the bytes are not read again
        del data, chunk
        segments = np.cumsum(repeated).astype(np.int32)
        keep = ~repeated
        if not keep.all():
            keep_idx = to_arrow(np.flatnonzero(keep))  # arrow_numpy: pa.array loads pandas
            columns = {i: col.take(keep_idx) for i, col in columns.items()}  # type: ignore[misc]
            lines, segments = lines[keep], segments[keep]
        return self._table(lines, segments, columns, converters, last_line)

    @staticmethod
    def _read_csv(chunk: pa.Buffer, names: list[str], wanted: list[int], cell_type: pa.DataType,
                  typed: set[int]) -> pa.Table:
        """``pyarrow.csv.read_csv`` of the rows: ``typed`` columns as float64, the rest text.

        An empty cell of a typed column is null (not reported); anything but a number in one
        raises ``ArrowInvalid``. Text columns keep every cell, empty ones as ``""``.
        """
        return pacsv.read_csv(
            pa.BufferReader(chunk),
            read_options=pacsv.ReadOptions(column_names=names, use_threads=False,
                                           block_size=CSV_BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(newlines_in_values=False, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.float64() if i in typed else cell_type
                              for i, n in enumerate(names)},
                include_columns=[names[i] for i in wanted], null_values=[""],
                strings_can_be_null=False, quoted_strings_can_be_null=False))

    def _typed_columns(self, data: bytes, lo: int, hi: int,
                       converters: Mapping[str, tuple[int, Converter]]) -> set[int]:
        """Columns the CSV parser may read as numbers.

        Plain-number converters only, and only where the first row's cell is a plain number or
        empty: a log with units or ``[N/A]`` is read as text at once, not parsed twice.
        """
        numeric: set[int] = set()
        other: set[int] = set()
        for index, conv in converters.values():
            (numeric if getattr(conv, TYPED_ATTR, False) else other).add(index)
        if not numeric - other:
            return set()
        end = data.find(b"\n", lo, hi)
        cells = data[lo:hi if end == -1 else end].split(b",")
        return {i for i in numeric - other
                if i < len(cells) and (cells[i] == b"" or _PLAIN.fullmatch(cells[i]))}

    def _repeated_headers(self, first_col: pa.ChunkedArray, data: bytes,
                          lines: np.ndarray) -> np.ndarray:
        """Rows that repeat the header (appended logs): segment starts, not data."""
        if pa.types.is_floating(first_col.type):
            # read as numbers: a repeated header row would have failed that parse already
            return np.zeros(len(first_col), dtype=bool)
        one = arrow_values.constant(first_col)  # a run-id column: one value, checked once
        if (one is not None and self.header[0] not in one) or \
                not pc.any(pc.match_substring(first_col, self.header[0])).as_py():
            return np.zeros(len(first_col), dtype=bool)  # the usual case: one pass, no copy
        cand = np.asarray(pc.equal(pc.utf8_trim_whitespace(first_col), self.header[0])
                          .to_numpy(zero_copy_only=False), dtype=bool)
        found = np.flatnonzero(cand)
        if found.size:
            starts, ends, _ = self._spans(data)  # only for a file with candidates: rare
        for k in found:
            row = int(lines[k]) - 1
            line = data[starts[row]:ends[row]].decode("utf-8", errors="replace")
            cells = [c.strip() for c in line.rstrip("\r").split(",")]
            cand[k] = cells == self.header
        return cand

    def _table(self, lines: np.ndarray, segments: np.ndarray,
               columns: dict[int, pa.ChunkedArray],
               converters: Mapping[str, tuple[int, Converter]], last_line: int) -> Table:
        table = Table(header=self.header, header_line=self.header_line,
                      lines=lines.astype(np.int64), segments=segments, last_line=last_line)
        for name, (index, conv) in converters.items():
            if len(lines) == 0:
                table.columns[name] = np.zeros(0)
            else:
                table.columns[name] = conv(columns[index], table.lines)
        return table
