"""The Recording context manager: events from threads, failures kept, no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from generation.record import Recording
from llm_powertrace_ds import layout
from llm_powertrace_ds.shards import read_run

REPO = Path(__file__).resolve().parents[3]


def test_a_block_with_events_from_several_threads(tmp_path):
    out = tmp_path / "ds"
    with Recording(out, "inference", axes={"model_name": "m", "concurrency": 4},
                   sampler="cpu_proxy", idle_before_s=0.3, idle_after_s=0.3) as rec:
        def worker(k: int) -> None:
            for i in range(50):
                rid = f"t{k}-{i}"
                rec.mark("request_arrival", request_id=rid)
                rec.mark("request_finish", request_id=rid)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rec.mark("stage", label="burst")
        rec.set_results(requests_completed=200)
    run = read_run(out, rec.run_id)
    arrivals = [e for e in run.events if e.kind == "request_arrival"]
    assert len(arrivals) == 200 and len({e.request_id for e in arrivals}) == 200
    assert all(e.rank is None for e in arrivals)  # request events are run-level
    assert [e.label for e in run.events if e.kind == "stage"] == ["burst"]
    assert run.meta["requests_completed"] == 200 and run.meta["program"] is None
    assert run.meta["concurrency"] == 4 and run.meta["sweep"] == "record"


def test_a_block_that_raises_is_kept_failed(tmp_path):
    out = tmp_path / "ds"
    with pytest.raises(RuntimeError, match="boom"):
        with Recording(out, "finetune", sampler="cpu_proxy") as rec:
            rec.mark("step_begin", step=1)
            raise RuntimeError("boom")
    assert not layout.data_root(out).exists() or not list(layout.data_root(out).rglob("*.arrow"))
    status = json.loads((layout.staging_dir(out, rec.run_id) / "status.json").read_text())
    assert status["status"] == "failed" and "boom" in status["error"]


def test_unknown_event_kinds_are_refused(tmp_path):
    with Recording(tmp_path / "ds", "finetune", sampler="cpu_proxy") as rec:
        with pytest.raises(ValueError, match="step_start"):
            rec.mark("step_start")


def test_the_api_never_imports_torch(tmp_path):
    code = ("import sys\nfrom generation.record import Recording\n"
            f"with Recording({str(tmp_path / 'ds')!r}, 'finetune', sampler='cpu_proxy') as r:\n"
            "    r.mark('step_begin', step=1); r.mark('step_end', step=1)\n"
            "heavy = [m for m in ('torch', 'transformers', 'trl', 'peft') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
