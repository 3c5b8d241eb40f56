"""Real weights and real text, offline.

A checkpoint the test saves, loaded through ``from_pretrained`` with the Hub offline; a local
instruction dataset through ``datasets``; a missing checkpoint stops the sweep before its first
run; random weights are labelled.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generation.workloads import models
from llm_powertrace_ds.errors import InputError

CHAT_TEMPLATE = ("{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>"
                 "{% endfor %}")

SWEEP = """\
name: real
workload: finetune
sampler: {{source: cpu_proxy, period_ms: 100}}
base:
  model: llama-tiny
  model_source: hub
  checkpoint: {checkpoint}
  method: lora
  batch_size: 2
  seq_len: 32
  max_steps: 2
  checkpoint_every_steps: 1
  dataset_name: {dataset}
"""


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    import huggingface_hub.constants as c

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))


def save_checkpoint(folder: Path) -> Path:
    """A tiny llama checkpoint with a tokenizer that has a chat template (save_pretrained)."""
    import torch

    model = models.build_model(models.get_spec("llama-tiny"), seed=5, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    tok = models.build_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(folder)
    return folder


def save_dataset(folder: Path, n: int = 6) -> Path:
    folder.mkdir(parents=True)
    rows = [{"instruction": f"Name a colour number {i}.", "context": "",
             "response": f"Colour {i} is blue."} for i in range(n)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return folder


def test_hub_checkpoint_and_dataset_run_end_to_end(tmp_path):
    from generation.runner import generate
    from llm_powertrace_ds.shards import read_run

    ckpt = save_checkpoint(tmp_path / "ckpt")
    data = save_dataset(tmp_path / "dolly-mini")
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP.format(checkpoint=ckpt, dataset=data))
    report = generate(sweep, tmp_path / "ds", progress=False)
    [outcome] = report.outcomes
    assert outcome.status == "published", outcome.error
    meta = read_run(tmp_path / "ds", outcome.run_id).meta
    assert meta["model_source"] == "hub" and meta["random_weights"] is False
    assert meta["model_revision"] == models.local_revision(ckpt)
    assert meta["weights_dtype_on_disk"] == "bfloat16"
    assert meta["dataset_name"] == "local:dolly-mini"
    assert meta["dataset_revision"].startswith("local:")
    assert meta["checkpoint_storage"] == "node_local"
    assert meta["checkpoints_written"] == 2 and meta["checkpoint_bytes"] > 0
    assert meta["checkpoint_write_s"] > 0
    assert not (tmp_path / "ds" / ".staging" / outcome.run_id / "checkpoints").exists()


def test_instruction_text_is_chat_templated_and_packed(tmp_path):
    from generation.workloads import data

    ckpt = save_checkpoint(tmp_path / "ckpt")
    folder = save_dataset(tmp_path / "d", n=2)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt, local_files_only=True)
    ids = data.instruction_token_ids(str(folder), tok, 3, 40)
    assert ids.shape == (3, 40)
    text = tok.decode(ids.reshape(-1).tolist())  # sequences are cut from one packed stream
    assert "user\nName a colour number 0." in text and "assistant\nColour 0 is blue." in text
    with pytest.raises(InputError, match="record 1 has neither"):
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / "train.jsonl").write_text(json.dumps({"question": "x"}) + "\n")
        data.instruction_token_ids(str(bad), tok, 1, 8)


def test_a_missing_checkpoint_fails_before_the_first_run(tmp_path):
    from generation.runner import generate

    data = save_dataset(tmp_path / "d")
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP.format(checkpoint="meta-llama/Llama-3.2-1B", dataset=data))
    with pytest.raises(InputError, match="checkpoint 'meta-llama/Llama-3.2-1B' at revision "
                       "'main' could not be fetched"):
        generate(sweep, tmp_path / "ds", progress=False)
    assert not (tmp_path / "ds" / ".staging").exists() or not any(
        p.name != "locks" for p in (tmp_path / "ds" / ".staging").iterdir())
    assert not (tmp_path / "ds" / "data").exists()


def test_auto_is_gone_and_zoo_is_labelled_random():
    from generation.workloads import MachineInfo, finetune

    cpu = MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=2, cuda=False,
                      bf16=True)
    r = finetune.SPEC.resolve({"model": "llama-tiny", "model_source": "auto"}, cpu)
    assert any("'auto' no longer exists" in m for _, m in finetune.SPEC.check(r, cpu))
    r = finetune.SPEC.resolve({"model": "llama-tiny"}, cpu)
    assert r["model_source"] == "zoo" and r["random_weights"] is True
    r = finetune.SPEC.resolve({"model": "llama-tiny", "model_source": "hub",
                               "dataset_name": "databricks/databricks-dolly-15k"}, cpu)
    assert ("model_source", "model 'llama-tiny' has no Hub id; name a `checkpoint` (a Hub id "
            "or a local folder) or use model_source: zoo") in finetune.SPEC.check(r, cpu)
    r = finetune.SPEC.resolve({"model": "llama-tiny",
                               "dataset_name": "databricks/databricks-dolly-15k"}, cpu)
    assert any(k == "dataset_name" and "needs model_source hub" in m
               for k, m in finetune.SPEC.check(r, cpu))


SHIPPED = Path(__file__).resolve().parents[2] / "generation" / "sweeps"


def test_no_shipped_gpu_sweep_uses_random_weights_or_synthetic_text():
    from generation.planning import ASSUMED
    from generation.sweep import load_sweep, plan

    checked = 0
    for path in sorted(SHIPPED.glob("*.yaml")):
        sweep = load_sweep(path)
        if sweep.sampler.get("source") != "nvml":
            continue
        for run in plan(sweep, ASSUMED):
            s = run.settings
            assert s["model_source"] == "hub", (path.name, run.run_id)
            assert s.get("random_weights", False) is False  # served engines: their own load
            if sweep.workload == "finetune":
                assert s["dataset_name"] != "synthetic", (path.name, run.run_id)
            checked += 1
    assert checked > 100
    demo = load_sweep(SHIPPED / "demo-finetune.yaml")
    [first, *_] = plan(demo, ASSUMED)
    assert first.settings["random_weights"] is True and first.columns["random_weights"] is True
