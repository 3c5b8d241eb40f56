"""validate on the request logs a folder holds: gates, time order and repeated ids, streamed."""

from __future__ import annotations

import pyarrow as pa
import pytest

from llm_powertrace_ds import layout, request_checks
from llm_powertrace_ds.folder_check import validate_folder
from llm_powertrace_ds.shards import publish_run, write_table_atomic
from llm_powertrace_ds.shards.encode import requests_table


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 3 rows and many partitions: repeats meet across blocks and partition files."""
    monkeypatch.setattr(request_checks, "BLOCK_ROWS", 3)
    monkeypatch.setattr(request_checks, "PARTITION_SHARD_BYTES", 64)


def _folder(tmp_path, make_run, *run_ids):
    root = tmp_path / "ds"
    runs = []
    for run_id in run_ids:
        run = make_run(run_id, workload="inference", with_requests=True)
        run.requests = [{**r, "request_id": f"r{i}"} for i, r in
                        enumerate(run.requests * 2)]  # ten requests, r0..r9
        for i, r in enumerate(run.requests):
            for key in ("arrival_ms", "start_ms", "first_token_ms", "finish_ms"):
                r[key] += 1000 * i
        publish_run(root, run)
        runs.append(run)
    return root, runs


def _rewrite(root, run, column, values):
    table = requests_table(run)
    table = table.set_column(table.schema.get_field_index(column), column,
                             pa.array(values, table.schema.field(column).type))
    write_table_atomic(layout.requests_path(root, run.platform, run.run_id), table)


def _shard_name(root, run):
    return layout.requests_path(root, run.platform, run.run_id).relative_to(root).as_posix()


def test_a_request_id_repeated_in_a_run_is_named_with_both_rows(tmp_path, make_run,
                                                                small_blocks):
    root, (run,) = _folder(tmp_path, make_run, "serve-1")
    assert validate_folder(root).ok
    ids = [f"r{i}" for i in range(10)]
    ids[7] = ids[8] = "r2"  # the earliest repeat is row 7, first seen at row 2
    _rewrite(root, run, "request_id", ids)
    report = validate_folder(root)
    assert not report.ok
    assert report.problems == [
        f"run serve-1: inference_requests field 'request_id' value 'r2' appears twice "
        f"(rows 2 and 7 of {_shard_name(root, run)})"]


def test_the_same_ids_in_two_runs_are_no_repeat(tmp_path, make_run, small_blocks):
    root, runs = _folder(tmp_path, make_run, "serve-1", "serve-2")
    assert [r.requests[0]["request_id"] for r in runs] == ["r0", "r0"]
    assert validate_folder(root).problems == []


def test_each_run_names_its_own_first_repeat(tmp_path, make_run, small_blocks):
    root, (one, two) = _folder(tmp_path, make_run, "serve-1", "serve-2")
    _rewrite(root, one, "request_id", ["a", "b", "c", "a", "b"] * 2)
    _rewrite(root, two, "request_id", [f"r{i}" for i in range(9)] + ["r8"])
    problems = validate_folder(root).problems
    assert problems == [
        f"run serve-1: inference_requests field 'request_id' value 'a' appears twice "
        f"(rows 0 and 3 of {_shard_name(root, one)})",
        f"run serve-2: inference_requests field 'request_id' value 'r8' appears twice "
        f"(rows 8 and 9 of {_shard_name(root, two)})"]


def test_request_times_out_of_order_are_named_once_per_run(tmp_path, make_run, small_blocks):
    root, (run,) = _folder(tmp_path, make_run, "serve-1")
    first_token = [r["first_token_ms"] for r in run.requests]
    first_token[4] = run.requests[4]["arrival_ms"] - 1  # before its arrival
    first_token[6] = None  # not reported: nothing to order
    first_token[8] = run.requests[8]["finish_ms"] + 1  # after its finish: a second one
    _rewrite(root, run, "first_token_ms", first_token)
    problems = validate_folder(root).problems
    assert len(problems) == 1, problems
    assert problems[0].startswith("run serve-1: inference_requests request 'r4': times out of "
                                  "order (arrival_ms <= start_ms <= first_token_ms <= "
                                  "finish_ms): ")
    assert problems[0].endswith(f"(row 4 of {_shard_name(root, run)})")


def test_a_folder_without_request_logs_has_no_request_problem(tmp_path, make_run):
    root = tmp_path / "ds"
    publish_run(root, make_run("ft-1"))
    assert request_checks.request_problems(root) == []
