"""``import requests-csv`` streams the log: the same shard and summary as the whole-log path.

The block size is forced small (1,024 rows) so a few thousand rows make several blocks and
several id partitions; the whole-log path (``read_requests`` -> ``to_run_clock`` ->
``summary_columns`` -> ``publish_run``) publishes the same log into a second folder, and the
two folders' request shards must be the same bytes and their runs rows the same values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds import request_rows
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import requests_csv, requests_stream
from llm_powertrace_ds.importers.requests import (
    attach_requests,
    read_requests,
    summary_columns,
    to_run_clock,
)
from llm_powertrace_ds.shards import publish_run, read_run

BLOCK_ROWS = 1024


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 1,024 rows and an id partition per 4 kB of CSV."""
    monkeypatch.setattr(requests_csv, "BLOCK_ROWS", BLOCK_ROWS)
    monkeypatch.setattr(request_rows, "BATCH_ROWS", BLOCK_ROWS)
    monkeypatch.setattr(requests_stream, "BATCH_ROWS", BLOCK_ROWS)
    monkeypatch.setattr(requests_stream, "PARTITION_FILE_BYTES", 4096)


def _published(out: Path, make_run) -> float:
    run = make_run("serve-1", workload="inference")
    publish_run(out, run)
    return float(run.meta["start_time"].timestamp())


def _write_csv(path: Path, t0_s: float, n: int, *, seed: int = 7) -> None:
    """``n`` requests inside the run: ties, empty cells, failed and cancelled ones."""
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as fh:
        fh.write("request_id,arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens,"
                 "status,requested_output_tokens\n")
        for i in range(n):
            a = t0_s + 1.0 + float(rng.integers(0, 40)) / 4  # few distinct values: ties
            ttft = float(rng.integers(0, 8)) / 8
            status = ("ok", "ok", "ok", "error", "cancelled")[i % 5]
            first = "" if status == "error" or i % 11 == 0 else f"{a + ttft:.6f}"
            finish = "" if i % 13 == 0 else f"{a + ttft + float(rng.integers(1, 9)):.6f}"
            prompt = "" if i % 17 == 0 else str(100 + i % 50)
            fh.write(f"req-{i},{a:.6f},{first},{finish},{prompt},{50 + i % 7},{status},"
                     f"{'' if i % 3 else 64}\n")


def _whole_log_publish(out: Path, log_path: Path) -> None:
    """The whole-log path: every row in memory, ``to_run_clock`` and ``summary_columns``."""
    from llm_powertrace_ds.run import coerce_meta

    run = read_run(out, "serve-1")
    utc_ns = int(round(run.meta["start_time"].timestamp() * 1000)) * 1_000_000
    run_end_ms = max(int(d.t_ms[-1]) for d in run.devices if len(d.t_ms))
    rows = to_run_clock(read_requests("csv", log_path), run_id=run.run_id,
                        platform=run.platform, t0_ns=0,
                        anchor={"monotonic_ns": 0, "utc_ns": utc_ns}, run_end_ms=run_end_ms)
    run.requests = rows
    found = {k: v for k, v in summary_columns(rows).items()
             if v is not None and run.meta.get(k) is None}
    run.meta.update(coerce_meta(found, "inference"))
    publish_run(out, run, refresh_card=False)


def _one(out: Path, config: str) -> Path:
    files = list((out / "data" / config).rglob("*.arrow"))
    assert len(files) == 1, files
    return files[0]


def _table(path: Path) -> pa.Table:
    with pa.OSFile(str(path)) as fh:
        return pa.ipc.open_stream(fh).read_all()


@pytest.mark.parametrize("n", [700, 5 * BLOCK_ROWS + 300])
def test_the_streamed_import_publishes_the_bytes_and_values_of_the_whole_log_path(
        tmp_path, make_run, small_blocks, n):
    streamed, whole = tmp_path / "streamed", tmp_path / "whole"
    t0_s = _published(streamed, make_run)
    assert _published(whole, make_run) == t0_s
    log = tmp_path / "log.csv"
    _write_csv(log, t0_s, n)

    attach_requests(streamed, "serve-1", "csv", log)
    _whole_log_publish(whole, log)

    a, b = _one(streamed, "inference_requests"), _one(whole, "inference_requests")
    assert _table(a).num_rows == n
    assert a.read_bytes() == b.read_bytes()
    runs_a = _table(_one(streamed, "inference_runs")).to_pylist()[0]
    runs_b = _table(_one(whole, "inference_runs")).to_pylist()[0]
    for key in ("num_requests", "requests_completed", "tokens_in", "tokens_out", "ttft_p50_ms",
                "ttft_p99_ms", "latency_p50_ms", "latency_p99_ms"):
        assert runs_a[key] is not None, key
    assert runs_a == runs_b
    assert not (streamed / ".staging" / "serve-1" / "requests-import").exists()


