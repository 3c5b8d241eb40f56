"""A run's requests held as columns encode, gate, sum and read back as the row dicts do."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.arrow_numpy import table_rows
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.requests import summary_columns
from llm_powertrace_ds.request_rows import RequestRows, number_column, status_is
from llm_powertrace_ds.shards import publish_run, read_run, requests_table

ROWS = [
    {"request_id": "a", "arrival_ms": 100, "start_ms": 100, "first_token_ms": 150,
     "finish_ms": 400, "prompt_tokens": 32, "requested_output_tokens": 16, "output_tokens": 16,
     "status": "ok", "chunk_ms": [150, 250, 400], "chunk_tokens": [1, 7, 8]},
    {"request_id": "b", "arrival_ms": 200, "start_ms": 200, "first_token_ms": None,
     "finish_ms": None, "prompt_tokens": 8, "requested_output_tokens": None,
     "output_tokens": None, "status": "error", "chunk_ms": None, "chunk_tokens": None},
    {"request_id": "c", "arrival_ms": 300, "start_ms": 300, "first_token_ms": 390,
     "finish_ms": 900, "prompt_tokens": None, "requested_output_tokens": 4, "output_tokens": 3,
     "status": "ok", "chunk_ms": [390, 600, 900], "chunk_tokens": [1, 1, 1]},
]


def _columns(rows: list[dict]) -> RequestRows:
    types = {"request_id": pa.string(), "status": pa.string(), "chunk_ms": pa.list_(pa.int64()),
             "chunk_tokens": pa.list_(pa.int32())}
    return RequestRows(pa.table({k: pa.array([r[k] for r in rows], type=types.get(k, pa.int64()))
                                 for k in rows[0]}))


def test_requests_table_of_columns_equals_the_one_of_row_dicts(make_run):
    listed = make_run("serve-1", workload="inference")
    listed.requests = [dict(r) for r in ROWS]
    columnar = make_run("serve-1", workload="inference")
    columnar.requests = _columns(ROWS)
    assert requests_table(columnar).equals(requests_table(listed), check_metadata=True)


def test_a_token_count_beyond_int32_is_refused_as_in_row_dicts(make_run):
    rows = [dict(r) for r in ROWS]
    rows[2]["output_tokens"] = 2**31
    errors = []
    for requests in (rows, _columns(rows)):
        run = make_run("serve-1", workload="inference")
        run.requests = requests
        with pytest.raises(InputError) as info:
            requests_table(run)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "output_tokens" in errors[0] and "2147483648" in errors[0]


def test_summaries_and_columns_agree_for_both_kinds():
    columnar = _columns(ROWS)
    assert summary_columns(columnar) == summary_columns(ROWS) == {
        "requests_completed": 2, "num_requests": 3, "tokens_in": 32, "tokens_out": 19,
        "ttft_p50_ms": 70.0, "ttft_p99_ms": pytest.approx(89.6), "latency_p50_ms": 450.0,
        "latency_p99_ms": pytest.approx(597.0)}
    for name in ("first_token_ms", "output_tokens", "no_such_column"):
        assert np.array_equal(number_column(columnar, name), number_column(ROWS, name),
                              equal_nan=True)
    assert status_is(columnar, "ok").tolist() == status_is(ROWS, "ok").tolist() == \
        [True, False, True]


def test_a_published_request_log_reads_back_as_columns(tmp_path, make_run):
    run = make_run("serve-1", workload="inference")
    run.requests = _columns(ROWS)
    publish_run(tmp_path, run)
    back = read_run(tmp_path, "serve-1").requests
    assert isinstance(back, RequestRows)
    assert back == ROWS
    assert table_rows(back.table) == list(back)
    again = read_run(tmp_path, "serve-1")
    publish_run(tmp_path / "copy", again)  # republished from its columns: the same table
    assert requests_table(again).equals(requests_table(run))
    assert read_run(tmp_path / "copy", "serve-1").requests == ROWS
