"""Issue 11, item 9: FSDP in transformers 5 / accelerate 1.x's current form (FSDP2), 2 gloo ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from generation.workloads import MachineInfo, RunContext, finetune

CPU2 = MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=2, cuda=False,
                   bf16=True)


def test_fsdp_is_applied_at_load_not_by_the_trainer(tmp_path):
    r = finetune.SPEC.resolve({"model": "llama-tiny", "method": "full", "parallelism": "fsdp",
                               "dp_size": 2}, CPU2)
    assert r["sharding_strategy"] == "fsdp2_full_shard"
    ctx = RunContext(run_id="r", staging_dir=tmp_path, mark=lambda *a, **k: None,
                     world_size=2, progress=False)
    kwargs = finetune.sft_config_kwargs(r, ctx, tmp_path)
    # FSDP2 shards the model while it loads (transformers' DistributedConfig) in setup, before
    # the sampler starts; the trainer must not wrap it again.
    assert "fsdp" not in kwargs and "fsdp_config" not in kwargs


FSDP_SWEEP = """\
name: fsdp
workload: finetune
sampler: {{source: cpu_proxy, period_ms: 100}}
idle_before_s: 0.2
idle_after_s: 0.2
base:
  model: {model}
  method: {method}
  parallelism: fsdp
  dp_size: 2
  batch_size: 2
  seq_len: 32
  max_steps: 2
"""


@pytest.mark.slow
@pytest.mark.parametrize("model,method", [("llama-tiny", "full"), ("mixtral-tiny", "lora")])
def test_fsdp2_trains_with_two_gloo_ranks_on_cpu(tmp_path, model, method):
    from generation.runner import generate
    from generation.workloads import models
    from llm_powertrace_ds.shards import read_run

    sweep = Path(tmp_path, "fsdp.yaml")
    sweep.write_text(FSDP_SWEEP.format(model=model, method=method))
    report = generate(sweep, tmp_path / "ds", progress=False)
    [outcome] = report.outcomes
    assert outcome.status == "published", outcome.error
    run = read_run(tmp_path / "ds", outcome.run_id)
    assert run.meta["parallelism"] == "fsdp" and run.meta["num_gpus"] == 2
    assert run.meta["sharding_strategy"] == "fsdp2_full_shard"
    assert run.meta["dp_size"] == 2 and run.meta["tp_size"] == 1
    assert run.meta["steps"] == 2 and run.meta["tokens"] == 2 * 2 * 2 * 32
    if method == "full":
        assert run.meta["weights_dtype"] == "float32"  # full fine-tuning: fp32 master weights
        # the sharded model counts every parameter once (global shapes), not one rank's shard
        assert run.meta["model_params"] == models.get_spec(model).estimated_params()
    assert len(run.devices) == 2  # one cpu_proxy device per rank
    kinds = [e.kind for e in run.events]
    assert kinds.index("prepare_end") < kinds.index("idle_begin")
    # the trainer's own preparation inside the window is labelled
    labels = [(e.kind, e.label) for e in run.events if e.kind.startswith("warmup")]
    assert ("warmup_begin", "trainer_prepare") in labels
    assert ("warmup_end", "trainer_prepare") in labels
