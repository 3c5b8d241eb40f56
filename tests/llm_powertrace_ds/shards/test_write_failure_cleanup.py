"""A write that fails after its temporary file exists leaves no temporary file and no half file.

The failure is a full disk (``ENOSPC``) raised by the real system call's wrapper at the step
after the temporary file was created: the fsync before the rename, the rename, or a copy.
Every file under the folder, hidden ones included, is listed before and after.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from llm_powertrace_ds import export, merge, shards
from llm_powertrace_ds.atomic import atomic_path
from llm_powertrace_ds.errors import PowerTraceError
from llm_powertrace_ds.shards.write import write_batches_atomic, write_table_atomic


def disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def disk_full_for_shards(fd, real=os.fsync):
    """``os.fsync`` that fails for an Arrow file (named by its descriptor) and works otherwise."""
    if ".arrow" in os.readlink(f"/proc/self/fd/{fd}"):
        disk_full()
    return real(fd)


def files_under(root: Path) -> set[str]:
    """Every file (hidden ones too) under ``root``, relative; lock files left out."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and not p.name.endswith(".lock")}


def temporaries(root: Path) -> list[str]:
    return sorted(p for p in files_under(root) if ".tmp" in p or "packing" in p)


def small_table() -> pa.Table:
    return pa.table({"x": pa.array(range(100), pa.int64())})


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_a_shard_failing_after_its_temporary_file_exists_leaves_nothing(tmp_path, monkeypatch,
                                                                         step):
    monkeypatch.setattr(os, step, disk_full)
    path = tmp_path / "data" / "x.arrow"
    with pytest.raises(OSError, match="No space left"):
        write_table_atomic(path, small_table())
    assert files_under(tmp_path) == set()


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_a_streamed_shard_failing_at_fsync_or_rename_leaves_nothing(tmp_path, monkeypatch, step):
    table = small_table()
    monkeypatch.setattr(os, step, disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_batches_atomic(tmp_path / "s.arrow", table.schema, table.to_batches())
    assert files_under(tmp_path) == set()


def test_atomic_path_failing_at_fsync_removes_its_temporary_file(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"), \
            atomic_path(tmp_path / "status.json", fsync=True) as tmp:
        tmp.write_text("{}", encoding="utf-8")
    assert files_under(tmp_path) == set()


def test_a_run_failing_at_fsync_publishes_nothing_and_leaves_no_temporary(tmp_path, monkeypatch,
                                                                          make_run):
    root = tmp_path / "ds"
    shards.publish_run(root, make_run("first"), refresh_card=False)
    before = files_under(root)
    monkeypatch.setattr(os, "fsync", disk_full_for_shards)
    with pytest.raises(PowerTraceError, match="No space left.*nothing of the run"):
        shards.publish_run(root, make_run("second", seed=1), refresh_card=False)
    monkeypatch.undo()
    assert temporaries(root) == []
    assert not [p for p in files_under(root) - before if p.startswith("data/")]


def test_pack_failing_at_fsync_leaves_no_shard_and_no_work_folder(tmp_path, monkeypatch,
                                                                 make_run):
    src = tmp_path / "src"
    for i in range(3):
        shards.publish_run(src, make_run(f"r{i}", seed=i), refresh_card=False)
    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        shards.pack(src, tmp_path / "dst")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_merge_failing_mid_copy_leaves_no_temporary_and_no_part_of_the_run(tmp_path,
                                                                          monkeypatch,
                                                                          make_run):
    src, into = tmp_path / "src", tmp_path / "into"
    shards.publish_run(src, make_run("m1", with_requests=True, workload="inference"),
                       refresh_card=False)
    real_copy = shutil.copyfile
    calls = []

    def second_copy_fails(a, b, *args, **kwargs):
        calls.append(b)
        if len(calls) == 2:  # the first file's temporary copy exists
            disk_full()
        return real_copy(a, b, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", second_copy_fails)
    with pytest.raises(OSError, match="No space left"):
        merge.merge([src], into)
    monkeypatch.undo()
    assert len(calls) == 2
    assert temporaries(into) == []
    assert not [p for p in files_under(into) if p.startswith("data/")]


def test_export_failing_after_its_first_rows_leaves_no_file(tmp_path, monkeypatch, make_run):
    root = tmp_path / "ds"
    for i in range(2):
        shards.publish_run(root, make_run(f"e{i}", seed=i), refresh_card=False)
    real = export._export_table
    seen = []

    def fails_on_second_batch(batch, **kw):
        seen.append(batch.num_rows)
        if len(seen) == 2:  # the first batch is already in the temporary file
            disk_full()
        return real(batch, **kw)

    monkeypatch.setattr(export, "_export_table", fails_on_second_batch)
    out = tmp_path / "out" / "finetune.parquet"
    out.parent.mkdir()
    with pytest.raises(OSError, match="No space left"):
        export.export(root, "finetune", out)
    assert len(seen) == 2
    assert files_under(out.parent) == set()
