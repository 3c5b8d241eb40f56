"""A tiny random-weight Llama and a locally built tokenizer, written into a folder.

What a real engine serves in the tests: nothing is downloaded. The shape is the smallest the
CPU attention kernels of vLLM take (head size 64: hidden 256, 4 heads); the tokenizer is a
word-level tokenizer built here over :data:`WORDS` plus numbered filler words up to
:data:`VOCAB` ids, saved with ``save_pretrained`` beside the model.
"""

from __future__ import annotations

from pathlib import Path

VOCAB = 512
HIDDEN = 256
HEADS = 4
LAYERS = 2
MAX_POSITIONS = 512
SPECIAL = ("<unk>", "<s>", "</s>")
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa")


def write_tiny_llama(folder: Path, *, name: str = "tiny-llama") -> Path:
    """Write the model (``config.json``, safetensors) and tokenizer into ``folder``."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    words = list(SPECIAL) + list(WORDS)
    words += [f"w{i}" for i in range(VOCAB - len(words))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.save_pretrained(folder)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=HEADS, max_position_embeddings=MAX_POSITIONS,
                         bos_token_id=1, eos_token_id=2, torch_dtype="float32")
    config.model_name = name
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder
