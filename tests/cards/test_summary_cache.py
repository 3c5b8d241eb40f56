"""The card's per-run trace summary is cached beside the runs file, keyed on content."""

from __future__ import annotations

from conftest import synthetic_run

from cards import summary
from llm_powertrace_ds import layout, shards


def test_one_more_run_reads_one_trace_file(tmp_path, monkeypatch):
    root = tmp_path / "ds"
    for i in range(3):
        shards.publish_run(root, synthetic_run(f"r{i}", n=40, seed=i))
    first = summary.summarize(root)
    read = []
    real = summary._read_file
    def spy(path, cols):  # noqa: ANN001, ANN202 - records trace-file reads
        if cols == summary.DEVICE_COLUMNS:
            read.append(path.name)
        return real(path, cols)

    monkeypatch.setattr(summary, "_read_file", spy)
    shards.publish_run(root, synthetic_run("r3", n=40, seed=3))
    again = summary.summarize(root)
    assert read == ["r3.arrow"]
    assert set(again.devices) == set(first.devices) | {"r3"}
    assert again.devices["r0"] == first.devices["r0"] and again.rows == {
        k: {s: n + (2 if k.startswith("finetune") and k != "finetune_runs" else 1)
            for s, n in v.items()} for k, v in first.rows.items()}
    runs_file = layout.runs_path(root, "finetune", "l40s", "r3")
    assert summary.summary_cache_path(runs_file).is_file()
    assert not any(p.name.startswith(".r") for p in layout.shard_files(root, "finetune_runs"))


def test_republished_run_is_read_again(tmp_path, monkeypatch):
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("r0", n=40))
    summary.summarize(root)
    changed = synthetic_run("r0", n=40, seed=5)
    for dev in changed.devices:
        dev.gpu_name = "NVIDIA L40"
    shards.publish_run(root, changed)
    assert {d["gpu_name"] for d in summary.summarize(root).devices["r0"]} == {"NVIDIA L40"}


def test_corrupt_cache_is_ignored(tmp_path):
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("r0", n=40))
    summary.summarize(root)
    cache = summary.summary_cache_path(layout.runs_path(root, "finetune", "l40s", "r0"))
    cache.write_text("{not json")
    assert len(summary.summarize(root).devices["r0"]) == 2
