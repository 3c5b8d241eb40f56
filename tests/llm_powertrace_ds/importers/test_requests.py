"""Request logs of serving benchmarks (vLLM, SGLang, plain CSV) onto the run clock.

The fixture files are written here from each client's documented format: vLLM's
``vllm bench serve --save-result --save-detailed`` result JSON (keys read from
``vllm/benchmarks/serve.py``), SGLang's ``bench_serving --output-details`` JSONL (keys from its
``docs/developer_guide/bench_serving.md``) and the project's plain CSV.

Exact behaviour of ``importers.requests``, ``requests_common`` and ``requests_csv``: the
one-line errors (reason, file, line, field), the floor and µs rounding of times on the run clock,
the inclusive tolerance at both ends of the run, the keys and values of the request rows, the
summary columns (checked against numpy), the plain CSV's defaults and how ``attach_requests``
aligns a wall-clock log to a published run and fills its metadata.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import llm_powertrace_ds
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.requests import (
    REQUEST_FORMATS,
    attach_requests,
    read_requests,
    summary_columns,
    to_run_clock,
)
from llm_powertrace_ds.importers.requests_common import (
    Request,
    RequestLog,
    as_float,
    as_int,
    column,
)

T0_NS = 5_000_000_000_000          # the sampler's first tick (CLOCK_MONOTONIC ns)
ANCHOR = {"monotonic_ns": T0_NS + 50_000_000, "utc_ns": 1_764_547_200_000_000_000}
RUN_END_MS = 60_000


def vllm_result(start_s: float = T0_NS / 1e9 + 2.0) -> dict:
    return {
        "date": "20261130-233000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B",
        "num_prompts": 3, "duration": 4.2, "completed": 2, "failed": 1,
        "total_input_tokens": 384, "total_output_tokens": 96,
        "input_lens": [128, 128, 128], "output_lens": [64, 32, 0],
        "ttfts": [0.120, 0.250, 0.0],
        "itls": [[0.02] * 63, [0.03] * 31, []],
        "start_times": [start_s, start_s + 0.5, start_s + 0.9],
        "generated_texts": ["...", "...", ""],
        "errors": ["", "", "Bad Request"],
    }


def write_vllm(tmp_path: Path, **kw) -> Path:
    path = tmp_path / "vllm-result.json"
    path.write_text(json.dumps(vllm_result(**kw)))
    return path


def to_clock(path: Path, fmt: str) -> list[dict]:
    return to_run_clock(read_requests(fmt, path), run_id="r", platform="h100_sxm_80gb",
                        t0_ns=T0_NS, anchor=ANCHOR, run_end_ms=RUN_END_MS)


def ordered(rows: list[dict]) -> bool:
    for r in rows:
        times = [r[k] for k in ("arrival_ms", "first_token_ms", "finish_ms") if r[k] is not None]
        if times != sorted(times):
            return False
    return True


def test_vllm_detailed_result(tmp_path):
    rows = to_clock(write_vllm(tmp_path), "vllm")
    assert [r["arrival_ms"] for r in rows] == [2000, 2500, 2900]
    assert rows[0]["first_token_ms"] == 2120 and rows[0]["finish_ms"] == 2120 + 1260
    assert rows[2]["status"] == "error" and rows[2]["first_token_ms"] is None
    assert [r["prompt_tokens"] for r in rows] == [128] * 3 and rows[1]["output_tokens"] == 32
    assert ordered(rows)
    summary = summary_columns(rows)
    assert summary["requests_completed"] == 2 and summary["tokens_out"] == 96


def test_sglang_jsonl_last_run(tmp_path):
    path = tmp_path / "sglang.jsonl"
    older = {"backend": "sglang", "completed": 1, "input_lens": [1]}
    details = vllm_result()
    details.pop("failed")
    path.write_text(json.dumps(older) + "\n" + json.dumps({"backend": "sglang", **details}) + "\n")
    rows = to_clock(path, "sglang")
    assert len(rows) == 3 and ordered(rows) and rows[0]["arrival_ms"] == 2000


def test_sglang_without_start_times_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "sglang.jsonl"
    details = vllm_result()
    details.pop("start_times")
    path.write_text(json.dumps(details) + "\n")
    with pytest.raises(InputError, match="start_times") as info:
        read_requests("sglang", path)
    assert info.value.file == str(path) and info.value.line == 1


def test_plain_csv_on_the_wall_clock(tmp_path):
    base = ANCHOR["utc_ns"] / 1e9 - 0.05  # = t0 on the wall clock
    path = tmp_path / "requests.csv"
    path.write_text("arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens,status\n"
                    f"{base + 1.0},{base + 1.2},{base + 3.0},100,50,ok\n"
                    f"{base + 1.5},,,90,0,error\n")
    rows = to_clock(path, "csv")
    assert [(r["arrival_ms"], r["first_token_ms"], r["finish_ms"]) for r in rows] == \
        [(1000, 1200, 3000), (1500, None, None)]
    assert rows[1]["status"] == "error" and ordered(rows)


def test_misaligned_clocks_are_an_error_naming_the_file(tmp_path):
    path = write_vllm(tmp_path, start_s=T0_NS / 1e9 - 3600)  # an hour before the run
    with pytest.raises(InputError, match="outside the run") as info:
        to_clock(path, "vllm")
    assert str(path) in str(info.value)
    path = tmp_path / "late.csv"
    path.write_text("arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens\n"
                    f"{ANCHOR['utc_ns'] / 1e9 + 7200},,,1,1\n")
    with pytest.raises(InputError, match="late.csv"):
        to_clock(path, "csv")


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.pop("ttfts"), "ttfts"),
    (lambda d: d["input_lens"].pop(), "input_lens"),
    (lambda d: d["ttfts"].__setitem__(0, "fast"), "ttfts"),
    (lambda d: d.pop("start_times"), "start_times"),
])
def test_bad_vllm_files_name_the_field(tmp_path, mutate, field):
    data = vllm_result()
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        read_requests("vllm", path)
    assert info.value.field == field and "bad.json" in str(info.value)


def test_bad_csv_names_file_line_and_field(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens\n1,2,3,4,5\n"
                    "1,2,3,four,5\n")
    with pytest.raises(InputError) as info:
        read_requests("csv", path)
    assert (info.value.line, info.value.field) == (3, "prompt_tokens")
    path.write_text("arrival_s,finish_s\n")
    with pytest.raises(InputError, match="first_token_s"):
        read_requests("csv", path)


def test_a_csv_log_onto_a_published_run(tmp_path, make_run):
    from llm_powertrace_ds.cli import main
    from llm_powertrace_ds.shards import iter_rows, publish_run

    out = tmp_path / "ds"
    run = make_run("serve-1", workload="inference")
    publish_run(out, run)
    t0 = run.meta["start_time"].timestamp()
    path = tmp_path / "requests.csv"
    path.write_text("arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens\n"
                    f"{t0 + 1.0},{t0 + 1.25},{t0 + 4.0},100,50\n")
    assert main(["import", "requests-csv", str(path), "--run", "serve-1", "--out", str(out),
                 "--workload", "inference"]) == 0
    rows = list(iter_rows(out, "inference_requests"))
    assert [(r["arrival_ms"], r["first_token_ms"], r["finish_ms"]) for r in rows] == \
        [(1000, 1250, 4000)]
    vllm = write_vllm(tmp_path)
    from llm_powertrace_ds.importers.requests import attach_requests

    with pytest.raises(InputError, match="monotonic clock"):
        attach_requests(out, "serve-1", "vllm", vllm)


T0_S = 5000.0


UTC_NS = 1_764_547_200_000_000_000


HEADER = "arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens"


OUTSIDE = ("clock, outside the run [0, {end} s]: the file's {clock} clock is not this run's "
           "(record the client on the sampler's machine, under `llm-powertrace record`)")


def mono_log(tmp_path: Path, *requests: Request) -> RequestLog:
    return RequestLog(file=tmp_path / "log.json", fmt="vllm", clock="monotonic",
                      requests=list(requests))


def on_clock(log: RequestLog, run_end_ms: int = RUN_END_MS, anchor: dict | None = None) -> list:
    return to_run_clock(log, run_id="run-1", platform="h100_sxm_80gb", t0_ns=T0_NS,
                        anchor=anchor, run_end_ms=run_end_ms)


def req(rid: str, arrival: float | None, first: float | None = None,
        finish: float | None = None, **kw) -> Request:
    """A request with times given in seconds after the sampler's first tick."""
    return Request(rid, None if arrival is None else T0_S + arrival,
                   None if first is None else T0_S + first,
                   None if finish is None else T0_S + finish, **kw)


