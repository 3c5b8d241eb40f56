"""PowerTraceCallback on a real tiny TRL run (zoo model, CPU) under the context manager."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from generation.record import Recording  # noqa: E402
from llm_powertrace_ds import schema  # noqa: E402
from llm_powertrace_ds.shards import iter_rows, read_run, read_table  # noqa: E402


def test_a_tiny_trl_run_yields_the_generators_events_and_columns(tmp_path):
    from trl import SFTConfig, SFTTrainer

    from generation.record.callback import PowerTraceCallback
    from generation.workloads import data, models

    out = tmp_path / "ds"
    spec = models.get_spec("gpt2-tiny")
    seq_len, steps, batch = 16, 4, 2
    with Recording(out, "finetune", axes={"model_name": "gpt2-tiny", "method": "full",
                                          "seq_len": seq_len},
                   sampler="cpu_proxy", idle_before_s=0.2, idle_after_s=0.2) as rec:
        model = models.build_model(spec, "zoo", seed=0)
        ids = data.synthetic_token_ids(steps * batch * 2, seq_len, vocab_size=spec.vocab_size,
                                       seed=0)
        args = SFTConfig(output_dir=str(tmp_path / "ckpt"), max_steps=steps,
                         per_device_train_batch_size=batch, gradient_accumulation_steps=2,
                         learning_rate=1e-4, logging_steps=1, report_to="none", use_cpu=True,
                         save_strategy="steps", save_steps=2, max_length=seq_len,
                         packing=False, disable_tqdm=True, dataloader_num_workers=0)
        trainer = SFTTrainer(model=model, args=args, train_dataset=data.to_dataset(ids),
                             processing_class=models.build_tokenizer())
        trainer.add_callback(PowerTraceCallback(seq_len=seq_len))
        trainer.train()
    run = read_run(out, rec.run_id)
    ends = [e for e in run.events if e.kind == "step_end"]
    assert [e.step for e in ends] == list(range(1, steps + 1))  # one per optimizer step
    assert len([e for e in run.events if e.kind == "step_begin"]) == steps
    assert [e.step for e in run.events if e.kind == "checkpoint_end"] == [2, 4]
    assert run.meta["steps"] == steps and run.meta["tokens"] == steps * batch * 2 * seq_len
    assert run.meta["batch_size"] == batch and run.meta["grad_accum"] == 2
    assert run.meta["transformers_version"] and run.meta["trl_version"]
    assert run.meta["model_params"] > 0 and run.meta["final_loss"] > 0
    # the same columns as the generator's fine-tuning runs
    for config in ("finetune", "finetune_runs"):
        files = sorted((out / "data" / config).rglob("*.arrow"))
        assert read_table(files[0]).schema.names == list(schema.features_for(config))
    row = next(iter_rows(out, "finetune_runs"))
    assert row["energy_per_token_j"] == pytest.approx(row["energy_j"] / row["tokens"])
