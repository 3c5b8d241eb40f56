"""The streaming client and the HTTP engine against the local OpenAI double."""

from __future__ import annotations

import threading

import pytest

from generation.serving import probe
from generation.serving.client import CompletionStream, split_url
from generation.serving.engine import HttpEngine
from generation.workloads.inference.engines import Job

from .openai_double import DoubleConfig, start_double


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_stream_is_read_token_by_token(api):
    with start_double(DoubleConfig(token_delay_s=0.001)) as server:
        res = CompletionStream(server.url, "double-model", api=api).run([5, 6, 7], 6)
        body = server.bodies[0]
    assert res.error is None and not res.cancelled
    assert res.output_tokens == 6 and len(res.chunk_ns) == 6
    assert res.chunk_ns == sorted(res.chunk_ns)
    assert res.start_ns <= res.first_token_ns <= res.chunk_ns[-1] <= res.finish_ns
    assert res.prompt_tokens == 3
    # the output length is forced the way vLLM and SGLang accept it
    assert body["max_tokens"] == body["min_tokens"] == 6 and body["ignore_eos"] is True
    assert body["stream"] is True
    assert ("messages" in body) == (api == "chat") and ("prompt" in body) == (api != "chat")


def test_server_errors_cut_streams_and_timeouts_are_results_not_exceptions():
    faults = {0: "error", 1: "drop:2", 2: "hang"}
    with start_double(DoubleConfig(faults=faults)) as server:
        errored = CompletionStream(server.url, "double-model").run([1], 4)
        dropped = CompletionStream(server.url, "double-model").run([1], 4)
        hung = CompletionStream(server.url, "double-model", timeout_s=0.3).run([1], 4)
        wrong = CompletionStream(server.url, "no-such-model").run([1], 4)
    assert errored.error.startswith("HTTP 500") and errored.output_tokens == 0
    assert dropped.error is not None and len(dropped.chunk_ns) == 2
    assert hung.error == "client timeout after 0.3 s"
    assert wrong.error.startswith("HTTP 404")
    refused = CompletionStream("http://127.0.0.1:9/v1", "m").run([1], 1)
    assert refused.error is not None and refused.finish_ns is not None


def test_cancel_ends_a_request_in_flight():
    with start_double(DoubleConfig(token_delay_s=0.05)) as server:
        stream = CompletionStream(server.url, "double-model")
        out = {}
        started = threading.Event()

        def go():
            started.set()
            out["res"] = stream.run([1, 2], 1000)

        t = threading.Thread(target=go)
        t.start()
        started.wait()
        while server.active == 0:  # the server is generating for it
            threading.Event().wait(0.01)
        stream.cancel()
        t.join(30)
    assert out["res"].cancelled and out["res"].error == "cancelled"
    assert out["res"].output_tokens < 1000


def test_http_engine_serves_jobs_concurrently_and_reports_completions():
    with start_double(DoubleConfig(token_delay_s=0.01, max_concurrency=8)) as server:
        engine = HttpEngine(server.url, "double-model")
        engine.submit([Job(f"r{i}", [1, 2, 3], 5) for i in range(4)])
        done = []
        while len(done) < 4:
            done += engine.wait(30)
        engine.stop()
        assert server.max_active > 1  # in flight together
    assert sorted(c.request_id for c in done) == ["r0", "r1", "r2", "r3"]
    assert all(c.error is None and c.output_tokens == 5 and len(c.chunk_ns) == 5 for c in done)


def test_probe_reads_what_the_server_says():
    cfg = DoubleConfig(owned_by="vllm", version="9.9.9",
                       server_info={"max_running_requests": 48, "disable_cuda_graph": True,
                                    "page_size": 32})
    with start_double(cfg) as server:
        assert probe.served_by(server.url, "double-model") == \
            "owned_by=vllm; server=openai-double/1.0"
        assert probe.engine_version(server.url) == "9.9.9"
        assert probe.server_config(server.url) == {"batch_size": 48, "engine_block_size": 32,
                                                   "engine_cuda_graphs": False}
        with pytest.raises(LookupError, match="does not serve model 'other'"):
            probe.served_by(server.url, "other")


def test_split_url():
    assert split_url("http://127.0.0.1:8000/v1/") == ("http", "127.0.0.1", 8000, "/v1")
    assert split_url("https://host/api/v1")[2] == 443
    with pytest.raises(ValueError):
        split_url("ftp://x")


def test_probe_reads_vllms_cache_config_metric():
    metrics = ("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
               "# TYPE vllm:cache_config_info gauge\n"
               'vllm:cache_config_info{block_size="16",cache_dtype="fp8",'
               'enable_prefix_caching="False",gpu_memory_utilization="0.9"} 1.0\n')
    with start_double(DoubleConfig(metrics=metrics)) as server:
        assert probe.server_config(server.url) == {"engine_block_size": 16,
                                                   "engine_kv_cache_dtype": "fp8",
                                                   "engine_prefix_caching": False}
    with start_double() as server:  # reports nothing: nothing is guessed
        assert probe.server_config(server.url) == {}