def where(info: pytest.ExceptionInfo) -> tuple:
    return info.value.reason, info.value.file, info.value.line, info.value.field


def write_csv(tmp_path: Path, text: str, name: str = "requests.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_formats_in_order():
    assert REQUEST_FORMATS == ("vllm", "sglang", "csv")


def test_unknown_format_lists_the_known_ones(tmp_path):
    path = write_csv(tmp_path, HEADER + "\n")
    with pytest.raises(InputError) as info:
        read_requests("json", path)
    assert where(info) == ("unknown request-log format 'json'; known: vllm, sglang, csv", None,
                           None, "format")


@pytest.mark.parametrize("make", [lambda p: p / "absent.csv", lambda p: p])
def test_a_missing_file_is_named(tmp_path, make):
    path = make(tmp_path)
    with pytest.raises(InputError) as info:
        read_requests("csv", str(path))
    assert where(info) == ("no such file (did the command write its result there?)", str(path),
                           None, None)


def test_as_float_values():
    f = Path("x.json")
    assert as_float(None, file=f, field_name="ttfts", index=0) is None
    value = as_float(3, file=f, field_name="ttfts", index=0)
    assert value == 3.0 and type(value) is float
    assert as_float(-0.25, file=f, field_name="ttfts", index=0) == -0.25


@pytest.mark.parametrize("value,text", [
    (True, "True"), (float("nan"), "nan"), (float("inf"), "inf"), ("1", "'1'"), ([1], "[1]"),
])
def test_as_float_refuses_non_numbers(value, text):
    with pytest.raises(InputError) as info:
        as_float(value, file=Path("d/x.json"), field_name="ttfts", index=2)
    assert where(info) == (f"request 2: value {text} is not a finite number", str(Path("d/x.json")),
                           None, "ttfts")


def test_as_int_values():
    f = Path("x.json")
    assert as_int(None, file=f, field_name="input_lens", index=0) is None
    for value in (7, 7.0):
        got = as_int(value, file=f, field_name="input_lens", index=0)
        assert got == 7 and type(got) is int
    assert as_int(0, file=f, field_name="input_lens", index=0) == 0


@pytest.mark.parametrize("value,reason", [
    (1.5, "request 4: value 1.5 is not a token count"),
    (-1, "request 4: value -1 is not a token count"),
    (-2.0, "request 4: value -2.0 is not a token count"),
    ("x", "request 4: value 'x' is not a finite number"),
    (False, "request 4: value False is not a finite number"),
])
def test_as_int_refuses_non_counts(value, reason):
    with pytest.raises(InputError) as info:
        as_int(value, file=Path("r.json"), field_name="output_lens", index=4)
    assert where(info) == (reason, "r.json", None, "output_lens")


def test_column_values():
    f = Path("r.json")
    data = {"a": [1, 2, 3], "b": []}
    assert column(data, "a", 3, file=f) == [1, 2, 3]
    assert column(data, "a", None, file=f) == [1, 2, 3]
    assert column(data, "b", None, file=f) == []
    assert column(data, "c", 3, file=f, required=False) is None


@pytest.mark.parametrize("data,n,reason", [
    ({}, 3, "no 'ttfts' array: save the per-request details (see the serving "
            "engines in docs/recording.md)"),
    ({"ttfts": {"a": 1}}, 3, "expected a list, got dict"),
    ({"ttfts": "0.1"}, None, "expected a list, got str"),
    ({"ttfts": None}, 1, "expected a list, got NoneType"),
    ({"ttfts": [0.1, 0.2]}, 3, "2 entries where the other arrays have 3"),
    ({"ttfts": [0.1, 0.2]}, 0, "2 entries where the other arrays have 0"),
])
def test_column_errors(data, n, reason):
    with pytest.raises(InputError) as info:
        column(data, "ttfts", n, file=Path("dir/r.json"))
    assert where(info) == (reason, str(Path("dir/r.json")), None, "ttfts")


def test_vllm_file_without_an_array_names_it(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"start_times": [T0_S], "input_lens": [1]}))
    with pytest.raises(InputError) as info:
        read_requests("vllm", path)
    assert where(info) == ("no 'ttfts' array: save the per-request details (see the serving "
                           "engines in docs/recording.md)", str(path), None, "ttfts")


