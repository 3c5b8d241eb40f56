"""Training data without a network: seeded synthetic token ids, or a local text dataset.

Power depends on the shape of the work (batch, sequence length), not on which tokens are fed,
so the default is ``synthetic``: uniform random token ids of exactly ``seq_len`` tokens per
sequence, seeded. A local text dataset (a ``.txt``/``.md`` file, a ``.jsonl`` file with a
``text`` field, or a folder of those) is encoded byte by byte by the zoo's offline tokenizer
(token id = byte + 3) and cut into ``seq_len`` chunks. ``dataset_name`` in the rows is
``synthetic`` or ``local:<file or folder name>``.

Only numpy is needed to make the token ids; :func:`to_dataset` wraps them in a
``datasets.Dataset`` with an ``input_ids`` column, the pre-tokenised form TRL accepts.

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
