"""The model zoo: published shapes, parameter counts, Hub-cache resolution, offline tokenizer."""

from __future__ import annotations

import pytest

from generation.workloads import models
from llm_powertrace_ds import schema
from llm_powertrace_ds.errors import InputError

# Published parameter counts (model cards / safetensors metadata).
PUBLISHED = {
    "Llama-3.2-1B": 1_235_814_400,
    "Llama-3.1-8B": 8_030_261_248,
    "Qwen2.5-0.5B": 494_032_768,
    "Qwen2.5-7B": 7_615_616_512,
    "Mistral-7B-v0.3": 7_248_023_552,
    "gpt2": 124_439_808,
    "gpt2-xl": 1_557_611_200,
}


def test_zoo_covers_the_required_families_and_sizes():
    fams = {}
    for spec in models.ZOO.values():
        assert spec.family in schema.MODEL_FAMILIES
        fams.setdefault(spec.family, []).append(spec.name)
    for fam in ("llama", "qwen", "mistral", "gpt2"):
        assert f"{fam}-tiny" in fams[fam]
    for name in ("Llama-3.2-1B", "Llama-3.2-3B", "Llama-3.1-8B", "Qwen2.5-0.5B", "Qwen3-8B",
                 "Mistral-7B-v0.3", "gpt2", "gpt2-xl"):
        assert name in models.ZOO


@pytest.mark.parametrize("name,count", sorted(PUBLISHED.items()))
def test_published_parameter_counts(name, count):
    assert models.get_spec(name).estimated_params() == count


def test_instantiated_counts_match_shapes():
    import torch
    from transformers import AutoModelForCausalLM

    for name in ("Qwen3-0.6B", "Llama-3.2-3B", "gpt2-medium"):
        spec = models.get_spec(name)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(models.make_config(spec))
        assert models.count_params(model) == spec.estimated_params(), name
    for name in ("llama-tiny", "qwen-tiny", "mistral-tiny", "gpt2-tiny"):
        spec = models.get_spec(name)
        model = models.build_model(spec, seed=1)
        assert models.count_params(model) == spec.estimated_params() < 2_000_000
        assert model.config.vocab_size == spec.vocab_size


def test_random_init_is_seeded():
    spec = models.get_spec("gpt2-tiny")
    a = models.build_model(spec, seed=3).state_dict()
    b = models.build_model(spec, seed=3).state_dict()
    assert all((a[k] == b[k]).all() for k in a)


def test_unknown_model_lists_the_zoo():
    with pytest.raises(InputError, match="Llama-3.2-1B"):
        models.get_spec("llama-9000")
    assert models.get_spec("LLAMA-TINY").name == "llama-tiny"


def _fake_cache(root, repo_id, weights=True):
    folder = root / f"models--{repo_id.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("abc123")
    snap = folder / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    if weights:
        (snap / "model.safetensors").write_bytes(b"x")


def test_hub_checkpoint_is_fetched_from_the_cache_offline_or_refused(tmp_path, monkeypatch):
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    spec = models.get_spec("gpt2")
    assert models.resolve_source(spec, "zoo") == "zoo"
    assert models.resolve_source(spec, "hub") == "hub"  # fetched before the first run
    with pytest.raises(InputError, match="no longer exists"):
        models.resolve_source(spec, "auto")
    with pytest.raises(InputError, match="could not be fetched"):
        models.fetch_checkpoint("openai-community/gpt2", None)
    _fake_cache(tmp_path, "openai-community/gpt2")
    fetched = models.fetch_checkpoint("openai-community/gpt2", None)
    assert fetched.revision == "abc123" and fetched.path.endswith("snapshots/abc123")


def test_offline_byte_tokenizer():
    tok = models.build_tokenizer()
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    text = "héllo, wörld"
    ids = tok(text)["input_ids"]
    assert ids == [b + models.BYTE_OFFSET for b in text.encode("utf-8")]
    assert tok.decode(ids) == text