def test_rows_have_exactly_the_request_columns(tmp_path):
    log = mono_log(tmp_path,
                   req("a", 1.0, 1.25, 3.5, prompt_tokens=12, output_tokens=7,
                       requested_output_tokens=8),
                   req("b", 2.0, None, None, prompt_tokens=5, status="error"))
    assert on_clock(log) == [
        {"run_id": "run-1", "platform": "h100_sxm_80gb", "request_id": "a", "arrival_ms": 1000,
         "start_ms": 1000, "first_token_ms": 1250, "finish_ms": 3500, "prompt_tokens": 12,
         "requested_output_tokens": 8, "output_tokens": 7, "status": "ok"},
        {"run_id": "run-1", "platform": "h100_sxm_80gb", "request_id": "b", "arrival_ms": 2000,
         "start_ms": 2000, "first_token_ms": None, "finish_ms": None, "prompt_tokens": 5,
         "requested_output_tokens": None, "output_tokens": None, "status": "error"},
    ]


@pytest.mark.parametrize("after_s,ms", [
    (0.0, 0), (0.0005, 0), (0.000999, 0), (0.001, 1), (1.2505, 1250), (0.999999, 999),
    (1.0, 1000), (-0.0005, -1), (-0.001, -1), (-0.0015, -2), (-1.0, -1000),
    (60.9999, 60999), (61.0, 61000),
])
def test_times_are_floored_to_whole_ms(tmp_path, after_s, ms):
    rows = on_clock(mono_log(tmp_path, req("a", after_s)))
    assert rows[0]["arrival_ms"] == ms and type(rows[0]["arrival_ms"]) is int
    assert rows[0]["start_ms"] == ms


def test_wall_clock_times_are_rounded_to_us_before_the_floor(tmp_path):
    # anchor: UTC_NS was read 50 ms after the first tick, so t0 is UTC_NS - 50 ms on the wall
    anchor = {"monotonic_ns": T0_NS + 50_000_000, "utc_ns": UTC_NS}
    t0_wall = UTC_NS / 1e9 - 0.05
    log = RequestLog(file=tmp_path / "r.csv", fmt="csv", clock="unix", requests=[
        Request("a", t0_wall + 1.25, t0_wall + 1.5, t0_wall + 30.0),
        Request("b", UTC_NS / 1e9 + 1.25, None, None)])
    rows = on_clock(log, anchor=anchor)
    assert [(r["arrival_ms"], r["first_token_ms"], r["finish_ms"]) for r in rows] == \
        [(1250, 1500, 30000), (1300, None, None)]


@pytest.mark.parametrize("anchor", [None, {}])
def test_a_wall_clock_log_needs_the_anchor(tmp_path, anchor):
    log = RequestLog(file=tmp_path / "r.csv", fmt="csv", clock="unix",
                     requests=[Request("a", UTC_NS / 1e9, None, None)])
    with pytest.raises(InputError) as info:
        on_clock(log, anchor=anchor)
    assert where(info) == ("wall-clock request times need the sampler's anchor, which this run "
                           "lacks", str(tmp_path / "r.csv"), None, None)


@pytest.mark.parametrize("request_", [
    req("a", -1.0), req("a", 0.0), req("a", 0.5), req("a", 0.999), req("a", 61.0),
    req("a", 59.0, 59.5, 60.9995), req("a", -1.0, None, 61.0),
])
def test_the_tolerance_is_inclusive_at_both_ends(tmp_path, request_):
    assert len(on_clock(mono_log(tmp_path, request_))) == 1


