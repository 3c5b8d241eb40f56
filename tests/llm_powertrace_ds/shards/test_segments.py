"""Runs-table segments: bytes per run, replace, merge, and repair after a kill (issue 40)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import pytest

from llm_powertrace_ds import audit, hooks, layout, schema, shards
from llm_powertrace_ds.merge import merge
from llm_powertrace_ds.shards import segments

TESTS = Path(__file__).resolve().parents[2]


def _runs_folder(root: Path, platform: str = "l40s") -> Path:
    return layout.data_root(root) / "finetune_runs" / platform


def _loaded(root: Path, platform: str = "l40s") -> datasets.Dataset:
    ds = datasets.load_dataset(str(root), "finetune_runs", split=platform)
    assert isinstance(ds, datasets.Dataset)
    return ds


def _publish(root: Path, make_run, ids: range, **meta) -> None:  # noqa: ANN001 - fixture
    for i in ids:
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i, **meta))


def test_bytes_per_run_at_64_runs_published_one_command_each_is_at_most_8_kb(
        tmp_path, make_run):
    root = tmp_path / "ds"
    _publish(root, make_run, range(64))  # publish_run ends as a command does: configs refresh
    folder = _runs_folder(root)
    files = [p for p in folder.iterdir() if not p.name.startswith(".")]
    per_run = sum(p.stat().st_size for p in files) / 64
    assert per_run <= 8 * 1024, f"{per_run:.0f} B per run in {sorted(p.name for p in files)}"
    assert any(layout.is_segment(p.name) for p in files)
    ds = _loaded(root)
    assert sorted(ds["run_id"]) == [f"run-{i:03d}" for i in range(64)]
    assert ds.features == schema.FEATURES["finetune_runs"]  # the contract's types


def test_a_folder_below_the_threshold_keeps_one_file_per_run(tmp_path, make_run):
    root = tmp_path / "ds"
    _publish(root, make_run, range(segments.MIN_LOOSE - 1))
    names = sorted(p.name for p in _runs_folder(root).iterdir() if not p.name.startswith("."))
    assert names == [f"run-{i:03d}.arrow" for i in range(segments.MIN_LOOSE - 1)]


def test_replacing_a_run_held_by_a_segment_leaves_one_row_with_the_new_data(tmp_path, make_run):
    root = tmp_path / "ds"
    _publish(root, make_run, range(segments.MIN_LOOSE))
    (seg,) = [p for p in _runs_folder(root).iterdir() if layout.is_segment(p.name)]
    shards.publish_run(root, make_run("run-003", seed=3, repeat=7), refresh_card=False)
    assert layout.runs_path(root, "finetune", "l40s", "run-003").is_file()
    assert "run-003" not in segments.scan(_runs_folder(root)).segments[seg]
    ds = _loaded(root)
    assert sorted(ds["run_id"]) == [f"run-{i:03d}" for i in range(segments.MIN_LOOSE)]
    assert ds.filter(lambda r: r["run_id"] == "run-003")["repeat"] == [7]
    assert audit.audit_folder(root).ok


def test_replacing_a_run_on_another_platform_removes_its_row_from_the_old_segment(
        tmp_path, make_run):
    root = tmp_path / "ds"
    _publish(root, make_run, range(segments.MIN_LOOSE))
    shards.publish_run(root, make_run("run-000", seed=0, platform="h100"))
    assert "run-000" not in _loaded(root)["run_id"]
    assert _loaded(root, "h100")["run_id"] == ["run-000"]
    assert audit.audit_folder(root).ok


def test_merge_of_folders_with_segments_copies_each_run_once(tmp_path, make_run):
    a, b, into = tmp_path / "a", tmp_path / "b", tmp_path / "into"
    _publish(a, make_run, range(20))
    _publish(b, make_run, range(15, 40))  # 15..19 in both: identical rows
    assert any(layout.is_segment(p.name) for p in _runs_folder(b).iterdir())
    copied, identical = merge([a, b], into)
    assert len(copied) == 40 and identical == {f"run-{i:03d}" for i in range(15, 20)}
    assert sorted(_loaded(into)["run_id"]) == [f"run-{i:03d}" for i in range(40)]
    assert any(layout.is_segment(p.name) for p in _runs_folder(into).iterdir())
    assert audit.audit_folder(into).ok
    assert merge([a], into) == ([], {f"run-{i:03d}" for i in range(20)})  # nothing new


def test_merge_refuses_a_segment_row_that_differs_from_the_destination(tmp_path, make_run):
    a, into = tmp_path / "a", tmp_path / "into"
    _publish(a, make_run, range(segments.MIN_LOOSE))
    shards.publish_run(into, make_run("run-002", seed=2, repeat=9))
    with pytest.raises(Exception, match="run run-002: .* hold different data"):
        merge([a], into)


_KILLED_MERGE = """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from conftest import synthetic_run
    from llm_powertrace_ds import shards
    from llm_powertrace_ds.shards import segments

    real = segments.write_segment

    def write_then_die(path, table):
        real(path, table)  # the segment is renamed into place ...
        os.kill(os.getpid(), signal.SIGKILL)  # ... and the writer dies before any removal

    segments.write_segment = write_then_die
    for i in range({n}):
        shards.publish_run({root!r}, synthetic_run(f"run-{{i:03d}}", seed=i))
