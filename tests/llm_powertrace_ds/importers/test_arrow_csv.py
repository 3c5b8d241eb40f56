"""The vectorised CSV reader equals the row reader: same runs, same one-line errors.

Every file is imported twice — through ``ArrowCsvReader`` (the importers' default) and through
the row-by-row ``CsvReader`` — and the results must be identical: the same run (metadata,
timestamps, every signal, events) or the same ``InputError`` message (file, line, field).
Clean logs must take the vectorised path (the row reader is made to fail to prove it).

The readers' own rules too: which files the vectorised reader takes itself (LF and CR LF files,
blank lines among the rows) and which it hands to the row reader, with the reason in the debug
log (bare carriage returns, quoted cells, a short line); the cut-off last line (dropped, one
warning naming the file and the line); header lines, repeated headers and their segments (int32);
UTF-16 and BOM logs; the typed-column probe; the row reader's cells (quoted CR LF, spaces after
a comma, blank and whitespace-only lines) and chunks; missing, vanished and empty files; and
the encoding names ``sniff_encoding`` returns.
"""

from __future__ import annotations

import codecs
import datetime as dt
import logging
import math
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import arrow_csv, import_file
from llm_powertrace_ds.importers.arrow_csv import ArrowCsvReader, _Fallback, _plain
from llm_powertrace_ds.importers.common import CsvReader, sniff_encoding
from llm_powertrace_ds.importers.values import numeric_converter

from .test_malformed import PT_CELLS, SMI_CELLS, SMI_HEADER, fuzz_body
from .test_nvidia_smi import indexed_log, stamp, units_log
from .test_powertrace_csv import HEADER as PT_HEADER
from .test_powertrace_csv import their_json, trace_csv


class RowReader(arrow_csv.ArrowCsvReader):
    """The same interface, always the row-by-row reader."""

    def read(self, converters):  # noqa: ANN001, ANN201 - test double
        return self._rows.read(converters)


def outcome(fmt: str, path: Path, workload: str, row_reader: bool, **kw):  # noqa: ANN201
    with pytest.MonkeyPatch.context() as mp:
        if row_reader:
            mp.setattr("llm_powertrace_ds.importers.nvidia_smi.ArrowCsvReader", RowReader)
            mp.setattr("llm_powertrace_ds.importers.powertrace_csv.ArrowCsvReader", RowReader)
        try:
            return import_file(fmt, path, workload=workload, **kw)
        except InputError as exc:
            return str(exc)


def assert_same(fast, slow) -> None:  # noqa: ANN001
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
        return
    assert fast.meta == slow.meta
    assert [e.as_dict() for e in fast.events] == [e.as_dict() for e in slow.events]
    assert len(fast.devices) == len(slow.devices)
    for a, b in zip(fast.devices, slow.devices, strict=True):
        np.testing.assert_array_equal(a.t_ms, b.t_ms)
        assert a.signals.keys() == b.signals.keys()
        for key in a.signals:
            np.testing.assert_array_equal(a.signals[key], b.signals[key])
        assert (a.gpu_index, a.gpu_name, a.gpu_uuid_hash, a.power_limit_w) == \
            (b.gpu_index, b.gpu_name, b.gpu_uuid_hash, b.power_limit_w)


def both(fmt: str, path: Path, workload: str, **kw) -> None:
    assert_same(outcome(fmt, path, workload, False, **kw), outcome(fmt, path, workload, True, **kw))


