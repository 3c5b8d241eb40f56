"""Pins of the vectorised CSV reader and column helpers that mutation testing found unpinned.

Mutation testing of ``importers/`` left these behaviours without a failing test: which files the
vectorised reader takes itself (LF and CR LF files, blank lines among the rows) and which it hands
to the row reader (bare carriage returns, with the reason in the debug log); the cut-off last line
of a CR LF file (dropped, with its warning naming the file and the line); the line numbers and
byte span of a header-only file; the field a line with too many cells names; and the shortcuts of
``arrow_values.distinct`` (when a mostly empty column takes its own path, its answer on columns
with nulls, plain arrays, sliced and empty chunks, and the int64 row index every path returns).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import arrow_values as av
from llm_powertrace_ds.importers.arrow_csv import ArrowCsvReader
from llm_powertrace_ds.importers.common import CsvReader

LOGGER = "llm_powertrace_ds.importers"


def _text(values, lines: np.ndarray) -> np.ndarray:  # noqa: ANN001 - a Converter
    """The cells as Python strings (an Arrow column or the row reader's tuple)."""
    cells = values.to_pylist() if isinstance(values, (pa.Array, pa.ChunkedArray)) else values
    return np.array([str(c) for c in cells], dtype=object)


CONVERTERS = {"a": (0, _text), "b": (1, _text)}


def _read(path: Path, reader_cls: type = ArrowCsvReader, cut_last: str = "drop"):  # noqa: ANN202
    with reader_cls(path, cut_last=cut_last) as reader:
        reader.read_header()
        table = reader.read(CONVERTERS)
    return table


def _shape(table) -> tuple:  # noqa: ANN001
    return (table.header, table.header_line, table.lines.tolist(), table.segments.tolist(),
            table.columns["a"].tolist(), table.columns["b"].tolist(), table.last_line)


def _fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and "row reader" in r.getMessage()]


# Lines of a log with blank lines among the rows: rows on lines 2, 4 and 7 of 7.
BODY = ["h1,h2", "1,a", "", "2,b", "", "", "3,c"]
WANT = (["h1", "h2"], 1, [2, 4, 7], [0, 0, 0], ["1", "2", "3"], ["a", "b", "c"], 7)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_lf_and_crlf_files_are_read_by_the_vectorised_path(tmp_path, caplog, newline):
    path = tmp_path / "log.csv"
    path.write_bytes((newline.join(BODY) + newline).encode())
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    assert _shape(_read(path)) == WANT
    assert _fallbacks(caplog) == []  # no row reader: blank CR LF lines are blank, not rows
    assert _shape(_read(path, CsvReader)) == WANT


def test_crlf_file_without_blank_lines_takes_the_vectorised_path(tmp_path, caplog):
    path = tmp_path / "log.csv"
    path.write_bytes(b"h1,h2\r\n1,a\r\n2,b\r\n")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    table = _read(path)
    assert _fallbacks(caplog) == []
    assert (table.lines.tolist(), table.columns["a"].tolist(), table.last_line) == \
        ([2, 3], ["1", "2"], 3)


@pytest.mark.parametrize("text", [
    "h1,h2\r1,a\r\r2,b\r\r\r3,c\r",  # bare CR line ends throughout (old Mac)
    "h1,h2\r\n1,a\r\n\r\n2,b\r\r\n\r\n3,c\r\n",  # one bare CR among CR LF ends
])
def test_bare_carriage_returns_go_to_the_row_reader(tmp_path, caplog, text):
    path = tmp_path / "log.csv"
    path.write_bytes(text.encode())
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    assert _shape(_read(path)) == WANT
    assert _fallbacks(caplog) == [f"{path}: row reader (bare carriage returns)"]


@pytest.mark.parametrize("text, rows", [
    ("h1,h2\r\n1,a\r\n2,b", [2]),
    ("h1,h2\r\n1,a\r\n\r\n2,b", [2]),  # a blank line before the cut-off one
])
def test_cut_off_last_line_of_a_crlf_file_is_dropped_with_a_warning(tmp_path, caplog, text, rows):
    path = tmp_path / "log.csv"
    path.write_bytes(text.encode())
    last = text.count("\n") + 1
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    table = _read(path)
    assert (table.lines.tolist(), table.columns["a"].tolist(), table.last_line) == \
        (rows, ["1"], last)
    warnings = [(r.name, r.levelno, r.getMessage()) for r in caplog.records
                if r.levelno >= logging.WARNING]
    assert warnings == [(LOGGER, logging.WARNING,
                         f"{path}: line {last} is cut off (a killed logger?); dropped it")]
    assert _fallbacks(caplog) == []
    caplog.clear()
    assert _shape(_read(path, CsvReader)) == _shape(table)


