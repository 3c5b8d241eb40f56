"""Real traces measured by others (``<repo>/../shared/data/external``, never committed).

Each file is imported through the CLI into its own dataset folder and loaded back with plain
``datasets.load_dataset``: one row per GPU, every sample of each GPU kept, the schema's features,
streaming giving the same rows, the per-family config loading. Skipped when the folder is absent.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest
from datasets import load_dataset

from llm_powertrace_ds import schema
from llm_powertrace_ds.cli import main

REPO = Path(__file__).resolve().parents[3]
EXTERNAL = REPO.parent / "shared" / "data" / "external"

pytestmark = [
    pytest.mark.external,
    pytest.mark.skipif(not EXTERNAL.is_dir(), reason=f"external traces not present at {EXTERNAL}"),
]

PT = EXTERNAL / "powertraces-v6"
SMI = EXTERNAL / "nvidia-smi"
PT_FILES = [
    # (stem, split, family, model_name, seq_len)
    ("powertraces-pt200array_pt220_r4_7536323_9-486809b730", "l40s", "gptj", "gpt-j-6b", 256),
    ("powertraces-pt100array_pt017_r1_7536307_1-50f3a1a4a0", "h200", "deepseek",
     "deepseek-llm-7b-base", 1024),
    ("powertraces-pt100array_pt019_r1_7536307_11-89ffb37037", "h200", "deepseek",
     "deepseek-llm-7b-chat", 1024),
]
SMI_FILES = [
    # (file, GPUs, family)
    ("a100-hf-mistral7b-b32-100ms.csv", 1, "mistral"),  # no GPU column; .job_info.yaml beside it
    ("a100x2-vllm-gemma4-26b-tp2-250ms.csv", 2, "unknown"),  # index + uuid
    ("h100-vllm-qwen3-8b-tp1-250ms.csv", 1, "unknown"),
    ("a100-vllm-qwen3-8b-smoke-250ms.csv", 1, "unknown"),
]


def samples_per_gpu(path: Path, gpu_column: str | None) -> Counter:
    """Data rows per GPU, counted independently of the importer (no GPU column: one GPU)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh, skipinitialspace=True))
    header = [c.strip() for c in rows[0]]
    data = [r for r in rows[1:] if r and [c.strip() for c in r] != header]
    if gpu_column is None or gpu_column not in header:
        return Counter({0: len(data)})
    col = header.index(gpu_column)
    return Counter(int(r[col]) for r in data)


def load(root: Path, config: str, split: str, cache: Path, **kwargs):
    return load_dataset(str(root), config, split=split, cache_dir=str(cache), **kwargs)


def check_rows(ds, streamed, counts: Counter, config: str) -> None:
    assert ds.features == schema.FEATURES[config]
    assert ds.num_rows == len(counts)
    assert {r["gpu_index"]: len(r["power_w"]) for r in ds} == dict(counts)
    for row in ds:
        n = len(row["power_w"])
        assert len(row["t_ms"]) == n and row["t_ms"][0] >= 0
        assert all(b > a for a, b in zip(row["t_ms"], row["t_ms"][1:], strict=False))
        assert all(p is not None for p in row["power_w"])
    assert list(streamed) == list(ds)


@pytest.mark.parametrize("stem,split,family,model_name,seq_len", PT_FILES,
                         ids=[p[0].split("_")[1] for p in PT_FILES])
def test_powertrace_csv_example(tmp_path, stem, split, family, model_name, seq_len):
    csv_path, meta = PT / f"{stem}.csv", PT / f"{stem}.json"
    root = tmp_path / "ds"
    assert main(["import", "powertrace-csv", str(csv_path), "--meta", str(meta), "--out",
                 str(root), "--workload", "finetune"]) == 0
    ds = load(root, "finetune", split, tmp_path / "cache")
    streamed = load(root, "finetune", split, tmp_path / "cache", streaming=True)
    check_rows(ds, streamed, samples_per_gpu(csv_path, "gpu_id"), "finetune")
    assert set(ds["run_id"]) == {stem}
    assert set(ds["model_family"]) == {family} and set(ds["model_name"]) == {model_name}
    assert set(ds["seq_len"]) == {seq_len} and set(ds["tp_size"]) == {4}
    assert set(ds["sampler"]) == {"import:powertrace-csv"}
    assert set(ds["power_field"]) == {"power_usage"}
    assert {"power_is_1s_average", "form_factor_unknown"} <= set(ds[0]["quality_flags"])
    fam = load(root, f"finetune-{family}", split, tmp_path / "cache")
    assert fam.num_rows == 4 and fam.features == schema.FEATURES["finetune"]


@pytest.mark.parametrize("name,gpus,family", SMI_FILES, ids=[s[0].split("-")[0] + "-" +
                                                             s[0].split("-")[2] for s in SMI_FILES])
def test_nvidia_smi_example(tmp_path, name, gpus, family):
    path = SMI / name
    root = tmp_path / "ds"
    assert main(["import", "nvidia-smi", str(path), "--out", str(root),
                 "--workload", "inference"]) == 0
    ds = load(root, "inference", "unknown", tmp_path / "cache")
    streamed = load(root, "inference", "unknown", tmp_path / "cache", streaming=True)
    counts = samples_per_gpu(path, "index")
    assert len(counts) == gpus
    check_rows(ds, streamed, counts, "inference")
    assert set(ds["model_family"]) == {family}
    assert set(ds["sampler"]) == {"import:nvidia-smi"}
    assert set(ds["num_gpus"]) == {gpus}
    fam = load(root, f"inference-{family}", "unknown", tmp_path / "cache")
    assert fam.num_rows == gpus
    written = b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())
    assert b"palmetto" not in written and b"GPU-" not in written  # host names, raw UUIDs
    if gpus == 2:
        hashes = set(ds["gpu_uuid_hash"])
        assert len(hashes) == 2 and None not in hashes


def test_nvidia_smi_example_imported_twice(tmp_path):
    path = SMI / "a100x2-vllm-gemma4-26b-tp2-250ms.csv"
    root = tmp_path / "ds"
    args = ["import", "nvidia-smi", str(path), "--out", str(root), "--workload", "inference",
            "--platform", "a100_sxm4_80gb"]
    assert main(args) == 0 and main(args) == 0
    ds = load(root, "inference", "a100_sxm4_80gb", tmp_path / "cache")
    assert ds.num_rows == 2 and len(set(ds["run_id"])) == 1
