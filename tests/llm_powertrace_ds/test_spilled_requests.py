"""Requests spilled to a stream file read back as the rows held in memory, a block at a time."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from llm_powertrace_ds import request_rows
from llm_powertrace_ds.request_rows import (
    RequestRows,
    SpilledRequests,
    number_column,
    request_blocks,
)


def _shard(n: int) -> pa.Table:
    constant = pa.array(np.zeros(n, dtype=np.int32))
    return pa.table({
        "run_id": pa.DictionaryArray.from_arrays(constant, pa.array(["serve-1"])),
        "platform": pa.DictionaryArray.from_arrays(constant, pa.array(["l40s"])),
        "request_id": [f"r{i}" for i in range(n)],
        "finish_ms": pa.array([None if i % 5 == 0 else i * 10 for i in range(n)], pa.int64())})


def test_spilled_requests_read_back_the_held_rows_in_the_same_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(request_rows, "BATCH_ROWS", 100)
    table = _shard(250)
    path = tmp_path / "requests.arrow"
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=64)  # file batches unlike the blocks
    spilled = SpilledRequests(path, table.num_rows)
    held = RequestRows.from_shard(table)

    assert [len(b) for b in request_blocks(spilled)] == [100, 100, 50]
    for a, b in zip(request_blocks(spilled), request_blocks(held), strict=True):
        assert list(a) == list(b)
        assert np.array_equal(number_column(a, "finish_ms"), number_column(b, "finish_ms"),
                              equal_nan=True)
    assert len(spilled) == 250 and list(spilled) == list(held)
    assert spilled.table.equals(held.table)
    assert [len(b) for b in request_blocks(list(held))] == [100, 100, 50]