def smi_shapes(tmp_path: Path) -> list[Path]:
    """Logs of every shape the importer accepts."""
    out = [indexed_log(tmp_path / "indexed.csv"), units_log(tmp_path / "units.csv", gpus=2,
                                                            skew_ms=2)]
    text = indexed_log(tmp_path / "base.csv").read_text()
    lines = text.splitlines()
    variants = {
        "crlf.csv": "\r\n".join(lines) + "\r\n",
        "blank-lines.csv": "\n\n" + "\n\n".join(lines) + "\n\n",
        "cut-off.csv": "\n".join(lines) + "\n" + lines[-1][:12],
        "no-final-newline.csv": "\n".join(lines),
        "appended.csv": "\n".join(lines) + "\n" + "\n".join(
            [lines[0]] + [ln.replace("2024/04/03 10:55", "2024/04/03 10:57") for ln in lines[1:]])
        + "\n",
        "na.csv": "\n".join(lines[:3] + [lines[3].replace(",1024", ",[N/A]")] + lines[4:]) + "\n",
        "spaces.csv": "\n".join(ln.replace(",", ", ") for ln in lines) + "\n",
    }
    for name, body in variants.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
        out.append(tmp_path / name)
    utf16 = tmp_path / "utf16.csv"
    utf16.write_text(text, encoding="utf-16")
    return [*out, utf16]


def test_every_smi_shape_is_the_same_run(tmp_path):
    for path in smi_shapes(tmp_path):
        both("nvidia-smi", path, "inference")
        both("nvidia-smi", path, "inference", tz="America/Phoenix")


def test_powertrace_csv_is_the_same_run(tmp_path):
    csv_path = trace_csv(tmp_path / "t.csv", ticks=30)
    meta = their_json(tmp_path / "t.json")
    both("powertrace-csv", csv_path, "finetune", meta_path=meta)


def test_clean_logs_take_the_vectorised_path(tmp_path, monkeypatch):
    def refuse(self, converters):  # noqa: ANN001, ANN202
        raise AssertionError("the row reader was used")

    monkeypatch.setattr(CsvReader, "read", refuse)
    for path in smi_shapes(tmp_path):
        if path.name not in ("crlf.csv",):
            import_file("nvidia-smi", path, workload="inference")
    csv_path = trace_csv(tmp_path / "t.csv", ticks=30)
    import_file("powertrace-csv", csv_path, workload="finetune", meta_path=their_json(
        tmp_path / "t.json"))
    # a quoted header (what pyarrow and pandas writers emit) does not cost the fast path
    lines = csv_path.read_text().splitlines()
    quoted = tmp_path / "quoted.csv"
    quoted.write_text(",".join(f'"{c}"' for c in lines[0].split(",")) + "\n"
                      + "\n".join(lines[1:]) + "\n")
    import_file("powertrace-csv", quoted, workload="finetune", meta_path=their_json(
        tmp_path / "t.json"))


def _compare(fmt: str, text: str, workload: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.csv"
        path.write_text(text, encoding="utf-8")
        both(fmt, path, workload)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from(SMI_CELLS), min_size=3, max_size=3), max_size=8),
       st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_fuzz_smi_same_outcome(rows, newline, final):
    body = newline.join(",".join(r) for r in rows) + (newline if final else "")
    _compare("nvidia-smi", SMI_HEADER + newline + body, "inference")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from(PT_CELLS), min_size=12, max_size=12), max_size=6))
def test_fuzz_powertrace_csv_same_outcome(rows):
    _compare("powertrace-csv", PT_HEADER + "\n" + fuzz_body(rows), "finetune")


def test_stamp_helper_is_nvidia_smi_format():
    assert stamp(0) == "2024/04/03 10:55:35.013"


# Fixed-width timestamps: the byte-matrix fast path gives the cast path's values, or declines.

def _cast_path(cells: list[str]):  # noqa: ANN202 - the general vectorised path
    import pyarrow as pa

    from llm_powertrace_ds.importers import arrow_values

    arr = pa.array(cells)
    utc = arrow_values.utc_z_ms(arr)
    if utc is not None:
        return utc, True
    local = arrow_values.naive_ms(arr)
    return None if local is None else (local, False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.datetimes(min_value=dt.datetime(1680, 1, 1),
                             max_value=dt.datetime(2260, 12, 31)),
                min_size=1, max_size=6),
       st.sampled_from([0, 1, 2, 3, 4, 6, 9]), st.sampled_from("T "), st.sampled_from("-/"),
       st.sampled_from(["", "Z"]), st.integers(0, 10**6))
