"""Sweep settings of the HTTP serving engines: what is refused, at which line, and why."""

from __future__ import annotations

import pytest

from generation.sweep import SweepError, load_sweep, plan
from generation.workloads import MachineInfo

CPU = MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=2, cuda=False, bf16=True)

HEAD = """\
name: s
workload: inference
sampler: {source: cpu_proxy}
base:
  concurrency: 2
  num_requests: 4
  prompt_len: 8
  output_len: 4
"""


def problems(tmp_path, body: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + body, encoding="utf-8")
    with pytest.raises(SweepError) as info:
        plan(load_sweep(path, strict=False), CPU)
    return str(info.value)


def test_openai_needs_an_endpoint_and_leaves_quantisation_to_the_server(tmp_path):
    text = problems(tmp_path, "  serving_engine: openai\n  model: m\n  weight_quant: fp8\n")
    assert "field 'endpoint': serving_engine openai needs endpoint" in text
    assert "a running server's quantisation is its own" in text
    text = problems(tmp_path, "  serving_engine: openai\n  model: m\n  endpoint: ftp://x\n")
    assert "'ftp://x' is not an http(s) URL" in text


def test_launched_engines_take_their_own_quantisation_only(tmp_path):
    text = problems(tmp_path, "  serving_engine: vllm\n  model: m\n  kv_cache_quant: int4\n"
                    "  endpoint: http://127.0.0.1:1/v1\n")
    assert "line 11, field 'kv_cache_quant': vllm runs take kv_cache_quant none or fp8" in text
    assert "line 12, field 'endpoint': endpoint is for serving_engine openai" in text


def test_rates_as_fractions_of_capacity(tmp_path):
    text = problems(tmp_path, "  serving_engine: openai\n  model: m\n"
                    "  endpoint: http://127.0.0.1:1/v1\n  arrival_rate: fast\n")
    assert "line 12, field 'arrival_rate': 'fast' is not a rate" in text
    text = problems(tmp_path, "  serving_engine: openai\n  model: m\n"
                    "  endpoint: http://127.0.0.1:1/v1\n  arrival_rate: 0.5x\n")
    assert "a rate as a fraction of capacity needs arrival_pattern poisson or gamma" in text
    text = problems(tmp_path, "  model: llama-tiny\n  arrival_pattern: poisson\n"
                    "  arrival_rate: 0.5x\n")
    assert "use serving_engine vllm, sglang or openai" in text
    text = problems(tmp_path, "  model: llama-tiny\n  kv_cache_quant: fp8\n  batching: static\n")
    assert "an fp8 KV cache is an engine's own" in text


def test_an_absolute_arrival_rate_is_arrival_rate_rps(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "  serving_engine: openai\n  model: m\n"
                    "  endpoint: http://127.0.0.1:1/v1\n  arrival_pattern: poisson\n"
                    "  arrival_rate: 4\n", encoding="utf-8")
    (run,) = plan(load_sweep(path), CPU)
    assert run.settings["arrival_rate_rps"] == 4.0
    assert run.settings["arrival_rate_capacity_fraction"] is None
    assert "endpoint" not in run.columns  # the server's address is never published
    assert "poisson4" in run.run_id
    # nor hashed: the same server on another port keeps the run ids (resume works)
    path.write_text(path.read_text().replace(":1/v1", ":2/v1"), encoding="utf-8")
    (again,) = plan(load_sweep(path), CPU)
    assert again.run_id == run.run_id and again.settings["_endpoint"].endswith(":2/v1")
