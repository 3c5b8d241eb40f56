"""The card's per-run trace summary is cached beside the runs file, keyed on the trace file."""

from __future__ import annotations

from conftest import synthetic_run

from cards import runs_cache, summary
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


def _runs_reads(monkeypatch) -> list[str]:  # noqa: ANN001 - records runs-file reads
    read: list[str] = []
    real = summary._read_runs_file

    def spy(path):  # noqa: ANN001, ANN202
        read.append(path.name)
        return real(path)

    monkeypatch.setattr(summary, "_read_runs_file", spy)
    return read


def test_unchanged_runs_files_come_from_the_folder_cache(tmp_path, monkeypatch):
    root = tmp_path / "ds"
    for i in range(3):
        shards.publish_run(root, synthetic_run(f"r{i}", n=40, seed=i))
    first = summary.summarize(root)
    folder = layout.runs_path(root, "finetune", "l40s", "r0").parent
    assert runs_cache.cache_path(folder).is_file()
    read = _runs_reads(monkeypatch)
    assert summary.summarize(root).runs == first.runs
    assert read == []
    # no configs refresh: four loose files would become a runs-table segment, one file
    shards.publish_run(root, synthetic_run("r3", n=40, seed=3), refresh_card=False)
    changed = synthetic_run("r1", n=40, seed=9)
    changed.meta["seed"] = 99
    shards.publish_run(root, changed, refresh_card=False)  # republished: a new file, same name
    again = summary.summarize(root)
    assert sorted(read) == ["r1.arrow", "r3.arrow"]
    assert [r["run_id"] for r in again.runs["finetune"]] == ["r0", "r1", "r2", "r3"]
    assert again.runs["finetune"][1]["seed"] == 99
    assert again.runs["finetune"][0] == first.runs["finetune"][0]


def test_folder_cache_gives_what_the_files_give(tmp_path):
    root = tmp_path / "ds"
    for i in range(4):
        shards.publish_run(root, synthetic_run(f"r{i}", n=40, seed=i))
    summary.summarize(root)
    cached = summary.summarize(root)  # every row from the cache
    folder = layout.runs_path(root, "finetune", "l40s", "r0").parent
    runs_cache.cache_path(folder).unlink()
    fresh = summary.summarize(root)
    assert cached.runs == fresh.runs and cached.rows == fresh.rows
    assert cached.devices == fresh.devices


def test_merging_runs_files_into_a_segment_reads_no_trace_again(tmp_path, monkeypatch):
    root = tmp_path / "ds"
    for i in range(3):
        shards.publish_run(root, synthetic_run(f"r{i}", n=40, seed=i))
    summary.summarize(root)
    read = []
    real = summary._read_file
    monkeypatch.setattr(summary, "_read_file", lambda path, cols: (
        read.append(path.name) if cols == summary.DEVICE_COLUMNS else None, real(path, cols))[1])
    shards.publish_run(root, synthetic_run("r3", n=40, seed=3))  # four: merged into a segment
    folder = layout.runs_path(root, "finetune", "l40s", "r0").parent
    assert [layout.is_segment(p.name) for p in layout.shard_files(root, "finetune_runs")] == [True]
    again = summary.summarize(root)
    assert read == ["r3.arrow"] and sorted(again.devices) == ["r0", "r1", "r2", "r3"]
    assert summary.summary_cache_path(folder / "r0.arrow").is_file()


def test_removed_run_and_corrupt_folder_cache(tmp_path, monkeypatch):
    root = tmp_path / "ds"
    for i in range(3):
        shards.publish_run(root, synthetic_run(f"r{i}", n=40, seed=i))
    summary.summarize(root)
    layout.runs_path(root, "finetune", "l40s", "r2").unlink()
    assert [r["run_id"] for r in summary.summarize(root).runs["finetune"]] == ["r0", "r1"]
    folder = layout.runs_path(root, "finetune", "l40s", "r0").parent
    runs_cache.cache_path(folder).write_bytes(b"not arrow")
    read = _runs_reads(monkeypatch)
    assert [r["run_id"] for r in summary.summarize(root).runs["finetune"]] == ["r0", "r1"]
    assert sorted(read) == ["r0.arrow", "r1.arrow"]
    assert not any(p.name.startswith(".") for p in layout.shard_files(root, "finetune_runs"))
