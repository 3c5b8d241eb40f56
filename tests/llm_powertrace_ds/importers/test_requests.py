"""Request logs of serving benchmarks (vLLM, SGLang, plain CSV) onto the run clock.

The fixture files are written here from each client's documented format: vLLM's
``vllm bench serve --save-result --save-detailed`` result JSON (keys read from
``vllm/benchmarks/serve.py``), SGLang's ``bench_serving --output-details`` JSONL (keys from its
``docs/developer_guide/bench_serving.md``) and the project's plain CSV.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.requests import read_requests, summary_columns, to_run_clock

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
