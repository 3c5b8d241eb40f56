"""Runs-table segments against other processes: the lock, duplicates, a killed republish.

The segments lock held by another process, two segments holding one run, and a republish of a
segment's run killed between its renames. Every writer here is real: the lock holder and the
killed publisher are separate Python processes; the folder is read back and checked with the
audit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_powertrace_ds import audit, layout, shards
from llm_powertrace_ds.errors import LockTimeout
from llm_powertrace_ds.shards import segments

TESTS = Path(__file__).resolve().parents[2]

_HOLDER = """
    import sys, time
    from pathlib import Path
    from filelock import FileLock
    from llm_powertrace_ds import layout
    from llm_powertrace_ds.shards import segments

    root, hold_s = Path({root!r}), {hold_s!r}
    folder = layout.data_root(root) / "finetune_runs" / "l40s"
    with FileLock(str(layout.lock_path(root, segments.LOCK_NAME))):
        # hidden temporary files may be written meanwhile: only their renames need the lock
        before = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
        print("held", flush=True)
        time.sleep(hold_s)
        after = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
        print("unchanged" if before == after else f"changed: {{before}} -> {{after}}", flush=True)
"""


def _runs_folder(root: Path) -> Path:
    return layout.data_root(root) / "finetune_runs" / "l40s"


def _hold_lock(root: Path, hold_s: float) -> subprocess.Popen[str]:
    """Another process holding the folder's segments lock; returns once it holds it."""
    script = textwrap.dedent(_HOLDER).format(root=str(root), hold_s=hold_s)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held", proc.stderr.read() if proc.stderr else ""
    return proc


def _runs_rows(root: Path) -> dict[str, list[dict]]:
    """Every runs row of the l40s runs folder, by run id (every file read)."""
    rows: dict[str, list[dict]] = {}
    for path in sorted(_runs_folder(root).glob("*.arrow")):
        for row in shards.read_table(path).select(["run_id", "repeat"]).to_pylist():
            rows.setdefault(row["run_id"], []).append(row)
    return rows


# --------------------------------------------------------------------------------------------
# the segments lock, held by another process
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("writer", ["publish a segment's run", "merge loose files",
                                    "write a runs row"])
def test_a_writer_waits_for_the_segments_lock_held_by_another_process(tmp_path, make_run,
                                                                      writer):
    root = tmp_path / "ds"
    for i in range(segments.MIN_LOOSE):  # one segment
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i))
    for i in range(4, 4 + segments.MIN_LOOSE - 1):  # and loose files, one short of a merge
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i), refresh_card=False)
    holder = _hold_lock(root, hold_s=1.5)
    try:
        if writer == "publish a segment's run":
            shards.publish_run(root, make_run("run-001", seed=1, repeat=5), refresh_card=False)
        elif writer == "merge loose files":
            shards.publish_run(root, make_run("run-009", seed=9))  # ends with a merge
        else:
            path = layout.runs_path(root, "finetune", "l40s", "run-002")
            row = shards.read_table(next(p for p in _runs_folder(root).glob("segment~*")))
            segments.write_runs_rows(root, {path: row.slice(2, 1)})
        out, err = holder.communicate(timeout=60)
    finally:
        holder.kill()
    # nothing in the runs folder changed while the other process held the lock
    assert out.strip() == "unchanged", err
    assert all(len(rows) == 1 for rows in _runs_rows(root).values())
    assert audit.audit_folder(root).ok


def test_a_writer_times_out_on_a_segments_lock_that_is_never_released(tmp_path, make_run,
                                                                      monkeypatch):
    root = tmp_path / "ds"
    for i in range(segments.MIN_LOOSE):
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i))
    before = sorted(p.name for p in _runs_folder(root).iterdir())
    monkeypatch.setattr(segments, "LOCK_TIMEOUT_S", 0.5)
    holder = _hold_lock(root, hold_s=30.0)
    try:
        with pytest.raises(LockTimeout, match="segments of .* are locked by another process"):
            shards.publish_run(root, make_run("run-002", seed=2, repeat=4), refresh_card=False)
        with pytest.raises(LockTimeout):
            segments.compact(root)
    finally:
        holder.kill()
        holder.communicate()
    assert sorted(p.name for p in _runs_folder(root).iterdir()) == before
    assert [r["repeat"] for r in _runs_rows(root)["run-002"]] == [0]


# --------------------------------------------------------------------------------------------
# two segments holding the same run
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def row_pool(tmp_path_factory) -> dict[tuple[str, int], pa.Table]:
    """One-row runs tables of run-000..run-007, each in two versions (``repeat`` 1 and 2)."""
    import conftest  # the tests' run factory (tests/ is on sys.path under pytest)

    pool: dict[tuple[str, int], pa.Table] = {}
    for version in (1, 2):
        root = tmp_path_factory.mktemp(f"pool{version}")
        for i in range(8):
            run_id = f"run-{i:03d}"
            shards.publish_run(root, conftest.synthetic_run(run_id, seed=i, repeat=version, n=20),
                               refresh_card=False)
            pool[(run_id, version)] = shards.read_table(
                layout.runs_path(root, "finetune", "l40s", run_id))
    return pool


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(members=st.lists(st.sets(st.integers(0, 7), min_size=1, max_size=8), min_size=2,
                        max_size=3))
