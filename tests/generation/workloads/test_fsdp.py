"""Issue 11, item 9: FSDP in transformers 5 / accelerate 1.x's current form (FSDP2), 2 gloo ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from generation.workloads import MachineInfo, RunContext, finetune

CPU2 = MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=2, cuda=False,
                   bf16=True)


def test_fsdp_arguments_are_the_current_form(tmp_path):
    r = finetune.SPEC.resolve({"model": "llama-tiny", "method": "full", "parallelism": "fsdp",
                               "dp_size": 2}, CPU2)
    ctx = RunContext(run_id="r", staging_dir=tmp_path, mark=lambda *a, **k: None,
                     world_size=2, progress=False)
    kwargs = finetune.sft_config_kwargs(r, ctx, tmp_path)
    assert kwargs["fsdp"] is True  # not the deprecated string form
    config = kwargs["fsdp_config"]
    assert config["version"] == 2 and "use_orig_params" not in config  # FSDP1-only option
    assert config["reshard_after_forward"] is True  # FSDP1's FULL_SHARD
    # (SFTConfig itself needs a process group with FSDP: the slow test below builds it.)


FSDP_SWEEP = """\
name: fsdp
workload: finetune
sampler: {source: cpu_proxy, period_ms: 100}
idle_before_s: 0.2
idle_after_s: 0.2
base:
  model: llama-tiny
  method: full
  parallelism: fsdp
  dp_size: 2
  batch_size: 2
  seq_len: 32
  max_steps: 2
"""


@pytest.mark.slow
def test_fsdp_trains_with_two_gloo_ranks_on_cpu(tmp_path):
    from generation.runner import generate
    from llm_powertrace_ds.shards import read_run

    sweep = Path(tmp_path, "fsdp.yaml")
    sweep.write_text(FSDP_SWEEP)
    report = generate(sweep, tmp_path / "ds", progress=False)
    [outcome] = report.outcomes
    assert outcome.status == "published", outcome.error
    run = read_run(tmp_path / "ds", outcome.run_id)
    assert run.meta["parallelism"] == "fsdp" and run.meta["num_gpus"] == 2
    assert run.meta["steps"] == 2 and run.meta["tokens"] == 2 * 2 * 2 * 32
    assert run.meta["weights_dtype"] == "float32"  # full fine-tuning: fp32 master weights
    assert len(run.devices) == 2  # one cpu_proxy device per rank
    kinds = [e.kind for e in run.events]
    assert kinds.index("prepare_end") < kinds.index("idle_begin")
