"""Pins of the importers that the seventh mutation run found unpinned (batch c2).

Pins: ``_plain`` on float columns with nulls (a zero minimum, no NaN); the vectorised reader's
initial ``header_line``; a UTF-16 log with an unpaired surrogate and a UTF-8 BOM log read by the
vectorised reader; one cut-off warning when blank lines make ``_parse`` renumber the rows; the
``_Fallback`` raised (and its text) on a row count that differs from the line count of a CR file;
a repeated-header candidate holding an invalid byte in an unread column; ``_typed_columns``
looking at the first row only, and at the whole span of a single unterminated row; the row
reader's skipped spaces after a comma, its whitespace-only line, its int32 segments, its chunk
size and its empty-file error; the keys of a dcgm run's metadata; the file of a missing-file
error.
"""

from __future__ import annotations

import codecs
import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.arrow_csv import ArrowCsvReader, _Fallback, _plain
from llm_powertrace_ds.importers.common import CsvReader

from .test_dcgm import write_log
from .test_importers_run7_pins_b import _typed


def _text(values, lines: np.ndarray) -> np.ndarray:  # noqa: ANN001 - a Converter
    """The cells as Python strings (an Arrow column or the row reader's tuple)."""
    cells = values.to_pylist() if isinstance(values, (pa.Array, pa.ChunkedArray)) else values
    return np.array([str(c) for c in cells], dtype=object)


CONVERTERS = {"a": (0, _text), "b": (1, _text)}


def _read(path: Path, reader_cls: type = ArrowCsvReader, **kw):  # noqa: ANN202, ANN003
    with reader_cls(path) as reader:
        reader.read_header()
        return reader.read(CONVERTERS, **kw)


def _shape(table) -> tuple:  # noqa: ANN001
    return (table.lines.tolist(), table.segments.tolist(), table.columns["a"].tolist(),
            table.columns["b"].tolist())


# ---------------------------------------------------------------------------------------------
# ArrowCsvReader
# ---------------------------------------------------------------------------------------------

def test_plain_float_column_with_a_null_and_no_nan_is_plain():
    assert _plain(pa.chunked_array([[3.0, None, 7.5]])) is True


def test_plain_float_column_with_a_null_and_a_zero_minimum_is_plain():
    assert _plain(pa.chunked_array([[0.0, None, 2.0]])) is True


