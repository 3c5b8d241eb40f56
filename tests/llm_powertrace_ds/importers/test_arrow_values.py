"""The vectorised column helpers' shortcuts give the general path's answer, cell for cell.

``arrow_values.distinct``'s shortcuts too: when a mostly empty column takes its own path, its
answer on columns with nulls, plain arrays, sliced and empty chunks, and the int64 row index
every path returns.
"""

from __future__ import annotations

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