@pytest.mark.parametrize("data, want", [
    (b"h", ([], 0, 0, 1)),
    (b"h1,h2", ([], 0, 0, 1)),
    (b"h1,h2\n", ([], 0, 0, 1)),
    (b"\nh1,h2\n", ([], 0, 0, 2)),
])
def test_header_only_files_scan_to_no_rows(tmp_path, data, want):
    """``_scanned_lines`` returns what ``_plain_lines`` does: no rows, span (0, 0), the lines."""
    path = tmp_path / "log.csv"
    path.write_bytes(data)
    reader = ArrowCsvReader(path)
    reader.read_header()
    for got in (reader._scanned_lines(data, False), reader._plain_lines(data)):
        assert (got[0].tolist(), got[1], got[2], got[3]) == want
    reader.__exit__(None, None, None)


def test_crlf_header_only_file_scans_to_no_rows(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"h1,h2\r\n")
    with ArrowCsvReader(path) as reader:
        reader.read_header()
        got = reader._scanned_lines(path.read_bytes(), True)
        assert (got[0].tolist(), got[1], got[2], got[3]) == ([], 0, 0, 1)
        assert _shape(reader.read(CONVERTERS)) == (["h1", "h2"], 1, [], [], [], [], 1)


@pytest.mark.parametrize("reader_cls", [ArrowCsvReader, CsvReader])
@pytest.mark.parametrize("row, line, field, reason", [
    ("1,a,x", 3, "column 3", "the line has 3 fields, the header has 2"),
    ("1,a,x,y", 3, "column 3", "the line has 4 fields, the header has 2"),
    ("1", 3, "h2", "the line has 1 fields, the header has 2"),
])
def test_a_line_with_the_wrong_field_count_names_its_field(tmp_path, reader_cls, row, line,
                                                            field, reason):
    path = tmp_path / "log.csv"
    path.write_text(f"h1,h2\n0,z\n{row}\n2,b\n")
    with pytest.raises(InputError) as exc:
        _read(path, reader_cls)
    assert (exc.value.file, exc.value.line, exc.value.field, exc.value.reason) == \
        (str(path), line, field, reason)


# ---------------------------------------------------------------------------------------------
# arrow_values: distinct and its mostly-empty shortcut
# ---------------------------------------------------------------------------------------------

def _want(cells: list) -> tuple[list, list[int]]:
    """Levels in order of first appearance and each row's index into them."""
    first: dict = {}
    index = [first.setdefault(c, len(first)) for c in cells]
    return list(first), index


def _check(got, cells: list) -> None:  # noqa: ANN001
    levels, inverse = got
    assert inverse.dtype == np.int64
    assert (levels, inverse.tolist()) == _want(cells)


@pytest.mark.parametrize("cells, shortcut", [
    ([""] * 6 + ["a", "b"], True),  # 2 filled of 8: at the n // 4 bound, still the shortcut
    (["", "a", "", "", "", "b", "", "c"], False),  # 3 of 8: more than a quarter
    ([""], True),  # one empty cell
    ([""] * 3, True),  # nothing filled
    (["x"] * 4, False),  # everything filled
    (["a", "", "b"] + [""] * 6, True),  # 2 of 9 (n / 4 = 2.25)
    (["", "a"] + [""] * 8, True),  # 1 of 10 (n // 5 = 2, n // 4 = 2)
    (["a", "b", "a"] + [""] * 6, False),  # 3 of 9
])
@pytest.mark.parametrize("typ", [pa.string(), pa.binary()])
@pytest.mark.parametrize("chunked", [False, True])
def test_mostly_empty_shortcut_takes_columns_a_quarter_filled_or_less(cells, shortcut, typ,
                                                                       chunked):
    arr = pa.array(cells, type=typ)
    col = pa.chunked_array([arr]) if chunked else arr
    got = av._mostly_empty(col)
    if not shortcut:
        assert got is None
        return
    assert got is not None
    levels, inverse = got
    want_levels, want_index = _want(cells)
    assert [v.decode() if isinstance(v, bytes) else v for v in levels] == want_levels
    assert inverse.dtype == np.int64 and inverse.tolist() == want_index


