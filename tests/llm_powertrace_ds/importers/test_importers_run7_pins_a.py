"""Pins of the importers that the seventh mutation run found unpinned (first half).

Mutation testing of ``importers/`` left these behaviours without a failing test: the readers'
initial ``header_line`` and the int32 dtype of ``Table.segments`` (vectorised and row reader);
a UTF-16 log with an unpaired surrogate (replaced, not an error); a repeated header whose last
cell ends in ``X``; the row reader's exact cells (a quoted CR LF kept as written, spaces after a
comma skipped, a line of empty cells is a data row); the fixed-width timestamp path's edges
(a non-digit second, minutes in one run, the year range, 29 February of a leap year); int64
from ``naive_ms`` with a null cell; an empty first chunk in ``_to_float``; ``distinct`` of a
binary column; the assembly helpers (1 ms steps increase, a declared GPU count equal to the
devices found, the 1 s average read from the platform slug, the platform error's text, the
device keys popped from the metadata, event labels checked under the field ``label``, the
default ``num_gpus``); ``apply_spec_power_limit``'s answers; the request CSV read as UTF-8
whatever the locale; and the message of a missing file.
"""

from __future__ import annotations

import codecs
import io
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import arrow_values as av
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.arrow_csv import ArrowCsvReader
from llm_powertrace_ds.importers.assemble import (
    DeviceData,
    assemble_run,
    base_meta,
    check_increasing,
    finish_meta,
    is_1s_average,
    resolve_platform,
    split_device_meta,
)
from llm_powertrace_ds.importers.common import CsvReader
from llm_powertrace_ds.importers.enrich import apply_spec_power_limit
from llm_powertrace_ds.importers.requests_csv import read_csv_requests
from llm_powertrace_ds.run import DeviceSeries, Run

from .test_powertrace_csv import trace_csv


def _text(values, lines: np.ndarray) -> np.ndarray:  # noqa: ANN001 - a Converter
    """The cells as Python strings (an Arrow column or the row reader's tuple)."""
    cells = values.to_pylist() if isinstance(values, (pa.Array, pa.ChunkedArray)) else values
    return np.array([str(c) for c in cells], dtype=object)


CONVERTERS = {"a": (0, _text), "b": (1, _text)}


def _read(path: Path, reader_cls: type = ArrowCsvReader):  # noqa: ANN202
    with reader_cls(path) as reader:
        reader.read_header()
        return reader.read(CONVERTERS)


def _shape(table) -> tuple:  # noqa: ANN001
    return (table.lines.tolist(), table.segments.tolist(), table.columns["a"].tolist(),
            table.columns["b"].tolist())


# ---------------------------------------------------------------------------------------------
# ArrowCsvReader / CsvReader
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# arrow_values
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cell", ["2024-01-01 00:00:0:", "2024-01-01 00:00::0",
                                  "2024-01-01 00:00:00.0:"])
def test_fixed_width_refuses_a_colon_among_the_second_digits(cell):
    assert av.fixed_width_ms(pa.array([cell])) is None


def test_fixed_width_parses_each_minute_of_a_column():
    got = av.fixed_width_ms(pa.array(["2024-01-01 00:00:00", "2024-01-01 00:01:00",
                                      "2024-01-01 01:01:00", "2024-01-01 01:01:30"]))
    assert got is not None
    assert (got[0].tolist(), got[1]) == (
        [1704067200000, 1704067260000, 1704070860000, 1704070890000], False)


@pytest.mark.parametrize("cell", ["2262-01-01 00:00:00", "1677-12-31 23:59:59",
                                  "2024-13-01 00:00:00", "2024-00-01 00:00:00"])
def test_fixed_width_refuses_years_and_months_out_of_range(cell):
    assert av.fixed_width_ms(pa.array([cell])) is None


