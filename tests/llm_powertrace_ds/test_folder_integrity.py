"""Regression tests for defects found in review.

Partial imports, packed folders, failed packs, Parquet-uploaded folders, scrubbing.
"""

import hashlib

import pytest
from datasets import load_dataset

from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import ShardError

GOOD = ("timestamp, index, name, power.draw [W]\n"
        "2026/01/05 10:00:00.000, 0, NVIDIA L40S, 100.0 W\n"
        "2026/01/05 10:00:00.100, 0, NVIDIA L40S, 200.0 W\n"
        "2026/01/05 10:00:00.200, 0, NVIDIA L40S, 150.0 W\n")


def _tree(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".staging" not in p.parts}


def test_multi_file_import_with_a_bad_file_changes_nothing(tmp_path, capsys):
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text(GOOD)
    bad.write_text(GOOD.replace("200.0 W", "abc W"))
    out = tmp_path / "ds"
    assert main(["import", "nvidia-smi", str(good), str(bad), "--out", str(out),
                 "--workload", "inference"]) == 1
    assert not layout.data_root(out).exists()
    assert main(["import", "nvidia-smi", str(good), "--out", str(out),
                 "--workload", "inference"]) == 0
    before = _tree(out)
    assert main(["import", "nvidia-smi", str(good), str(bad), "--out", str(out),
                 "--workload", "inference"]) == 1
    assert _tree(out) == before
    assert load_dataset(str(out), "inference", split="l40s").num_rows == 1


def test_publish_into_a_packed_folder_is_refused(tmp_path, make_run):
    src, dst = tmp_path / "src", tmp_path / "dst"
    shards.publish_run(src, make_run("a"))
    shards.pack(src, dst)
    with pytest.raises(ShardError, match="packed"):
        shards.publish_run(dst, make_run("a"))
    assert load_dataset(str(dst), "finetune", split="l40s").num_rows == 2


def test_failed_pack_leaves_nothing_and_can_be_rerun(tmp_path, make_run):
    src, dst = tmp_path / "src", tmp_path / "dst"
    shards.publish_run(src, make_run("a"))
    shards.publish_run(src, make_run("b", workload="inference"))
    corrupt = layout.runs_path(src, "inference", "l40s", "zzz")
    corrupt.write_bytes(b"not arrow")
    with pytest.raises(ShardError):
        shards.pack(src, dst)
    assert not dst.exists() and [p.name for p in tmp_path.iterdir()] == ["src"]
    corrupt.unlink()
    res = shards.pack(src, dst)
    assert res.rows["data/finetune/l40s/llama"] == 2


def test_cli_reads_a_parquet_copy(tmp_path, make_run, capsys):
    import json

    from upload import write_parquet_copy

    src, packed, pq_root = tmp_path / "src", tmp_path / "packed", tmp_path / "pq"
    shards.publish_run(src, make_run("a"))
    shards.pack(src, packed)
    write_parquet_copy(packed, pq_root)
    assert not list(pq_root.rglob("*.arrow"))
    assert main(["metrics", str(pq_root), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in rows] == ["a"] and rows[0]["energy_j"] > 0
    assert shards.read_run(pq_root, "a").devices[0].power_w.size == 200


@pytest.mark.parametrize(("value", "expected"), [
    ("/home/alice/models/llama", "llama"),
    ("run on /home/alice/x done", "run on x done"),
    ("run by alice on gpu-node-17.corp.example.com", None),
    ("bob@cluster", None),
    ("10.1.2.3", None),
    ("Llama-3.2-1B", "Llama-3.2-1B"),
    ("Qwen2.5-7B v4.56.1", "Qwen2.5-7B v4.56.1"),
])
def test_scrub_text_removes_paths_hosts_and_users(value, expected):
    from llm_powertrace_ds.importers.common import scrub_text

    assert scrub_text(value) == expected


def test_meta_may_not_set_host_hash(tmp_path, capsys):
    good, meta = tmp_path / "good.csv", tmp_path / "meta.json"
    good.write_text(GOOD)
    meta.write_text('{"host_hash": "my-laptop"}')
    assert main(["import", "nvidia-smi", str(good), "--meta", str(meta), "--out",
                 str(tmp_path / "ds"), "--workload", "inference"]) == 1
    assert "host_hash" in capsys.readouterr().err


def test_lock_files_live_only_in_the_staging_locks_folder(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text(GOOD)
    out, packed = tmp_path / "ds", tmp_path / "packed"
    assert main(["import", "nvidia-smi", str(good), "--out", str(out),
                 "--workload", "inference"]) == 0
    assert main(["pack", str(out), "--out", str(packed)]) == 0
    for root in (out, packed):
        folders = {p.parent for p in root.rglob("*.lock")}
        assert folders == {root / ".staging" / "locks"}