def test_percentiles_of_a_file_are_numpys_on_values_with_ties(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "values.f64"
    for n in (1, 2, 3, 100, 101, 4097):
        for values in (rng.integers(-20, 20, n).astype(np.float64),  # ties, negatives
                       rng.normal(500.0, 300.0, n), np.full(n, 42.0)):
            values.astype("<f8").tofile(path)
            got = requests_stream.percentiles_of_file(path, n, (0, 37.5, 50, 99, 100))
            for q, value in got.items():
                assert value == float(np.percentile(values, q)), (n, q)


def test_a_repeated_id_is_named_with_both_its_lines(tmp_path, make_run, small_blocks):
    out = tmp_path / "out"
    t0_s = _published(out, make_run)
    log = tmp_path / "log.csv"
    _write_csv(log, t0_s, 3 * BLOCK_ROWS)
    lines = log.read_text().splitlines()
    lines[2500] = lines[2500].replace("req-2499,", "req-9,", 1)  # line 2501 repeats line 11
    log.write_text("\n".join(lines) + "\n")
    before = sorted(p.relative_to(out) for p in (out / "data").rglob("*"))

    with pytest.raises(InputError) as exc:
        attach_requests(out, "serve-1", "csv", log)

    message = str(exc.value)
    assert "request id 'req-9' appears twice (lines 11 and 2501)" in message
    assert "log.csv" in message and "request_id" in message
    assert sorted(p.relative_to(out) for p in (out / "data").rglob("*")) == before
    assert not (out / ".staging" / "serve-1" / "requests-import").exists()


@pytest.mark.parametrize(("repeat_line", "late_line", "expected"), [
    (11, 2501, "appears twice"),  # the repeat comes first
    (2501, 11, "times out of order"),  # the bad row comes first
])
def test_the_first_failing_row_is_reported_whether_a_repeat_or_a_bad_time(
        tmp_path, make_run, small_blocks, repeat_line, late_line, expected):
    out = tmp_path / "out"
    t0_s = _published(out, make_run)
    log = tmp_path / "log.csv"
    _write_csv(log, t0_s, 3 * BLOCK_ROWS)
    lines = log.read_text().splitlines()
    i = repeat_line - 1
    lines[i] = lines[i].replace(f"req-{i - 1},", "req-0,", 1)  # repeats line 2
    cells = lines[late_line - 1].split(",")
    cells[2], cells[3] = f"{float(cells[1]) + 5:.6f}", f"{float(cells[1]) + 1:.6f}"
    lines[late_line - 1] = ",".join(cells)
    log.write_text("\n".join(lines) + "\n")

    with pytest.raises(InputError, match=expected):
        attach_requests(out, "serve-1", "csv", log)
    with pytest.raises(InputError, match=expected):  # the whole-log path's choice
        _whole_log_publish(out, log)


def test_equal_ids_hash_equal_in_any_array_and_slice():
    ids = pa.array(["a", "req-1", "", "req-1", "é", "a" * 70])
    h = requests_stream.id_hash(ids)
    assert h[1] == h[3] and h[0] != h[5] and len(set(h.tolist())) == 5
    assert np.array_equal(requests_stream.id_hash(ids.slice(1, 3)), h[1:4])
    chunked = pa.chunked_array([ids.slice(0, 2), ids.slice(2)])
    assert np.array_equal(requests_stream.id_hash(chunked), h)


def test_a_second_log_replaces_the_first_without_reading_it(tmp_path, make_run, small_blocks,
                                                            monkeypatch):
    from llm_powertrace_ds.shards import read as shard_read

    out = tmp_path / "out"
    t0_s = _published(out, make_run)
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    _write_csv(first, t0_s, 3000, seed=1)
    _write_csv(second, t0_s, 1500, seed=2)
    attach_requests(out, "serve-1", "csv", first)
    loaded = []
    monkeypatch.setattr(shard_read.RunReader, "_attach",
                        lambda self, run: loaded.append(run.run_id))

    attach_requests(out, "serve-1", "csv", second)

    assert loaded == []
    table = _table(_one(out, "inference_requests"))
    assert table.num_rows == 1500
    assert table.column("request_id")[0].as_py() == "req-0"


def test_a_private_id_in_a_later_block_is_refused_as_the_whole_log_path_refuses_it(
        tmp_path, make_run, small_blocks):
    out = tmp_path / "out"
    t0_s = _published(out, make_run)
    log = tmp_path / "log.csv"
    _write_csv(log, t0_s, 3 * BLOCK_ROWS)
    lines = log.read_text().splitlines()
    lines[2600] = lines[2600].replace("req-2599,", "someone@example.org,", 1)
    log.write_text("\n".join(lines) + "\n")

    with pytest.raises(InputError) as streamed:
        attach_requests(out, "serve-1", "csv", log)
    with pytest.raises(InputError) as whole:
        _whole_log_publish(out, log)

    assert "request_id" in str(streamed.value)
    assert str(streamed.value) == str(whole.value)
    assert not (out / ".staging" / "serve-1" / "requests-import").exists()
