"""Issue 11, items 2 and 3 through the real runner.

Set-up before the window, and a failed (out-of-memory) run that leaves nothing behind for the
next run's idle padding.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from generation.workloads import finetune

SWEEP = """\
name: oom
workload: finetune
sampler: {source: cpu_proxy, period_ms: 50}
idle_before_s: 0.2
idle_after_s: 0.1
base:
  model: llama-tiny
  method: lora
  lora_rank: 4
  batch_size: 2
  seq_len: 16
  max_steps: 1
grid:
  seed: [0, 1]
"""


def test_an_out_of_memory_run_is_recorded_and_the_next_starts_clean(tmp_path, monkeypatch):
    import torch

    from generation.runner import generate
    from llm_powertrace_ds.shards import read_run

    models: list[weakref.ref] = []
    real_run = finetune.FinetuneSpec.run

    def run(self, r, ctx):
        if r["seed"] == 0:
            models.append(weakref.ref(ctx.prepared.trainer.model))
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        gc.collect()
        assert models and models[0]() is None, "the failed run's model is still alive"
        return real_run(self, r, ctx)

    monkeypatch.setattr(finetune.FinetuneSpec, "run", run)
    sweep = Path(tmp_path, "oom.yaml")
    sweep.write_text(SWEEP)
    report = generate(sweep, tmp_path / "ds", progress=False)
    first, second = report.outcomes
    assert first.status == "failed" and "OutOfMemoryError" in first.error
    assert second.status == "published", second.error
    run = read_run(tmp_path / "ds", second.run_id)
    kinds = [e.kind for e in run.events]
    assert kinds.index("prepare_end") < kinds.index("idle_begin")
