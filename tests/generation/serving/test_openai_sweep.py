"""Real sweeps with ``serving_engine: openai`` against the local OpenAI double (issue 38)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_powertrace_ds import layout
from llm_powertrace_ds.shards import read_run, read_table

from .openai_double import DoubleConfig, start_double

SWEEP = """\
name: openai-double
workload: inference
sampler: {{source: cpu_proxy, period_ms: 50}}
idle_before_s: 0.2
idle_after_s: 0.2
base:
  serving_engine: openai
  endpoint: {url}
  model: double-model
  concurrency: 2
  prompt_len: 8
  output_len: 4
{extra}
"""


def write(tmp_path: Path, url: str, extra: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.format(url=url, extra=extra), encoding="utf-8")
    return path


def request_rows(out: Path) -> list[dict]:
    rows: list[dict] = []
    for path in layout.shard_files(out, "inference_requests"):
        rows.extend(read_table(path).to_pylist())
    return sorted(rows, key=lambda r: r["request_id"])


@pytest.mark.parametrize("pattern", [
    "  arrival_pattern: closed\n  num_requests: 10",
    "  arrival_pattern: poisson\n  arrival_rate_rps: 50\n  num_requests: 10",
    "  arrival_pattern: gamma\n  arrival_rate_rps: 50\n  arrival_cv: 2\n  num_requests: 10",
    "  arrival_pattern: replay\n  replay_file: trace.csv",
], ids=["closed", "poisson", "gamma", "replay"])
def test_a_sweep_against_a_running_server_publishes_one_run(tmp_path, pattern):
    from generation.runner import generate

    (tmp_path / "trace.csv").write_text(
        "arrival_s\n" + "".join(f"{i * 0.01:.2f}\n" for i in range(10)), encoding="utf-8")
    with start_double(DoubleConfig(token_delay_s=0.002, owned_by="vllm")) as server:
        report = generate(write(tmp_path, server.url, pattern), tmp_path / "ds",
                          progress=False)
        served = server.count
        bodies = list(server.bodies)
    assert [o.status for o in report.outcomes] == ["published"], report.outcomes[0].error
    run = read_run(tmp_path / "ds", report.outcomes[0].run_id)
    m = run.meta
    assert m["serving_engine"] == "openai" and m["platform"] == "cpu_proxy"
    assert m["served_by"] == "owned_by=vllm; server=openai-double/1.0"
    assert m["engine_version"] == "0.0.0-double"
    assert m["requests_completed"] == 10 and m["requests_unfinished"] == 0
    assert m["tokens_out"] == 40 and m["model_name"] == "double-model"
    assert m["torch_version"] is None  # the server's libraries are its own
    assert served == 10 + 2  # the run's requests and the two warm-up requests
    warm, sent = bodies[:2], bodies[2:]
    assert all(b["max_tokens"] == 2 for b in warm)  # warm-up: before the window, unrecorded
    assert not {tuple(b["prompt"]) for b in warm} & {tuple(b["prompt"]) for b in sent}
    rows = request_rows(tmp_path / "ds")
    assert len(rows) == 10 and {r["run_id"] for r in rows} == {run.run_id}
    prepare_end = next(e.t_ms for e in run.events if e.kind == "prepare_end")
    for r in rows:
        assert r["status"] == "ok" and r["output_tokens"] == 4
        assert prepare_end <= r["arrival_ms"] <= r["first_token_ms"] <= r["finish_ms"]
        assert r["chunk_ms"][0] == r["first_token_ms"] and len(r["chunk_ms"]) == 4
        assert r["chunk_ms"] == sorted(r["chunk_ms"]) and r["chunk_ms"][-1] <= r["finish_ms"]
    kinds = [e.kind for e in run.events]
    assert kinds.count("request_arrival") == 10 and kinds.count("request_finish") == 10
    assert "steady_begin" in kinds and "steady_end" in kinds


def test_cut_streams_errors_and_timeouts_are_failed_requests_not_a_crashed_run(tmp_path):
    from generation.runner import generate

    # completions 0-1 are the warm-up; of the run's, 5 is cut, 8 answers 500, 9 hangs
    faults = {5: "drop:2", 8: "error", 9: "hang"}
    with start_double(DoubleConfig(token_delay_s=0.002, faults=faults)) as server:
        report = generate(write(tmp_path, server.url,
                                "  arrival_pattern: closed\n  num_requests: 10\n"
                                "  request_timeout_s: 1.0"),
                          tmp_path / "ds", progress=False)
    assert [o.status for o in report.outcomes] == ["published"], report.outcomes[0].error
    m = read_run(tmp_path / "ds", report.outcomes[0].run_id).meta
    rows = request_rows(tmp_path / "ds")
    assert len(rows) == 10
    failed = [r for r in rows if r["status"] == "error"]
    assert len(failed) == 3 and m["requests_completed"] == 7 and m["request_timeout_s"] == 1.0
    cut = [r for r in failed if r["output_tokens"] == 2]
    assert len(cut) == 1 and len(cut[0]["chunk_ms"]) == 2  # what was streamed is kept
    assert all(r["finish_ms"] is not None for r in failed)


def test_a_server_that_does_not_serve_the_model_fails_the_run_with_its_names(tmp_path):
    from generation.runner import generate

    with start_double(DoubleConfig(model="other-model")) as server:
        report = generate(write(tmp_path, server.url,
                                "  arrival_pattern: closed\n  num_requests: 4"),
                          tmp_path / "ds", progress=False)
    (outcome,) = report.outcomes
    assert outcome.status == "failed"
    assert "does not serve model 'double-model'" in outcome.error
    assert "other-model" in outcome.error


def test_prompt_ids_stay_inside_the_served_models_vocabulary(tmp_path):
    from generation.runner import generate

    config = DoubleConfig(model="small-vocab-model", vocab_size=50)
    with start_double(config) as server:
        sweep = write(tmp_path, server.url, "  arrival_pattern: closed\n  num_requests: 6")
        sweep.write_text(sweep.read_text().replace("model: double-model",
                                                   "model: small-vocab-model"), encoding="utf-8")
        report = generate(sweep, tmp_path / "ds", progress=False)
        prompts = [b["prompt"] for b in server.bodies]
    assert [o.status for o in report.outcomes] == ["published"], report.outcomes[0].error
    assert prompts and all(0 <= t < 50 for p in prompts for t in p)
    assert all(len(p) == 8 for p in prompts[-6:])  # the run's prompts keep their length
