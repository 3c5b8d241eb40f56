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
