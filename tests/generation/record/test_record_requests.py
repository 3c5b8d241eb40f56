"""``record --requests``: a client run under record writes vLLM's detailed result file."""

from __future__ import annotations

import sys

from generation.record import RecordConfig, record_command
from generation.record.requests import loader
from llm_powertrace_ds.shards import iter_rows, read_run

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
