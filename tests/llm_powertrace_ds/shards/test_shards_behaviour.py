"""Publishing order and atomic replacement, seen from a reader of the dataset folder."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from llm_powertrace_ds import layout, shards


def _paths(root, run_id: str) -> dict[str, object]:
    return {"trace": layout.trace_path(root, "inference", "l40s", "llama", run_id),
            "runs": layout.runs_path(root, "inference", "l40s", run_id),
            "requests": layout.requests_path(root, "l40s", run_id)}


def test_a_reader_never_sees_a_trace_file_before_its_runs_row_and_requests(tmp_path, make_run,
                                                                           monkeypatch):
    """At every rename into ``data/``, an existing trace implies its runs and requests files."""
    paths = _paths(tmp_path, "inf-1")
    seen: list[str] = []
    real_replace = os.replace

    def watching_replace(src, dst, **kwargs):
        real_replace(src, dst, **kwargs)
        seen.append(os.fspath(dst))
        if paths["trace"].exists():
            assert paths["runs"].exists() and paths["requests"].exists(), seen

    monkeypatch.setattr(os, "replace", watching_replace)
    shards.publish_run(tmp_path, make_run("inf-1", workload="inference", with_requests=True),
                       refresh_card=False)
    assert paths["trace"].exists()  # the watcher saw the trace file arrive
    assert {os.fspath(p) for p in paths.values()} <= set(seen)


def test_a_publish_that_dies_before_the_trace_leaves_no_trace(tmp_path, make_run, monkeypatch):
    paths = _paths(tmp_path, "inf-2")
    real_replace = os.replace

    def dying_replace(src, dst, **kwargs):
        if os.fspath(dst) == os.fspath(paths["trace"]):
            raise OSError(28, "No space left on device")
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", dying_replace)
    with pytest.raises(OSError, match="No space left"):
        shards.publish_run(tmp_path, make_run("inf-2", workload="inference", with_requests=True),
                           refresh_card=False)
    assert not paths["trace"].exists()  # not a done run: no trace file
    assert not any(p.name.endswith(".tmp") for p in tmp_path.rglob("*"))  # no litter
    monkeypatch.setattr(os, "replace", real_replace)
    shards.publish_run(tmp_path, make_run("inf-2", workload="inference", with_requests=True),
                       refresh_card=False)
    assert all(p.exists() for p in paths.values())


def test_a_reader_holding_the_old_file_keeps_reading_the_old_bytes(tmp_path, make_run):
    paths = _paths(tmp_path, "inf-3")
    first = make_run("inf-3", workload="inference", seed=0)
    shards.publish_run(tmp_path, first, refresh_card=False)
    old_bytes = paths["trace"].read_bytes()
    old_inode = paths["trace"].stat().st_ino
    with open(paths["trace"], "rb") as held, pa.memory_map(str(paths["trace"])) as mapped:
        shards.publish_run(tmp_path, make_run("inf-3", workload="inference", seed=1),
                           refresh_card=False)
        assert held.read() == old_bytes
        old_table = ipc.open_stream(mapped).read_all()
    # The old reader saw the whole old run; a new reader sees the whole new one.
    np.testing.assert_allclose(np.asarray(old_table["power_w"][0].as_py(), float),
                               first.devices[0].power_w, rtol=1e-6)
    assert paths["trace"].stat().st_ino != old_inode
    new = shards.read_run(tmp_path, "inf-3")
    assert not np.allclose(new.devices[0].power_w, first.devices[0].power_w)
