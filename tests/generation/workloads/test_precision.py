"""Issue 11, item 1: precision is what the row says — the dtype columns are the real dtypes."""

from __future__ import annotations

from collections import Counter

import pytest

from generation.workloads import MachineInfo, RunContext, finetune, models

CPU = MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=1, cuda=False, bf16=True)


def _ctx(tmp_path):
    return RunContext(run_id="r", staging_dir=tmp_path, mark=lambda *a, **k: None,
                      progress=False)


def _real_dtypes(model) -> str:
    counts: Counter[str] = Counter()
    seen = set()
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            counts[str(p.dtype).removeprefix("torch.")] += p.numel()
    return ",".join(k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@pytest.mark.parametrize(("method", "precision", "weights", "compute"), [
    ("lora", "fp32", "float32", "float32"),
    ("lora", "bf16", "bfloat16,float32", "bfloat16"),  # bf16 base, fp32 adapters
    ("full", "fp32", "float32", "float32"),
    ("full", "bf16", "float32", "bfloat16"),  # fp32 master weights, bf16 autocast compute
])
def test_dtype_columns_equal_the_parameters_real_dtypes(tmp_path, method, precision, weights,
                                                        compute):
    r = finetune.SPEC.resolve({"model": "llama-tiny", "method": method, "precision": precision,
                               "batch_size": 2, "seq_len": 16, "max_steps": 1}, CPU)
    ctx = _ctx(tmp_path)
    ctx.prepared = finetune.setup(r, ctx)
    model = ctx.prepared.trainer.model
    assert ctx.prepared.columns["weights_dtype"] == _real_dtypes(model) == weights
    result = finetune.train(r, ctx)
    assert result["weights_dtype"] == weights
    assert result["compute_dtype"] == compute  # observed in the first forward pass
    assert result["attn_implementation"] in ("sdpa", "eager")
    assert result["tf32"] is None  # CPU


def test_zoo_models_are_built_in_the_requested_dtype_on_the_target_device():
    import torch

    spec = models.get_spec("gpt2-tiny")
    model = models.build_model(spec, dtype=torch.bfloat16, device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert models.weights_dtypes(model) == "bfloat16"
    default = models.build_model(spec)
    assert {p.dtype for p in default.parameters()} == {torch.float32}  # never "auto"


def test_base_weights_dtype_policy():
    assert finetune.base_weights_dtype({"method": "full", "precision": "bf16"}) == "float32"
    assert finetune.base_weights_dtype({"method": "lora", "precision": "fp16"}) == "float16"
    assert finetune.base_weights_dtype({"method": "qlora", "precision": "fp32"}) == "float32"