@pytest.mark.parametrize("request_,name,at", [
    (req("r1", -1.001), "arrival", "-1.001"),
    (req("r1", -1.0011), "arrival", "-1.002"),
    (req("r1", -3600.0), "arrival", "-3600.000"),
    (req("r1", 61.001), "arrival", "61.001"),
    (req("r1", 0.0, 61.002), "first_token", "61.002"),
    (req("r1", 0.0, 1.0, 61.0015), "finish", "61.001"),
    (req("r1", None, None, 99.0), "finish", "99.000"),
])
def test_outside_the_run_names_time_and_field(tmp_path, request_, name, at):
    log = mono_log(tmp_path, req("r0", 0.0), request_)
    with pytest.raises(InputError) as info:
        on_clock(log)
    reason = (f"request 'r1' has its {name} at {at} s on the run "
              + OUTSIDE.format(end="60.000", clock="monotonic"))
    assert where(info) == (reason, str(tmp_path / "log.json"), None, f"{name}_s")


def test_the_run_end_is_printed_in_seconds(tmp_path):
    with pytest.raises(InputError) as info:
        on_clock(mono_log(tmp_path, req("x", 13.5)), run_end_ms=12_345)
    assert info.value.reason == ("request 'x' has its arrival at 13.500 s on the run "
                                 + OUTSIDE.format(end="12.345", clock="monotonic"))
    assert len(on_clock(mono_log(tmp_path, req("x", 13.345)), run_end_ms=12_345)) == 1


@pytest.mark.parametrize("request_,times", [
    (req("a", 2.0, 1.5, 3.0), "{'arrival': 2000, 'first_token': 1500, 'finish': 3000}"),
    (req("a", 1.0, 2.0, 1.999), "{'arrival': 1000, 'first_token': 2000, 'finish': 1999}"),
    (req("a", 2.0, None, 1.0), "{'arrival': 2000, 'first_token': None, 'finish': 1000}"),
])
def test_times_out_of_order(tmp_path, request_, times):
    with pytest.raises(InputError) as info:
        on_clock(mono_log(tmp_path, request_))
    assert where(info) == ("request 'a': times out of order (arrival <= first token <= finish): "
                           + times, str(tmp_path / "log.json"), None, "first_token_s")


def test_equal_times_are_in_order(tmp_path):
    rows = on_clock(mono_log(tmp_path, req("a", 2.0, 2.0, 2.0)))
    assert (rows[0]["arrival_ms"], rows[0]["first_token_ms"], rows[0]["finish_ms"]) == \
        (2000, 2000, 2000)


def test_a_request_id_twice(tmp_path):
    log = mono_log(tmp_path, req("a", 1.0), req("b", 2.0), req("a", 3.0))
    with pytest.raises(InputError) as info:
        on_clock(log)
    assert where(info) == ("request id 'a' appears twice", str(tmp_path / "log.json"), None,
                           "request_id")


def row(arrival, first, finish, prompt, out, status="ok") -> dict:
    return {"arrival_ms": arrival, "first_token_ms": first, "finish_ms": finish,
            "prompt_tokens": prompt, "output_tokens": out, "status": status}


def test_summary_columns_over_completed_requests():
    rows = [row(0, 100, 1000, 10, 5), row(200, 250, 900, None, 7),
            row(300, 310, 320, 1000, 1000, "error"), row(400, None, None, 20, None),
            row(None, 500, 600, 3, 2), row(1000, 1400, 5000, 0, 0),
            row(50, 60, 70, 500, 500, "cancelled")]
    ttft = [100, 50, 400]
    lat = [1000, 700, 4000]
    assert summary_columns(rows) == {
        "requests_completed": 5, "num_requests": 7, "tokens_in": 33, "tokens_out": 14,
        "ttft_p50_ms": float(np.percentile(ttft, 50)), "ttft_p99_ms": float(np.percentile(ttft, 99)),
        "latency_p50_ms": float(np.percentile(lat, 50)),
        "latency_p99_ms": float(np.percentile(lat, 99)),
    }
    assert (summary_columns(rows)["ttft_p50_ms"], summary_columns(rows)["latency_p99_ms"]) == \
        (100.0, 3940.0)


