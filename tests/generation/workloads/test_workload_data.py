"""Training data: seeded synthetic ids and local text datasets, no network."""

from __future__ import annotations

import json

import numpy as np
import pytest

from generation.workloads import data
from llm_powertrace_ds.errors import InputError


def test_synthetic_ids_are_seeded_in_range_and_shaped():
    a = data.synthetic_token_ids(5, 7, vocab_size=100, seed=1)
    b = data.synthetic_token_ids(5, 7, vocab_size=100, seed=1)
    assert a.shape == (5, 7) and a.dtype == np.int32
    assert (a == b).all() and not (a == data.synthetic_token_ids(5, 7, vocab_size=100,
                                                                  seed=2)).all()
    assert a.min() >= 3 and a.max() < 100


def test_sequences_needed():
    assert data.sequences_needed(10, 4) == 40
    assert data.sequences_needed(10**6, 8) == data.MAX_SEQUENCES
    assert data.sequences_needed(1, 64) == 64


def test_local_text_txt_jsonl_and_folder(tmp_path):
    (tmp_path / "a.txt").write_text("abc")
    ids = data.local_token_ids(tmp_path / "a.txt", 3, 4, vocab_size=300)
    assert ids.tolist() == [[100, 101, 102, 100], [101, 102, 100, 101], [102, 100, 101, 102]]
    lines = [json.dumps({"text": "hi"}), "", json.dumps({"text": "yo"})]
    (tmp_path / "b.jsonl").write_text("\n".join(lines))
    ids = data.local_token_ids(tmp_path / "b.jsonl", 1, 5, vocab_size=300)
    assert bytes(int(i) - 3 for i in ids[0]) == b"hi\nyo"
    folder = data.text_files(tmp_path)
    assert [p.name for p in folder] == ["a.txt", "b.jsonl"]
    assert data.dataset_label(str(tmp_path / "a.txt")) == "local:a.txt"
    assert data.dataset_label("synthetic") == "synthetic"
    ds = data.to_dataset(ids)
    assert ds.column_names == ["input_ids"] and len(ds) == 1


def test_local_text_errors_name_file_and_line(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        data.text_files(tmp_path / "missing.txt")
    (tmp_path / "x.csv").write_text("a")
    with pytest.raises(InputError, match=r"\.txt"):
        data.text_files(tmp_path / "x.csv")
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"txt": 1}\n')
    with pytest.raises(InputError) as err:
        data.local_token_ids(tmp_path / "bad.jsonl", 1, 4, vocab_size=300)
    assert err.value.line == 2 and "bad.jsonl" in str(err.value)
    (tmp_path / "e.txt").write_text("")
    with pytest.raises(InputError, match="empty"):
        data.local_token_ids(tmp_path / "e.txt", 1, 4, vocab_size=300)
    with pytest.raises(InputError, match="too small"):
        data.local_token_ids(tmp_path / "e.txt", 1, 4, vocab_size=100)