def test_fixed_width_accepts_29_february_of_a_leap_year():
    got = av.fixed_width_ms(pa.array(["2024-02-29 00:00:00", "2024-02-28 00:00:00"]))
    assert got is not None
    assert got[0].tolist() == [1709164800000, 1709078400000]
    assert av.fixed_width_ms(pa.array(["2023-02-29 00:00:00"])) is None


def test_naive_ms_returns_int64_with_a_null_cell():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = av.naive_ms(pa.array(["2024-01-01 00:00:00", None]))
    assert got is not None
    assert got.dtype == np.int64
    assert int(got[0]) == 1704067200000


def test_to_float_skips_an_empty_first_chunk():
    col = pa.chunked_array([pa.array([], pa.float64()), pa.array([1.25, 2.5]),
                            pa.array([], pa.float64()), pa.array([None, 7.5])])
    got = av._to_float(col)
    assert np.array_equal(got, np.array([1.25, 2.5, np.nan, 7.5]), equal_nan=True)
    assert av.numbers(col, None).tolist()[:2] == [1.25, 2.5]


def test_distinct_of_a_constant_binary_column_is_text():
    levels, index = av.distinct(pa.array([b"a", b"a", b"a"], pa.binary()))
    assert levels == ["a"]
    assert index.tolist() == [0, 0, 0]


# ---------------------------------------------------------------------------------------------
# assemble
# ---------------------------------------------------------------------------------------------

def _dev(ts: list[int], **kw) -> DeviceData:  # noqa: ANN003
    n = len(ts)
    return DeviceData(gpu_index=kw.pop("gpu_index", 0), ts_ms=np.asarray(ts, np.int64),
                      lines=np.arange(2, n + 2, dtype=np.int64),
                      signals={"power_w": np.full(n, 100.0)}, **kw)


def test_one_millisecond_steps_increase(tmp_path):
    check_increasing(_dev([0, 1, 2]), file=tmp_path / "x.csv")
    with pytest.raises(InputError) as exc:
        check_increasing(_dev([0, 1, 1]), file=tmp_path / "x.csv")
    assert (exc.value.line, exc.value.field) == (4, "timestamp")


def test_declared_gpu_count_equal_to_the_log_is_no_mismatch(tmp_path):
    meta = {"num_gpus": 2, "power_field": "instant", "gpu_name": "NVIDIA L40S"}
    flags = finish_meta([_dev([0, 100]), _dev([0, 100], gpu_index=1)], meta, platform=None,
                        num_gpus=None, file=tmp_path / "x.csv")
    assert flags == []
    assert (meta["num_gpus"], meta["platform"]) == (2, "l40s")
    meta = {"num_gpus": 1, "power_field": "instant", "gpu_name": "NVIDIA L40S"}
    flags = finish_meta([_dev([0, 100]), _dev([0, 100], gpu_index=1)], meta, platform=None,
                        num_gpus=None, file=tmp_path / "x.csv")
    assert flags == ["gpu_count_mismatch"]
    assert meta["num_gpus"] == 2


def test_one_second_average_read_from_the_platform_slug():
    assert is_1s_average("power_usage", None, "h100_sxm") is True
    assert is_1s_average("power_usage", None, "a100_sxm") is False
    assert is_1s_average("instant", None, "h100_sxm") is False


def test_bad_platform_error_quotes_the_split_rule():
    with pytest.raises(InputError) as exc:
        resolve_platform("bad platform!", None)
    assert exc.value.field == "platform"
    assert exc.value.reason.startswith("platform 'bad platform!' is not a valid split name")


def test_split_device_meta_pops_every_device_key():
    meta = {"gpu_name": "NVIDIA L40S", "power_limit_w": 300.0, "default_power_limit_w": 350.0,
            "run_id": "r"}
    assert split_device_meta(meta) == {"gpu_name": "NVIDIA L40S", "power_limit_w": 300.0,
                                       "default_power_limit_w": 350.0}
    assert meta == {"run_id": "r"}


