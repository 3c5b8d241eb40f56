"""``record --requests``: a client run under record writes vLLM's detailed result file."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from generation.record import RecordConfig, record_command
from generation.record.requests import loader
from llm_powertrace_ds import layout
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.requests import read_requests, summary_columns, to_run_clock
from llm_powertrace_ds.run import Run
from llm_powertrace_ds.shards import iter_rows, read_run, read_table
from llm_powertrace_ds.shards.encode import requests_table

# A stand-in client that keeps vLLM's result keys and clock (time.perf_counter start times).
CLIENT = """\
import json, sys, time
starts, ttfts, itls = [], [], []
for i in range(5):
    st = time.perf_counter()
    time.sleep(0.05)
    ttft = time.perf_counter() - st
    gaps = []
    for _ in range(3):
        t = time.perf_counter(); time.sleep(0.01); gaps.append(time.perf_counter() - t)
    starts.append(st); ttfts.append(ttft); itls.append(gaps)
json.dump({"input_lens": [32] * 5, "output_lens": [4] * 5, "ttfts": ttfts, "itls": itls,
           "start_times": starts, "errors": [""] * 5, "generated_texts": [""] * 5},
          open(sys.argv[1], "w"))
"""


def test_requests_land_inside_the_work_window(tmp_path):
    out = tmp_path / "ds"
    result = tmp_path / "result.json"
    outcome = record_command(
        [sys.executable, "-c", CLIENT, str(result)],
        RecordConfig(out=out, workload="inference", sampler="cpu_proxy", idle_before_s=0.5,
                     idle_after_s=0.5, axes={"model_name": "Llama-3.1-8B",
                                             "serving_engine": "vllm", "concurrency": 1}),
        requests_from=loader("vllm", result))
    assert outcome.status == "published", outcome
    run = read_run(out, outcome.run_id)
    idle_end = min(e.t_ms for e in run.events if e.kind == "idle_end")
    idle_begin = max(e.t_ms for e in run.events if e.kind == "idle_begin")
    rows = list(iter_rows(out, "inference_requests"))
    assert len(rows) == 5
    for r in rows:
        assert idle_end <= r["arrival_ms"] <= r["first_token_ms"] <= r["finish_ms"] <= idle_begin
    assert run.meta["requests_completed"] == 5 and run.meta["tokens_out"] == 20
    assert run.meta["ttft_p50_ms"] >= 40


# A stand-in for SGLang's client with --print-requests: its two stdout lines per request, the
# output printed as the repr of a RequestFuncOutput (start_time = time.perf_counter()).
SGLANG_CLIENT = """\
import time, uuid
from dataclasses import dataclass, field

@dataclass
class RequestFuncOutput:
    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    ttft: float = 0.0
    itl: list = field(default_factory=list)
    prompt_len: int = 0
    error: str = ""
    output_len: int = 0
    start_time: float = 0.0

print("Starting warmup with 1 sequences...")
print("Warmup completed with 1 sequences. Starting main benchmark run...")
for i in range(4):
    rid, t_start = uuid.uuid4().hex, time.time()
    print(f'rid={rid} time={t_start} message="request start" request_func_input="..."')
    out = RequestFuncOutput(generated_text="...", prompt_len=16, output_len=3)
    st = out.start_time = time.perf_counter()
    time.sleep(0.05)
    out.ttft = time.perf_counter() - st
    for _ in range(3):
        t = time.perf_counter(); time.sleep(0.01); out.itl.append(time.perf_counter() - t)
    out.latency = time.perf_counter() - st
    out.success = True
    now = time.time()
    print(f'rid={rid} time={now} time_delta={now - t_start} message="request end" output="{out}"')
"""


def test_sglang_print_requests_log_under_record(tmp_path):
    out = tmp_path / "ds"
    client, log = tmp_path / "client.py", tmp_path / "client.log"
    client.write_text(SGLANG_CLIENT)
    outcome = record_command(
        ["sh", "-c", f'exec "{sys.executable}" "{client}" > "{log}"'],
        RecordConfig(out=out, workload="inference", sampler="cpu_proxy", idle_before_s=0.3,
                     idle_after_s=0.3, axes={"model_name": "Llama-3.1-8B",
                                             "serving_engine": "sglang", "concurrency": 1}),
        requests_from=loader("sglang", log))
    assert outcome.status == "published", outcome
    run = read_run(out, outcome.run_id)
    idle_end = min(e.t_ms for e in run.events if e.kind == "idle_end")
    idle_begin = max(e.t_ms for e in run.events if e.kind == "idle_begin")
    rows = list(iter_rows(out, "inference_requests"))
    assert len(rows) == 4
    for r in rows:
        assert idle_end <= r["arrival_ms"] <= r["first_token_ms"] <= r["finish_ms"] <= idle_begin
        assert r["first_token_ms"] - r["arrival_ms"] >= 40
    assert run.meta["program"] == "sh" and run.meta["tokens_out"] == 12


# A stand-in client that writes the plain request CSV (UNIX seconds, time.time()).
CSV_CLIENT = """\
import sys, time
rows = []
for i in range(int(sys.argv[2])):
    arrival = time.time()
    time.sleep(0.01)
    first = time.time()
    time.sleep(0.01)
    rows.append(f"{sys.argv[3]}{i},{arrival:.6f},{first:.6f},{time.time():.6f},{10 + i},{3 + i % 2},ok")
