"""Known answers against the double: capacity calibration and bounded draining (issue 38).

The double serves at most ``max_concurrency`` requests at once, each taking
``prefill_delay_s + (max_tokens - 1) * token_delay_s`` (sleeps: never less), so its saturation
throughput is known exactly as an upper bound; the lower bounds leave room for a busy machine.
"""

from __future__ import annotations

import pytest

from generation.serving.calibrate import calibration_stream, measure_capacity
from generation.serving.engine import HttpEngine
from generation.workloads import arrivals as arr
from llm_powertrace_ds.shards import read_run

from .openai_double import DoubleConfig, start_double
from .test_openai_sweep import request_rows

# 2 slots, 0.05 s prefill + 3 x 0.05 s per 4-token request = 0.2 s: 10 requests/s, 40 tokens/s
KNOWN = DoubleConfig(token_delay_s=0.05, prefill_delay_s=0.05, max_concurrency=2)
CAPACITY_RPS = 2 / (0.05 + 3 * 0.05)


def test_capacity_of_a_server_with_a_known_rate():
    with start_double(KNOWN) as server:
        engine = HttpEngine(server.url, "double-model")
        stream = calibration_stream(arr.Lengths.fixed(8, 4), 16, seed=0)
        cap = measure_capacity(engine, stream, concurrency=4,
                               prompts=lambda r: [5] * r.prompt_tokens)
        engine.stop()
    assert cap.requests == cap.completed == 16 and cap.concurrency == 4
    assert 0.75 * CAPACITY_RPS <= cap.requests_per_s <= CAPACITY_RPS * 1.001
    assert cap.tokens_per_s == pytest.approx(4 * cap.requests_per_s)


SWEEP = """\
name: capacity
workload: inference
sampler: {{source: cpu_proxy, period_ms: 50}}
base:
  serving_engine: openai
  endpoint: {url}
  model: double-model
  concurrency: 4
{extra}
"""


def test_a_rate_given_as_a_fraction_of_capacity_is_calibrated_and_recorded(tmp_path):
    from generation.runner import generate

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP.format(url="{url}", extra="""\
  arrival_pattern: poisson
  arrival_rate: 0.5x
  calibration_requests: 16
  num_requests: 6
  prompt_len: 8
  output_len: 4
"""), encoding="utf-8")
    with start_double(KNOWN) as server:
        sweep.write_text(sweep.read_text().replace("{url}", server.url), encoding="utf-8")
        report = generate(sweep, tmp_path / "ds", progress=False)
    assert [o.status for o in report.outcomes] == ["published"], report.outcomes[0].error
    assert "poisson0.5x" in report.outcomes[0].run_id
    m = read_run(tmp_path / "ds", report.outcomes[0].run_id).meta
    assert m["arrival_rate_capacity_fraction"] == 0.5 and m["calibration_requests"] == 16
    assert 0.75 * CAPACITY_RPS <= m["capacity_rps"] <= CAPACITY_RPS * 1.001
    assert m["arrival_rate_rps"] == pytest.approx(0.5 * m["capacity_rps"], rel=1e-6)
    assert m["capacity_tokens_per_s"] == pytest.approx(4 * m["capacity_rps"], rel=1e-6)
    assert m["calibration_s"] > 0 and m["requests_completed"] == 6


def test_draining_is_bounded_and_what_is_left_is_unfinished(tmp_path):
    from generation.runner import generate

    # two requests at t = 0: 2 tokens (0.05 s) and 200 tokens (about 10 s); drain 0.5 s
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n"
                                        "0,8,2\n0,8,200\n", encoding="utf-8")
    sweep = tmp_path / "sweep.yaml"
    with start_double(DoubleConfig(token_delay_s=0.05)) as server:
        sweep.write_text(SWEEP.format(url=server.url, extra="""\
  arrival_pattern: replay
  length_distribution: replay
  replay_file: trace.csv
  drain_timeout_s: 0.5
""") + "idle_after_s: 0.1\n", encoding="utf-8")
        report = generate(sweep, tmp_path / "ds", progress=False)
    assert [o.status for o in report.outcomes] == ["published"], report.outcomes[0].error
    run = read_run(tmp_path / "ds", report.outcomes[0].run_id)
    m = run.meta
    assert m["drain_timeout_s"] == 0.5
    assert (m["requests_completed"], m["requests_unfinished"], m["num_requests"]) == (1, 1, 2)
    rows = request_rows(tmp_path / "ds")
    by_status = {r["status"]: r for r in rows}
    assert set(by_status) == {"ok", "unfinished"}
    left = by_status["unfinished"]
    assert left["requested_output_tokens"] == 200 and left["finish_ms"] is None
    last_arrival = max(r["arrival_ms"] for r in rows)
    end = next(e.t_ms for e in run.events if e.kind == "idle_begin")  # serving is over
    # the loop gave up 0.5 s after the last arrival, long before the 10 s the request needs
    assert 500 - 1 <= end - last_arrival < 9000
    assert m["tokens_out"] == 2


def test_draining_is_unbounded_without_a_timeout(tmp_path):
    from generation.workloads.inference.loop import ServingLoop

    with start_double(DoubleConfig(token_delay_s=0.01)) as server:
        engine = HttpEngine(server.url, "double-model")
        stream = arr.RequestStream(arr.ArrivalProcess("closed"), arr.Lengths.fixed(4, 30),
                                   num_requests=2)
        loop = ServingLoop(stream, lambda r: [5] * 4, concurrency=2)
        loop.bind(engine)
        records = loop.run()
        engine.stop()
    assert [r.status for r in records] == ["ok", "ok"]
    assert all(r.output_tokens == 30 for r in records)
