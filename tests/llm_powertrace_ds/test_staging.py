"""The run lifecycle module (``llm_powertrace_ds.staging``) and the one atomic writer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from llm_powertrace_ds import audit, layout
from llm_powertrace_ds.atomic import atomic_path, write_json_atomic, write_text_atomic
from llm_powertrace_ds.errors import LockTimeout
from llm_powertrace_ds.staging import (
    DONE_STATUSES,
    RunStatus,
    Staging,
    is_done,
    published_run_ids,
    read_status_file,
    unpublished_runs,
)


def test_atomic_write_replaces_whole_file_and_leaves_no_litter(tmp_path):
    path = tmp_path / "sub" / "x.json"
    write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    write_text_atomic(path, "new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer died")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_atomic_temporary_name_is_hidden_and_carries_this_pid(tmp_path):
    with atomic_path(tmp_path / "run.arrow") as tmp:
        assert tmp.name.startswith(".")
        match = audit._TMP_RE.match(tmp.name)  # the leftover sweep finds the writer's pid
        assert match is not None and int(match.group("pid")) == os.getpid()
        tmp.write_bytes(b"x")


def test_write_bytes_mode(tmp_path):
    path = tmp_path / "journal.json"
    write_json_atomic(path, {"k": 1}, mode=0o600)
    assert path.stat().st_mode & 0o777 == 0o600


def test_status_round_trip_and_unreadable_status(tmp_path):
    st = Staging(tmp_path, "r1")
    assert st.status() is None and not st.exists()
    st.set_status(RunStatus.FAILED, error="boom")
    assert st.status() == "failed" == RunStatus.FAILED
    assert st.status_record() == {"status": "failed", "error": "boom"}
    (st.dir / "status.json").write_text("{half")
    assert st.status() is None and read_status_file(st.dir) is None
    (st.dir / "status.json").write_text("[1, 2]")
    assert st.status() is None


def test_meta_round_trip(tmp_path):
    st = Staging(tmp_path, "r1")
    assert st.meta() is None
    st.write_meta({"columns": {"run_id": "r1"}, "settings": {"b": 2}})
    assert st.meta() == {"columns": {"run_id": "r1"}, "settings": {"b": 2}}


def _publish_trace(root, workload, run_id):
    path = layout.trace_path(root, workload, "cpu_proxy", "gpt2", run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


def test_done_means_trace_file_and_no_staging_saying_otherwise(tmp_path):
    _publish_trace(tmp_path, "finetune", "r1")
    _publish_trace(tmp_path, "finetune", "r2")
    published = published_run_ids(tmp_path, "finetune")
    assert published == {"r1", "r2"}
    assert published_run_ids(tmp_path, "inference") == set()
    assert is_done(tmp_path, "r1", published)
    assert not is_done(tmp_path, "r3", published)  # no trace
    Staging(tmp_path, "r2").set_status(RunStatus.RUNNING)
    assert not is_done(tmp_path, "r2", published)
    for status in DONE_STATUSES:
        Staging(tmp_path, "r2").set_status(status)
        assert is_done(tmp_path, "r2", published)
    Staging(tmp_path, "r4").set_status(RunStatus.KILLED)
    assert unpublished_runs(tmp_path) == ["r4"]


def test_archive_attempt_keeps_runner_files_and_numbers_attempts(tmp_path):
    st = Staging(tmp_path, "r1")
    st.set_status(RunStatus.RUNNING)
    st.write_meta({})
    (st.dir / "spool").mkdir()
    (st.dir / "spool" / "samples.bin").write_bytes(b"abc")
    (st.dir / "requests.jsonl").write_text("")
    (st.dir / ".hidden.tmp").write_text("")
    assert sorted(p.name for p in st.attempt_leftovers()) == ["requests.jsonl", "spool"]
    first = st.archive_attempt("killed", sampler_state="parent_gone")
    assert first.name == "attempt-1"
    record = read_status_file(first)
    assert record["status"] == "incomplete" and record["attempt"] == 1
    assert record["reason"] == "killed" and record["sampler_state"] == "parent_gone"
    assert record["files"] == ["requests.jsonl", "spool"]
    assert st.status() == "running"  # the run's own status is untouched
    (st.dir / "spool").mkdir()
    assert st.archive_attempt("failed").name == "attempt-2"
    assert [p.name for p in st.attempts()] == ["attempt-1", "attempt-2"]


def test_remove_after_publish_keeps_attempts_and_status(tmp_path):
    st = Staging(tmp_path, "r1")
    st.write_meta({})
    (st.dir / "spool").mkdir()
    st.archive_attempt("killed")
    (st.dir / "spool").mkdir()
    st.set_status(RunStatus.PUBLISHED)
    st.remove_after_publish()
    assert sorted(p.name for p in st.dir.iterdir()) == ["attempt-1", "status.json"]
    other = Staging(tmp_path, "r2")
    other.write_meta({})
    other.remove_after_publish()
    assert not other.exists()


def test_measure_lock_is_exclusive_across_processes(tmp_path):
    st = Staging(tmp_path, "r1")
    holder = textwrap.dedent(f"""
        import sys, time
        from llm_powertrace_ds.staging import Staging
        with Staging({str(tmp_path)!r}, "r1").measure_lock():
            print("held", flush=True)
            sys.stdin.readline()
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout, match="r1"), st.measure_lock():
            pass
    finally:
        proc.communicate("\n", timeout=30)
    with st.measure_lock():  # free again once the holder is gone
        pass