def test_fixed_width_stamps_equal_the_cast_path(stamps, digits, sep, dash, zone, corrupt):
    import pyarrow as pa

    from llm_powertrace_ds.importers import arrow_values

    cells = []
    for t in stamps:
        text = t.strftime(f"%Y{dash}%m{dash}%d{sep}%H:%M:%S")
        if digits:
            text += "." + (t.strftime("%f") + "987")[:digits]
        cells.append(text + zone)
    if corrupt % 3 == 0:  # one byte replaced: the fast path must decline or agree
        row = corrupt % len(cells)
        pos = corrupt % len(cells[row])
        cells[row] = cells[row][:pos] + "0:-/ TZx."[corrupt % 9] + cells[row][pos + 1:]
    fast = arrow_values.fixed_width_ms(pa.array(cells))
    if corrupt % 3:
        assert fast is not None  # clean fixed-width stamps take the fast path
    if fast is not None:
        slow = _cast_path(cells)
        assert slow is not None
        assert fast[1] == slow[1]
        np.testing.assert_array_equal(fast[0], slow[0])


@pytest.mark.parametrize("cell", ["2023-02-29T10:00:00.000Z", "2024-13-01 10:00:00",
                                  "2024-12-31 24:00:00", "2024-12-31 23:59:60",
                                  "1900-02-29T00:00:00Z", " 2024-04-03 10:55:35",
                                  "2024-04-03T10:55:35+02:00", "2024-04-03T10:55:35.Z",
                                  "2024-04-03T10:55:35.1234567890Z"])
def test_fixed_width_stamps_decline_what_they_do_not_decide(cell):
    import pyarrow as pa

    from llm_powertrace_ds.importers import arrow_values

    assert arrow_values.fixed_width_ms(pa.array([cell])) is None


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1680, 1, 1), max_value=dt.datetime(2260, 12, 31)),
       st.integers(1, 400), st.sampled_from([100, 1000, 7_000]), st.sampled_from([0, 3, 6]),
       st.sampled_from(["", "Z"]), st.integers(0, 10**6))
