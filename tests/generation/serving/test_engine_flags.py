"""The launch command lines use flags the engines accept, in the form every release runs."""

from __future__ import annotations

import dataclasses

import pytest

from generation.serving.launch import EngineConfig, engine_command


def flags(cmd: list[str]) -> list[str]:
    return [tok.split("=", 1)[0] for tok in cmd if tok.startswith("--")]


def every_knob(engine: str) -> list[str]:
    cfg = EngineConfig(engine, "m", "m", block_size=16, weight_quant="fp8", kv_cache_quant="fp8",
                       cuda_graphs=False, prefix_caching=False, chunked_prefill=False,
                       python="python")
    return engine_command(cfg, "127.0.0.1", 1)


def test_each_engine_runs_as_its_server_module():
    assert every_knob("vllm")[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert every_knob("sglang")[:3] == ["python", "-m", "sglang.launch_server"]


def test_every_sglang_flag_is_a_field_of_the_installed_server_args():
    server_args = pytest.importorskip("sglang.srt.server_args")
    fields = {f.name for f in dataclasses.fields(server_args.ServerArgs)}
    missing = [f for f in flags(every_knob("sglang")) if f[2:].replace("-", "_") not in fields]
    assert missing == []