def test_summary_columns_with_nothing_reported():
    nothing = {"tokens_in": None, "tokens_out": None, "ttft_p50_ms": None, "ttft_p99_ms": None,
               "latency_p50_ms": None, "latency_p99_ms": None}
    assert summary_columns([]) == {"requests_completed": 0, "num_requests": 0, **nothing}
    rows = [row(0, None, None, None, None), row(0, 10, 20, 5, 5, "error")]
    assert summary_columns(rows) == {"requests_completed": 1, "num_requests": 2, **nothing}


def test_summary_columns_zero_tokens_are_not_null():
    out = summary_columns([row(0, 10, 30, 0, 0)])
    assert (out["tokens_in"], out["tokens_out"]) == (0, 0)
    assert (out["ttft_p50_ms"], out["ttft_p99_ms"], out["latency_p50_ms"],
            out["latency_p99_ms"]) == (10.0, 10.0, 30.0, 30.0)


def test_summary_columns_time_only_or_tokens_only():
    out = summary_columns([row(100, 150, None, None, 3), row(200, None, 260, 4, None)])
    assert (out["tokens_in"], out["tokens_out"]) == (4, 3)
    assert (out["ttft_p50_ms"], out["latency_p50_ms"]) == (50.0, 60.0)


def test_csv_values_defaults_and_ids(tmp_path):
    path = write_csv(tmp_path, HEADER + ",request_id,status,requested_output_tokens\n"
                     "1.5,2.25,3.0,100,50,q-1,ok,64\n"
                     "4, , ,90,0,,error,\n"
                     "5,6,7, 3 ,2.0, ,cancelled,16.0\n"
                     "8,9,10,1,1,q-4, ,\n"
                     "11,12,13,,,q-5,,\n")
    log = read_requests("csv", path)
    assert (log.file, log.fmt, log.clock) == (path, "csv", "unix")
    assert log.requests == [
        Request("q-1", 1.5, 2.25, 3.0, 100, 50, 64, "ok"),
        Request("1", 4.0, None, None, 90, 0, None, "error"),
        Request("2", 5.0, 6.0, 7.0, 3, 2, 16, "cancelled"),
        Request("q-4", 8.0, 9.0, 10.0, 1, 1, None, "ok"),
        Request("q-5", 11.0, 12.0, 13.0, None, None, None, "ok"),
    ]
    assert [type(r.output_tokens) for r in log.requests[:3]] == [int, int, int]


def test_csv_header_order_and_spaces_are_free(tmp_path):
    path = write_csv(tmp_path, " output_tokens , status,prompt_tokens,finish_s,first_token_s,"
                     "arrival_s\n7,error,6,3,2,1\n")
    assert read_requests("csv", path).requests == [Request("0", 1.0, 2.0, 3.0, 6, 7, None,
                                                           "error")]


def test_csv_quoted_cells_keep_their_line_breaks(tmp_path):
    path = tmp_path / "requests.csv"
    path.write_bytes((HEADER + ",request_id\r\n1,2,3,4,5,\"a\r\nb\"\r\n6,7,8,9,10,c\r\n")
                     .encode())
    log = read_requests("csv", path)
    assert [r.request_id for r in log.requests] == ["a\r\nb", "c"]
    assert [r.arrival_s for r in log.requests] == [1.0, 6.0]