def test_fixed_width_stamps_in_runs_of_one_minute(start, n, step_ms, digits, zone, corrupt):
    """Stamps sharing their minute in runs (parsed once per run) equal the cast path.

    A byte changed in any cell of a run, not only its first, is declined or agrees with it.
    """
    import pyarrow as pa

    from llm_powertrace_ds.importers import arrow_values

    cells = []
    for k in range(n):
        t = start + dt.timedelta(milliseconds=k * step_ms)
        text = t.strftime("%Y-%m-%dT%H:%M:%S")
        if digits:
            text += "." + t.strftime("%f")[:digits]
        cells.append(text + zone)
    if corrupt % 2 == 0:
        row = corrupt % n
        pos = corrupt % 16  # inside the minute prefix
        cells[row] = cells[row][:pos] + "0:-/ TZx9"[corrupt % 9] + cells[row][pos + 1:]
    arr = pa.array(cells)
    if n > 2 and corrupt % 5 == 0:
        arr = pa.chunked_array([arr[: n // 2], arr[n // 2:]])
    fast = arrow_values.fixed_width_ms(arr)
    if corrupt % 2:
        assert fast is not None
    if fast is not None:
        slow = _cast_path(cells)
        assert slow is not None
        assert fast[1] == slow[1]
        np.testing.assert_array_equal(fast[0], slow[0])


def test_non_ascii_file_is_the_same_run(tmp_path):
    """A non-ASCII file (parsed as validated strings) is the row reader's run, like an ASCII one.

    An ASCII file's cells are parsed as binary and viewed as strings; the label keeps its ä.
    """
    ascii_csv = trace_csv(tmp_path / "a.csv", stages=["warmup"] * 15 + ["train"] * 15)
    other = tmp_path / "b.csv"
    other.write_text(ascii_csv.read_text(encoding="utf-8").replace("train", "tr\u00e4in"),
                     encoding="utf-8")
    for path in (ascii_csv, other):
        both("powertrace-csv", path, "finetune")
    run = outcome("powertrace-csv", other, "finetune", False)
    assert [e.label for e in run.events if e.kind == "stage"] == ["warmup", "tr\u00e4in"]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 3), st.lists(st.text("ab,1", min_size=1, max_size=5), max_size=6),
       st.booleans(), st.sampled_from(["drop", "error"]))
def test_plain_line_numbers_equal_the_scanned_ones(blank_before, rows, final, cut_last):
    """The find-based line numbering of a file without CR or blank lines equals the numpy scan."""
    text = "\n" * blank_before + "h1,h2\n" + "\n".join(rows) + ("\n" if final and rows else "")
    if "\n\n" in text[blank_before:]:
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.csv"
        path.write_bytes(text.encode())
        reader = arrow_csv.ArrowCsvReader(path, cut_last=cut_last)
        reader.read_header()
        data = path.read_bytes()
        plain = reader._plain_lines(data)
        scanned = reader._scanned_lines(data, False)
    assert plain[0].tolist() == scanned[0].tolist()
    assert plain[3] == scanned[3]
    if len(plain[0]):
        assert plain[1:3] == scanned[1:3]
        assert data[plain[1]:plain[2]].decode().split("\n") == \
            text.split("\n")[plain[0][0] - 1:plain[0][-1]]


ODD_NUMBERS = ["-3", "nan", "-nan", "NaN", "inf", "-inf", "1e400", "", " 5", "5 W", "N/A",
               "[N/A]", "0x10", "1_000", "+2.5", ".5", "5."]


@pytest.fixture
def typed_parses(monkeypatch) -> list:
    """The sorted set of float64-typed columns of every ``read_csv`` the fast path makes."""
    calls: list = []
    real = arrow_csv.ArrowCsvReader._read_csv

    def spy(chunk, names, wanted, cell_type, typed):  # noqa: ANN001, ANN202
        calls.append(sorted(typed))
        return real(chunk, names, wanted, cell_type, typed)

    monkeypatch.setattr(arrow_csv.ArrowCsvReader, "_read_csv", staticmethod(spy))
    return calls


@pytest.mark.parametrize("cell", ODD_NUMBERS)
@pytest.mark.parametrize("column", [4, 5])  # power_w (must be >= 0), sm_clock_mhz
def test_numbers_parsed_by_arrow_equal_the_text_path(tmp_path, typed_parses, cell, column):
    """Columns Arrow's CSV parser reads as float64 give the row reader's values and errors."""
    path = trace_csv(tmp_path / "t.csv", ticks=30)
    lines = path.read_text().splitlines()
    cells = lines[40].split(",")
    cells[column] = cell
    lines[40] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    meta = their_json(tmp_path / "t.json")
    both("powertrace-csv", path, "finetune", meta_path=meta)
    assert typed_parses and column in typed_parses[0]  # the first row is plain: tried typed


def test_plain_columns_are_parsed_as_numbers_once(tmp_path, typed_parses):
    """A clean file is parsed once, its numeric columns as float64 by the CSV parser."""
    calls = typed_parses
    path = trace_csv(tmp_path / "t.csv", ticks=30)
    import_file("powertrace-csv", path, workload="finetune", meta_path=their_json(
        tmp_path / "t.json"))
    assert calls == [[3, 4, 5, 6, 7, 8, 10]]  # gpu_id and the signals; one parse
    calls.clear()
    import_file("nvidia-smi", units_log(tmp_path / "u.csv", gpus=2, skew_ms=2),
                workload="inference")
    assert calls == [[]]  # "250.00 W" cells: text at once, not parsed twice


@pytest.mark.parametrize("block_bytes", [256, 1000])
def test_many_arrow_chunks_are_the_same_run(tmp_path, monkeypatch, block_bytes):
    """Small parse blocks (a log larger than CSV_BLOCK_BYTES): every column in many chunks."""
    csv_path = trace_csv(tmp_path / "t.csv", ticks=200)
    meta = their_json(tmp_path / "t.json")
    one_chunk = outcome("powertrace-csv", csv_path, "finetune", False, meta_path=meta)
    monkeypatch.setattr(arrow_csv, "CSV_BLOCK_BYTES", block_bytes)
    chunks: list[int] = []
    real = arrow_csv.ArrowCsvReader._read_csv

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - spy
        table = real(*args, **kwargs)
        chunks.append(table.column(0).num_chunks)
        return table

    monkeypatch.setattr(arrow_csv.ArrowCsvReader, "_read_csv", staticmethod(counting))
    assert_same(outcome("powertrace-csv", csv_path, "finetune", False, meta_path=meta), one_chunk)
    assert_same(one_chunk, outcome("powertrace-csv", csv_path, "finetune", True, meta_path=meta))
    assert chunks and min(chunks) > 10  # the chunked paths really ran
    for path in smi_shapes(tmp_path):
        both("nvidia-smi", path, "inference")


LOGGER = "llm_powertrace_ds.importers"


def _text(values, lines: np.ndarray) -> np.ndarray:  # noqa: ANN001 - a Converter
    """The cells as Python strings (an Arrow column or the row reader's tuple)."""
    cells = values.to_pylist() if isinstance(values, (pa.Array, pa.ChunkedArray)) else values
    return np.array([str(c) for c in cells], dtype=object)


CONVERTERS = {"a": (0, _text), "b": (1, _text)}


def _read(path: Path, reader_cls: type = ArrowCsvReader, converters=CONVERTERS):  # noqa: ANN001, ANN202
    """The table ``reader_cls`` reads from ``path`` with ``converters`` (text cells by default)."""
    with reader_cls(path) as reader:
        reader.read_header()
        return reader.read(converters)


def _shape_with_header(table) -> tuple:  # noqa: ANN001
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
    assert _shape_with_header(_read(path)) == WANT
    assert _fallbacks(caplog) == []  # no row reader: blank CR LF lines are blank, not rows
    assert _shape_with_header(_read(path, CsvReader)) == WANT


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
    assert _shape_with_header(_read(path)) == WANT
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
    assert _shape_with_header(_read(path, CsvReader)) == _shape_with_header(table)


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
        assert _shape_with_header(reader.read(CONVERTERS)) == (["h1", "h2"], 1, [], [], [], [], 1)


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


def _shape(table) -> tuple:  # noqa: ANN001
    return (table.lines.tolist(), table.segments.tolist(), table.columns["a"].tolist(),
            table.columns["b"].tolist())


def test_header_line_is_zero_before_the_header_is_read(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\n", encoding="utf-8")
    with ArrowCsvReader(path) as reader:
        assert reader.header_line == 0
        assert reader.read_header() == ["h1", "h2"]
        assert reader.header_line == 1


@pytest.mark.parametrize("reader_cls", [ArrowCsvReader, CsvReader])
def test_segments_are_int32(tmp_path, reader_cls):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\nh1,h2\n2,b\n", encoding="utf-8")
    table = _read(path, reader_cls)
    assert _shape(table) == ([2, 4], [0, 1], ["1", "2"], ["a", "b"])
    assert table.segments.dtype == np.int32
    assert table.lines.dtype == np.int64


def test_utf16_log_with_an_unpaired_surrogate_is_read_with_a_replacement(tmp_path):
    path = tmp_path / "log.csv"
    body = "h1,h2\n1,a\ud800\n2,b\n".encode("utf-16-le", errors="surrogatepass")
    path.write_bytes(codecs.BOM_UTF16_LE + body)
    assert _shape(_read(path)) == ([2, 3], [0, 0], ["1", "2"], ["a\ufffd", "b"])


def test_repeated_header_whose_last_cell_ends_in_x(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("id,X\n1,2\nid,X\n3,4\n", encoding="utf-8")
    assert _shape(_read(path)) == ([2, 4], [0, 1], ["1", "3"], ["2", "4"])


def test_row_reader_keeps_a_quoted_crlf_as_written(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b'h1,h2\r\n1,"a\r\nb"\r\n2,c\r\n')
    assert _shape(_read(path, CsvReader)) == ([3, 4], [0, 0], ["1", "2"], ["a\r\nb", "c"])


def test_row_reader_skips_spaces_after_a_comma(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text('h1,h2\n1,  a\n2, "b,c"\n', encoding="utf-8")
    assert _shape(_read(path, CsvReader)) == ([2, 3], [0, 0], ["1", "2"], ["a", "b,c"])


def test_row_reader_reads_a_line_of_empty_cells_as_a_row(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n,\n1,a\n", encoding="utf-8")
    assert _shape(_read(path, CsvReader)) == ([2, 3], [0, 0], ["", "1"], ["", "a"])


def test_plain_accepts_a_float_column_with_an_empty_cell():
    assert _plain(pa.chunked_array([[1.0, None, 2.5]])) is True
    assert _plain(pa.chunked_array([[-1.0, None]])) is False


def test_read_csv_refuses_a_quoted_empty_cell_in_a_number_column():
    with pytest.raises(pa.ArrowInvalid, match="invalid value ''"):
        ArrowCsvReader._read_csv(pa.py_buffer(b'"",1\n2,3\n'), ["f0", "f1"], [0, 1],
                                 pa.string(), {0})
    table = ArrowCsvReader._read_csv(pa.py_buffer(b',1\n2,3\n'), ["f0", "f1"], [0, 1],
                                     pa.string(), {0})
    assert table.column("f0").to_pylist() == [None, 2.0]
    assert table.column("f1").to_pylist() == ["1", "3"]


def test_repeated_headers_is_a_bool_mask_with_a_null_cell(tmp_path):
    path = tmp_path / "log.csv"
    data = b"h1,h2\nh1,h2\n,\nx,1\n"
    path.write_bytes(data)
    with ArrowCsvReader(path) as reader:
        reader.read_header()
        got = reader._repeated_headers(pa.chunked_array([["h1", None, "x"]]), data,
                                       np.array([2, 3, 4], np.int64))
    assert got.dtype == np.bool_
    assert got.tolist() == [True, False, False]


def test_candidate_header_line_with_an_invalid_byte_is_a_data_row(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"h1,h2,h3\n1,2,3\nh1,h2,\xff\n4,5,6\n")
    with ArrowCsvReader(path) as reader:
        reader.read_header()
        table = reader.read({"a": (0, _text), "b": (1, _text)})
    assert (table.lines.tolist(), table.segments.tolist()) == ([2, 3, 4], [0, 0, 0])
    assert table.columns["a"].tolist() == ["1", "h1", "4"]
    assert table.columns["b"].tolist() == ["2", "h2", "5"]


def _typed(tmp_path: Path, data: bytes, lo: int, hi: int) -> set[int]:
    path = tmp_path / "log.csv"
    path.write_bytes(data)
    conv = numeric_converter(file=path, field="x")
    with ArrowCsvReader(path) as reader:
        return reader._typed_columns(data, lo, hi, {"a": (0, conv), "b": (1, conv)})


def test_typed_columns_read_the_first_row_only(tmp_path):
    data = b"h1,h2\n1,2\n3,4\n"
    assert _typed(tmp_path, data, 6, 13) == {0, 1}


def test_typed_columns_of_a_single_unterminated_row(tmp_path):
    data = b"h1,h2\n1,2x"
    assert _typed(tmp_path, data, 6, 10) == {0}


def test_row_reader_classifies_a_blank_row_as_skip(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n\n1,a\n", encoding="utf-8")
    with CsvReader(path) as reader:
        reader.read_header()
        assert reader._classify([], 2) == "skip"
        assert reader._classify(["  "], 2) == "skip"
        assert reader._classify(["1", "a"], 2) == "data"


def test_plain_float_column_with_a_null_and_no_nan_is_plain():
    assert _plain(pa.chunked_array([[3.0, None, 7.5]])) is True


def test_plain_float_column_with_a_null_and_a_zero_minimum_is_plain():
    assert _plain(pa.chunked_array([[0.0, None, 2.0]])) is True


def test_header_line_counts_the_blank_lines_before_the_header(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("\nh1,h2\n1,a\n", encoding="utf-8")
    reader = ArrowCsvReader(path)
    try:
        assert reader.header_line == 0
        reader.read_header()
        assert reader.header_line == 2
    finally:
        reader.__exit__(None, None, None)


def test_utf16_log_with_an_unpaired_surrogate_inside_a_cell_is_read_with_a_replacement(tmp_path):
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


def test_row_reader_skips_a_whitespace_only_line(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\n   \n2,b\n", encoding="utf-8")
    assert _shape(_read(path, CsvReader)) == ([2, 4], [0, 0], ["1", "2"], ["a", "b"])


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


READERS = [ArrowCsvReader, CsvReader]


def _shape_with_last_line(table) -> tuple:  # noqa: ANN001
    return (table.lines.tolist(), table.segments.tolist(), table.columns["a"].tolist(),
            table.columns["b"].tolist(), table.last_line)


@pytest.mark.parametrize("reader_cls", READERS)
def test_negative_after_an_empty_cell_is_quoted_as_written(tmp_path, reader_cls):
    # an empty cell, then a negative one: the float64 parse is not "plain", so the text path
    # decides the column and the error quotes the cell's own text (not the float -1.5)
    path = tmp_path / "log.csv"
    path.write_text("a,p\nx,\ny,-1.50\nz,2\n")
    conv = {"p": (1, numeric_converter(file=path, field="p", nonnegative=True))}
    with pytest.raises(InputError) as err:
        _read(path, reader_cls, conv)
    e = err.value
    assert (e.reason, e.file, e.line, e.field) == ("value '-1.50' is negative", str(path), 3, "p")


@pytest.mark.parametrize("reader_cls", READERS)
def test_empty_then_plain_numbers_read_as_nan_then_values(tmp_path, reader_cls):
    path = tmp_path / "log.csv"
    path.write_text("a,p\nx,\ny,1.50\nz,0\n")
    conv = {"p": (1, numeric_converter(file=path, field="p", nonnegative=True))}
    table = _read(path, reader_cls, conv)
    got = table.columns["p"].tolist()
    assert math.isnan(got[0]) and got[1:] == [1.5, 0.0]
    assert table.lines.tolist() == [2, 3, 4]


def test_quote_in_a_dropped_cut_off_line_keeps_the_vectorised_path(tmp_path, caplog):
    path = tmp_path / "log.csv"
    path.write_bytes(b'h1,h2\n1,a\n2,b\n3,"c')  # the cut-off last line has the only quote
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    table = _read(path, ArrowCsvReader)
    assert _shape_with_last_line(table) == ([2, 3], [0, 0], ["1", "2"], ["a", "b"], 4)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert not [m for m in messages if "row reader" in m]
    assert [m for m in messages if "cut off" in m] == \
        [f"{path}: line 4 is cut off (a killed logger?); dropped it"]
    caplog.clear()
    assert _shape_with_last_line(_read(path, CsvReader)) == ([2, 3], [0, 0], ["1", "2"], ["a", "b"], 4)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == \
        [f"{path}: line 4 is cut off (a killed logger?); dropped it"]


def test_quoted_cells_go_to_the_row_reader_with_the_reason(tmp_path, caplog):
    path = tmp_path / "log.csv"
    path.write_bytes(b'h1,h2\n1,"a"\n2,b\n')
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    assert _shape_with_last_line(_read(path, ArrowCsvReader)) == ([2, 3], [0, 0], ["1", "2"], ["a", "b"], 3)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == \
        [f"{path}: row reader (quoted cells)"]


@pytest.mark.parametrize("reader_cls", READERS)
def test_a_missing_file_is_an_input_error(tmp_path, reader_cls):
    path = tmp_path / "missing.csv"
    with pytest.raises(InputError) as err:
        reader_cls(path)
    e = err.value
    assert (e.reason, e.file, e.line, e.field) == \
        ("cannot read the file (No such file or directory)", str(path), None, None)


def test_a_file_gone_before_the_vectorised_read_is_an_input_error(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\n")
    with ArrowCsvReader(path) as reader:
        reader.read_header()
        path.unlink()
        with pytest.raises(InputError) as err:
            reader.read(CONVERTERS)
    e = err.value
    assert (e.reason, e.file, e.line) == \
        ("cannot read the file (No such file or directory)", str(path), None)


@pytest.mark.parametrize("reader_cls", READERS)
def test_repeated_header_in_a_one_value_first_column(tmp_path, reader_cls):
    # a run-id column whose every cell equals the header's first cell: the repeated header
    # line (line 3) is still a segment start, not data
    path = tmp_path / "log.csv"
    path.write_text("run,p\nrun,1\nrun,p\nrun,2\n")
    assert _shape_with_last_line(_read(path, reader_cls)) == ([2, 4], [0, 1], ["run", "run"], ["1", "2"], 4)


@pytest.mark.parametrize("reader_cls", READERS)
def test_each_repeated_header_starts_the_next_segment(tmp_path, reader_cls):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\nh1,h2\n2,b\nh1,h2\n3,c\nh1,h2\n4,d\n")
    assert _shape_with_last_line(_read(path, reader_cls)) == \
        ([2, 4, 6, 8], [0, 1, 2, 3], ["1", "2", "3", "4"], ["a", "b", "c", "d"], 8)


def test_row_reader_header_is_empty_before_read_header(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\n")
    with CsvReader(path) as reader:
        assert reader.header == [] and reader.header_line == 0
        assert reader.read_header() == ["h1", "h2"]


@pytest.mark.parametrize("reader_cls", READERS)
def test_header_only_file_gives_empty_columns(tmp_path, reader_cls):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n")
    table = _read(path, reader_cls)
    for name in ("a", "b"):
        assert table.columns[name].shape == (0,)
    assert (table.lines.tolist(), table.segments.tolist(), table.last_line) == ([], [], 1)
    assert (table.lines.dtype, table.segments.dtype) == (np.int64, np.int32)


def test_sniff_encoding_names(tmp_path):
    plain = tmp_path / "plain.csv"
    plain.write_bytes(b"h1,h2\n1,a\n")
    wide = tmp_path / "wide.csv"
    wide.write_bytes("h1,h2\n1,a\n".encode("utf-16"))  # with its byte-order mark
    assert sniff_encoding(plain) == "utf-8-sig"
    assert sniff_encoding(tmp_path / "missing.csv") == "utf-8-sig"
    assert sniff_encoding(wide) == "utf-16"


def test_invalid_utf8_in_an_unread_column_keeps_the_vectorised_path(tmp_path, caplog):
    path = tmp_path / "log.csv"
    path.write_bytes(b"h1,h2,h3\n1,a,\xff\n2,b,c\n")  # only h1 and h2 are converted
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    assert _shape_with_last_line(_read(path, ArrowCsvReader)) == ([2, 3], [0, 0], ["1", "2"], ["a", "b"], 3)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == []


def test_a_short_line_falls_back_with_the_parser_reason_then_names_the_field(tmp_path, caplog):
    path = tmp_path / "log.csv"
    path.write_bytes(b"h1,h2\n1,a\n2\n3,c\n")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with pytest.raises(InputError) as err:
        _read(path, ArrowCsvReader)
    e = err.value
    assert (e.reason, e.file, e.line, e.field) == \
        ("the line has 1 fields, the header has 2", str(path), 3, "h2")
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 1
    assert messages[0].startswith(f"{path}: row reader (CSV parse error: ")
    assert "Expected 2 columns, got 1" in messages[0]


def test_an_oversized_field_names_the_file_and_line(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1," + "a" * 140_000 + "\n")
    with pytest.raises(InputError) as err:
        _read(path, CsvReader)
    e = err.value
    assert (e.file, e.line) == (str(path), 2)
    assert e.reason.startswith("not a readable CSV line (field larger than field limit")
