"""The explorer reads request logs as columns: per run from packed shards, drawn as from rows."""

from __future__ import annotations

import pyarrow as pa
from conftest import synthetic_run

from llm_powertrace_ds import shards
from llm_powertrace_ds.explore import rundata
from llm_powertrace_ds.explore.site import requests_by_run
from llm_powertrace_ds.request_rows import RequestRows


def test_requests_by_run_splits_packed_batches_by_run(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    for i in range(3):
        shards.publish_run(src, synthetic_run(f"i{i}", workload="inference", seed=i,
                                              with_requests=True), refresh_card=False)
    shards.pack(src, dst)
    by_run = requests_by_run(dst)
    assert sorted(by_run) == ["i0", "i1", "i2"]
    for run_id, rows in by_run.items():
        assert isinstance(rows, RequestRows)
        assert rows == shards.read_run(src, run_id).requests


def test_in_flight_view_of_columns_equals_the_one_of_rows():
    rows = [{"request_id": "a", "arrival_ms": 0, "finish_ms": 300},
            {"request_id": "b", "arrival_ms": 100, "finish_ms": None},
            {"request_id": "c", "arrival_ms": None, "finish_ms": 250},
            {"request_id": "d", "arrival_ms": 300, "finish_ms": 300}]
    listed = synthetic_run(workload="inference")
    listed.requests = rows
    columnar = synthetic_run(workload="inference")
    columnar.requests = RequestRows(pa.Table.from_pylist(rows))
    view = rundata.requests_view(columnar)
    assert view == rundata.requests_view(listed)
    assert view == {"t_ms": [0, 100, 300], "in_flight": [1, 2, 1], "arrivals_ms": [0, 100, 300],
                    "unfinished": 1}
