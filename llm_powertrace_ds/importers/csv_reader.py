"""The chunked CSV reader: encoding sniffing, line states, one table of string cells per chunk."""

from __future__ import annotations

import codecs
import csv
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa

from ..errors import InputError
from .meta_files import CHUNK_ROWS, log, one_line

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
