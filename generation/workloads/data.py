"""Training data: real instruction text through ``datasets``, or synthetic/byte-level for demos.

GPU sweeps train on real text: a public instruction dataset named by its Hub id (default
:data:`DEFAULT_DATASET`, with its licence in :data:`DATASET_LICENCES`) or a local dataset
folder, loaded with ``datasets.load_dataset`` (the same call for both), each record turned into
a user/assistant conversation, tokenised with the model's own tokenizer and chat template (a
tokenizer without a template gets :data:`PLAIN_FORMAT`), joined with the end-of-text token and
packed into sequences of exactly ``seq_len`` tokens. The dataset is fetched once per node
before the first run (:func:`fetch_dataset`); ``dataset_name`` and ``dataset_revision`` (the
commit loaded) are recorded.

For the demo, the tests and ``cpu_proxy`` the random-weight zoo models keep two offline
sources: ``synthetic`` (uniform random token ids, seeded) and a local text file or folder
(``.txt``/``.md``/``.jsonl`` with a ``text`` field) encoded byte by byte by the zoo's offline
tokenizer (token id = byte + 3). ``dataset_name`` is then ``synthetic`` or
``local:<file or folder name>``.

Example:
    >>> ids = synthetic_token_ids(4, 16, vocab_size=2048, seed=0)
    >>> ids.shape
    (4, 16)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from llm_powertrace_ds.errors import InputError

from .models import BYTE_OFFSET, NUM_SPECIAL

SYNTHETIC = "synthetic"
DEFAULT_DATASET = "databricks/databricks-dolly-15k"
"""The instruction dataset of the GPU sweeps: 15k human-written instruction/response pairs."""
DATASET_LICENCES = {"databricks/databricks-dolly-15k": "CC BY-SA 3.0"}
"""Licences of the datasets the shipped sweeps name (stated in the campaign file too)."""
PLAIN_FORMAT = "{user}\n\n{assistant}"
"""How a conversation is written for a tokenizer without a chat template (base checkpoints)."""
TEXT_SUFFIXES = (".txt", ".md", ".jsonl")
MAX_SEQUENCES = 4096
"""Upper bound of the sequences materialised; the trainer cycles through them (epochs)."""


def dataset_label(dataset: str | None) -> str:
    """The ``dataset_name`` column for a sweep's ``dataset_name`` setting.

    ``None``/``synthetic`` -> ``synthetic``; a path -> ``local:<name>``.
    """
    if dataset is None or dataset == SYNTHETIC:
        return SYNTHETIC
    return f"local:{Path(dataset).name}"


def sequences_needed(max_steps: int, global_batch_size: int) -> int:
    """How many sequences to materialise for ``max_steps`` optimiser steps (capped, >= one batch)."""
    return int(max(global_batch_size, min(max_steps * global_batch_size, MAX_SEQUENCES)))


def synthetic_token_ids(num_sequences: int, seq_len: int, *, vocab_size: int,
                        seed: int) -> np.ndarray:
    """Uniform random token ids in ``[3, vocab_size)`` (ids 0..2 are the special tokens).

    Returns:
        An ``int32`` array of shape ``(num_sequences, seq_len)``.
    """
    if vocab_size <= NUM_SPECIAL:
        raise ValueError(f"vocab_size {vocab_size} leaves no ordinary tokens")
    rng = np.random.default_rng(seed)
    return rng.integers(NUM_SPECIAL, vocab_size, size=(num_sequences, seq_len), dtype=np.int32)


def text_files(path: str | Path) -> list[Path]:
    """The text files of a local dataset (a file, or a folder's files sorted by name).

    Raises:
        InputError: missing path, unsupported suffix, or a folder without text files.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"local dataset '{path}' does not exist", field="dataset_name")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
        if not files:
            raise InputError(f"local dataset folder '{path}' has no {'/'.join(TEXT_SUFFIXES)} "
                             "files", field="dataset_name")
        return files
    if path.suffix not in TEXT_SUFFIXES:
        raise InputError(f"local dataset '{path}' must be one of {', '.join(TEXT_SUFFIXES)} "
                         "(or a folder of them)", field="dataset_name")
    return [path]


def _read_text(path: Path) -> str:
    if path.suffix != ".jsonl":
        return path.read_text(encoding="utf-8")
    parts = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not JSON: {exc.msg}", file=path, line=n) from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise InputError("each line needs a string field 'text'", file=path, line=n,
                             field="text")
        parts.append(record["text"])
    return "\n".join(parts)


