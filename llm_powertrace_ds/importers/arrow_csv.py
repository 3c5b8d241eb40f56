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
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ..errors import InputError
from .common import Converter, CsvReader, Table, one_line, sniff_encoding

log = logging.getLogger("llm_powertrace_ds.importers")

_NL, _CR, _QUOTE = 10, 13, 34


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
        data = self._bytes()
        raw = np.frombuffer(data, dtype=np.uint8)
        newline = np.flatnonzero(raw == _NL)
        has_cr = b"\r" in data  # memchr: no numpy pass over the bytes for the usual LF file
        if has_cr and not np.isin(np.flatnonzero(raw == _CR) + 1, newline).all():
            raise _Fallback("bare carriage returns")
        # Line k (0-based) spans [starts[k], ends[k]) without its terminator.
        starts = np.r_[0, newline + 1]
        ends = np.r_[newline, len(data)]
        if starts[-1] == len(data):  # the file ends with a newline: no unterminated last line
            starts, ends = starts[:-1], ends[:-1]
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
            log.warning("%s: line %d is cut off (a killed logger?); dropped it", self.path,
                        len(starts))
            body = body[:-1]
        rows = body[~blank[body]]
        lines = rows + 1
        width = len(self.header)
        if len(rows) == 0:
            return self._table(lines, np.zeros(0, np.int32), {}, converters, len(starts))
        lo, hi = int(starts[rows[0]]), int(ends[rows[-1]])
        if data.find(b'"', lo, hi) != -1:  # the header was read already
            raise _Fallback("quoted cells")
        chunk = pa.py_buffer(data).slice(lo, hi - lo)  # no copy of the file's bytes
        wanted = sorted({0, *(index for index, _ in converters.values())})
        names = [f"f{i}" for i in range(width)]
        # ASCII bytes are valid UTF-8: read them as binary (no per-cell UTF-8 validation, ~15 %
        # of the parse) and view the columns as strings; other bytes are validated as strings
        ascii_only = data.isascii()
        cell_type = pa.binary() if ascii_only else pa.string()
        try:
            table = pacsv.read_csv(
                pa.BufferReader(chunk),
                read_options=pacsv.ReadOptions(column_names=names, use_threads=False),
                parse_options=pacsv.ParseOptions(newlines_in_values=False,
                                                 ignore_empty_lines=True),
                convert_options=pacsv.ConvertOptions(
                    column_types={n: cell_type for n in names},
                    include_columns=[names[i] for i in wanted],
                    strings_can_be_null=False, quoted_strings_can_be_null=False))
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            raise _Fallback(one_line(exc)) from None
        if table.num_rows != len(rows):
            raise _Fallback("row count differs from the line count")
        columns = {i: table.column(names[i]) for i in wanted}  # chunked: no copy
        if ascii_only:
            columns = {i: pa.chunked_array([c.view(pa.string()) for c in col.chunks],
                                           type=pa.string()) for i, col in columns.items()}
        repeated = self._repeated_headers(columns[0], data, starts, ends, rows)
        segments = np.cumsum(repeated).astype(np.int32)
        keep = ~repeated
        if not keep.all():
            keep_idx = pa.array(np.flatnonzero(keep))
            columns = {i: col.take(keep_idx) for i, col in columns.items()}  # type: ignore[misc]
            lines, segments = lines[keep], segments[keep]
        return self._table(lines, segments, columns, converters, len(starts))

    def _repeated_headers(self, first_col: pa.ChunkedArray, data: bytes, starts: np.ndarray,
                          ends: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Rows that repeat the header (appended logs): segment starts, not data."""
        import pyarrow.compute as pc

        if not pc.any(pc.match_substring(first_col, self.header[0])).as_py():
            return np.zeros(len(first_col), dtype=bool)  # the usual case: one pass, no copy
        cand = np.asarray(pc.equal(pc.utf8_trim_whitespace(first_col), self.header[0])
                          .to_numpy(zero_copy_only=False), dtype=bool)
        for k in np.flatnonzero(cand):
            line = data[starts[rows[k]]:ends[rows[k]]].decode("utf-8", errors="replace")
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
