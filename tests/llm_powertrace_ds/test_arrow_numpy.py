"""``arrow_numpy`` builds the same arrays as pyarrow's own conversions, without pandas."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds import schema
from llm_powertrace_ds.arrow_numpy import from_python, strings, table_rows, to_arrow, to_numpy

NUMERIC = ["int8", "int16", "int32", "int64", "uint8", "uint32", "float32", "float64", "bool"]


@pytest.mark.parametrize("dtype", NUMERIC)
@given(data=st.data())
@settings(max_examples=30, deadline=None)
def test_to_arrow_equals_pa_array(dtype, data):
    n = data.draw(st.integers(0, 40))
    raw = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).integers(0, 200, n)
    values = (raw % 2).astype(bool) if dtype == "bool" else raw.astype(dtype)
    valid = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    got = to_arrow(values, valid=valid)
    want = pa.array(values, mask=~valid)
    assert got.type == want.type and got.equals(want) and got.null_count == want.null_count
    assert to_arrow(values).equals(pa.array(values))
    if n:  # sliced arrays (offset into the buffers) read back the same
        assert np.array_equal(to_numpy(to_arrow(values)[1:]), values[1:])


def test_to_numpy_equals_pyarrow():
    floats = pa.chunked_array([pa.array([1.5, None, 3.0]), pa.array([], pa.float64()),
                               pa.array([None, 2.0])])
    assert np.array_equal(to_numpy(floats), floats.to_numpy(), equal_nan=True)
    bools = pa.chunked_array([pa.array([True, False, True])[1:], pa.array([False, True])])
    assert to_numpy(bools).tolist() == bools.to_numpy().tolist()
    assert to_numpy(pa.array([], pa.int32())).dtype == np.int32
    with pytest.raises(ValueError, match="nulls in a int64"):
        to_numpy(pa.array([1, None]))
    assert to_numpy(pa.array([1, None, 3]), null_value=-1).tolist() == [1, -1, 3]
    assert to_numpy(pa.array([True, None]), null_value=False).tolist() == [True, False]
    with pytest.raises(TypeError, match="no numpy buffer layout"):
        to_numpy(pa.array(["a"]))


def test_strings_equal_pa_array():
    words = ["", "n/a", "é", "日本", "x" * 300]
    assert strings(words).equals(pa.array(words))
    assert strings([]).equals(pa.array([], pa.string()))


_SCALARS = {
    "bool": st.booleans(),
    "int16": st.integers(-2**15, 2**15 - 1),
    "int32": st.integers(-2**31, 2**31 - 1),
    "int64": st.integers(-2**63, 2**63 - 1),
    "float": st.floats(width=32, allow_nan=True),
    "double": st.floats(allow_nan=True),
    "string": st.text(max_size=8),
    "timestamp[ms, tz=UTC]": st.datetimes(
        min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1),
        timezones=st.sampled_from([None, dt.timezone.utc,
                                   dt.timezone(dt.timedelta(hours=-5, minutes=-30))])),
}


def _values(arrow_type: pa.DataType) -> st.SearchStrategy:
    if pa.types.is_list(arrow_type):
        return st.lists(st.none() | _values(arrow_type.value_type), max_size=4)
    if pa.types.is_struct(arrow_type):
        return st.fixed_dictionaries({}, optional={
            f.name: st.none() | _values(f.type) for f in arrow_type})
    return _SCALARS[str(arrow_type)]


def _schema_types() -> list[pa.DataType]:
    seen: dict[str, pa.DataType] = {}
    for config in ("finetune", "finetune_runs", "inference", "inference_runs",
                   "inference_requests"):
        for field in schema.arrow_schema(config):
            seen.setdefault(str(field.type), field.type)
    return list(seen.values())


@pytest.mark.parametrize("arrow_type", _schema_types(), ids=str)
@given(data=st.data())
@settings(max_examples=40, deadline=None)
def test_from_python_equals_pa_array_for_every_schema_type(arrow_type, data):
    """Every column type of every config, nulls at any level, as ``pa.array`` builds it."""
    values = data.draw(st.lists(st.none() | _values(arrow_type), max_size=6))
    want = pa.array(values, type=arrow_type)
    got = from_python(values, arrow_type)
    got.validate(full=True)
    assert got.type == want.type
    assert _ipc(got) == _ipc(want), (got, want)  # the bytes a shard holds (NaN == NaN too)
    assert got.null_count == want.null_count


def _ipc(arr: pa.Array) -> bytes:
    sink = pa.BufferOutputStream()
    batch = pa.record_batch([arr], names=["c"])
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def test_from_python_leaves_other_values_to_pyarrow():
    """Values it does not build go to ``pa.array``: same result, same errors."""
    assert from_python([np.int64(3), None], pa.int64()).equals(pa.array([3, None], pa.int64()))
    assert from_python([1, 2.5], pa.float64()).equals(pa.array([1, 2.5], pa.float64()))
    assert from_python([5, None], pa.timestamp("ms")).equals(
        pa.array([5, None], pa.timestamp("ms")))
    with pytest.raises((OverflowError, pa.ArrowInvalid)):
        from_python([2**40], pa.int16())
    with pytest.raises((TypeError, pa.ArrowInvalid, pa.ArrowTypeError)):
        from_python(["x"], pa.int64())


def test_no_pandas():
    code = ("import sys, datetime as dt, numpy as np, pyarrow as pa\n"
            "from llm_powertrace_ds.arrow_numpy import (from_python, strings, table_rows,\n"
            "    to_arrow, to_numpy)\n"
            "t = pa.list_(pa.struct([('t_ms', pa.int64()), ('kind', pa.string())]))\n"
            "from_python([[{'t_ms': 1, 'kind': 'a'}], None], t)\n"
            "from_python([dt.datetime.now(dt.timezone.utc)], pa.timestamp('ms', 'UTC'))\n"
            "to_numpy(to_arrow(np.arange(3)) )\n"
            "to_numpy(pa.chunked_array([to_arrow(np.ones(3, bool))]))\n"
            "strings(['a'])\n"
            "s = to_arrow(np.array([0, 5]), valid=np.array([True, False]))\n"
            "table_rows(pa.table({'s': s.cast(pa.timestamp('ms', 'UTC'))}))\n"
            "print('pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


@pytest.mark.parametrize("arrow_type", [pa.timestamp("ms", "UTC"), pa.timestamp("s"),
                                        pa.timestamp("us", "Europe/Paris"),
                                        pa.timestamp("ms", "+05:30")], ids=str)
def test_table_rows_equal_to_pylist(arrow_type):
    stamps = [dt.datetime(2026, 5, 1, 12, 44, 37, 638000, tzinfo=dt.timezone.utc), None,
              dt.datetime(1969, 12, 31, 23, 59, 59, 1000, tzinfo=dt.timezone.utc)]
    table = pa.table({"run_id": ["a", "b", None], "start_time": pa.array(stamps, arrow_type),
                      "flags": [["x"], [], None], "watts": [1.5, None, 2.0]})
    got, want = table_rows(table), table.to_pylist()
    assert got == want
    assert [type(r["start_time"]) for r in got] == [type(r["start_time"]) for r in want]
    assert [str(r["start_time"]) for r in got] == [str(r["start_time"]) for r in want]
    assert table_rows(table.drop_columns(["start_time"])) == table.drop_columns(
        ["start_time"]).to_pylist()