def test_of_two_segments_holding_a_run_the_larger_keeps_it(row_pool, tmp_path_factory,
                                                           members):
    root = tmp_path_factory.mktemp("two") / "ds"
    folder = _runs_folder(root)
    folder.mkdir(parents=True)
    written: list[tuple[Path, list[str], int]] = []
    for k, ids in enumerate(members):  # segment k holds version 1 + k % 2 of its runs
        version = 1 + k % 2
        names = [f"run-{i:03d}" for i in sorted(ids)]
        table = pa.concat_tables([row_pool[(n, version)] for n in names])
        path = folder / f"{layout.SEGMENT_PREFIX}{k:016x}{layout.SHARD_SUFFIX}"
        segments.write_segment(path, table)
        written.append((path, names, version))
    with segments.segments_lock(root):  # the rows have no traces: repair_folder would drop them
        segments.resolve_duplicates(folder)
    rows = _runs_rows(root)
    assert sorted(rows) == sorted({n for _, names, _ in written for n in names})
    for run_id, kept in rows.items():
        assert len(kept) == 1, run_id
        holders = [(len(names), path.name, version) for path, names, version in written
                   if run_id in names]
        # the most rows wins; among equal sizes the first name
        winner = min(holders, key=lambda h: (-h[0], h[1]))
        assert kept[0]["repeat"] == winner[2], (run_id, holders)
    assert segments.resolve_duplicates(folder) == []  # nothing left to resolve


# --------------------------------------------------------------------------------------------
# a republish of a segment's run, killed between its renames
# --------------------------------------------------------------------------------------------

_KILLED_REPUBLISH = """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from conftest import synthetic_run
    from llm_powertrace_ds import shards
    from llm_powertrace_ds.shards import write

    renames = 0
    real = os.replace

    def replace_then_die(src, dst):
        global renames
        real(src, dst)
        if "/data/" not in str(dst):  # status files and the like
            return
        renames += 1
        if renames == {after}:
            os.kill(os.getpid(), signal.SIGKILL)  # the writer dies after this rename

    write.os.replace = replace_then_die
    shards.publish_run({root!r}, synthetic_run("run-001", seed=1, repeat=9), refresh_card=False)
"""


@pytest.mark.parametrize("after", [1, 2], ids=["after the runs row", "after the segment"])
def test_a_republish_of_a_segments_run_killed_between_renames_is_repaired(tmp_path, make_run,
                                                                         after):
    root = tmp_path / "ds"
    for i in range(segments.MIN_LOOSE):
        shards.publish_run(root, make_run(f"run-{i:03d}", seed=i))
    assert not segments.scan(_runs_folder(root)).loose  # every row in one segment
    script = textwrap.dedent(_KILLED_REPUBLISH).format(tests=str(TESTS), root=str(root),
                                                       after=after)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=120)
    assert proc.returncode == -9, proc.stderr
    rows = _runs_rows(root)
    # the new row is in place; the old one too until the segment was rewritten
    assert sorted(r["repeat"] for r in rows["run-001"]) == ([0, 9] if after == 1 else [9])
    if after == 1:
        assert not audit.audit_folder(root).ok  # validate reports the second row
    shards.repair_folder(root)
    rows = _runs_rows(root)
    assert sorted(rows) == [f"run-{i:03d}" for i in range(segments.MIN_LOOSE)]
    assert all(len(r) == 1 for r in rows.values())
    assert [r["repeat"] for r in rows["run-001"]] == [9]  # the newer (loose) row is kept
    # its trace was never renamed: publishing again makes the run whole
    again = shards.publish_run(root, make_run("run-001", seed=1, repeat=9))
    assert again.run_id == "run-001"
    rows = _runs_rows(root)
    assert [r["repeat"] for r in rows["run-001"]] == [9]
    assert all(len(r) == 1 for r in rows.values())
    assert audit.audit_folder(root).ok
    loaded = shards.read_table(layout.trace_path(root, "finetune", "l40s", "llama", "run-001"))
    assert set(loaded.column("repeat").to_pylist()) == {9}


def test_the_lock_holder_script_reports_a_change_made_while_it_holds(tmp_path, make_run):
    """The check above can fail: a write that ignores the lock is seen by the holder."""
    root = tmp_path / "ds"
    shards.publish_run(root, make_run("run-000", seed=0))
    holder = _hold_lock(root, hold_s=1.0)
    try:
        (_runs_folder(root) / "intruder.arrow").write_bytes(b"")
        out, _ = holder.communicate(timeout=60)
    finally:
        holder.kill()
    assert out.startswith("changed")