def test_csv_is_read_as_utf8_whatever_the_locale(tmp_path):
    path = tmp_path / "requests.csv"
    path.write_bytes((HEADER + ",request_id\n1,2,3,4,5,caf\u00e9-\u00b5s\n").encode("utf-8"))
    package = str(Path(llm_powertrace_ds.__file__).resolve().parents[1])
    code = ("import locale, sys\n"
            "from llm_powertrace_ds.importers.requests import read_requests\n"
            "print(locale.getpreferredencoding(False))\n"
            "print(ascii(read_requests('csv', sys.argv[1]).requests[0].request_id))\n")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONCOERCECLOCALE": "0",
           "PYTHONPATH": os.pathsep.join([package, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True,
                          text=True, encoding="utf-8", timeout=60)
    assert done.returncode == 0, done.stderr
    encoding, rid = done.stdout.splitlines()
    if encoding.lower().replace("-", "") in ("utf8", "utf_8"):
        pytest.skip("no locale with a non-UTF-8 encoding here")
    assert rid == ascii("caf\u00e9-\u00b5s")


def test_csv_not_utf8(tmp_path):
    path = tmp_path / "requests.csv"
    path.write_bytes(HEADER.encode() + b"\n1,2,3,4,5\n\xff\n")
    with pytest.raises(InputError) as info:
        read_requests("csv", path)
    assert where(info) == ("Failed to read: UnicodeDecodeError: 'utf-8' codec can't decode byte "
                           "0xff in position 71: invalid start byte", str(path), None, None)


@pytest.mark.parametrize("header,reason,field", [
    ("arrival_s,finish_s,prompt_tokens\n", "missing column(s) first_token_s, output_tokens; the "
     "header must have arrival_s, first_token_s, finish_s, prompt_tokens, output_tokens",
     "first_token_s"),
    ("", "missing column(s) arrival_s, first_token_s, finish_s, prompt_tokens, output_tokens; the "
     "header must have arrival_s, first_token_s, finish_s, prompt_tokens, output_tokens",
     "arrival_s"),
    (HEADER + ",gpu,request_id,model\n", "unknown column(s) gpu, model", "gpu"),
    ("arrival_s,first_token_s,finish_s,prompt_tokens,Output_tokens\n",
     "missing column(s) output_tokens; the header must have arrival_s, first_token_s, finish_s, "
     "prompt_tokens, output_tokens", "output_tokens"),
])
def test_csv_header_errors(tmp_path, header, reason, field):
    path = write_csv(tmp_path, header + "1,2,3,4,5,6,7,8\n" if header else "")
    with pytest.raises(InputError) as info:
        read_requests("csv", path)
    assert where(info) == (reason, str(path), 1, field)


@pytest.mark.parametrize("cells,reason,field", [
    ("x,2,3,4,5,0,", "value 'x' is not a number", "arrival_s"),
    ("1, 2s ,3,4,5,0,", "value '2s' is not a number", "first_token_s"),
    ("1,2,three,4,5,0,", "value 'three' is not a number", "finish_s"),
    ("1,2,3,four,5,0,", "value 'four' is not a number", "prompt_tokens"),
    ("1,2,3,4.5,5,0,", "value '4.5' is not a token count", "prompt_tokens"),
    ("1,2,3,-4,5,0,", "value '-4' is not a token count", "prompt_tokens"),
    ("1,2,3,4,five,0,", "value 'five' is not a number", "output_tokens"),
    ("1,2,3,4, 5.5 ,0,", "value '5.5' is not a token count", "output_tokens"),
    ("1,2,3,4,-1,0,", "value '-1' is not a token count", "output_tokens"),
    ("1,2,3,4,5,x,", "value 'x' is not a number", "requested_output_tokens"),
    ("1,2,3,4,5,0.25,", "value '0.25' is not a token count", "requested_output_tokens"),
    ("1,2,3,4,5,-1.5,", "value '-1.5' is not a token count", "requested_output_tokens"),
    ("1,2,3,4,5,0,done", "value 'done' is not one of ok, error, cancelled", "status"),
    ("1,2,3,4,5,0,OK", "value 'OK' is not one of ok, error, cancelled", "status"),
])
def test_csv_bad_values_name_file_line_and_field(tmp_path, cells, reason, field):
    path = write_csv(tmp_path, HEADER + ",requested_output_tokens,status\n1,2,3,4,5,6,ok\n"
                     + cells + "\n", name="bad.csv")
    with pytest.raises(InputError) as info:
        read_requests("csv", path)
    assert where(info) == (reason, str(path), 3, field)


START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def published(tmp_path: Path, make_run, run_id: str = "serve-1", **meta) -> Path:
    from llm_powertrace_ds.shards import publish_run

    out = tmp_path / "ds"
    publish_run(out, make_run(run_id, **{"workload": "inference", **meta}))
    return out


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_attach_refuses_monotonic_formats(tmp_path, fmt):
    data = {"start_times": [1.0], "input_lens": [3], "ttfts": [0.1]}
    path = tmp_path / f"{fmt}.json"
    path.write_text(json.dumps(data) + "\n")
    with pytest.raises(InputError) as info:
        attach_requests(tmp_path / "no-dataset", "serve-1", fmt, path)
    assert where(info) == (
        f"{fmt} request times are on the client's monotonic clock and cannot be aligned after "
        f"the fact: record them with `llm-powertrace record --requests {fmt}:FILE -- ...`",
        str(path), None, "format")


def test_attach_refuses_a_finetune_run(tmp_path, make_run):
    out = published(tmp_path, make_run, "ft-1", workload="finetune")
    path = write_csv(tmp_path, HEADER + f"\n{START.timestamp() + 1},,,1,1\n")
    with pytest.raises(InputError) as info:
        attach_requests(out, "ft-1", "csv", path)
    assert where(info) == ("run ft-1 is a finetune run; request logs belong to inference runs",
                           None, None, "workload")


def test_attach_needs_the_start_time(tmp_path, make_run):
    out = published(tmp_path, make_run, start_time=None)
    path = write_csv(tmp_path, HEADER + f"\n{START.timestamp() + 1},,,1,1\n")
    with pytest.raises(InputError) as info:
        attach_requests(out, "serve-1", "csv", path)
    assert where(info) == ("run serve-1 has no start_time to align wall-clock times with",
                           str(path), None, "start_time")


def test_attach_aligns_fills_missing_meta_and_leaves_the_card(tmp_path, make_run):
    from llm_powertrace_ds.shards import read_run

    out = published(tmp_path, make_run)  # tokens_out=2000 in its metadata; last tick 19902 ms
    card = (out / "README.md").read_bytes()
    t0 = START.timestamp()
    late = write_csv(tmp_path, HEADER + f"\n{t0 + 1.0},{t0 + 1.5},{t0 + 20.903},1,1\n",
                     name="late.csv")
    with pytest.raises(InputError) as info:
        attach_requests(out, "serve-1", "csv", late)
    assert where(info) == ("request '0' has its finish at 20.903 s on the run "
                           + OUTSIDE.format(end="19.902", clock="unix"), str(late), None,
                           "finish_s")
    path = write_csv(tmp_path, HEADER + ",status\n"
                     f"{t0 + 1.0},{t0 + 1.25},{t0 + 20.9},100,50,ok\n"
                     f"{t0 + 1.5},,,90,0,error\n")
    result = attach_requests(out, "serve-1", "csv", path)
    assert result.run_id == "serve-1"
    assert (out / "README.md").read_bytes() == card
    run = read_run(out, "serve-1")
    assert [(r["request_id"], r["arrival_ms"], r["first_token_ms"], r["finish_ms"], r["status"])
            for r in run.requests] == [("0", 1000, 1250, 20900, "ok"),
                                       ("1", 1500, None, None, "error")]
    got = {k: run.meta[k] for k in ("requests_completed", "num_requests", "tokens_in",
                                    "tokens_out", "ttft_p50_ms", "ttft_p99_ms",
                                    "latency_p50_ms", "latency_p99_ms")}
    assert got == {"requests_completed": 1, "num_requests": 2, "tokens_in": 100,
                   "tokens_out": 2000, "ttft_p50_ms": 250.0, "ttft_p99_ms": 250.0,
                   "latency_p50_ms": 19900.0, "latency_p99_ms": 19900.0}


@pytest.mark.parametrize("start_ms,arrival_s,arrival_ms", [
    (2, 1767225601.0019994, 1000),
    (6, 1767225601.0059993, 999),
])
def test_attach_aligns_on_the_start_time_to_the_nanosecond(tmp_path, make_run, start_ms,
                                                           arrival_s, arrival_ms):
    # At these float boundaries one nanosecond more (or less) in the anchor moves the request
    # to the neighbouring millisecond: the anchor is exactly (monotonic 0, start_time) at t0 0.
    from llm_powertrace_ds.shards import read_run

    start = START + dt.timedelta(milliseconds=start_ms)
    out = published(tmp_path, make_run, start_time=start)
    path = write_csv(tmp_path, HEADER + f"\n{arrival_s!r},,,1,1\n")
    attach_requests(out, "serve-1", "csv", path)
    assert [r["arrival_ms"] for r in read_run(out, "serve-1").requests] == [arrival_ms]
