"""The fine-tuning workload: settings resolution, checks, trainer arguments, events, a real run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from generation.workloads import MachineInfo, RunContext, finetune, get_workload
from llm_powertrace_ds import schema

CPU = MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=2, cuda=False, bf16=True)
GPU = MachineInfo(source="nvml", platform="h100_sxm_80gb", num_devices=4, cuda=True, bf16=True,
                  bitsandbytes=True, can_set_power_limit=True)
SPEC = finetune.SPEC


def test_spec_is_registered_and_typed_after_the_schema():
    assert get_workload("finetune") is SPEC
    columns = {c.name: c.feature.dtype for c in schema.FINETUNE_AXES}
    for name, setting in SPEC.settings.items():
        if name in columns:
            assert setting.dtype == columns[name], name
    assert set(columns) - set(SPEC.settings) == set(finetune.DERIVED)  # derived


def test_resolve_defaults_and_derived_columns():
    r = SPEC.resolve({"model": "gpt2-tiny", "batch_size": 3, "grad_accum": 2}, CPU)
    assert r["precision"] == "fp32" and r["method"] == "lora"
    assert r["lora_targets"] == "c_attn,c_proj" and r["dp_size"] == 1 and r["num_gpus"] == 1
    assert r["global_batch_size"] == 6 and r["max_steps"] == finetune.DEFAULT_MAX_STEPS
    assert (r["model_family"], r["model_name"], r["model_source"]) == ("gpt2", "gpt2-tiny", "zoo")
    full = SPEC.resolve({"model": "llama-tiny", "method": "full", "lora_rank": 8}, GPU)
    assert full["precision"] == "bf16"
    assert full["lora_rank"] is None and full["lora_alpha"] is None and full["lora_targets"] is None
    ddp = SPEC.resolve({"model": "llama-tiny", "parallelism": "ddp"}, GPU)
    assert ddp["dp_size"] == 4 and ddp["num_gpus"] == 4 and SPEC.num_processes(ddp) == 4
    timed = SPEC.resolve({"model": "llama-tiny", "target_duration_s": 30}, CPU)
    assert timed["max_steps"] is None and timed["target_duration_s"] == 30
    cols = SPEC.columns(ddp)
    assert set(cols) <= schema.RUN_LEVEL_FIELDS["finetune"] and "model" not in cols
    assert SPEC.slug(ddp) == "ft-llama-tiny-lora-r16-b4-s512-bf16-ddp4"


@pytest.mark.parametrize("values,machine,field", [
    ({"method": "qlora"}, CPU, "method"),
    ({"method": "qlora"}, MachineInfo(**{**GPU.__dict__, "bitsandbytes": False}), "method"),
    ({"precision": "fp16"}, CPU, "precision"),
    ({"precision": "bf16"}, MachineInfo(**{**GPU.__dict__, "bf16": False}), "precision"),
    ({"parallelism": "fsdp", "dp_size": 1}, GPU, "parallelism"),
    ({"parallelism": "ddp", "dp_size": 8}, GPU, "dp_size"),
    ({"parallelism": "tp"}, GPU, "parallelism"),
    ({"dp_size": 2}, GPU, "dp_size"),
    ({"tp_size": 2}, GPU, "tp_size"),
    ({"seq_len": 2048}, CPU, "seq_len"),
    ({"power_limit_setting_w": 250}, CPU, "power_limit_setting_w"),
    ({"lora_targets": "q_proj,gate"}, CPU, "lora_targets"),
    ({"optimizer": "paged_adamw_8bit"}, CPU, "optimizer"),
    ({"model": "nope"}, CPU, "model"),
    ({"dataset_name": "/no/such/file.txt"}, CPU, "dataset_name"),
])
def test_impossible_settings_are_named(values, machine, field):
    r = SPEC.resolve({"model": "llama-tiny", **values}, machine)
    problems = SPEC.check(r, machine)
    assert field in [p[0] for p in problems], problems


def test_a_bad_local_dataset_is_caught_at_validation(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    r = SPEC.resolve({"model": "llama-tiny", "dataset_name": str(bad)}, CPU)
    (field, message), = SPEC.check(r, CPU)
    assert field == "dataset_name" and "line 2" in message and "bad.jsonl" in message
    good = tmp_path / "good.txt"
    good.write_text("some text")
    r = SPEC.resolve({"model": "llama-tiny", "dataset_name": str(good)}, CPU)
    assert SPEC.check(r, CPU) == [] and r["dataset_name"] == "local:good.txt"


def test_valid_settings_have_no_problems():
    for machine, values in ((CPU, {"parallelism": "ddp", "dp_size": 2}),
                            (GPU, {"method": "qlora", "precision": "bf16",
                                   "power_limit_setting_w": 300})):
        r = SPEC.resolve({"model": "llama-tiny", **values}, machine)
        assert SPEC.check(r, machine) == []


def ctx_for(tmp_path: Path, events: list, **kw) -> RunContext:
    def mark(kind, step=None, label=None, **_):
        events.append((kind, step, label))

    return RunContext(run_id="r", staging_dir=tmp_path, mark=mark, progress=False, **kw)


def test_trainer_arguments():
    r = SPEC.resolve({"model": "llama-tiny", "checkpoint_every_steps": 5, "precision": "bf16",
                      "gradient_checkpointing": True, "eval_every_steps": 3,
                      "optimizer": "sgd", "max_steps": 7}, CPU)
    kw = finetune.sft_config_kwargs(r, ctx_for(Path("."), []), Path("/x"))
    assert kw["max_steps"] == 7 and kw["save_strategy"] == "steps" and kw["save_steps"] == 5
    assert kw["bf16"] and not kw["fp16"] and kw["use_cpu"] and kw["optim"] == "sgd"
    assert kw["gradient_checkpointing"] and kw["eval_steps"] == 3 and kw["logging_steps"] == 1
    assert kw["max_length"] == r["seq_len"] and kw["report_to"] == "none"
    ddp = SPEC.resolve({"model": "llama-tiny", "parallelism": "ddp", "dp_size": 2}, CPU)
    kw = finetune.sft_config_kwargs(ddp, ctx_for(Path("."), [], world_size=2, rank=1),
                                    Path("/x"))
    assert kw["ddp_backend"] == "gloo" and kw["save_strategy"] == "no" and kw["disable_tqdm"]
    timed = SPEC.resolve({"model": "llama-tiny", "target_duration_s": 5}, CPU)
    assert finetune.sft_config_kwargs(timed, ctx_for(Path("."), []), Path("/x"))["max_steps"] > 10**6


def test_callback_event_order_and_deadline():
    events: list = []
    cb = finetune._callback_class()(lambda kind, step=None, **_: events.append((kind, step)),
                                    duration_ns=None, world_size=1)
    state = SimpleNamespace(global_step=0)
    control = SimpleNamespace(should_evaluate=False, should_save=False,
                              should_training_stop=False)
    cb.on_step_begin(None, state, control)
    state.global_step = 1
    control.should_evaluate = control.should_save = True
    cb.on_step_end(None, state, control)
    cb.on_evaluate(None, state, control)
    cb.on_save(None, state, control)
    control.should_evaluate = False
    cb.on_step_begin(None, state, control)
    state.global_step = 2
    cb.on_step_end(None, state, control)
    cb.on_save(None, state, control)
    assert events == [("step_begin", 1), ("step_end", 1), ("eval_begin", 1), ("eval_end", 1),
                      ("checkpoint_begin", 1), ("checkpoint_end", 1), ("step_begin", 2),
                      ("step_end", 2), ("checkpoint_begin", 2), ("checkpoint_end", 2)]
    cb.deadline_ns = 0
    control.should_save = False
    cb.on_step_end(None, state, control)
    assert control.should_training_stop


def test_a_real_tiny_training_run(tmp_path):
    events: list = []
    r = SPEC.resolve({"model": "qwen-tiny", "method": "lora", "lora_rank": 4, "batch_size": 2,
                      "seq_len": 16, "max_steps": 3, "checkpoint_every_steps": 2,
                      "eval_every_steps": 3}, CPU)
    SPEC.prepare()
    out = SPEC.run(r, ctx_for(tmp_path, events))
    assert out["steps"] == 3 and out["tokens"] == 3 * 2 * 16 and out["tokens_per_s"] > 0
    assert out["final_loss"] > 0 and out["model_params"] > 0
    kinds = [e[0] for e in events]
    assert kinds[:2] == ["warmup_begin", "warmup_end"]
    assert kinds.count("step_begin") == 3 and kinds.count("step_end") == 3
    at = events.index(("checkpoint_begin", 2, None))
    assert events[at - 1] == ("step_end", 2, None) and events[at + 1][0] == "checkpoint_end"
    assert "eval_begin" in kinds and "eval_end" in kinds
    # written to node-local storage (not the output folder), measured, then removed
    # step 2 and the last step (the trainer saves at the end too)
    assert out["checkpoint_storage"] == "node_local" and out["checkpoints_written"] == 2
    assert out["checkpoint_bytes"] > 0 and out["checkpoint_write_s"] > 0
    assert not (tmp_path / "checkpoints").exists()
    assert not finetune.node_local_checkpoint_dir("r").exists()


def test_training_until_a_target_duration(tmp_path):
    events: list = []
    r = SPEC.resolve({"model": "gpt2-tiny", "method": "full", "batch_size": 1, "seq_len": 8,
                      "target_duration_s": 1.0}, CPU)
    out = SPEC.run(r, ctx_for(tmp_path, events))
    assert out["steps"] >= 1 and out["train_span_s"] >= 1.0
    assert out["train_span_s"] < 10
