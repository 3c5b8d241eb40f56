"""Request logs held as columns: the column-wise checks and times equal the per-request ones.

``to_run_clock`` checks whole columns and re-checks the first flagged request alone; these tests
pin that the request named is the first one the per-request order (privacy gate, finite times,
inside the run, in order, not a repeat) would have refused, and that the run-clock times are
the scalar conversion's to the millisecond. The CSV reader keeps its columns a batch of rows at
a time; a log of several batches reads as one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import requests_csv
from llm_powertrace_ds.importers.requests import read_requests, to_run_clock
from llm_powertrace_ds.importers.requests_common import (
    Request,
    RequestColumns,
    RequestLog,
    _first_duplicates,
    _to_ms,
)
from llm_powertrace_ds.request_rows import RequestRows

T0_NS = 7_000_000_000_000
T0_S = T0_NS / 1e9
RUN_END_MS = 60_000


def _clock(tmp_path: Path, requests: list[Request]) -> RequestRows:
    log = RequestLog(file=tmp_path / "log.csv", fmt="vllm", clock="monotonic", requests=requests)
    return to_run_clock(log, run_id="r", platform="h100_sxm_80gb", t0_ns=T0_NS, anchor=None,
                        run_end_ms=RUN_END_MS)


def _ok(rid: str, at_s: float = 1.0) -> Request:
    return Request(rid, T0_S + at_s, T0_S + at_s + 0.5, T0_S + at_s + 1.0, 10, 5)


@pytest.mark.parametrize(("bad", "message"), [
    (Request("a", T0_S + 3.0, T0_S + 2.0, None), "request 'a': times out of order"),
    (Request("b", T0_S + 99.0, None, None), "request 'b' has its arrival at 99.000 s"),
    (Request("c", T0_S + 1e300, None, None), "request 'c' has its arrival at"),
    (Request("x", T0_S + 1.0, float("inf"), None), "request 'x': value inf is not a finite"),
    (Request("x", T0_S + 1.0, float("nan"), None), "request 'x': value nan is not a finite"),
    (Request("x", T0_S + 1.0, None, None), "request id 'x' appears twice"),
    (Request("/home/someone/x", T0_S + 1.0, None, None), "refused"),
])
def test_the_first_bad_request_is_the_one_named(tmp_path, bad, message):
    later = [Request("/home/someone/y", T0_S + 1.0, None, None),
             Request("late", T0_S + 1.0, T0_S + 0.5, None), _ok("x")]
    with pytest.raises(InputError) as info:
        _clock(tmp_path, [_ok("x"), _ok("z"), bad, *later])
    assert message in str(info.value)


def test_a_private_id_after_a_bad_request_is_not_the_one_named(tmp_path):
    with pytest.raises(InputError) as info:
        _clock(tmp_path, [_ok("a"), _ok("a"), Request("/etc/passwd", T0_S, None, None)])
    assert "request id 'a' appears twice" in str(info.value)


def test_column_times_equal_the_scalar_conversion_to_the_ms(tmp_path):
    rng = np.random.default_rng(3)
    # µs ticks and exact half-µs ties around the offset, on an epoch-sized clock
    at_us = np.concatenate([rng.integers(-999_000, 59_999_000, 2000),
                            np.arange(-2500, 2500, 1)])
    arrivals = [T0_S + u / 1e6 for u in at_us] + [T0_S + (k + 0.5) / 1e6 for k in range(-50, 50)]
    arrivals += [T0_S + 1.25, T0_S - 0.0005, T0_S + 59.9995]
    requests = [Request(f"r{i}", a, None, None) for i, a in enumerate(arrivals)]
    rows = _clock(tmp_path, requests)
    assert rows.table.column("arrival_ms").to_pylist() == [_to_ms(a, T0_NS) for a in arrivals]


def test_rows_on_the_run_clock_read_as_the_dicts_they_replace(tmp_path):
    rows = _clock(tmp_path, [_ok("a"), Request("b", T0_S + 2.0, None, None, status="error")])
    assert isinstance(rows, RequestRows) and len(rows) == 2
    assert rows[1] == {"run_id": "r", "platform": "h100_sxm_80gb", "request_id": "b",
                       "arrival_ms": 2000, "start_ms": 2000, "first_token_ms": None,
                       "finish_ms": None, "prompt_tokens": None, "requested_output_tokens": None,
                       "output_tokens": None, "status": "error"}
    assert rows == list(rows) and rows[-1] == rows[1] and rows[:1] == [rows[0]]
    with pytest.raises(IndexError):
        rows[2]


def test_a_repeat_is_flagged_at_its_second_row_only():
    import pyarrow as pa

    ids = pa.chunked_array([["b", "a", "b"], ["a", "c", "b"]])
    assert _first_duplicates(ids).tolist() == [False, False, True, True, False, True]


def test_a_csv_of_several_batches_reads_as_one_log(tmp_path, monkeypatch):
    monkeypatch.setattr(requests_csv, "BLOCK_ROWS", 3)
    path = tmp_path / "requests.csv"
    path.write_text("arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens,request_id\n"
                    + "".join(f"{i},{i + 0.5},{i + 1},{i},{2 * i},{'' if i % 2 else f'q{i}'}\n"
                              for i in range(8)))
    log = read_requests("csv", path)
    assert isinstance(log.requests, RequestColumns)
    assert log.requests.table.column("request_id").num_chunks == 3
    assert log.requests == [Request(str(i) if i % 2 else f"q{i}", float(i), i + 0.5,
                                    float(i + 1), i, 2 * i)
                            for i in range(8)]