"""


def _kill_during_merge(root: Path) -> None:
    script = textwrap.dedent(_KILLED_MERGE).format(tests=str(TESTS), root=str(root),
                                                   n=segments.MIN_LOOSE)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=120)
    assert proc.returncode == -9, proc.stderr


def test_repair_after_a_kill_between_segment_rename_and_removals_keeps_each_run_once(tmp_path):
    root = tmp_path / "ds"
    _kill_during_merge(root)
    ids = [f"run-{i:03d}" for i in range(segments.MIN_LOOSE)]
    found = audit.audit_folder(root)
    assert found.duplicate_rows == ids and not found.ok  # validate reports it until repaired
    assert sorted(_loaded(root)["run_id"]) == sorted(ids * 2)
    removed = shards.repair_folder(root)
    assert sorted(removed) == [f"data/finetune_runs/l40s/{r}.arrow" for r in ids]
    assert sorted(_loaded(root)["run_id"]) == ids
    assert audit.audit_folder(root).ok


def test_the_next_writer_resolves_what_a_killed_merge_left(tmp_path, make_run):
    root = tmp_path / "ds"
    _kill_during_merge(root)
    shards.publish_run(root, make_run("run-100", seed=100))
    assert sorted(_loaded(root)["run_id"]) == [f"run-{i:03d}" for i in
                                               [*range(segments.MIN_LOOSE), 100]]
    assert audit.audit_folder(root).ok


def test_segments_merge_smallest_first_and_stay_within_max_rows(tmp_path, make_run):
    root = tmp_path / "ds"
    folder = _runs_folder(root)
    sizes = []
    for start in range(0, 12, 3):  # 4 rounds of 3 loose files, merged at 3 into <= 8 rows
        for i in range(start, start + 3):
            shards.publish_run(root, make_run(f"run-{i:03d}", seed=i), refresh_card=False)
        with segments.segments_lock(root):
            segments.compact_folder(folder, min_loose=3, max_rows=8)
        found = segments.scan(folder)
        assert not found.loose
        sizes.append(sorted(len(ids) for ids in found.segments.values()))
    # 3; 3+3; 6 is larger than 3 new rows; 3+3 again, and 6+6 would pass 8
    assert sizes == [[3], [6], [3, 6], [6, 6]]
    assert audit.audit_folder(root).ok


def test_a_segment_name_is_accepted_only_in_a_runs_folder():
    name = "segment~0123456789abcdef.arrow"
    assert audit._expected(("data", "finetune_runs", "l40s", name)) is None
    assert audit._expected(("data", "finetune", "l40s", "llama", name)) is not None


def test_pack_of_a_folder_with_segments_keeps_every_row_and_stays_compressed(tmp_path, make_run):
    root, packed = tmp_path / "ds", tmp_path / "packed"
    _publish(root, make_run, range(40))
    segs = [p for p in _runs_folder(root).iterdir() if layout.is_segment(p.name)]
    assert sorted(len(ids) for ids in segments.scan(_runs_folder(root)).segments.values()) \
        == [8, 32]  # one run a command, merged 4 at a time: a binary counter
    shards.pack(root, packed)
    (shard,) = [p for p in _runs_folder(packed).iterdir() if not p.name.startswith(".")]
    assert shards.count_rows(shard) == 40
    # both compressed; an uncompressed shard would be ~4x
    assert shard.stat().st_size <= 1.2 * sum(p.stat().st_size for p in segs)


def test_a_command_ending_with_a_card_writer_merges_the_loose_runs_files(tmp_path, make_run,
                                                                          monkeypatch):
    root = tmp_path / "ds"
    for i in range(segments.MIN_LOOSE):  # as `import` commits: no configs block per run
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i), refresh_card=False)
    seen: list[list[str]] = []
    monkeypatch.setattr(hooks, "_card_writers", {"card": lambda r: seen.append(
        sorted(p.name for p in _runs_folder(r).iterdir() if not p.name.startswith(".")))})
    hooks.rebuild_card(root)
    assert len(seen) == 1 and len(seen[0]) == 1 and layout.is_segment(seen[0][0])
