"""Issue 11, item 1: a cached Hub checkpoint loads in the run's dtype, not in the one it was saved in."""

from __future__ import annotations

from generation.workloads import models


def _cache_checkpoint(root, repo_id: str, dtype) -> None:
    """A real (tiny) checkpoint saved in ``dtype``, laid out as the Hub cache does."""
    from transformers import AutoModelForCausalLM

    folder = root / f"models--{repo_id.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("abc123")
    snap = folder / "snapshots" / "abc123"
    model = AutoModelForCausalLM.from_config(models.make_config(models.get_spec("llama-tiny")),
                                             dtype=dtype)
    model.save_pretrained(snap)


def test_a_bf16_cached_checkpoint_loads_in_the_requested_fp32(tmp_path, monkeypatch):
    # transformers 5 defaults to dtype="auto": before the fix a row saying fp32 trained the
    # bf16 weights the cache happened to hold.
    import huggingface_hub.constants as c
    import torch

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    _cache_checkpoint(tmp_path, "meta-llama/Llama-3.2-1B", torch.bfloat16)
    spec = models.get_spec("Llama-3.2-1B")
    assert models.resolve_source(spec, "hub") == "hub"
    model = models.build_model(spec, "hub", dtype=torch.float32, device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert models.weights_dtypes(model) == "float32"
    bf16 = models.build_model(spec, "hub", dtype=torch.bfloat16, device="cpu")
    assert models.weights_dtypes(bf16) == "bfloat16"
