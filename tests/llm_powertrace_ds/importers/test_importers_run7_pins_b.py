"""Pins of the importers that the seventh mutation run found unpinned (second half).

Mutation testing of ``importers/`` left these behaviours without a failing test: ``_plain`` of
a float column with an empty cell; ``_read_csv`` refusing a quoted empty cell in a number
column; ``_repeated_headers`` returning a bool mask (also for a null cell) and replacing an
invalid UTF-8 byte of a candidate line; ``_typed_columns`` judging the first row only (several
rows, a single unterminated row); ``float_view``'s error text; ``fixed_width_ms`` after an empty
chunk; ``numbers`` of empty and null cells; the default ``num_gpus`` of ``assemble_run``; the
row reader's ``skip`` answer for a blank row; a dmon log whose cut-off last line follows a
units line ending in ``XX``; ``apply_spec_power_limit`` with a run-level ``power_limit_w``; an
nvidia-smi import with ``--meta`` of a log whose sidecar name would be too long;
and the file named by ``import_file``'s missing-file error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import arrow_values as av
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.arrow_csv import ArrowCsvReader, _plain
from llm_powertrace_ds.importers.assemble import DeviceData, assemble_run, base_meta
from llm_powertrace_ds.importers.common import CsvReader
from llm_powertrace_ds.importers.dcgm import _parse
from llm_powertrace_ds.importers.enrich import apply_spec_power_limit
from llm_powertrace_ds.importers.nvidia_smi import import_nvidia_smi
from llm_powertrace_ds.importers.values import numeric_converter
from llm_powertrace_ds.run import DeviceSeries, Run


def _text(values, lines: np.ndarray) -> np.ndarray:  # noqa: ANN001 - a Converter
    """The cells as Python strings (an Arrow column or the row reader's tuple)."""
    cells = values.to_pylist() if isinstance(values, (pa.Array, pa.ChunkedArray)) else values
    return np.array([str(c) for c in cells], dtype=object)


# ---------------------------------------------------------------------------------------------
# ArrowCsvReader
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# arrow_values
# ---------------------------------------------------------------------------------------------

def test_float_view_error_names_the_type_and_nulls():
    with pytest.raises(ValueError) as exc:
        av.float_view(pa.array([1.0], pa.float32()))
    assert str(exc.value) == "a float64 array without nulls, not float with 0 nulls"


def test_fixed_width_goes_on_after_an_empty_chunk():
    col = pa.chunked_array([pa.array([], pa.string()), pa.array(["2024-01-01 00:00:00"]),
                            pa.array([], pa.string()), pa.array(["2024-01-01 00:00:01"])])
    got = av.fixed_width_ms(col)
    assert got is not None
    assert (got[0].tolist(), got[1]) == ([1704067200000, 1704067201000], False)


def test_numbers_of_empty_and_null_cells_are_nan():
    got = av.numbers(pa.array(["", None, ""]), None)
    assert got is not None
    assert np.isnan(got).tolist() == [True, True, True]


# ---------------------------------------------------------------------------------------------
# CsvReader
# ---------------------------------------------------------------------------------------------

def test_row_reader_classifies_a_blank_row_as_skip(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n\n1,a\n", encoding="utf-8")
    with CsvReader(path) as reader:
        reader.read_header()
        assert reader._classify([], 2) == "skip"
        assert reader._classify(["  "], 2) == "skip"
        assert reader._classify(["1", "a"], 2) == "data"


# ---------------------------------------------------------------------------------------------
# dcgm
# ---------------------------------------------------------------------------------------------

def test_dcgm_cut_off_line_after_a_units_line_ending_in_xx(tmp_path):
    path = tmp_path / "dmon.txt"
    path.write_text("#Entity POWER\nID W\nGPU 0 100\nGPU 0 101\nID XX\nXX", encoding="utf-8")
    assert _parse(path) == (["POWER"], {0: [(3, [100.0]), (4, [101.0])]})


# ---------------------------------------------------------------------------------------------
# assemble, enrich
# ---------------------------------------------------------------------------------------------

def _dev(gpu: int) -> DeviceData:
    ts = np.array([1_700_000_000_000, 1_700_000_000_100], np.int64)
    return DeviceData(gpu_index=gpu, ts_ms=ts, lines=np.array([2, 3], np.int64),
                      signals={"power_w": np.full(2, 100.0)})


def test_assemble_run_sets_num_gpus_to_three_devices(tmp_path):
    meta = base_meta("nvidia-smi", "inference")
    meta.update(run_id="r3", platform="l40s", power_field="instant", sample_period_ms=100.0)
    run = assemble_run([_dev(0), _dev(1), _dev(2)], meta, file=tmp_path / "x.csv")
    assert run.meta["num_gpus"] == 3
    assert 3 not in run.meta


def test_spec_power_limit_skipped_for_a_run_level_power_limit():
    dev = DeviceSeries(0, np.arange(3, dtype=np.int64) * 100, {"power_w": np.full(3, 100.0)})
    run = Run({"run_id": "r", "workload": "inference", "platform": "h100_sxm_80gb",
               "power_limit_w": 250.0}, [dev], [])
    assert apply_spec_power_limit(run) is False
    assert run.devices[0].default_power_limit_w is None
    assert "power_limit_from_spec" not in run.flags


# ---------------------------------------------------------------------------------------------
# nvidia-smi, import_file
# ---------------------------------------------------------------------------------------------

def test_meta_file_given_no_sidecar_is_probed(tmp_path):
    # a log name one byte short of the limit, whose sidecar name would be too long: with --meta
    # the import reads the given file (and a sidecar lookup would find none: test_long_names)
    path = tmp_path / ("g" * 242 + ".csv")
    path.write_text("timestamp,index,power.draw [W]\n"
                    "2024/04/03 10:55:35.000,0,100.00\n"
                    "2024/04/03 10:55:35.100,0,101.00\n"
                    "2024/04/03 10:55:35.200,0,102.00\n", encoding="utf-8")
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"concurrency": 8}), encoding="utf-8")
    run = import_nvidia_smi(path, workload="inference", meta_path=meta)
    assert run.meta["concurrency"] == 8
    assert run.devices[0].signals["power_w"].tolist() == [100.0, 101.0, 102.0]


def test_missing_dcgm_file_names_the_file(tmp_path):
    path = tmp_path / "dmon.txt"
    with pytest.raises(InputError) as exc:
        import_file("dcgm", path, workload="finetune")
    assert (exc.value.reason, exc.value.file, exc.value.line, exc.value.field) == (
        "no such file", str(path), None, None)
