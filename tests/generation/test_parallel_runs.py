"""A whole node busy: runs side by side, each pinned to its own devices, each its own trace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from generation import parallel_runs
from llm_powertrace_ds.errors import UsageError

SWEEP = """\
name: side-by-side
workload: finetune
sampler: {source: cpu_proxy, period_ms: 100}
idle_before_s: 0.2
idle_after_s: 0.2
base:
  model: llama-tiny
  method: lora
  lora_rank: 4
  batch_size: 2
  seq_len: 16
  max_steps: 2
grid:
  seed: [0, 1]
"""


def test_slots():
    assert parallel_runs.plan_slots("auto", 8, 1) == 8
    assert parallel_runs.plan_slots("auto", 8, 2) == 4
    assert parallel_runs.plan_slots("3", 8, 2) == 3
    with pytest.raises(UsageError, match="hold at most 4 slot"):
        parallel_runs.plan_slots("5", 8, 2)
    from generation.node_context import RUNS_ENV, SLOT_ENV, parallel_columns

    assert parallel_columns({}) == {}
    assert parallel_columns({SLOT_ENV: "1", RUNS_ENV: "2"}) == {
        "parallel_runs": 2, "parallel_slot": 1}


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPU cores")
def test_two_runs_side_by_side_each_with_its_own_trace_on_its_own_core(tmp_path, capsys):
    from llm_powertrace_ds import cli
    from llm_powertrace_ds.shards import read_run
    from llm_powertrace_ds.staging import published_run_ids

    sweep = Path(tmp_path, "s.yaml")
    sweep.write_text(SWEEP)
    out = tmp_path / "ds"
    code = cli.main(["generate", str(sweep), "--out", str(out), "--parallel-runs", "2",
                     "--format", "json"])
    slots = json.loads(capsys.readouterr().out)
    [folder] = list((out / parallel_runs.NODE_TRACES_DIR).iterdir())
    manifest = json.loads((folder / "manifest.json").read_text())
    logs = "\n".join(p.read_text() for p in folder.glob("slot-*.log"))
    assert code == 0, logs[-3000:]
    assert [s["exit_code"] for s in slots] == [0, 0]
    cores = [tuple(s["devices"]) for s in manifest["slots"]]
    assert len(set(cores)) == 2  # distinct devices (CPU cores here; GPUs by UUID on nvml)
    # every slot was running before the first one exited: side by side
    assert (max(s["started_unix_s"] for s in manifest["slots"])
            < min(s["exited_unix_s"] for s in manifest["slots"]))
    ids = sorted(published_run_ids(out, "finetune"))
    assert len(ids) == 2
    runs = [read_run(out, i) for i in ids]
    assert sorted(r.meta["parallel_slot"] for r in runs) == [0, 1]  # one run per slot
    assert all(r.meta["parallel_runs"] == 2 and len(r.devices) == 1 for r in runs)
    assert manifest["node_trace"] is True and (folder / "spool").is_dir()