if len(sys.argv) > 4:
    rows.append(rows[1].replace(",ok", ",ok", 1))  # the second request's id once more
with open(sys.argv[1], "w") as fh:
    fh.write("request_id,arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens,status\\n")
    fh.write("\\n".join(rows) + "\\n")
"""


def _record_csv(tmp_path, *client_args):
    out = tmp_path / "ds"
    log = tmp_path / "requests.csv"
    outcome = record_command(
        [sys.executable, "-c", CSV_CLIENT, str(log), *client_args],
        RecordConfig(out=out, workload="inference", sampler="cpu_proxy", idle_before_s=0.3,
                     idle_after_s=0.3, axes={"model_name": "Llama-3.1-8B",
                                             "serving_engine": "vllm", "concurrency": 1}),
        requests_from=loader("csv", log))
    return out, log, outcome


@pytest.fixture
def streamed_calls(monkeypatch):
    """Every call of the streamed CSV import by ``record``; the whole-log CSV reader refuses."""
    from generation.record import requests as record_requests
    from llm_powertrace_ds.importers import requests as importers_requests
    from llm_powertrace_ds.importers.requests_stream import stream_csv_requests

    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return stream_csv_requests(*args, **kwargs)

    def whole(path):
        raise AssertionError(f"the whole-log CSV reader read {path}")

    monkeypatch.setattr(record_requests, "stream_csv_requests", spy, raising=False)
    monkeypatch.setitem(importers_requests.READERS, "csv", whole)
    return calls


def test_a_csv_log_under_record_is_streamed_into_the_shard_the_whole_log_path_gives(
        tmp_path, streamed_calls, monkeypatch):
    out, log, outcome = _record_csv(tmp_path, "6", "req-")
    assert outcome.status == "published", outcome
    assert len(streamed_calls) == 1
    assert not (layout.staging_dir(out, outcome.run_id) / "requests-import").exists()
    got = read_table(layout.requests_path(out, "cpu_proxy", outcome.run_id))
    # the whole-log path on the same clock (the CSV read whole, then to_run_clock), written as
    # a shard is written whole
    monkeypatch.undo()
    call = streamed_calls[0]
    expected = to_run_clock(read_requests("csv", log), run_id=outcome.run_id,
                            platform="cpu_proxy", t0_ns=call["t0_ns"], anchor=call["anchor"],
                            run_end_ms=call["run_end_ms"])
    run = read_run(out, outcome.run_id)
    assert got.num_rows == 6 and got.equals(requests_table(Run(run.meta, [], requests=expected)))
    summary = summary_columns(expected)
    for key in ("requests_completed", "tokens_in", "tokens_out", "ttft_p50_ms",
                "latency_p99_ms"):
        assert np.float32(run.meta[key]) == np.float32(summary[key]), key  # stored as float32
    idle_end = min(e.t_ms for e in run.events if e.kind == "idle_end")
    idle_begin = max(e.t_ms for e in run.events if e.kind == "idle_begin")
    for r in got.to_pylist():
        assert idle_end <= r["arrival_ms"] <= r["first_token_ms"] <= r["finish_ms"] <= idle_begin


def test_a_repeated_id_in_a_csv_log_under_record_names_both_lines(tmp_path, streamed_calls):
    with pytest.raises(InputError) as err:
        _record_csv(tmp_path, "4", "req-", "repeat")
    assert str(err.value).count("\n") == 0
    assert "request id 'req-1' appears twice (lines 3 and 6)" in str(err.value)
    assert "requests.csv" in str(err.value) and "request_id" in str(err.value)
    assert len(streamed_calls) == 1
    out = tmp_path / "ds"
    assert not list(layout.staging_root(out).glob("*/requests-import"))
    assert not layout.data_root(out).exists() or not list(
        (layout.data_root(out)).rglob("*.arrow"))