def local_token_ids(path: str | Path, num_sequences: int, seq_len: int, *,
                    vocab_size: int) -> np.ndarray:
    """Byte-level token ids of a local text dataset, cut into ``seq_len`` chunks.

    The byte stream is repeated when it is shorter than ``num_sequences * seq_len``.

    Raises:
        InputError: unreadable or empty dataset; a vocabulary too small for bytes.
    """
    if vocab_size < BYTE_OFFSET + 256:
        raise InputError(f"vocab_size {vocab_size} is too small for byte-level text "
                         f"(needs {BYTE_OFFSET + 256})", field="dataset_name")
    data = b"\n".join(_read_text(f).encode("utf-8") for f in text_files(path))
    if not data:
        raise InputError(f"local dataset '{path}' is empty", field="dataset_name")
    ids = np.frombuffer(data, dtype=np.uint8).astype(np.int32) + BYTE_OFFSET
    need = num_sequences * seq_len
    if len(ids) < need:
        ids = np.tile(ids, -(-need // len(ids)))
    return ids[:need].reshape(num_sequences, seq_len)


def token_ids(dataset: str | None, num_sequences: int, seq_len: int, *, vocab_size: int,
              seed: int) -> np.ndarray:
    """Token ids for a run: synthetic (seeded) or from a local text dataset."""
    if dataset is None or dataset == SYNTHETIC:
        return synthetic_token_ids(num_sequences, seq_len, vocab_size=vocab_size, seed=seed)
    return local_token_ids(dataset, num_sequences, seq_len, vocab_size=vocab_size)


def to_dataset(ids: np.ndarray) -> Any:
    """Wrap token ids as a ``datasets.Dataset`` with an ``input_ids`` column (pre-tokenised)."""
    from datasets import Dataset

    return Dataset.from_dict({"input_ids": ids.tolist()})


# ---------------------------------------------------------------------------------------------
# Real instruction text through `datasets`
# ---------------------------------------------------------------------------------------------

def hub_dataset_label(dataset: str) -> str:
    """The ``dataset_name`` column of a ``datasets`` source: the Hub id, or ``local:<folder>``."""
    path = Path(dataset)
    return f"local:{path.name}" if path.exists() else dataset


def fetch_dataset(dataset: str, revision: str | None) -> tuple[str, str]:
    """Bring a dataset onto this node (or find its local folder); return ``(path, revision)``.

    Raises:
        InputError: the dataset cannot be fetched (names it and the revision).
    """
    path = Path(dataset)
    if path.exists():
        from .models import local_revision

        return str(path), local_revision(path)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    rev = revision or "main"
    try:
        local = snapshot_download(dataset, repo_type="dataset", revision=rev)
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as exc:
        raise InputError(f"dataset {dataset!r} at revision {rev!r} could not be fetched "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); nothing "
                         "was run", field="dataset_name") from None
    return local, Path(local).name


def conversation(record: dict[str, Any], n: int) -> list[dict[str, str]]:
    """A record as a user/assistant conversation.

    Accepted fields: ``messages`` (a list of ``{role, content}``), or ``instruction`` with
    ``response``/``output`` and an optional ``context``/``input`` (Dolly, Alpaca).

    Raises:
        InputError: the record has neither form (names the record number and the fields).
    """
    messages = record.get("messages")
    if isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
        return [{"role": str(m.get("role", "user")), "content": m["content"]} for m in messages]
    instruction = record.get("instruction")
    answer = record.get("response", record.get("output"))
    if not isinstance(instruction, str) or not isinstance(answer, str):
        raise InputError(f"record {n} has neither `messages` nor `instruction` + `response` "
                         f"(fields: {', '.join(sorted(map(str, record)))[:200]})",
                         field="dataset_name")
    context = record.get("context", record.get("input"))
    user = instruction + (f"\n\n{context}" if isinstance(context, str) and context else "")
    return [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]


def encode_conversation(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of one conversation: the tokenizer's chat template, else :data:`PLAIN_FORMAT`."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    user = "\n\n".join(m["content"] for m in messages if m["role"] != "assistant")
    answer = "\n\n".join(m["content"] for m in messages if m["role"] == "assistant")
    text = PLAIN_FORMAT.format(user=user, assistant=answer)
    return [int(i) for i in tokenizer(text, add_special_tokens=True)["input_ids"]]


def instruction_token_ids(path: str, tokenizer: Any, num_sequences: int, seq_len: int, *,
                          split: str = "train") -> np.ndarray:
    """Packed token ids of an instruction dataset: conversations joined by EOS, cut to ``seq_len``.

    Records are read in order until ``num_sequences * seq_len`` tokens are packed; a dataset
    shorter than that is read again from the start (epochs).

    Raises:
        InputError: unreadable dataset, a record without a conversation, or no tokens.
    """
    from datasets import load_dataset

    try:
        ds = load_dataset(path, split=split)
    except (OSError, ValueError, FileNotFoundError) as exc:
        raise InputError(f"dataset '{path}' could not be loaded: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:200]}", field="dataset_name") from None
    eos = tokenizer.eos_token_id
    need = num_sequences * seq_len
    out: list[int] = []
    if len(ds) == 0:
        raise InputError(f"dataset '{path}' split {split!r} has no records", field="dataset_name")
    while len(out) < need:
        for n, record in enumerate(ds, start=1):
            out.extend(encode_conversation(tokenizer, conversation(record, n)))
            if eos is not None:
                out.append(int(eos))
            if len(out) >= need:
                break
    return np.asarray(out[:need], dtype=np.int64).reshape(num_sequences, seq_len)
