"""The model zoo: published architecture shapes of open LLMs, and where their real weights live.

Two sources, and a sweep says which one it wants (``model_source``):

* ``hub``: the real checkpoint, named by its Hub id (the zoo entry's ``hub_id``, or the
  ``checkpoint`` setting: another Hub id or a local folder) at a revision (``model_revision``:
  a commit hash, tag or branch; default ``main``). Before the first run of a sweep every
  checkpoint it needs is fetched once on this node (:func:`fetch_checkpoints`, never inside a
  measured window); a checkpoint that cannot be fetched stops the sweep there, before any run.
  The row records the commit that was loaded (``model_revision``) and ``random_weights`` false.
* ``zoo``: the same architecture instantiated with random weights (for the demo, the tests and
  ``cpu_proxy``). Rows say so: ``model_source = zoo`` and ``random_weights`` true. Power depends
  on the operands as well as on the shapes, so random-weight rows are never mixed with real ones
  under one label.

The shapes are those of the published ``config.json`` files (hidden size, intermediate size,
layers, attention and key-value heads, head dimension, vocabulary, positions, tied embeddings,
RoPE base, experts). They size the random-init models and the memory estimate
(``generation/memory_estimate.py``); a Hub run counts the parameters of what it loaded.
``*-tiny`` entries keep each family's architecture at a size that trains on a CPU in seconds.

This module imports neither torch nor transformers at import time: specs, names and the
checkpoint checks are available to sweep validation without the ``generate`` extra.

Example:
    >>> spec = get_spec("Llama-3.2-1B")
    >>> spec.family, spec.max_positions
    ('llama', 131072)
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_powertrace_ds.errors import InputError

from . import Setting

# Token ids 0..2 are reserved for the offline tokenizer's special tokens.
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
NUM_SPECIAL = 3
BYTE_OFFSET = NUM_SPECIAL  # byte b is token id b + BYTE_OFFSET

_CONFIG_CLASSES = {
    "llama": "LlamaConfig",
    "qwen2": "Qwen2Config",
    "qwen3": "Qwen3Config",
    "mistral": "MistralConfig",
    "gpt2": "GPT2Config",
    "mixtral": "MixtralConfig",
    "gemma2": "Gemma2Config",
    "phi3": "Phi3Config",
}
_LORA_TARGETS = {
    "llama": "q_proj,k_proj,v_proj,o_proj",
    "qwen2": "q_proj,k_proj,v_proj,o_proj",
    "qwen3": "q_proj,k_proj,v_proj,o_proj",
    "mistral": "q_proj,k_proj,v_proj,o_proj",
    "gpt2": "c_attn,c_proj",
    "mixtral": "q_proj,k_proj,v_proj,o_proj",
    "gemma2": "q_proj,k_proj,v_proj,o_proj",
    "phi3": "qkv_proj,o_proj",
}


@dataclass(frozen=True)
class ModelSpec:
    """One zoo entry.

    Attributes:
        name: the published model name (``Llama-3.2-1B``), or ``<family>-tiny``.
        family: the schema's model family (``llama``, ``qwen``, ``mistral``, ``gpt2``).
        arch: the ``transformers`` architecture key (``llama``, ``qwen2``, ``qwen3``, ...).
        shape: keyword arguments of the architecture's config class (the published shape).
        hub_id: the Hub repository of the real checkpoint, if any.
    """

    name: str
    family: str
    arch: str
    shape: dict[str, Any] = field(hash=False)
    hub_id: str | None = None

    def __post_init__(self) -> None:
        if self.arch not in _CONFIG_CLASSES:
            raise ValueError(f"unknown architecture {self.arch!r}")

    @property
    def max_positions(self) -> int:
        """The longest sequence the architecture supports (its position embeddings)."""
        return int(self.shape.get("max_position_embeddings", self.shape.get("n_positions", 0)))

    @property
    def vocab_size(self) -> int:
        """Vocabulary size of the architecture."""
        return int(self.shape["vocab_size"])

    @property
    def default_lora_targets(self) -> str:
        """Comma-separated LoRA target modules used when a sweep names none."""
        return _LORA_TARGETS[self.arch]

    @property
    def target_modules(self) -> frozenset[str]:
        """Linear-module names a LoRA adapter can target in this architecture."""
        if self.arch == "gpt2":
            return frozenset({"c_attn", "c_proj", "c_fc"})
        if self.arch == "phi3":
            return frozenset({"qkv_proj", "o_proj", "gate_up_proj", "down_proj"})
        if self.arch == "mixtral":
            return frozenset({"q_proj", "k_proj", "v_proj", "o_proj"})
        return frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                          "down_proj"})

    @property
    def num_experts(self) -> int:
        """Experts per MoE layer (0 for a dense model)."""
        return int(self.shape.get("num_local_experts", 0))

    @property
    def experts_per_token(self) -> int:
        """Experts each token is routed to (0 for a dense model)."""
        return int(self.shape.get("num_experts_per_tok", 0))

    @property
    def moe(self) -> bool:
        """Whether the model is a mixture of experts."""
        return self.num_experts > 0

    def estimated_params(self, *, active: bool = False) -> int:
        """Analytic parameter count (no torch); the published rows use the instantiated count.

        Args:
            active: count only the experts one token is routed to (mixture-of-experts models).
        """
        s = self.shape
        if self.arch == "gpt2":
            h, n, v, p = s["n_embd"], s["n_layer"], s["vocab_size"], s["n_positions"]
            per_layer = 12 * h * h + 13 * h
            return v * h + p * h + n * per_layer + 2 * h
        h, n, v = s["hidden_size"], s["num_hidden_layers"], s["vocab_size"]
        inter, heads = s["intermediate_size"], s["num_attention_heads"]
        kv = s.get("num_key_value_heads", heads)
        hd = s.get("head_dim") or h // heads
        attn = h * heads * hd * 2 + h * kv * hd * 2
        if self.arch == "qwen2":
            attn += heads * hd + 2 * kv * hd  # q/k/v biases
        if self.arch == "qwen3":
            attn += 2 * hd  # q/k RMS norms
        mlp = 3 * h * inter
        if self.moe:
            experts = self.experts_per_token if active else self.num_experts
            mlp = experts * 3 * h * inter + h * self.num_experts  # experts + router
        norms = 4 * h if self.arch == "gemma2" else 2 * h  # gemma2: pre/post norms
        per_layer = attn + mlp + norms
        emb = v * h * (1 if s.get("tie_word_embeddings") else 2)
        return emb + n * per_layer + h


def _decoder(name: str, family: str, arch: str, eps: float, hidden: int, inter: int,
             layers: int, heads: int, kv: int, *, vocab: int, positions: int, tie: bool,
             theta: float, head_dim: int | None, hub_id: str | None) -> ModelSpec:
    """A llama-style decoder (RMSNorm, SiLU MLP, RoPE, grouped-query attention)."""
    shape = dict(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                 num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                 max_position_embeddings=positions, tie_word_embeddings=tie, rope_theta=theta,
                 rms_norm_eps=eps, hidden_act="silu")
    if head_dim is not None:
        shape["head_dim"] = head_dim
    return ModelSpec(name, family, arch, shape, hub_id)


def _llama(name: str, hidden: int, inter: int, layers: int, heads: int, kv: int, *, vocab: int,
           positions: int, tie: bool, theta: float, head_dim: int | None = None,
           hub_id: str | None = None) -> ModelSpec:
    return _decoder(name, "llama", "llama", 1e-5, hidden, inter, layers, heads, kv, vocab=vocab,
                    positions=positions, tie=tie, theta=theta, head_dim=head_dim, hub_id=hub_id)


def _qwen(name: str, arch: str, hidden: int, inter: int, layers: int, heads: int, kv: int, *,
          vocab: int, positions: int, tie: bool, theta: float, head_dim: int | None = None,
          hub_id: str | None = None) -> ModelSpec:
    return _decoder(name, "qwen", arch, 1e-6, hidden, inter, layers, heads, kv, vocab=vocab,
                    positions=positions, tie=tie, theta=theta, head_dim=head_dim, hub_id=hub_id)


def _gpt2(name: str, embd: int, layers: int, heads: int, *, vocab: int = 50257,
          positions: int = 1024, hub_id: str | None = None) -> ModelSpec:
    shape = dict(n_embd=embd, n_layer=layers, n_head=heads, vocab_size=vocab,
                 n_positions=positions, tie_word_embeddings=True)
    return ModelSpec(name, "gpt2", "gpt2", shape, hub_id)


def _moe(name: str, hidden: int, inter: int, layers: int, heads: int, kv: int, *, experts: int,
         per_token: int, vocab: int, positions: int, hub_id: str | None = None) -> ModelSpec:
    """A Mixtral-style sparse mixture of experts (``experts`` SiLU MLPs, ``per_token`` routed)."""
    shape = dict(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                 num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                 max_position_embeddings=positions, tie_word_embeddings=False,
                 rope_theta=1000000.0, rms_norm_eps=1e-5, hidden_act="silu", sliding_window=None,
                 num_local_experts=experts, num_experts_per_tok=per_token)
    return ModelSpec(name, "mistral", "mixtral", shape, hub_id)


def _gemma2(name: str, hidden: int, inter: int, layers: int, heads: int, kv: int, *,
            head_dim: int, vocab: int = 256000, hub_id: str | None = None) -> ModelSpec:
    """A Gemma 2 decoder (alternating local/global attention, logit soft-capping, tied)."""
    shape = dict(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                 num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                 vocab_size=vocab, max_position_embeddings=8192, tie_word_embeddings=True,
                 rope_theta=10000.0, rms_norm_eps=1e-6, query_pre_attn_scalar=head_dim,
                 sliding_window=4096, final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
                 hidden_activation="gelu_pytorch_tanh")
    return ModelSpec(name, "gemma", "gemma2", shape, hub_id)


_ENTRIES = [
    # Llama (meta-llama config.json files)
    _llama("Llama-3.2-1B", 2048, 8192, 16, 32, 8, vocab=128256, positions=131072, tie=True,
           theta=500000.0, head_dim=64, hub_id="meta-llama/Llama-3.2-1B"),
    _llama("Llama-3.2-3B", 3072, 8192, 28, 24, 8, vocab=128256, positions=131072, tie=True,
           theta=500000.0, head_dim=128, hub_id="meta-llama/Llama-3.2-3B"),
    _llama("Llama-3.1-8B", 4096, 14336, 32, 32, 8, vocab=128256, positions=131072, tie=False,
           theta=500000.0, hub_id="meta-llama/Llama-3.1-8B"),
    _llama("llama-tiny", 128, 352, 2, 4, 2, vocab=2048, positions=1024, tie=True, theta=500000.0),
    # Qwen2.5 and Qwen3 (Qwen config.json files)
    _qwen("Qwen2.5-0.5B", "qwen2", 896, 4864, 24, 14, 2, vocab=151936, positions=32768,
          tie=True, theta=1000000.0, hub_id="Qwen/Qwen2.5-0.5B"),
    _qwen("Qwen2.5-1.5B", "qwen2", 1536, 8960, 28, 12, 2, vocab=151936, positions=131072,
          tie=True, theta=1000000.0, hub_id="Qwen/Qwen2.5-1.5B"),
    _qwen("Qwen2.5-3B", "qwen2", 2048, 11008, 36, 16, 2, vocab=151936, positions=32768,
          tie=True, theta=1000000.0, hub_id="Qwen/Qwen2.5-3B"),
    _qwen("Qwen2.5-7B", "qwen2", 3584, 18944, 28, 28, 4, vocab=152064, positions=131072,
          tie=False, theta=1000000.0, hub_id="Qwen/Qwen2.5-7B"),
    _qwen("Qwen3-0.6B", "qwen3", 1024, 3072, 28, 16, 8, vocab=151936, positions=40960,
          tie=True, theta=1000000.0, head_dim=128, hub_id="Qwen/Qwen3-0.6B"),
    _qwen("Qwen3-1.7B", "qwen3", 2048, 6144, 28, 16, 8, vocab=151936, positions=40960,
          tie=True, theta=1000000.0, head_dim=128, hub_id="Qwen/Qwen3-1.7B"),
    _qwen("Qwen3-4B", "qwen3", 2560, 9728, 36, 32, 8, vocab=151936, positions=40960,
          tie=True, theta=1000000.0, head_dim=128, hub_id="Qwen/Qwen3-4B"),
    _qwen("Qwen3-8B", "qwen3", 4096, 12288, 36, 32, 8, vocab=151936, positions=40960,
          tie=False, theta=1000000.0, head_dim=128, hub_id="Qwen/Qwen3-8B"),
    _qwen("qwen-tiny", "qwen2", 128, 352, 2, 4, 2, vocab=2048, positions=1024, tie=True,
          theta=1000000.0),
    # Mistral
    ModelSpec("Mistral-7B-v0.3", "mistral", "mistral", dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=32768, max_position_embeddings=32768,
        tie_word_embeddings=False, rope_theta=1000000.0, sliding_window=None, rms_norm_eps=1e-5,
        hidden_act="silu"), "mistralai/Mistral-7B-v0.3"),
    ModelSpec("mistral-tiny", "mistral", "mistral", dict(
        hidden_size=128, intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=2048, max_position_embeddings=1024,
        tie_word_embeddings=False, rope_theta=1000000.0, sliding_window=None, rms_norm_eps=1e-5,
        hidden_act="silu")),
    # GPT-2 (openai-community)
    _gpt2("gpt2", 768, 12, 12, hub_id="openai-community/gpt2"),
    _gpt2("gpt2-medium", 1024, 24, 16, hub_id="openai-community/gpt2-medium"),
    _gpt2("gpt2-large", 1280, 36, 20, hub_id="openai-community/gpt2-large"),
    _gpt2("gpt2-xl", 1600, 48, 25, hub_id="openai-community/gpt2-xl"),
    _gpt2("gpt2-tiny", 128, 2, 4, vocab=2048, positions=1024),
    # Larger than one GPU for full fine-tuning (FSDP over a node)
    _llama("Llama-3.1-70B", 8192, 28672, 80, 64, 8, vocab=128256, positions=131072, tie=False,
           theta=500000.0, hub_id="meta-llama/Llama-3.1-70B"),
    _qwen("Qwen2.5-14B", "qwen2", 5120, 13824, 48, 40, 8, vocab=152064, positions=131072,
          tie=False, theta=1000000.0, hub_id="Qwen/Qwen2.5-14B"),
    _qwen("Qwen2.5-32B", "qwen2", 5120, 27648, 64, 40, 8, vocab=152064, positions=131072,
          tie=False, theta=1000000.0, hub_id="Qwen/Qwen2.5-32B"),
    _qwen("Qwen2.5-72B", "qwen2", 8192, 29568, 80, 64, 8, vocab=152064, positions=131072,
          tie=False, theta=1000000.0, hub_id="Qwen/Qwen2.5-72B"),
    # Mixture of experts (Mistral AI's Mixtral: 8 experts, 2 per token)
    _moe("Mixtral-8x7B-v0.1", 4096, 14336, 32, 32, 8, experts=8, per_token=2, vocab=32000,
         positions=32768, hub_id="mistralai/Mixtral-8x7B-v0.1"),
    _moe("mixtral-tiny", 128, 224, 2, 4, 2, experts=4, per_token=2, vocab=2048, positions=1024),
    # Gemma 2 (Google) and Phi-4 (Microsoft)
    _gemma2("gemma-2-2b", 2304, 9216, 26, 8, 4, head_dim=256, hub_id="google/gemma-2-2b"),
    _gemma2("gemma-2-9b", 3584, 14336, 42, 16, 8, head_dim=256, hub_id="google/gemma-2-9b"),
    _gemma2("gemma-tiny", 128, 352, 2, 4, 2, head_dim=32, vocab=2048),
    ModelSpec("phi-4", "phi", "phi3", dict(
        hidden_size=5120, intermediate_size=17920, num_hidden_layers=40, num_attention_heads=40,
        num_key_value_heads=10, vocab_size=100352, max_position_embeddings=16384,
        tie_word_embeddings=False, rope_theta=250000.0, rms_norm_eps=1e-5, hidden_act="silu"),
        "microsoft/phi-4"),
    ModelSpec("phi-tiny", "phi", "phi3", dict(
        hidden_size=128, intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=2048, max_position_embeddings=1024,
        tie_word_embeddings=False, rope_theta=250000.0, rms_norm_eps=1e-5, hidden_act="silu")),
]

ZOO: dict[str, ModelSpec] = {s.name: s for s in _ENTRIES}
"""Every zoo entry by name."""

MODEL_SOURCES = ("zoo", "hub")
"""What a sweep may ask for: the zoo shape with random weights, or the real Hub checkpoint."""
DEFAULT_REVISION = "main"
"""The revision fetched when a sweep pins none (the commit it resolves to is recorded)."""


def get_spec(name: str) -> ModelSpec:
    """Return the zoo entry ``name`` (case-insensitive).

    Raises:
        InputError: unknown name; the message lists the zoo.
    """
    if name in ZOO:
        return ZOO[name]
    lowered = {k.lower(): v for k, v in ZOO.items()}
    if str(name).lower() in lowered:
        return lowered[str(name).lower()]
    raise InputError(f"unknown model {name!r}; the zoo has: {', '.join(ZOO)}", field="model")


def hub_id_of(spec: ModelSpec) -> str:
    """The Hub id of a model with a checkpoint source.

    Raises:
        InputError: the zoo model has no Hub id (``model_source: hub`` cannot load it).
    """
    if spec.hub_id is None:
        raise InputError(f"model {spec.name!r} has no Hub id; use model_source: zoo or name a "
                         "checkpoint", field="model_source")
    return spec.hub_id


def resolve_source(spec: ModelSpec, requested: str = "zoo") -> str:
    """Check a requested model source (``zoo`` or ``hub``) and return it.

    There is no automatic choice: a sweep says what it wants, and a ``hub`` checkpoint that
    cannot be fetched is an error before the first run (:func:`fetch_checkpoints`), never a
    silent substitution of random weights.

    Raises:
        InputError: an unknown source (``auto`` included, with the reason it is gone).
    """
    if requested == "auto":
        raise InputError("model_source 'auto' no longer exists (it mixed random and real "
                         "weights silently): say `hub` (the real checkpoint) or `zoo` (random "
                         "weights)", field="model_source")
    if requested not in MODEL_SOURCES:
        raise InputError(f"model_source {requested!r} is not one of {', '.join(MODEL_SOURCES)}",
                         field="model_source")
    return requested


def checkpoint_of(settings: dict[str, Any]) -> str | None:
    """The checkpoint a ``hub`` run loads: the ``checkpoint`` setting, else the zoo's Hub id."""
    if settings.get("model_source") != "hub":
        return None
    if settings.get("checkpoint"):
        return str(settings["checkpoint"])
    try:
        return get_spec(settings["model"]).hub_id
    except InputError:
        return None


def _is_local(checkpoint: str) -> bool:
    return os.path.isabs(checkpoint) or checkpoint.startswith(".") or os.path.isdir(checkpoint)


def local_revision(folder: str | Path) -> str:
    """``local:<12 hex>``: SHA-256 over a local checkpoint's file names, sizes and config text.

    Hashing every weight byte of a 140 GB folder would take minutes; names, sizes and the
    config identify a saved checkpoint well enough to tell two apart.
    """
    folder = Path(folder)
    digest = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{f.relative_to(folder)}:{f.stat().st_size}\n".encode())
        if f.name == "config.json":
            digest.update(f.read_bytes())
    return f"local:{digest.hexdigest()[:12]}"


@dataclass(frozen=True)
class Fetched:
    """A checkpoint on this node's disk.

    Attributes:
        path: the local folder ``from_pretrained`` loads.
        revision: the commit hash loaded (``local:<hash>`` for a local folder).
        weights_dtype_on_disk: the dtype the weights were saved in (``torch_dtype``/``dtype``
            of ``config.json``), or ``None`` when the config does not say.
    """

    path: str
    revision: str
    weights_dtype_on_disk: str | None


WEIGHT_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken")
"""Files fetched from a model repository: config, safetensors weights, tokenizer, template."""


def _on_disk_dtype(folder: str) -> str | None:
    try:
        config = json.loads(Path(folder, "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("dtype") or config.get("torch_dtype")
    return str(value) if isinstance(value, str) else None


def fetch_checkpoint(checkpoint: str, revision: str | None) -> Fetched:
    """Bring one checkpoint onto this node (or find it there) and pin what was fetched.

    A local folder is used in place. A Hub id is fetched with ``huggingface_hub``'s
    ``snapshot_download`` at ``revision`` (default ``main``); with ``HF_HUB_OFFLINE=1`` only
    the local cache is consulted.

    Raises:
        InputError: the checkpoint cannot be fetched or has no ``config.json`` (names the
            checkpoint and the revision).
    """
    if _is_local(checkpoint):
        folder = Path(checkpoint)
        if not (folder / "config.json").is_file():
            raise InputError(f"checkpoint '{checkpoint}' is not a folder with a config.json",
                             field="checkpoint")
        return Fetched(str(folder), local_revision(folder), _on_disk_dtype(str(folder)))
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    rev = revision or DEFAULT_REVISION
    try:
        path = snapshot_download(checkpoint, revision=rev, allow_patterns=list(WEIGHT_PATTERNS))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as exc:
        raise InputError(f"checkpoint {checkpoint!r} at revision {rev!r} could not be fetched "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); nothing "
                         "was run", field="checkpoint") from None
    if not Path(path, "config.json").is_file():
        raise InputError(f"checkpoint {checkpoint!r} at revision {rev!r} has no config.json",
                         field="checkpoint")
    return Fetched(str(path), Path(path).name, _on_disk_dtype(path))


def fetch_checkpoints(settings_list: list[dict[str, Any]]) -> dict[tuple[str, str | None], Fetched]:
    """Fetch every checkpoint a list of runs needs, once each, before the first run starts.

    Each ``hub`` run's settings get ``_checkpoint_path``, ``_model_revision`` and
    ``_weights_dtype_on_disk`` (local, not hashed into run ids).

    Raises:
        InputError: the first checkpoint that cannot be fetched (before anything ran).
    """
    fetched: dict[tuple[str, str | None], Fetched] = {}
    for settings in settings_list:
        checkpoint = checkpoint_of(settings)
        if checkpoint is None:
            continue
        key = (checkpoint, settings.get("model_revision"))
        if key not in fetched:
            fetched[key] = fetch_checkpoint(*key)
        f = fetched[key]
        settings.update(_checkpoint_path=f.path, _model_revision=f.revision,
                        _weights_dtype_on_disk=f.weights_dtype_on_disk)
    return fetched


def make_config(spec: ModelSpec) -> Any:
    """The ``transformers`` config object of a spec (imports transformers)."""
    import transformers

    cls = getattr(transformers, _CONFIG_CLASSES[spec.arch])
    shape = dict(spec.shape)
    shape.update(pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID)
    return cls(**shape)


PRECISION_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""The torch dtype name of each ``precision`` value."""


def torch_dtype(precision: str) -> Any:
    """The ``torch.dtype`` of a ``precision`` (``fp32``/``bf16``/``fp16``); imports torch."""
    import torch

    return getattr(torch, PRECISION_DTYPES[precision])


def build_model(spec: ModelSpec, source: str = "zoo", *, seed: int = 0, dtype: Any = None,
                device: str | None = None, quantization_config: Any = None,
                device_map: Any = None, attn_implementation: str | None = None,
                checkpoint: str | None = None, revision: str | None = None,
                distributed_config: Any = None) -> Any:
    """Instantiate a causal-LM: random weights of the zoo shape, or the fetched Hub checkpoint.

    The weights' dtype is always explicit (``dtype``; default float32): never transformers 5's
    ``dtype="auto"``, which loads a cached checkpoint in whatever it was saved in (bf16) while a
    zoo model would be fp32 — the row's precision would then depend on the cache.

    Args:
        spec: the zoo entry.
        source: ``zoo`` or ``hub`` (see :func:`resolve_source`).
        seed: seed of the random initialisation.
        dtype: the ``torch.dtype`` of the weights (``None`` = float32).
        device: where a zoo model is built (``cuda:0``, ``cpu``): directly there, in ``dtype``,
            with no float32 copy on the host first. A Hub checkpoint goes there after loading
            (or through ``device_map``).
        quantization_config: a ``BitsAndBytesConfig`` for QLoRA. A Hub checkpoint is loaded
            quantized; a zoo model is written once as a random checkpoint (in ``dtype``) to a
            temporary folder and reloaded quantized (bitsandbytes quantizes on load only) — in
            the workload's ``setup``, before the sampler starts.
        device_map: passed to ``from_pretrained`` (QLoRA needs the GPU map).
        attn_implementation: the attention kernel (``eager``, ``sdpa``, ...); ``None`` leaves
            transformers' default, which the rows record (``attn_implementation``).
        checkpoint: the local folder (:func:`fetch_checkpoint`) of a ``hub`` model; ``None``
            loads the zoo entry's Hub id from the local cache.
        revision: the revision of a Hub id loaded from the cache.
        distributed_config: a ``transformers`` ``DistributedConfig`` (FSDP2): the model is
            sharded over the process group while it loads. A zoo model is written once as a
            random checkpoint and loaded the same way.

    Returns:
        A ``transformers`` ``PreTrainedModel``.
    """
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    dtype = torch.float32 if dtype is None else dtype
    extra: dict[str, Any] = {}
    if attn_implementation is not None:
        extra["attn_implementation"] = attn_implementation
    if source == "hub":
        kwargs: dict[str, Any] = {"local_files_only": True, "dtype": dtype, **extra}
        if quantization_config is not None:
            kwargs["quantization_config"] = quantization_config
        if device_map is not None:
            kwargs["device_map"] = device_map
        if distributed_config is not None:
            kwargs["distributed_config"] = distributed_config
        if revision is not None and checkpoint is None:
            kwargs["revision"] = revision
        model: Any = AutoModelForCausalLM.from_pretrained(checkpoint or hub_id_of(spec), **kwargs)
        if (device_map is None and quantization_config is None and distributed_config is None
                and device is not None):
            model = model.to(device)
        return model
    config = make_config(spec)
    if distributed_config is not None:
        return _sharded_random_model(config, dtype, distributed_config, extra)
    if quantization_config is None:
        with torch.device(device or "cpu"):
            return AutoModelForCausalLM.from_config(config, dtype=dtype, **extra)
    return _quantized_random_model(config, quantization_config, device_map, dtype, extra)


def _quantized_random_model(config: Any, quantization_config: Any, device_map: Any,
                            dtype: Any, extra: dict[str, Any]) -> Any:
    """A random-weight model loaded 4-bit: save a random checkpoint to a temp dir, reload quantized.

    The checkpoint is written in ``dtype`` (half the bytes of float32 for bf16/fp16).
    """
    import tempfile

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(config, dtype=dtype, **extra)
    with tempfile.TemporaryDirectory(prefix="powertrace-zoo-") as tmp:
        model.save_pretrained(tmp)
        del model
        return AutoModelForCausalLM.from_pretrained(
            tmp, quantization_config=quantization_config, device_map=device_map or "auto",
            dtype=dtype, **extra)


def _sharded_random_model(config: Any, dtype: Any, distributed_config: Any,
                          extra: dict[str, Any]) -> Any:
    """A random-weight model sharded while it loads: rank 0 saves it, every rank loads its shard.

    The checkpoint goes to a temporary folder that rank 0 creates and broadcasts (all ranks of
    a node share it; a multi-node run needs the folder on a shared file system, so each rank
    builds the same seeded model instead when the folder is not visible).
    """
    import tempfile

    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    if not dist.is_initialized():
        raise RuntimeError("a sharded model needs an initialised process group")
    names = [tempfile.mkdtemp(prefix="powertrace-zoo-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(names, src=0)
    folder = Path(str(names[0]))
    if not folder.is_dir():  # another node: its local rank 0 writes its own (same seed)
        folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "config.json").exists() and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **extra)
        model.save_pretrained(folder)
        del model
    dist.barrier()
    try:
        return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype,
                                                    distributed_config=distributed_config,
                                                    local_files_only=True, **extra)
    finally:
        dist.barrier()
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


def _param_kind(p: Any) -> str:
    """What one parameter is held as: its dtype name, or the quantised format."""
    cls = type(p).__name__
    if cls == "Params4bit":
        return str(getattr(p, "quant_type", None) or "4bit")
    if cls == "Int8Params":
        return "int8"
    qtype = getattr(p, "qtype", None)  # optimum-quanto's quantised tensors
    if qtype is not None:
        return str(getattr(qtype, "name", qtype))
    return str(p.dtype).removeprefix("torch.")


def weights_dtypes(model: Any) -> str:
    """The dtypes the model's parameters are held in, comma-separated, most parameters first.

    Example: ``bfloat16,float32`` for a bf16 LoRA base with fp32 adapters; ``nf4,...`` for
    4-bit bitsandbytes weights. Shared tensors are counted once.
    """
    from collections import Counter

    counts: Counter[str] = Counter()
    seen: set[int] = set()
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        counts[_param_kind(p)] += p.numel()
    return ",".join(k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


class ComputeDtypeProbe:
    """Records the output dtype of the model's first linear layer in its first forward pass.

    That is the dtype the matmuls really ran in (autocast, bitsandbytes' compute dtype and
    quanto's dequantisation included), observed rather than inferred from the settings. The
    hook removes itself after the first call.
    """

    def __init__(self, model: Any) -> None:
        self.dtype: str | None = None
        self._handle = None
        module = _first_linear(model)
        if module is not None:
            self._handle = module.register_forward_hook(self._hook)

    def _hook(self, module: Any, args: Any, output: Any) -> None:
        out = output[0] if isinstance(output, (tuple, list)) else output
        dtype = getattr(out, "dtype", None)
        if dtype is not None:
            self.dtype = str(dtype).removeprefix("torch.")
        self.remove()

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def _first_linear(model: Any) -> Any:
    """The first module holding a 2-D ``weight`` of its own that is not an embedding."""
    for _name, module in model.named_modules():
        if "Embedding" in type(module).__name__:
            continue
        weight = module._parameters.get("weight") if hasattr(module, "_parameters") else None
        if weight is not None and getattr(weight, "ndim", 0) == 2:
            return module
    return None


def execution_columns(model: Any, *, cuda: bool, compute_dtype: str | None = None
                      ) -> dict[str, Any]:
    """The columns of what actually ran, observed on the instantiated model and torch.

    ``weights_dtype``, ``compute_dtype`` (the caller's probe), ``attn_implementation``, ``tf32``.
    """
    import torch

    config = getattr(model, "config", None)
    return {
        "weights_dtype": weights_dtypes(model),
        "compute_dtype": compute_dtype,
        "attn_implementation": getattr(config, "_attn_implementation", None),
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32) if cuda else None,
    }


def count_params(model: Any) -> int:
    """Parameters of an instantiated model.

    Shared tensors are counted once; 4-bit packed weights are counted by their logical size.
    """
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        n = p.numel()
        quant_state = getattr(p, "quant_state", None)
        if quant_state is not None and getattr(quant_state, "shape", None) is not None:
            n = 1
            for d in quant_state.shape:
                n *= int(d)
        total += n
    return total


def build_tokenizer() -> Any:
    """An offline byte-level tokenizer: ``<|pad|>``, ``<|bos|>``, ``<|eos|>`` then the 256 bytes.

    Training feeds token ids directly (any id below the architecture's ``vocab_size``); the
    tokenizer supplies the special ids to the trainer and encodes local text datasets byte by
    byte (token id = byte + 3). Built with the ``tokenizers`` library, nothing downloaded.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_chars = _bytes_to_unicode()
    vocab = {"<|pad|>": PAD_ID, "<|bos|>": BOS_ID, "<|eos|>": EOS_ID}
    for b in range(256):
        vocab[byte_chars[b]] = b + BYTE_OFFSET
    assert set(byte_chars.values()) == set(alphabet)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>",
                                   bos_token="<|bos|>", eos_token="<|eos|>")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ``ByteLevel`` uses)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def resolve_model_columns(resolved: dict[str, Any], machine: Any) -> ModelSpec | None:
    """Fill a run's model columns and default precision in place (shared by every workload).

    ``model``, ``model_name``, ``model_family``, ``model_label`` come from the zoo entry;
    ``model_source`` is what the sweep asked for (``hub``: ``model_label`` is the checkpoint's
    Hub id, the zoo name for a local folder; ``random_weights`` false; ``zoo``: random weights, true);
    ``precision`` defaults to bf16 on a CUDA device that has it, else fp32. An unknown model or
    source is left as given: the workload's ``check`` reports it.

    Args:
        resolved: the run's settings (``model``, ``model_source``, ``precision`` at least).
        machine: the ``MachineInfo`` the run is planned for (``cuda``, ``bf16``).

    Returns:
        The zoo entry, or ``None`` for an unknown model.
    """
    try:
        spec: ModelSpec | None = get_spec(resolved["model"])
    except InputError:
        spec = None
    if spec is not None:
        resolved.update(model=spec.name, model_name=spec.name, model_family=spec.family,
                        model_label=spec.name)
        source = resolved.get("model_source")
        if source in MODEL_SOURCES:
            resolved["random_weights"] = source == "zoo"
        if source == "hub":
            checkpoint = checkpoint_of(resolved)
            if checkpoint is not None and not _is_local(checkpoint):
                resolved["model_label"] = checkpoint  # a local folder keeps the zoo name
    if resolved["precision"] is None:
        resolved["precision"] = "bf16" if (machine.cuda and machine.bf16) else "fp32"
    return spec


def check_model(resolved: dict[str, Any]) -> tuple[ModelSpec | None, list[tuple[str, str]]]:
    """Check a run's ``model``, ``model_source`` and checkpoint (shared by every workload).

    Whether a ``hub`` checkpoint can be fetched is checked once per sweep before its first run
    (:func:`fetch_checkpoints`), not here: a dry run plans on a machine without the weights.

    Returns:
        The zoo entry (``None`` when the model is unknown) and ``(setting, reason)`` problems.
    """
    try:
        spec = get_spec(resolved["model"])
    except InputError as exc:
        return None, [("model", exc.reason)]
    try:
        source = resolve_source(spec, resolved["model_source"])
    except InputError as exc:
        return spec, [("model_source", exc.reason)]
    if source == "hub" and checkpoint_of(resolved) is None:
        return spec, [("model_source", f"model {spec.name!r} has no Hub id; name a "
                       "`checkpoint` (a Hub id or a local folder) or use model_source: zoo")]
    if source == "zoo" and resolved.get("checkpoint"):
        return spec, [("checkpoint", "a checkpoint is loaded with model_source: hub only")]
    return spec, []


def model_settings() -> dict[str, Setting]:
    """The model settings every workload that loads a model declares."""
    return {
        "model": Setting("model", "string", default="llama-tiny", column=False,
                         doc="Zoo model name (see generation.workloads.models.ZOO)"),
        "model_source": Setting("model_source", "string", default="zoo",
                                choices=MODEL_SOURCES + ("auto",),
                                doc="`zoo` (random weights, labelled) or `hub` (the real "
                                "checkpoint, fetched before the first run)"),
        "checkpoint": Setting("checkpoint", "string", column=False,
                              doc="Hub id or local folder of the checkpoint (default: the "
                              "zoo entry's Hub id)"),
        "model_revision": Setting("model_revision", "string",
                                  doc="Revision of the checkpoint (commit, tag or branch; "
                                  "default main); the row records the commit loaded"),
    }
