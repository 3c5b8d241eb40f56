"""transformers as a reference engine, honestly configured and labelled."""

from __future__ import annotations

import pytest

from generation.workloads import MachineInfo
from generation.workloads.inference import SPEC

GPU = MachineInfo(source="nvml", platform="h100_sxm_80gb", num_devices=8, cuda=True, bf16=True,
                  bitsandbytes=True, extra={"flash_attn": True, "flash_attn_3": False})
CPU = MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=2, cuda=False, bf16=True)


def resolved(machine: MachineInfo, **values):
    base = {"model": "llama-tiny", "num_requests": 8, "concurrency": 2}
    return SPEC.resolve({**base, **values}, machine)


def test_continuous_batching_on_a_gpu_defaults_to_the_paged_kernel_with_cuda_graphs():
    r = resolved(GPU, batching="continuous")
    assert r["cb_attn_implementation"] == "flash_attention_2" and r["cb_use_cuda_graph"] is True
    assert SPEC.check(r, GPU) == []
    r = resolved(CPU, batching="continuous")
    assert r["cb_attn_implementation"] == "sdpa" and r["cb_use_cuda_graph"] is False
    # the masked reference path stays available when asked for
    r = resolved(GPU, batching="continuous", cb_attn_implementation="sdpa",
                 cb_use_cuda_graph=False)
    assert (r["cb_attn_implementation"], r["cb_use_cuda_graph"]) == ("sdpa", False)


def test_a_gpu_without_the_flash_package_is_told_so_before_any_run():
    machine = MachineInfo(**{**GPU.__dict__, "extra": {"flash_attn": False}})
    found = dict(SPEC.check(resolved(machine, batching="continuous"), machine))
    assert "flash_attn package" in found["cb_attn_implementation"]
    assert "cb_attn_implementation: sdpa" in found["cb_attn_implementation"]


@pytest.mark.parametrize("values, weight, kv", [
    ({"weight_quant": "fp8", "weight_quant_backend": "quanto"}, "fp8_w8a16", "none"),
    ({"weight_quant": "int8", "weight_quant_backend": "quanto"}, "int8_w8a16", "none"),
    ({"weight_quant": "int4", "weight_quant_backend": "bitsandbytes"}, "nf4_w4a16", "none"),
    ({"weight_quant": "int8", "weight_quant_backend": "bitsandbytes"}, "int8_llm_int8", "none"),
    ({"kv_cache_quant": "int4", "batching": "static"}, "none", "int4_dequant_per_step"),
    ({"kv_cache_quant": "int2", "batching": "static"}, "none", "int2_dequant_per_step"),
])
def test_quantisation_is_labelled_by_the_kernels_that_run(values, weight, kv):
    cols = SPEC.columns(resolved(GPU, **values))
    assert cols["weight_quant"] == weight and cols["kv_cache_quant"] == kv
    assert cols["weight_quant"] != "fp8"  # no row claims an FP8 tensor-core path


def test_engine_runs_keep_the_engines_own_labels_and_transformers_run_ids_are_unchanged():
    r = resolved(GPU, serving_engine="vllm", model="meta-llama/Llama-3.1-8B", weight_quant="fp8",
                 kv_cache_quant="fp8")
    cols = SPEC.columns(r)
    assert (cols["weight_quant"], cols["kv_cache_quant"]) == ("fp8", "fp8")
    assert "cb_attn_implementation" not in r and SPEC.num_processes(r) == 1
    # engine knobs are not part of a transformers run (nor of its run id)
    t = resolved(GPU, batching="static")
    assert not any(k.startswith("engine_") or k in ("endpoint", "serving_api",
                                                     "request_timeout_s", "drain_timeout_s")
                   for k in t)


LEAK_SWEEP = """\
name: leak
workload: inference
sampler: {source: cpu_proxy, period_ms: 50}
base:
  model: llama-tiny
  batching: continuous
  concurrency: 2
  num_requests: 2
  prompt_len: 8
  output_len: 2
"""


def test_the_generation_thread_is_stopped_when_the_sampler_fails_to_start(tmp_path,
                                                                           monkeypatch):
    import threading

    from generation import sampler
    from generation.runner import generate

    def refuse(self):
        raise RuntimeError("the sampler could not start")

    monkeypatch.setattr(sampler.Sampler, "start", refuse)
    path = tmp_path / "leak.yaml"
    path.write_text(LEAK_SWEEP, encoding="utf-8")
    before = {t.ident for t in threading.enumerate()}
    report = generate(path, tmp_path / "ds", progress=False)
    assert [o.status for o in report.outcomes] == ["failed"]
    assert "could not start" in report.outcomes[0].error
    left = [t for t in threading.enumerate()
            if t.ident not in before and not t.daemon and t.is_alive()]
    assert left == [], left  # transformers' non-daemon generation thread was stopped
