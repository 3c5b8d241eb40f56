"""Workload events: cheap buffered marks on CLOCK_MONOTONIC, read back on the run clock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from generation.events import RUN_LEVEL_KINDS, EventRecorder, load_events, read_raw_events
from llm_powertrace_ds.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def test_mark_validates_the_kind(tmp_path):
    rec = EventRecorder(tmp_path)
    with pytest.raises(ValueError, match="event kind 'step'"):
        rec.mark("step")
    rec.close()
    with pytest.raises(ValueError, match="closed"):
        rec.mark("step_begin")
    with pytest.raises(ValueError, match="rank"):
        EventRecorder(tmp_path, rank=-1)


def test_ranks_and_run_level_kinds(tmp_path):
    assert {"idle_begin", "steady_end", "request_arrival"} <= RUN_LEVEL_KINDS
    assert "step_begin" not in RUN_LEVEL_KINDS
    with EventRecorder(tmp_path, rank=2) as rec:
        rec.mark("idle_begin")
        rec.mark("step_begin", step=7)
        rec.mark("request_arrival", request_id="r1")
        rec.mark("stage", label="burst", rank=None)
        rec.mark("idle_end", rank=2)
    rows = read_raw_events(tmp_path)
    assert [(r[1], r[2], r[3], r[4], r[5]) for r in rows] == [
        ("idle_begin", None, None, None, None),
        ("step_begin", 7, 2, None, None),
        ("request_arrival", None, None, "r1", None),
        ("stage", None, None, None, "burst"),
        ("idle_end", None, 2, None, None),
    ]


def test_span_marks_begin_and_end_even_on_error(tmp_path):
    rec = EventRecorder(tmp_path, rank=0)
    with pytest.raises(RuntimeError), rec.span("step", step=3):
        raise RuntimeError("boom")
    rec.close()
    assert [(r[1], r[2]) for r in read_raw_events(tmp_path)] == [("step_begin", 3),
                                                                 ("step_end", 3)]


def test_marks_are_buffered_not_written_per_event(tmp_path):
    rec = EventRecorder(tmp_path, rank=0, flush_s=30.0)
    for i in range(100):
        rec.mark("step_begin", step=i)
    time.sleep(0.1)
    assert read_raw_events(tmp_path) == []  # nothing written yet: no I/O per event
    rec.close()
    assert len(read_raw_events(tmp_path)) == 100


def test_buffer_is_written_within_the_flush_interval(tmp_path):
    rec = EventRecorder(tmp_path, rank=0, flush_s=0.2)
    rec.mark("warmup_begin")
    deadline = time.monotonic() + 3.0
    while not read_raw_events(tmp_path):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    rec.close()


def test_marks_from_many_threads_are_all_kept(tmp_path):
    rec = EventRecorder(tmp_path, rank=0, flush_s=0.01)

    def work(k: int) -> None:
        for i in range(500):
            rec.mark("step_end", step=k * 1000 + i)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rec.close()
    steps = sorted(r[2] for r in read_raw_events(tmp_path))
    assert steps == sorted(k * 1000 + i for k in range(4) for i in range(500))


def test_mark_is_cheap(tmp_path):
    rec = EventRecorder(tmp_path, rank=0)
    t = time.perf_counter()
    for i in range(20_000):
        rec.mark("step_begin", step=i)
    per_mark_us = (time.perf_counter() - t) / 20_000 * 1e6
    rec.close()
    assert per_mark_us < 50


def test_load_events_on_the_run_clock(tmp_path):
    now = [5_000_000_000]
    rec = EventRecorder(tmp_path, rank=1, clock=lambda: now[0])
    rec.mark("step_begin", step=1)
    now[0] += 123_999_999
    rec.mark("step_end", step=1)
    rec.close()
    other = EventRecorder(tmp_path, rank=None, clock=lambda: 4_999_000_000)
    other.mark("idle_end")
    other.close()
    events = load_events(tmp_path, t0_ns=5_000_000_000)
    assert [(e.t_ms, e.kind, e.rank) for e in events] == [(-1, "idle_end", None),
                                                          (0, "step_begin", 1),
                                                          (123, "step_end", 1)]


def test_partial_last_line_is_skipped_a_bad_line_is_an_error(tmp_path):
    d = tmp_path / "events"
    d.mkdir()
    (d / "rank0-1-0.jsonl").write_text('[1,"step_begin",1,0,null,null]\n[2,"step_e')
    assert len(read_raw_events(tmp_path)) == 1
    (d / "rank0-1-0.jsonl").write_text('[1,"step_begin",1,0,null,null]\n[2,"nope",1,0,null,'
                                       'null]\n[3,"step_end",1,0,null,null]\n')
    with pytest.raises(InputError, match="rank0-1-0.jsonl.*line 2.*unknown event kind"):
        read_raw_events(tmp_path)


def test_events_are_flushed_at_exit(tmp_path):
    code = ("import sys\nfrom generation.events import EventRecorder\n"
            "rec = EventRecorder(sys.argv[1], rank=0, flush_s=60)\n"
            "rec.mark('eval_begin'); rec.mark('eval_end')\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=_env(), cwd=REPO)
    assert [r[1] for r in read_raw_events(tmp_path)] == ["eval_begin", "eval_end"]


def test_sigkill_loses_at_most_the_flush_interval(tmp_path):
    code = ("import sys, time\nfrom generation.events import EventRecorder\n"
            "rec = EventRecorder(sys.argv[1], rank=0)\n"
            "print('go', flush=True)\n"
            "i = 0\n"
            "while True:\n"
            "    rec.mark('step_end', step=i); i += 1; time.sleep(0.01)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=_env(), cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "go"
    time.sleep(1.5)
    kill_ns = time.monotonic_ns()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    rows = read_raw_events(tmp_path)
    assert len(rows) > 30
    assert rows[-1][0] >= kill_ns - 1_000_000_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_rewrite_the_parents_events(tmp_path):
    rec = EventRecorder(tmp_path, rank=0, flush_s=60)
    rec.mark("step_begin", step=1)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        rec.mark("checkpoint_begin")
        rec.flush()
        os._exit(0)
    os.waitpid(pid, 0)
    rec.close()
    kinds = sorted(r[1] for r in read_raw_events(tmp_path))
    assert kinds == ["checkpoint_begin", "step_begin"]
