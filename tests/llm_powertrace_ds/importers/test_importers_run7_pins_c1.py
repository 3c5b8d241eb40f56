"""Pins of the importers that the seventh mutation run found unpinned (batch c1).

Mutation testing of ``importers/`` left these behaviours without a failing test: the int64
dtype of ``naive_ms`` with a null cell; ``constant`` refusing cells of different lengths whose
total is a multiple of the first width; the fixed-width timestamp path's edges (a minute
prefix that returns to an earlier one, a cell whose date bytes repeat the previous cell's time,
one fraction digit after a non-dot, a binary column, minute 60, leap years 2024 and 2000, the
first year 1678); ``naive_ms`` refusing a bare date; ``numbers`` of a never-filled column
as float64 NaN; ``float_view`` refusing float64 with nulls; ``distinct`` of a mostly empty
binary column; ``assemble_run``'s errors (label field, the file of a metadata error);
``apply_spec_power_limit`` for an unknown platform and a zero cap; and the SGLang result read
as UTF-8 whatever the default encoding; ``numeric_converter`` of no cells.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import arrow_values as av
from llm_powertrace_ds.importers.assemble import DeviceData, assemble_run, base_meta
from llm_powertrace_ds.importers.enrich import apply_spec_power_limit
from llm_powertrace_ds.importers.requests_sglang import read_sglang_requests
from llm_powertrace_ds.importers.values import numeric_converter
from llm_powertrace_ds.run import DeviceSeries, Event, Run


def _ms(text: str) -> int:
    return int(np.datetime64(text, "ms").astype(np.int64))


# ---------------------------------------------------------------------------------------------
# arrow_values
# ---------------------------------------------------------------------------------------------

def test_naive_ms_with_a_null_cell_is_int64():
    with np.errstate(invalid="ignore"):
        got = av.naive_ms(pa.array(["2024-01-01 00:00:00", None]))
    assert got.dtype == np.int64
    assert got[0] == _ms("2024-01-01T00:00:00")


def test_constant_refuses_cells_of_different_lengths():
    # 2 + 1 + 3 bytes = 3 rows of width 2, all "aa" if read as a matrix
    assert av.constant(pa.array(["aa", "a", "aaa"])) is None


def test_fixed_width_minute_returning_to_an_earlier_one():
    cells = ["2024-01-01 00:00:00", "2024-02-01 00:00:00", "2024-01-01 00:00:00"]
    got = av.fixed_width_ms(pa.array(cells))
    jan, feb = _ms("2024-01-01T00:00"), _ms("2024-02-01T00:00")
    assert got[0].tolist() == [jan, feb, jan]
    assert got[1] is False


def test_fixed_width_cell_repeating_the_previous_time_as_its_date():
    assert av.fixed_width_ms(pa.array(["2024-01-01 00:00:00", "01 00:0001 00:00:00"])) is None


def test_fixed_width_one_fraction_digit_needs_a_dot():
    assert av.fixed_width_ms(pa.array(["2024-01-01 00:00:00x5"])) is None
    got = av.fixed_width_ms(pa.array(["2024-01-01 00:00:00.5"]))
    assert got[0].tolist() == [_ms("2024-01-01T00:00:00.500")]


def test_fixed_width_refuses_a_binary_column():
    assert av.fixed_width_ms(pa.array([b"2024-01-01 00:00:00"], pa.binary())) is None


def test_fixed_width_refuses_minute_60():
    assert av.fixed_width_ms(pa.array(["2024-01-01 00:60:00"])) is None
    got = av.fixed_width_ms(pa.array(["2024-01-01 00:59:00"]))
    assert got[0].tolist() == [_ms("2024-01-01T00:59")]


@pytest.mark.parametrize("day", ["2024-02-29", "2000-02-29"])
def test_fixed_width_leap_day(day):
    got = av.fixed_width_ms(pa.array([f"{day} 12:00:00"]))
    assert got[0].tolist() == [_ms(f"{day}T12:00")]


@pytest.mark.parametrize("day", ["2024-04-31", "2023-02-29", "2100-02-29"])
def test_fixed_width_refuses_a_day_past_the_month(day):
    assert av.fixed_width_ms(pa.array([f"{day} 12:00:00"])) is None


def test_fixed_width_accepts_the_first_year():
    got = av.fixed_width_ms(pa.array(["1678-01-01 00:00:00"]))
    assert got[0].tolist() == [-9214560000000]


def test_naive_ms_refuses_a_bare_date():
    assert av.naive_ms(pa.array(["2024-01-01"])) is None


def test_numbers_of_a_never_filled_column_are_float_nan():
    got = av.numbers(pa.array(["", ""]), None)
    assert got.dtype == np.float64
    assert np.isnan(got).tolist() == [True, True]


def test_float_view_refuses_float64_with_nulls():
    with pytest.raises(ValueError) as exc:
        av.float_view(pa.array([1.0, None]))
    assert str(exc.value) == "a float64 array without nulls, not double with 1 nulls"


def test_distinct_of_a_mostly_empty_binary_column():
    levels, inverse = av.distinct(pa.array([b"", b"", b"", b"", b"", b"x"], pa.binary()))
    assert levels == ["", b"x"]
    assert isinstance(levels[0], str)
    assert inverse.tolist() == [0, 0, 0, 0, 0, 1]


# ---------------------------------------------------------------------------------------------
# assemble, enrich
# ---------------------------------------------------------------------------------------------

def _dev(gpu: int = 0) -> DeviceData:
    ts = np.array([1_700_000_000_000, 1_700_000_000_100], np.int64)
    return DeviceData(gpu_index=gpu, ts_ms=ts, lines=np.array([2, 3], np.int64),
                      signals={"power_w": np.full(2, 100.0)})


def _meta() -> dict:
    meta = base_meta("nvidia-smi", "inference")
    meta.update(run_id="r1", platform="l40s", power_field="instant", sample_period_ms=100.0)
    return meta


def test_assemble_run_checks_event_labels_under_the_field_label(tmp_path):
    path = tmp_path / "x.csv"
    events = [(1_700_000_000_000, Event(0, "stage", label="ask alice@example.com"))]
    with pytest.raises(InputError) as exc:
        assemble_run([_dev()], _meta(), file=path, events=events)
    assert (exc.value.file, exc.value.field) == (str(path), "label")


def test_assemble_run_metadata_error_names_the_file(tmp_path):
    path = tmp_path / "x.csv"
    meta = _meta()
    meta["bogus_key"] = "x"
    with pytest.raises(InputError) as exc:
        assemble_run([_dev()], meta, file=path)
    assert (exc.value.file, exc.value.field) == (str(path), "bogus_key")


def _run(platform: str | None = "l40s", **meta) -> Run:  # noqa: ANN003
    dev = DeviceSeries(0, np.arange(3, dtype=np.int64) * 100, {"power_w": np.full(3, 100.0)})
    return Run({"run_id": "r", "workload": "inference", "platform": platform, **meta}, [dev], [])


def test_spec_power_limit_of_an_unknown_platform_is_not_applied():
    run = _run("h100")
    assert apply_spec_power_limit(run) is False
    assert run.devices[0].default_power_limit_w is None
    assert "power_limit_from_spec" not in run.flags


def test_spec_power_limit_not_applied_under_a_zero_cap_setting():
    run = _run(power_limit_setting_w=0.0)
    assert apply_spec_power_limit(run) is False
    assert run.devices[0].default_power_limit_w is None
    assert "power_limit_from_spec" not in run.flags


# ---------------------------------------------------------------------------------------------
# SGLang requests
# ---------------------------------------------------------------------------------------------

def test_sglang_result_is_read_as_utf8_whatever_the_default_encoding(tmp_path, monkeypatch):
    path = tmp_path / "res.jsonl"
    path.write_bytes(b'{"x": 1}\n\xff\n')
    real = io.text_encoding
    monkeypatch.setattr(io, "text_encoding",
                        lambda enc, stacklevel=2: "latin-1" if enc is None else real(enc))
    with pytest.raises(InputError) as exc:
        read_sglang_requests(path)
    assert exc.value.reason.startswith("Failed to read: UnicodeDecodeError: ")
    assert (exc.value.file, exc.value.line, exc.value.field) == (str(path), None, None)


# ---------------------------------------------------------------------------------------------
# numeric_converter
# ---------------------------------------------------------------------------------------------

def test_numeric_converter_of_no_cells_is_an_empty_float_array(tmp_path):
    convert = numeric_converter(file=tmp_path / "x.csv", field="power.draw")
    got = convert((), np.zeros(0, np.int64))
    assert (got.dtype, got.shape) == (np.dtype(np.float64), (0,))
