"""Every stream has a line limit and every wait a deadline.

Against an OpenAI-compatible server that sends a line without end, trickles bytes or never
finishes.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from generation.serving.client import CompletionStream, StreamResult
from llm_powertrace_ds.shards import read_run

from .openai_double import DoubleConfig, start_double, sweep_text


def run_bounded(target, limit_s: float):
    """``target()`` in a thread; ``(finished, result, seconds)`` after at most ``limit_s``."""
    out: list = []
    started = time.monotonic()
    thread = threading.Thread(target=lambda: out.append(target()), daemon=True)
    thread.start()
    thread.join(limit_s)
    return not thread.is_alive(), (out[0] if out else None), time.monotonic() - started


def test_a_line_without_a_newline_ends_the_request_at_the_line_limit():
    with start_double(DoubleConfig(faults={0: "endless"})) as server:
        stream = CompletionStream(server.url, "double-model", timeout_s=60)
        finished, res, _ = run_bounded(lambda: stream.run([5, 6], 4), 30)
    assert finished, "the request was still reading an endless line after 30 s"
    assert isinstance(res, StreamResult)
    assert res.error == "an SSE line longer than 1048576 bytes after 0 chunk(s)"  # 1 MiB
    assert res.output_tokens == 0 and res.chunk_ns == []


def test_a_trickling_server_cannot_hold_a_request_past_its_client_timeout():
    with start_double(DoubleConfig(faults={0: "trickle"})) as server:
        stream = CompletionStream(server.url, "double-model", timeout_s=1.0)
        finished, res, seconds = run_bounded(lambda: stream.run([5, 6], 4), 20)
    assert finished, "a byte every 50 ms held the request past its 1 s timeout"
    assert res.error == "client timeout after 1 s" and not res.cancelled
    assert seconds < 5


def test_a_run_whose_requests_time_out_fails_in_one_line_without_tracebacks(tmp_path: Path,
                                                                             capfd):
    from generation.runner import generate

    faults = {i: "trickle" for i in range(64)}
    with start_double(DoubleConfig(faults=faults)) as server:
        sweep = tmp_path / "sweep.yaml"
        sweep.write_text(sweep_text(server.url, "bounds", extra="  request_timeout_s: 1\n"
                                    "  drain_timeout_s: 2"), encoding="utf-8")
        finished, report, seconds = run_bounded(
            lambda: generate(sweep, tmp_path / "ds", progress=False), 60)
    assert finished, "the run hung past request_timeout_s and drain_timeout_s"
    (outcome,) = report.outcomes
    assert outcome.status == "failed"
    assert "client timeout after 1 s" in outcome.error and "\n" not in outcome.error
    assert "Traceback" not in capfd.readouterr().err


def test_requests_given_up_by_the_drain_end_the_run_at_its_deadline(tmp_path: Path):
    from generation.runner import generate

    # warm-up (requests 0 and 1) is served; every measured request trickles forever
    faults = {i: "trickle" for i in range(2, 64)}
    with start_double(DoubleConfig(faults=faults)) as server:
        sweep = tmp_path / "sweep.yaml"
        sweep.write_text(sweep_text(server.url, "bounds", extra="  drain_timeout_s: 1").replace(
            "arrival_pattern: closed", "arrival_pattern: poisson\n  arrival_rate_rps: 50"),
            encoding="utf-8")
        finished, report, seconds = run_bounded(
            lambda: generate(sweep, tmp_path / "ds", progress=False), 60)
    assert finished, "the run hung past drain_timeout_s"
    (outcome,) = report.outcomes
    assert outcome.status == "published", outcome.error
    assert seconds < 30
    meta = read_run(tmp_path / "ds", outcome.run_id).meta
    assert meta["requests_unfinished"] == 4 and meta["requests_completed"] == 0



def test_the_body_of_a_servers_description_is_read_up_to_a_limit():
    from generation.serving import probe
    from generation.serving.client import get_text

    huge = "# " + "x" * (17 << 20) + "\n"
    with start_double(DoubleConfig(metrics=huge)) as server:
        with pytest.raises(OSError, match="answered more than 16777216 bytes"):
            get_text(server.url.removesuffix("/v1"), "/metrics")
        assert probe.vllm_cache_config(server.url) == {}  # what it says is then unknown


def test_a_request_that_raises_is_a_failed_request_not_a_dead_thread(capfd):
    import numpy as np

    from generation.serving.engine import HttpEngine
    from generation.workloads.inference.engines import Job

    with start_double() as server:
        engine = HttpEngine(server.url, "double-model", timeout_s=10)
        # numpy ids are not JSON: the stream raises TypeError while building its body
        engine.submit([Job("r0", [np.int64(5), np.int64(6)], 4)])
        done = engine.wait(10)
        engine.stop()
    assert [d.request_id for d in done] == ["r0"], "the request thread died without a result"
    assert done[0].error.startswith("unexpected TypeError: ")
    assert "\n" not in done[0].error
    assert "Traceback" not in capfd.readouterr().err