def test_vectorised_reader_header_line_starts_at_zero(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("\nh1,h2\n1,a\n", encoding="utf-8")
    reader = ArrowCsvReader(path)
    try:
        assert reader.header_line == 0
        reader.read_header()
        assert reader.header_line == 2
    finally:
        reader.__exit__(None, None, None)


def test_utf16_log_with_an_unpaired_surrogate_is_read_with_a_replacement(tmp_path):
    path = tmp_path / "log.csv"
    text = "h1,h2\n1,x\ud800y\n2,b\n"
    path.write_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le", errors="surrogatepass"))
    assert _shape(_read(path)) == ([2, 3], [0, 0], ["1", "2"], ["x\ufffdy", "b"])


def test_utf8_bom_log_is_read_by_the_vectorised_reader(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(codecs.BOM_UTF8 + b"h1,h2\n1,a\n2,b\n")
    assert _shape(_read(path)) == ([2, 3], [0, 0], ["1", "2"], ["a", "b"])


def test_cut_off_line_warned_once_when_blank_lines_renumber_rows(tmp_path, caplog):
    path = tmp_path / "log.csv"
    path.write_bytes(b"h1,h2\n1,a\n\n2,b\n3,c")
    with caplog.at_level(logging.DEBUG, logger="llm_powertrace_ds.importers"):
        table = _read(path)
    assert _shape(table) == ([2, 4], [0, 0], ["1", "2"], ["a", "b"])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"{path}: line 5 is cut off (a killed logger?); dropped it"]


def test_parse_of_a_cr_file_with_a_row_count_off_raises_fallback(tmp_path):
    path = tmp_path / "log.csv"
    data = b"h1,h2\r\n1,a\r\n"
    path.write_bytes(data)
    with ArrowCsvReader(path) as reader:
        reader.read_header()
        with pytest.raises(_Fallback) as exc:
            reader._parse(data, np.array([2, 3], np.int64), 7, 11, 2, CONVERTERS)
    assert str(exc.value) == "row count differs from the line count"


def test_candidate_header_with_an_invalid_byte_in_an_unread_column(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"h1,h2,h3\n1,a,x\nh1,h2,\xff\n2,b,y\n")
    table = _read(path)
    assert _shape(table) == ([2, 3, 4], [0, 0, 0], ["1", "h1", "2"], ["a", "h2", "b"])


def test_typed_columns_of_one_unterminated_row_reads_its_last_byte(tmp_path):
    assert _typed(tmp_path, b"1,5x", 0, 4) == {0}


def test_typed_columns_stop_at_the_first_newline(tmp_path):
    assert _typed(tmp_path, b"1,2\n3,4", 0, 7) == {0, 1}


# ---------------------------------------------------------------------------------------------
# CsvReader
# ---------------------------------------------------------------------------------------------

def test_row_reader_skips_spaces_after_a_comma(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,  x\n", encoding="utf-8")
    assert _shape(_read(path, CsvReader)) == ([2], [0], ["1"], ["x"])


def test_row_reader_skips_a_whitespace_only_line(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\n   \n2,b\n", encoding="utf-8")
    assert _shape(_read(path, CsvReader)) == ([2, 4], [0, 0], ["1", "2"], ["a", "b"])


def test_row_reader_segments_are_int32(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\nh1,h2\n2,b\n", encoding="utf-8")
    table = _read(path, CsvReader)
    assert (table.segments.dtype, table.segments.tolist()) == (np.dtype(np.int32), [0, 1])


def test_row_reader_converts_full_chunks_of_chunk_rows(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\n2,b\n3,c\n4,d\n5,e\n", encoding="utf-8")
    sizes: list[int] = []

    def conv(values, lines: np.ndarray) -> np.ndarray:  # noqa: ANN001
        sizes.append(len(lines))
        return np.asarray(values, dtype=object)

    with CsvReader(path) as reader:
        reader.read_header()
        table = reader.read({"a": (0, conv)}, chunk_rows=2)
    assert sizes == [2, 2, 1]
    assert table.columns["a"].tolist() == ["1", "2", "3", "4", "5"]


def test_row_reader_empty_file_error(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("\n\n", encoding="utf-8")
    with CsvReader(path) as reader, pytest.raises(InputError) as exc:
        reader.read_header()
    assert (exc.value.reason, exc.value.file, exc.value.line, exc.value.field) == (
        "the file is empty; expected a header line", str(path), 2, "header")


# ---------------------------------------------------------------------------------------------
# dcgm / import_file
# ---------------------------------------------------------------------------------------------

def test_dcgm_run_meta_has_start_time_and_no_other_start_key(tmp_path):
    path, meta = write_log(tmp_path, n=3, gpus=1)
    run = import_file("dcgm", path, workload="inference", meta_path=meta)
    assert sorted(k for k in run.meta if "start" in k.lower()) == ["start_time"]
    assert run.meta["start_time"].isoformat() == "2026-11-30T12:00:00+00:00"


def test_import_file_missing_file_names_it(tmp_path):
    path = tmp_path / "nope.csv"
    with pytest.raises(InputError) as exc:
        import_file("nvidia-smi", path, workload="inference")
    assert (exc.value.reason, exc.value.file, str(exc.value)) == (
        "no such file", str(path), f"'{path}': no such file")


def test_dcgm_meta_json_fixture_is_what_the_pins_assume(tmp_path):
    _, meta = write_log(tmp_path, n=3, gpus=1)
    assert json.loads(meta.read_text())["start_time"] == "2026-11-30T12:00:00Z"
