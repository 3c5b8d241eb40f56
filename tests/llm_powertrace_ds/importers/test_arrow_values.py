"""The vectorised column helpers' shortcuts give the general path's answer, cell for cell."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
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
