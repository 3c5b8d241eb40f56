"""Segment names, what a scan of a runs folder counts, and what a merge reports."""

from __future__ import annotations

import hashlib

from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.shards import segments


def _expected(ids: list[str], salt: str = "") -> str:
    digest = hashlib.sha256(("\n".join(sorted(ids)) + salt).encode()).hexdigest()[:16]
    return f"segment~{digest}.arrow"


def test_a_segment_is_named_by_its_sorted_run_ids_and_salted_when_taken(tmp_path):
    ids = ["run-b", "run-a", "run-c"]
    first = segments.segment_name(tmp_path, ids)
    assert first.name == _expected(ids) == segments.segment_name(tmp_path, sorted(ids)).name
    first.write_bytes(b"")
    second = segments.segment_name(tmp_path, ids)
    assert second.name == _expected(ids, "\n1")
    second.write_bytes(b"")
    assert segments.segment_name(tmp_path, ids).name == _expected(ids, "\n2")


def test_a_scan_counts_runs_files_and_segments_not_hidden_or_other_files(tmp_path, make_run):
    root = tmp_path / "ds"
    for i in range(3):
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i), refresh_card=False)
    folder = layout.data_root(root) / "finetune_runs" / "l40s"
    (folder / ".run-009.arrow.123.tmp").write_bytes(b"")  # a writer's temporary file
    (folder / ".hidden.arrow").write_bytes(b"")
    (folder / "notes.txt").write_text("x", encoding="utf-8")
    found = segments.scan(folder)
    assert sorted(found.loose) == ["run-000", "run-001", "run-002"] and found.segments == {}
    assert segments.scan(tmp_path / "nowhere") == segments.RunsFolder(loose={}, segments={})


def test_a_merge_says_what_it_merged_and_drop_runs_names_an_emptied_segment(tmp_path, make_run):
    root = tmp_path / "ds"
    for i in range(4):
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i), refresh_card=False)
    folder = layout.data_root(root) / "finetune_runs" / "l40s"
    with segments.segments_lock(root):
        notes = segments.compact_folder(folder, min_loose=4)
    (seg,) = segments.scan(folder).segments
    assert notes == [f"{seg.name}: 4 runs files and 0 segment(s) merged (4 rows)"]
    rewrites, removals = segments.drop_runs(root, {f"run-{i:03d}" for i in range(4)})
    assert rewrites == {} and removals == [seg]
    rewrites, removals = segments.drop_runs(root, {"run-001"})
    assert list(rewrites) == [seg] and rewrites[seg].num_rows == 3 and removals == []
