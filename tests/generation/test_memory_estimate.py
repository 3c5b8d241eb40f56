"""Known answers of the memory estimator, and the dry run that lists cells that cannot fit."""

from __future__ import annotations

import pytest

from generation import memory_estimate as me
from generation.workloads import models

LLAMA8 = models.get_spec("Llama-3.1-8B")


def test_fp32_logits_of_seq_8192_batch_8_on_a_128k_vocabulary():
    est = me.estimate(LLAMA8, method="lora", precision="bf16", batch_size=8, seq_len=8192,
                      gradient_checkpointing=False)
    assert est.logits_fp32_bytes == 8 * 8192 * 128256 * 4 == 33_621_540_864  # ~34 GB
    # logits + their fp32 gradient + the bf16 head output
    assert est.logits_bytes == 8 * 8192 * 128256 * (4 + 4 + 2)
    assert me.too_big({"model": "Llama-3.1-8B", "method": "lora", "precision": "bf16",
                       "batch_size": 8, "seq_len": 8192, "gradient_checkpointing": False,
                       "parallelism": "single", "dp_size": 1},
                      "h100_sxm_80gb").startswith("needs ~")


def test_full_fine_tuning_with_adamw_is_16_bytes_per_parameter_sharded_by_fsdp():
    p = LLAMA8.estimated_params()
    assert p == 8_030_261_248  # the published count of Llama-3.1-8B
    one = me.estimate(LLAMA8, method="full", precision="bf16", batch_size=1, seq_len=512,
                      gradient_checkpointing=True)
    assert one.weights_bytes + one.gradients_bytes + one.optimizer_bytes == 16 * p
    eight = me.estimate(LLAMA8, method="full", precision="bf16", batch_size=1, seq_len=512,
                        gradient_checkpointing=True, parallelism="fsdp", dp_size=8)
    assert eight.weights_bytes == 4 * p // 8 and eight.optimizer_bytes == 8 * p // 8
    ddp = me.estimate(LLAMA8, method="full", precision="bf16", batch_size=1, seq_len=512,
                      gradient_checkpointing=True, parallelism="ddp", dp_size=8)
    assert ddp.weights_bytes == 4 * p  # DDP replicates


def test_checkpointing_keeps_one_hidden_state_per_layer():
    kw = dict(method="lora", precision="bf16", batch_size=2, seq_len=1024)
    off = me.estimate(LLAMA8, gradient_checkpointing=False, **kw)
    on = me.estimate(LLAMA8, gradient_checkpointing=True, **kw)
    per_token, h, layers = 83968, 4096, 32  # 4h + 2*32*128 + 2*8*128 + 4*14336
    assert off.activations_bytes == 2 * 1024 * 2 * layers * per_token
    assert on.activations_bytes == 2 * 1024 * 2 * (layers * h + per_token)


def test_parameter_counts_of_the_published_shapes():
    assert models.get_spec("Llama-3.1-70B").estimated_params() == 70_553_706_496
    mixtral = models.get_spec("Mixtral-8x7B-v0.1")
    assert mixtral.moe and mixtral.estimated_params() == 46_702_792_704
    assert mixtral.estimated_params(active=True) == 12_879_925_248


@pytest.mark.parametrize("name", ["llama-tiny", "qwen-tiny", "gpt2-tiny", "phi-tiny",
                                  "mixtral-tiny", "gemma-tiny"])
def test_lora_and_model_counts_equal_what_peft_and_transformers_instantiate(name):
    from peft import LoraConfig, get_peft_model

    spec = models.get_spec(name)
    model = models.build_model(spec, seed=0)
    assert models.count_params(model) == spec.estimated_params()
    peft_model = get_peft_model(model, LoraConfig(
        r=8, lora_alpha=16, target_modules=spec.default_lora_targets.split(","),
        fan_in_fan_out=spec.arch == "gpt2", task_type="CAUSAL_LM"))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert trainable == me.lora_params(spec, 8, None)


def test_device_memory_from_the_platform_slug():
    assert me.device_memory_bytes("h100_sxm_80gb") == 80 * me.GIB
    assert me.device_memory_bytes("cpu_proxy") is None


