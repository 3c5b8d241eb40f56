"""Reading Arrow IPC streams: one schema parse per distinct schema, any stream still read."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from llm_powertrace_ds.shards import read


def _write(path, table: pa.Table) -> None:
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


@pytest.fixture
def fresh_schema_cache(monkeypatch):
    monkeypatch.setattr(read, "_STREAM_SCHEMAS", {})


def test_files_of_one_schema_parse_it_once(tmp_path, monkeypatch, fresh_schema_cache):
    parsed = []
    real = ipc.read_schema
    monkeypatch.setattr(read.ipc, "read_schema", lambda m: (parsed.append(1), real(m))[1])
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"run-{i}.arrow")
        _write(paths[-1], pa.table({"run_id": [f"r{i}"], "energy_j": [float(i)]}))
    batches = [b for p in paths for b in read.iter_file_batches(p)]
    assert len(parsed) == 1
    assert pa.Table.from_batches(batches).to_pydict() == {
        "run_id": ["r0", "r1", "r2"], "energy_j": [0.0, 1.0, 2.0]}


def test_a_second_schema_is_parsed_for_its_own_files(tmp_path, fresh_schema_cache):
    _write(tmp_path / "a.arrow", pa.table({"x": pa.array([1], pa.int16())}))
    _write(tmp_path / "b.arrow", pa.table({"x": pa.array([2], pa.int64())}))
    a = list(read.iter_file_batches(tmp_path / "a.arrow"))
    b = list(read.iter_file_batches(tmp_path / "b.arrow"))
    assert a[0].schema.field("x").type == pa.int16()
    assert b[0].schema.field("x").type == pa.int64()


def test_a_stream_with_a_dictionary_field_reads_as_written(tmp_path, fresh_schema_cache):
    table = pa.table({"kind": pa.array(["a", "b", "a"]).dictionary_encode(),
                      "v": [1, 2, 3]})
    _write(tmp_path / "d.arrow", table)
    got = pa.Table.from_batches(list(read.iter_file_batches(tmp_path / "d.arrow")))
    assert got.equals(table)


def test_several_batches_and_compressed_buffers_read_back(tmp_path, fresh_schema_cache):
    table = pa.table({"t_ms": list(range(5000)), "w": [float(i % 7) for i in range(5000)]})
    path = tmp_path / "z.arrow"
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(
            sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table, max_chunksize=1000)
    batches = list(read.iter_file_batches(path))
    assert len(batches) == 5
    assert pa.Table.from_batches(batches).equals(table)


def test_a_truncated_stream_raises_what_callers_translate(tmp_path, fresh_schema_cache):
    """A cut file raises ``OSError``/``ArrowInvalid``, which every caller turns into ShardError."""
    path = tmp_path / "cut.arrow"
    _write(path, pa.table({"run_id": ["r"] * 100, "v": list(range(100))}))
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises((OSError, pa.ArrowInvalid)):
        list(read.iter_file_batches(path))