def test_mostly_empty_levels_keep_the_order_of_first_appearance():
    cells = ["a", "b"] + [""] * 10
    assert av._mostly_empty(pa.array(cells)) is not None
    _check(av.distinct(pa.array(cells)), cells)
    _check(av._mostly_empty(pa.array(cells)), cells)
    cells = ["", "b", "a", "", "", "", "", "", "", "", "", "a"]
    _check(av._mostly_empty(pa.array(cells)), cells)


def test_mostly_empty_declines_columns_with_nulls_and_non_text():
    cells = ["", None, "", "", "", "", "", "x"]
    assert av._mostly_empty(pa.array(cells)) is None
    assert av._mostly_empty(pa.chunked_array([pa.array(cells)])) is None
    _check(av.distinct(pa.array(cells)), cells)  # a null is its own level, not ""
    assert av._mostly_empty(pa.array([0, 0, 0, 0, 0, 1])) is None


def test_mostly_empty_reads_sliced_chunks_to_their_end():
    base = pa.array(["", "", "", "", "", "", "", "q", "r", "s", "t", "u"])
    for chunk in (base.slice(0, 8), base.slice(1, 7)):
        cells = chunk.to_pylist()
        _check(av._mostly_empty(chunk), cells)
        _check(av.distinct(chunk), cells)
        _check(av._mostly_empty(pa.chunked_array([chunk, chunk])), cells + cells)


def test_mostly_empty_skips_empty_chunks():
    empty = pa.array([], pa.string())
    no_offsets = pa.Array.from_buffers(pa.string(), 0, [None, pa.py_buffer(b""),
                                                          pa.py_buffer(b"")])
    no_offsets.validate(full=True)  # a valid Arrow array: an empty one may have no offsets
    body = pa.array(["a"] + [""] * 7)
    for blank in (empty, no_offsets, pa.array(["zz"]).slice(1)):
        for chunks in ([blank, body], [body, blank], [blank, body, blank]):
            col = pa.chunked_array(chunks, type=pa.string())
            cells = col.to_pylist()
            _check(av._mostly_empty(col), cells)
            _check(av.distinct(col), cells)


@pytest.mark.parametrize("cells", [
    ["a", "b", "a", "c"],  # the hash pass
    ["b", None, "b", "a", None],
    ["r1"] * 3,  # one value
    ["", "", "", "", "", "", "", "k"],  # mostly empty
])
def test_every_distinct_path_gives_an_int64_row_index(cells):
    for col in (pa.array(cells, pa.string()), pa.chunked_array([cells[:2], cells[2:]],
                                                               pa.string())):
        _check(av.distinct(col), cells)
    levels, inverse = av._hashed(pa.array(cells, pa.string()))
    assert inverse.dtype == np.int64 and (levels, inverse.tolist()) == _want(cells)


def test_a_plain_number_first_column_is_imported_not_a_pyarrow_error(tmp_path):
    """nvidia-smi ``--format=csv,nounits`` with ``power.draw`` as the first column.

    The vectorised reader reads that column as float64; the repeated-header search must not run
    text kernels on it (it raised ``ArrowNotImplementedError: match_substring ... (double)``).
    """
    from llm_powertrace_ds.importers import import_file

    path = tmp_path / "nounits.csv"
    path.write_text("power.draw [W], timestamp, index, name\n"
                    "100.00, 2026/05/01 12:00:00.000, 0, NVIDIA H100 80GB HBM3\n"
                    "120.50, 2026/05/01 12:00:00.100, 0, NVIDIA H100 80GB HBM3\n"
                    "130.25, 2026/05/01 12:00:00.200, 0, NVIDIA H100 80GB HBM3\n")
    run = import_file("nvidia-smi", path, workload="inference")
    (device,) = run.devices
    assert device.power_w.tolist() == [100.0, 120.5, 130.25]
