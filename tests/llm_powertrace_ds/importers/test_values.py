"""The column converters (``importers.values``): null tokens, units, flags and their errors.

The null tokens; the one-line errors of each converter (reason, file, line and field of each
``InputError``, the earliest bad row winning); decimal versus hex clock-event bitmasks; the
``Active``/``Not Active`` flags; units and the negative check on both the plain (Python list)
and the vectorised (``pyarrow``) paths; and the codes and levels of the ``Factorizer``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.values import (
    TYPED_ATTR,
    Factorizer,
    active_converter,
    is_null_token,
    numeric_converter,
    reasons_converter,
)

FILE = Path("/data/gpu.csv")
FIELD = "power.draw"


def lines_of(values: list[str], first: int = 2) -> np.ndarray:
    """1-based line numbers of the cells, the header being line ``first - 1``."""
    return np.arange(first, first + len(values), dtype=np.int64)


def as_list(values: list[str]) -> list[str]:
    return list(values)


def as_arrow(values: list[str]) -> pa.Array:
    return pa.array(values, pa.string())


def as_chunked(values: list[str]) -> pa.ChunkedArray:
    half = len(values) // 2
    return pa.chunked_array([pa.array(values[:half], pa.string()),
                             pa.array(values[half:], pa.string())])


SHAPES = pytest.mark.parametrize("shape", [as_list, as_arrow, as_chunked],
                                 ids=["list", "arrow", "chunked"])


def raises(convert, values: list[str], first: int = 2) -> InputError:
    with pytest.raises(InputError) as exc:
        convert(values, lines_of(values, first))
    return exc.value


def same(a: np.ndarray, b: list[float]) -> None:
    """Equal values with NaN where NaN is expected, as float64."""
    assert a.dtype == np.float64
    np.testing.assert_array_equal(a, np.array(b, dtype=np.float64))


# ---------------------------------------------------------------------------------------------
# Null tokens
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "n/a", "N/A", " NA ", "nan", "NaN", "None", "NULL",
                                  "unknown", "Unknown", "[N/A]", "[Not Supported]", " [x] ",
                                  "[]", "[Unknown Error]"])
def test_null_tokens(text):
    assert is_null_token(text) is True


@pytest.mark.parametrize("text", ["0", "-", "[", "]", "x]", "[x", "n/a/", "nil", "N/A W",
                                  "unknownx", "0x0", "Not Active", "[N/A] W"])
def test_not_null_tokens(text):
    assert is_null_token(text) is False


# ---------------------------------------------------------------------------------------------
# numeric_converter
# ---------------------------------------------------------------------------------------------


@SHAPES
def test_numbers_units_and_nulls(shape):
    convert = numeric_converter(file=FILE, field=FIELD, units=frozenset({"W"}))
    cells = ["34.44 W", " 35 W ", "[N/A]", "", "1e2W", ".5 W", "+2.", "-3.25 W", "[Not Supported]",
             "7"]
    out = convert(shape(cells), lines_of(cells))
    same(out, [34.44, 35.0, math.nan, math.nan, 100.0, 0.5, 2.0, -3.25, math.nan, 7.0])


@SHAPES
def test_plain_numbers_fast_path(shape):
    convert = numeric_converter(file=FILE, field=FIELD)
    cells = ["1", "2.5", "0", "1e3", "-4"]
    same(convert(shape(cells), lines_of(cells)), [1.0, 2.5, 0.0, 1000.0, -4.0])


def test_converter_is_marked_for_typed_columns():
    convert = numeric_converter(file=FILE, field=FIELD)
    assert TYPED_ATTR == "plain_numbers"
    assert getattr(convert, TYPED_ATTR) is True


def test_any_unit_when_units_is_none():
    convert = numeric_converter(file=FILE, field="x")
    cells = ["3 V", "4 MHz", "5 %", "6 °C"]
    same(convert(cells, lines_of(cells)), [3.0, 4.0, 5.0, 6.0])


def test_null_word_nan_is_null_not_an_error():
    convert = numeric_converter(file=FILE, field=FIELD)
    cells = ["1", "nan", "NaN", "2"]
    same(convert(cells, lines_of(cells)), [1.0, math.nan, math.nan, 2.0])


@SHAPES
@pytest.mark.parametrize(("cells", "units", "row", "reason"), [
    (["1", "abc", "2"], None, 1, "value 'abc' is not a number"),
    (["1", "2", "12 V"], frozenset({"W"}), 2, "value '12 V' has unit 'V', expected W"),
    (["5 C", "1 K"], frozenset({"C", "°C"}), 1, "value '1 K' has unit 'K', expected C or °C"),
    (["3", "4 W"], frozenset(), 1, "value '4 W' has unit 'W', expected no unit"),
    (["1e999"], None, 0, "value '1e999' is not finite"),
    (["2", "inf"], None, 1, "value 'inf' is not a number"),
    (["2", "-inf"], None, 1, "value '-inf' is not a number"),
    (["1 2"], None, 0, "value '1 2' is not a number"),
    (["W"], frozenset({"W"}), 0, "value 'W' is not a number"),
    (["0x10"], None, 0, "value '0x10' is not a number"),
    (["x" * 60], None, 0, f"value {('x' * 60)!r:.36}...' is not a number"),
])
def test_numeric_errors(shape, cells, units, row, reason):
    err = raises(lambda v, ln: numeric_converter(file=FILE, field=FIELD, units=units)(
        shape(v), ln), cells, first=7)
    assert err.reason == reason
    assert err.file == str(FILE) and err.line == 7 + row and err.field == FIELD


@SHAPES
def test_earliest_bad_row_is_named_not_the_first_in_sorted_order(shape):
    convert = numeric_converter(file=FILE, field=FIELD)
    cells = ["1", "zz", "2", "aa", "zz"]
    err = raises(lambda v, ln: convert(shape(v), ln), cells)
    assert err.reason == "value 'zz' is not a number" and err.line == 3


@SHAPES
def test_negative_values(shape):
    convert = numeric_converter(file=FILE, field=FIELD, units=frozenset({"W"}), nonnegative=True)
    cells = ["1 W", "0 W", " -0.5 W ", "-2 W"]
    err = raises(lambda v, ln: convert(shape(v), ln), cells, first=10)
    assert err.reason == "value '-0.5 W' is negative"
    assert (err.file, err.line, err.field) == (str(FILE), 12, FIELD)
    plain = ["3", "-1"]
    err = raises(lambda v, ln: convert(shape(v), ln), plain, first=4)
    assert err.reason == "value '-1' is negative" and err.line == 5


@SHAPES
def test_zero_and_nulls_are_not_negative(shape):
    convert = numeric_converter(file=FILE, field=FIELD, nonnegative=True)
    cells = ["0", "-0", "[N/A]", "3"]
    out = convert(shape(cells), lines_of(cells))
    same(out, [0.0, 0.0, math.nan, 3.0])


@SHAPES
def test_negative_allowed_by_default(shape):
    convert = numeric_converter(file=FILE, field=FIELD)
    same(convert(shape(["-5", "-1 W"]), lines_of(["a", "b"])), [-5.0, -1.0])


def test_empty_column():
    convert = numeric_converter(file=FILE, field=FIELD, nonnegative=True)
    out = convert([], np.zeros(0, np.int64))
    assert out.dtype == np.float64 and out.shape == (0,)


# ---------------------------------------------------------------------------------------------
# reasons_converter
# ---------------------------------------------------------------------------------------------


@SHAPES
def test_reason_bitmasks_hex_decimal_and_null(shape):
    convert = reasons_converter(file=FILE, field="clocks_event_reasons.active")
    cells = ["0x0000000000000004", "0X10", " 0x1 ", "10", "4", "0", "[N/A]", "", "[Not Supported]",
             "0x0000000000000000"]
    out = convert(shape(cells), lines_of(cells))
    same(out, [4.0, 16.0, 1.0, 10.0, 4.0, 0.0, math.nan, math.nan, math.nan, 0.0])


@SHAPES
@pytest.mark.parametrize(("cells", "row", "text"), [
    (["0x4", "0xZZ"], 1, "'0xZZ'"),
    (["4.0"], 0, "'4.0'"),
    (["0x1", "0x1", "Active"], 2, "'Active'"),
    (["abc", "0x4"], 0, "'abc'"),
])
def test_reason_errors(shape, cells, row, text):
    convert = reasons_converter(file=FILE, field="clocks_event_reasons.active")
    err = raises(lambda v, ln: convert(shape(v), ln), cells, first=5)
    assert err.reason == (f"value {text} is not a clock-event-reasons bitmask "
                          "(e.g. 0x0000000000000004)")
    assert err.file == str(FILE) and err.line == 5 + row
    assert err.field == "clocks_event_reasons.active"


# ---------------------------------------------------------------------------------------------
# active_converter
# ---------------------------------------------------------------------------------------------


@SHAPES
def test_active_flags(shape):
    convert = active_converter(file=FILE, field="clocks_event_reasons.gpu_idle")
    cells = ["Active", "Not Active", " active ", "NOT ACTIVE", "[N/A]", "", "[Not Supported]"]
    same(convert(shape(cells), lines_of(cells)), [1.0, 0.0, 1.0, 0.0, math.nan, math.nan, math.nan])


@SHAPES
@pytest.mark.parametrize(("cells", "row", "text"), [
    (["Active", "Maybe"], 1, "'Maybe'"),
    (["1"], 0, "'1'"),
    (["Not  Active"], 0, "'Not  Active'"),
    (["Inactive", "Active"], 0, "'Inactive'"),
])
def test_active_errors(shape, cells, row, text):
    convert = active_converter(file=FILE, field="clocks_event_reasons.gpu_idle")
    err = raises(lambda v, ln: convert(shape(v), ln), cells, first=3)
    assert err.reason == f"value {text} is neither 'Active' nor 'Not Active'"
    assert err.file == str(FILE) and err.line == 3 + row
    assert err.field == "clocks_event_reasons.gpu_idle"


# ---------------------------------------------------------------------------------------------
# Factorizer
# ---------------------------------------------------------------------------------------------


def test_factorizer_codes_and_levels():
    f = Factorizer()
    assert f.levels == []
    assert [f.code(t) for t in ["b", " a ", "[N/A]", "b", "", "a", "c", "N/A"]] == \
        [0, 1, -1, 0, -1, 1, 2, -1]
    assert f.levels == ["b", "a", "c"]


@pytest.mark.parametrize("shape", [as_list, as_arrow, as_chunked], ids=["list", "arrow", "chunked"])
def test_factorizer_converter(shape):
    f = Factorizer()
    convert = f.converter()
    cells = ["GPU-b", "GPU-a", "[N/A]", "GPU-b", " GPU-a"]
    out = convert(shape(cells), lines_of(cells))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [0, 1, -1, 0, 1])
    assert f.levels == ["GPU-b", "GPU-a"]
    # a second column through the same factorizer keeps the codes
    more = ["GPU-c", "GPU-a"]
    np.testing.assert_array_equal(convert(shape(more), lines_of(more)), [2, 1])
    assert f.levels == ["GPU-b", "GPU-a", "GPU-c"]


@pytest.mark.parametrize("empty", [[], pa.array([], pa.string()),
                                   pa.chunked_array([], pa.string())], ids=["list", "arrow", "chunked"])
def test_factorizer_converter_empty(empty):
    out = Factorizer().converter()(empty, np.zeros(0, np.int64))
    assert out.dtype == np.int64 and out.shape == (0,)


@pytest.mark.parametrize("cells", [["1_000", "2"], pa.chunked_array([["2", "1_000"]])])
def test_an_underscore_in_a_number_is_refused_on_every_path(cells) -> None:  # noqa: ANN001
    """A fast parse by numpy reads "1_000" as 1000.0; the exact parser refuses it.

    The fast path must accept nothing the per-value parser refuses (``values.TYPED_ATTR``), so
    a list of cells and an Arrow text column give the exact parser's error.
    """
    convert = numeric_converter(file=Path("log.csv"), field="power.draw [W]")
    with pytest.raises(InputError) as err:
        convert(cells, np.array([2, 3]))
    assert err.value.field == "power.draw [W]"
    assert err.value.line == (2 if isinstance(cells, list) else 3)
    assert "value '1_000' is not a number" in str(err.value)


@pytest.mark.parametrize("unit", [" W", ""])  # csv and csv,nounits
def test_an_underscore_in_a_logged_number_fails_the_import(tmp_path: Path, unit: str) -> None:
    log = tmp_path / "smi.csv"
    log.write_text("timestamp, index, power.draw [W]\n"
                   f"2024/05/01 10:00:00.000, 0, 50.0{unit}\n"
                   f"2024/05/01 10:00:00.100, 0, 1_000{unit}\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        import_file("nvidia-smi", log, workload="inference")
    assert (err.value.line, err.value.field) == (3, "power.draw")
    assert "1_000" in str(err.value) and "is not a number" in str(err.value)


def test_numeric_converter_of_no_cells_is_an_empty_float_array(tmp_path):
    convert = numeric_converter(file=tmp_path / "x.csv", field="power.draw")
    got = convert((), np.zeros(0, np.int64))
    assert (got.dtype, got.shape) == (np.dtype(np.float64), (0,))