def test_stage_label_is_checked_under_the_field_label(tmp_path):
    stages = ["warmup", "ask alice@example.com", "eval"]
    path = trace_csv(tmp_path / "t.csv", gpus=1, ticks=3, stages=stages)
    with pytest.raises(InputError) as exc:
        import_file("powertrace-csv", path, workload="finetune")
    assert exc.value.field == "label"
    assert exc.value.reason.startswith("value 'ask alice@example.com' ")


def _assembled_meta() -> dict:
    meta = base_meta("nvidia-smi", "inference")
    meta.update(run_id="r1", platform="l40s", power_field="instant", sample_period_ms=100.0)
    return meta


def test_assemble_run_defaults_num_gpus_to_the_devices(tmp_path):
    devs = [_dev([1_700_000_000_000, 1_700_000_000_100]),
            _dev([1_700_000_000_000, 1_700_000_000_100], gpu_index=1)]
    run = assemble_run(devs, _assembled_meta(), file=tmp_path / "x.csv")
    assert run.meta["num_gpus"] == 2


# ---------------------------------------------------------------------------------------------
# enrich
# ---------------------------------------------------------------------------------------------

def _run(platform: str = "l40s", **meta) -> Run:  # noqa: ANN003
    dev = DeviceSeries(0, np.arange(3, dtype=np.int64) * 100, {"power_w": np.full(3, 100.0)})
    return Run({"run_id": "r", "workload": "inference", "platform": platform, **meta}, [dev], [])


def test_spec_power_limit_applies_without_any_limit():
    run = _run()
    assert apply_spec_power_limit(run) is True
    assert run.devices[0].default_power_limit_w == 350.0


@pytest.mark.parametrize("meta", [{"power_limit_setting_w": 300.0},
                                  {"power_limit_w": 300.0},
                                  {"power_limit_setting_w": 0.0, "power_limit_w": None}])
def test_spec_power_limit_is_not_applied_when_the_run_sets_a_limit(meta):
    run = _run(**meta)
    assert apply_spec_power_limit(run) is False
    assert run.devices[0].default_power_limit_w is None


def test_spec_power_limit_is_not_applied_when_a_device_reports_one():
    run = _run()
    run.devices[0].power_limit_w = 280.0
    assert apply_spec_power_limit(run) is False
    assert run.devices[0].default_power_limit_w is None


# ---------------------------------------------------------------------------------------------
# requests CSV, import_file
# ---------------------------------------------------------------------------------------------

def test_request_csv_is_utf8_whatever_the_default_encoding(tmp_path, monkeypatch):
    path = tmp_path / "req.csv"
    path.write_text("arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens,"
                    "request_id,status\n1.0,1.5,2.0,10,5,r\u00e9q-1,ok\n", encoding="utf-8")
    real = io.text_encoding
    monkeypatch.setattr(io, "text_encoding",
                        lambda enc, stacklevel=2: "latin-1" if enc is None else real(enc))
    got = read_csv_requests(path)
    assert [(r.request_id, r.status) for r in got.requests] == [("r\u00e9q-1", "ok")]


def test_missing_file_message(tmp_path):
    path = tmp_path / "nope.csv"
    with pytest.raises(InputError) as exc:
        import_file("nvidia-smi", path, workload="inference")
    assert (exc.value.reason, exc.value.file, exc.value.line, exc.value.field) == (
        "no such file", str(path), None, None)


class _Float64Ext(pa.ExtensionType):
    """An extension type over float64: ``to_numpy`` gives a read-only zero-copy view."""

    def __init__(self) -> None:
        super().__init__(pa.float64(), "run7.float64")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):  # noqa: ANN001, ANN206
        return cls()


def test_to_float_of_a_read_only_view_is_a_writable_copy():
    col = pa.ExtensionArray.from_storage(_Float64Ext(), pa.array([1.5, 2.5]))
    got = av._to_float(col)
    assert got.tolist() == [1.5, 2.5]
    assert got.flags.writeable is True
