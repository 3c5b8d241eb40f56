"""Every state ``validate`` reports of a runs table has a repair, and ``pack`` copies none of them.

A run repeated inside one segment is repaired by ``validate --repair`` (its last row, the newest,
is kept). A folder left by a merge killed after its segment write holds each run's row twice:
``pack`` refuses it by name instead of packing two rows per run, and packs it once repaired. A
packed folder is never rewritten in place: its problems name the repair (in the folder it was
packed from, then pack again). A trace left without its runs row gets the row rebuilt from it.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import pyarrow as pa
import pytest
from test_segments import _kill_during_merge

from llm_powertrace_ds import audit, layout, shards
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.shards import segments


def _runs_folder(root: Path) -> Path:
    return layout.data_root(root) / "finetune_runs" / "l40s"


def _run_ids(root: Path) -> list[str]:
    ds = datasets.load_dataset(str(root), "finetune_runs", split="l40s")
    assert isinstance(ds, datasets.Dataset)
    return sorted(ds["run_id"])


def _segment_repeating_a_run(root: Path, make_run) -> Path:  # noqa: ANN001 - fixture
    for i in range(segments.MIN_LOOSE):
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i))
    (seg,) = segments.scan(_runs_folder(root)).segments
    table = shards.read_table(seg)
    again = table.filter(pa.compute.equal(table.column("run_id"), "run-001"))
    again = again.set_column(again.schema.get_field_index("repeat"), "repeat",
                             pa.array([7], again.schema.field("repeat").type))
    segments.write_segment(seg, pa.concat_tables([table, again]))
    return seg


def test_validate_repair_fixes_a_run_repeated_inside_one_segment(tmp_path, make_run, capsys):
    root = tmp_path / "ds"
    seg = _segment_repeating_a_run(root, make_run)
    assert audit.audit_folder(root).duplicate_rows == ["run-001"]
    assert main(["validate", str(root)]) == 1
    assert "run run-001: more than one runs row (run `validate --repair`)" in capsys.readouterr().out
    assert main(["validate", str(root), "--repair"]) == 0
    assert "held more than once in it" in capsys.readouterr().out
    assert segments.scan(_runs_folder(root)).segments[seg].count("run-001") == 1
    assert _run_ids(root) == [f"run-{i:03d}" for i in range(segments.MIN_LOOSE)]
    kept = shards.read_table(seg).filter(pa.compute.equal(
        shards.read_table(seg).column("run_id"), "run-001"))
    assert kept.column("repeat").to_pylist() == [7]  # the last row: the newest
    assert audit.audit_folder(root).ok


def test_pack_refuses_the_folder_a_killed_merge_left_and_packs_it_once_repaired(
        tmp_path, capsys):
    root, packed = tmp_path / "ds", tmp_path / "packed"
    _kill_during_merge(root)
    ids = [f"run-{i:03d}" for i in range(segments.MIN_LOOSE)]
    assert main(["pack", str(root), "--out", str(packed)]) != 0
    err = capsys.readouterr().err.strip()
    assert "fails validation, so it is not packed" in err and "--repair" in err
    assert "run run-000: more than one runs row" in err and len(err.splitlines()) == 1
    assert not packed.exists()
    assert main(["validate", str(root), "--repair"]) == 0
    capsys.readouterr()
    assert main(["pack", str(root), "--out", str(packed)]) == 0
    assert _run_ids(packed) == ids  # four rows for four runs


def test_a_packed_folder_with_a_run_twice_names_its_repair(tmp_path, make_run, capsys):
    root, packed = tmp_path / "ds", tmp_path / "packed"
    for i in range(2):
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i))
    shards.pack(root, packed)
    (shard,) = [p for p in _runs_folder(packed).iterdir() if "-of-" in p.name]
    # a packed copy holding a run's row twice (what a pack of an unrepaired folder made)
    table = shards.read_table(shard)
    segments.write_segment(shard, pa.concat_tables([table, table.slice(0, 1)]))
    assert main(["validate", str(packed), "--repair"]) == 1
    out = capsys.readouterr().out
    assert "run run-000: more than one runs row in a packed folder" in out
    assert "on the folder it was packed from, then pack it again" in out
    assert main(["pack", str(packed), "--out", str(tmp_path / "again")]) != 0
    assert "pack it again" in capsys.readouterr().err


def test_validate_repair_rebuilds_the_runs_row_of_a_trace_left_without_one(tmp_path, make_run,
                                                                          capsys):
    root = tmp_path / "ds"
    for i in range(segments.MIN_LOOSE + 1):  # four rows in a segment, one loose file
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i))
    before = {r["run_id"]: r for r in shards.list_runs(root)}
    loose = layout.runs_path(root, "finetune", "l40s", "run-004")
    loose.unlink()  # a loose runs file lost
    with segments.segments_lock(root):  # a segment row lost
        rewrites, _ = segments.drop_runs(root, {"run-001"})
        for seg, table in rewrites.items():
            segments.write_segment(seg, table)
    assert audit.audit_folder(root).orphan_traces == ["run-001", "run-004"]
    assert main(["validate", str(root)]) == 1
    assert "trace file without a runs row (run `validate --repair`" in capsys.readouterr().out
    assert main(["validate", str(root), "--repair"]) == 0
    out = capsys.readouterr().out
    assert "the runs row of run run-004 rebuilt from its trace file" in out
    assert audit.audit_folder(root).ok
    assert _run_ids(root) == sorted(before)
    after = {r["run_id"]: r for r in shards.list_runs(root)}
    for run_id in ("run-001", "run-004"):  # recomputed from the stored trace
        assert after[run_id]["energy_j"] == pytest.approx(before[run_id]["energy_j"], rel=1e-4)
        assert after[run_id]["num_gpus"] == before[run_id]["num_gpus"]


def test_pack_refuses_a_runs_row_validate_rejects_by_value(tmp_path, make_run, capsys):
    root, packed = tmp_path / "ds", tmp_path / "packed"
    shards.publish_run(root, make_run("run-000", seed=0))
    path = layout.runs_path(root, "finetune", "l40s", "run-000")
    table = shards.read_table(path)
    at = table.schema.get_field_index("energy_j")
    table = table.set_column(at, "energy_j", pa.array([float("nan")], table.schema.field(at).type))
    shards.write_table_atomic(path, table)  # a runs row edited by hand: a NaN energy
    assert main(["validate", str(root)]) == 1
    capsys.readouterr()
    assert main(["pack", str(root), "--out", str(packed)]) != 0
    err = capsys.readouterr().err.strip()
    assert "fails validation, so it is not packed" in err and "energy_j" in err
    assert not packed.exists()
