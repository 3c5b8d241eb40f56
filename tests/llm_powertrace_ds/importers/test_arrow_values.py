"""The vectorised column helpers' shortcuts give the general path's answer, cell for cell.

Also each helper of ``arrow_values`` on its edge cases: ``distinct``'s shortcuts (when a mostly
empty column takes its own path, its answer on columns with nulls, plain arrays, sliced and empty
chunks, the int64 row index every path returns); ``constant`` on nulls, sliced columns and cells
of different lengths; ``float_view``, ``null_mask``, ``numbers`` and ``_to_float`` on nulls,
float32, empty and read-only input; ``naive_ms``'s int64 result and refusals; and the fixed-width
timestamp path's bounds (digits, minutes, months, leap days, the first year, binary columns).
"""

from __future__ import annotations

import datetime as dt
import math
import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds.importers import arrow_values as av

# cells drawn from a small pool, so columns repeat values, run empty, or hold one value only
_CELLS = st.sampled_from(["", "", "", "warmup", "train", "train ", "bench-00001", "é", "a,b"])


def _chunked(cells: list[str], cuts: list[int], typ: pa.DataType, offset: int) -> pa.ChunkedArray:
    """``cells`` as a chunked array cut at ``cuts``, each chunk a slice at ``offset``."""
    bounds = sorted({0, len(cells), *(c % (len(cells) + 1) for c in cuts)})
    chunks = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        padded = ["pad"] * offset + cells[lo:hi]
        chunks.append(pa.array(padded, type=pa.string()).slice(offset).cast(typ))
    return pa.chunked_array(chunks, type=typ)


@settings(max_examples=300, deadline=None)
@given(st.lists(_CELLS, max_size=40), st.lists(st.integers(0, 40), max_size=3),
       st.sampled_from([pa.string(), pa.binary()]), st.integers(0, 3),
       st.sampled_from(["mixed", "one value", "mostly empty"]))
def test_distinct_equals_the_hash_pass(cells, cuts, typ, offset, shape):
    if shape == "one value":
        cells = ["bench-00001"] * len(cells)
    elif shape == "mostly empty":
        cells = ["" if i % 7 else c for i, c in enumerate(cells)]
    col = _chunked(cells, cuts, typ, offset)
    levels, inverse = av.distinct(col)
    want_levels, want_inverse = av._hashed(col)
    if typ == pa.binary():  # _hashed gives bytes for a binary column; the shortcuts give str
        want_levels = [v.decode() if isinstance(v, bytes) else v for v in want_levels]
        levels = [v.decode() if isinstance(v, bytes) else v for v in levels]
    assert levels == want_levels
    assert inverse.tolist() == want_inverse.tolist()
    # and both are what a dictionary of first appearances gives
    first: dict[str, int] = {}
    assert inverse.tolist() == [first.setdefault(c, len(first)) for c in cells]
    assert levels == list(first)


def test_constant_is_one_value_or_none():
    assert av.constant(pa.chunked_array([["r1", "r1"], ["r1"]])) == "r1"
    assert av.constant(pa.chunked_array([["r1", "r1"], ["r2"]])) is None  # chunks differ
    assert av.constant(pa.array(["ab", "ab", "ba"])) is None  # same width, other bytes
    assert av.constant(pa.array(["ab", "ab", "abc"])) is None  # other width
    assert av.constant(pa.array(["x", None])) is None  # a null is not the value
    assert av.constant(pa.array(["", ""])) == ""
    assert av.constant(pa.array([], pa.string())) is None
    assert av.constant(pa.array(["zz", "ab", "ab"]).slice(1)) == "ab"  # a sliced chunk


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=False)), max_size=30),
       st.lists(st.integers(0, 30), max_size=3), st.integers(0, 2))
def test_to_float_equals_to_numpy(values, cuts, offset):
    bounds = sorted({0, len(values), *(c % (len(values) + 1) for c in cuts)})
    chunks = [pa.array([1.5] * offset + values[lo:hi], pa.float64()).slice(offset)
              for lo, hi in zip(bounds, bounds[1:], strict=False)]
    col = pa.chunked_array(chunks, type=pa.float64())
    got = av._to_float(col)
    want = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    assert got.dtype == np.float64 and got.flags.writeable
    np.testing.assert_array_equal(got, want)
    got[:] = 0.0  # a copy: the Arrow buffers are not written through
    assert col.to_pylist() == values


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


class _Float64Ext(pa.ExtensionType):
    """An extension type over float64: ``to_numpy`` gives a read-only zero-copy view."""

    def __init__(self) -> None:
        super().__init__(pa.float64(), "test.float64")

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


def _ms(text: str) -> int:
    return int(np.datetime64(text, "ms").astype(np.int64))


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


def test_constant_and_distinct_of_an_all_null_column():
    col = pa.array([None, None], pa.string())
    assert av.constant(col) is None  # nulls are not a string
    uniq, inverse = av.distinct(col)
    assert uniq == [None] and inverse.tolist() == [0, 0]


def test_constant_of_a_repeated_string():
    assert av.constant(pa.array(["r1", "r1", "r1"])) == "r1"
    assert av.constant(pa.array(["r1", None, "r1"])) is None


def test_fixed_width_ms_refuses_cells_of_different_widths():
    # lengths 19, 18, 20 (sum 3 x 19): read as a 3 x 19 matrix they would look like stamps
    cells = ["2024-01-01 00:00:00", "2024-01-01 00:00:0", "52024-01-01 00:00:03"]
    assert av.fixed_width_ms(pa.array(cells)) is None
    same = ["2024-01-01 00:00:00", "2024-01-01 00:00:05"]
    ms, zulu = av.fixed_width_ms(pa.array(same))
    t0 = int(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert ms.tolist() == [t0, t0 + 5000] and zulu is False


def test_numbers_of_a_float32_column():
    got = av.numbers(pa.array([1.5, 2.0], pa.float32()), None)
    assert got.dtype == np.float64 and got.tolist() == [1.5, 2.0]
    got = av.numbers(pa.array([1.5, None], pa.float32()), None)
    assert got[0] == 1.5 and math.isnan(got[1])
    got[0] = 3.0  # writable


def test_numbers_with_units_and_null_tokens():
    got = av.numbers(pa.array(["1", "[N/A]", " 2.5 "]), None)
    assert got is not None
    assert got[0] == 1.0 and math.isnan(got[1]) and got[2] == 2.5
    got = av.numbers(pa.array(["1 W", " 2.5W "]), frozenset({"W"}))
    assert got is not None and got.tolist() == [1.0, 2.5]
    got = av.numbers(pa.array(["1 W", "2 W"]), frozenset({"W", "mW"}))
    assert got.tolist() == [1.0, 2.0]
    assert av.numbers(pa.array(["1 W", "2 kW"]), frozenset({"W"})) is None


def test_float_view_of_an_empty_array():
    got = av.float_view(pa.array([], pa.float64()))
    assert got.shape == (0,) and got.dtype == np.float64
    assert av.float_view(pa.array([0.5, 2.0])).tolist() == [0.5, 2.0]


def test_null_mask_is_a_bool_array_with_nulls_false():
    got = av.null_mask(pa.array(["N/A", None, "[Not Supported]", "1", ""]))
    assert got.dtype == np.bool_
    assert got.tolist() == [True, False, True, False, True]


def test_constant_of_a_sliced_column():
    assert av.constant(pa.array(["x", "r1", "r1", "y"]).slice(1, 2)) == "r1"