def test_dry_run_prints_the_estimate_next_to_the_gpu_memory_and_refuses(tmp_path, capsys):
    import csv
    import io
    from pathlib import Path

    from llm_powertrace_ds import cli

    sweep = Path(tmp_path, "s.yaml")
    sweep.write_text("name: big\nworkload: finetune\nsampler: {source: nvml}\n"
                     "base: {model: Llama-3.1-8B, model_source: hub, method: lora,\n"
                     "       precision: bf16, gradient_checkpointing: false, batch_size: 8}\n"
                     "grid: {seq_len: [512, 8192]}\n")
    cli.main(["generate", str(sweep), "--out", str(tmp_path / "ds"), "--dry-run",
              "--assume-platform", "h100_sxm_80gb", "--format", "csv"])
    small, big = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert small["status"] == "todo" and float(small["mem_gib"]) < float(small["gpu_gib"]) == 80
    assert big["status"] == "too_big" and "logits" in big["error"]
    assert float(big["mem_gib"]) > 80


# --- serving --------------------------------------------------------------------------------

LLAMA70 = models.get_spec("Llama-3.1-70B")


def test_serving_weights_at_the_dtype_the_engine_loads_per_tensor_parallel_rank():
    p = LLAMA70.estimated_params()
    bf16 = me.serving_estimate(LLAMA70, precision="bf16", tp_size=4, max_num_seqs=1,
                               max_model_len=1)
    assert bf16.weights_bytes == p * 2 // 4
    # FP8 quantised on the fly: loaded in the original dtype first
    fly = me.serving_estimate(LLAMA70, precision="bf16", tp_size=1, max_num_seqs=1,
                              max_model_len=1, weight_quant="fp8")
    assert fly.weights_bytes == p * 2 and fly.load_dtype == "bf16"
    pre = me.serving_estimate(LLAMA70, precision="bf16", tp_size=1, max_num_seqs=1,
                              max_model_len=1, weight_quant="fp8", prequantized=True)
    assert pre.weights_bytes == p and pre.load_dtype == "fp8"


def test_serving_kv_cache_for_every_sequence_at_full_length():
    # Llama-3.1-70B: 80 layers, 8 KV heads of 128; K and V; bf16; split over 2 ranks
    est = me.serving_estimate(LLAMA70, precision="bf16", tp_size=2, max_num_seqs=128,
                              max_model_len=769)
    assert est.kv_cache_bytes == 2 * 80 * 4 * 128 * 2 * 128 * 769
    fp8 = me.serving_estimate(LLAMA70, precision="bf16", tp_size=16, max_num_seqs=128,
                              max_model_len=769, kv_cache_quant="fp8")
    assert fp8.kv_cache_bytes == 2 * 80 * 1 * 128 * 1 * 128 * 769  # a KV head per rank at least


def served(**over):
    r = {"serving_engine": "vllm", "model": "meta-llama/Llama-3.1-70B", "precision": "bf16",
         "tp_size": 1, "batch_size": 256, "concurrency": 16, "weight_quant": "fp8",
         "kv_cache_quant": "none", "arrival_pattern": "closed", "num_requests": 512,
         "length_distribution": "fixed", "prompt_len": 512, "output_len": 256, "seed": 0}
    r.update(over)
    from generation.planning import planning_machine
    from generation.workloads.inference import SPEC

    return SPEC.resolve(r, planning_machine({"source": "nvml"}))


def test_a_70b_fp8_cell_at_tp_1_is_refused_with_one_line_naming_what_it_needs():
    reason = me.too_big(served(), "h100_sxm_80gb")
    assert reason is not None and "\n" not in reason
    assert reason.startswith("meta-llama/Llama-3.1-70B in bf16, weight_quant fp8 loaded as "
                             "bf16 at "
                             "tp_size 1 needs ~")
    assert "GB per GPU > 77.3 GB (0.9 of 85.9 GB, h100_sxm_80gb)" in reason
    assert me.too_big(served(tp_size=4, weight_quant="none"), "h100_sxm_80gb") is None
    # the engine's share of the card is read from its own flag
    share = served(tp_size=4, weight_quant="none",
                   engine_extra_args="--gpu-memory-utilization 0.3")
    assert "0.3 of 85.9 GB" in me.too_big(share, "h100_sxm_80gb")


def test_a_dry_run_lists_a_served_cell_that_cannot_load_as_too_big(tmp_path):
    from generation.runner import generate

    sweep = tmp_path / "s.yaml"
    sweep.write_text("""\
name: big
workload: inference
sampler: {source: nvml, period_ms: 100}
base: {model: meta-llama/Llama-3.1-70B, serving_engine: vllm, precision: bf16, batch_size: 256,
       arrival_pattern: closed, concurrency: 16, num_requests: 512, prompt_len: 512,
       output_len: 256, tp_size: 1, weight_quant: fp8}
""", encoding="utf-8")
    report = generate(sweep, tmp_path / "ds", dry_run=True, assume_platform="h100_sxm_80gb")
    (outcome,) = report.outcomes
    assert outcome.status == "too_big" and "at tp_size 1 needs ~" in outcome.error
