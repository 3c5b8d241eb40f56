"""Adversarial run lifecycles (issue 12, items 12-15): kills, resumes, salvage, Ctrl-C.

Spools are written by the real sampler (``cpu_proxy`` source, a spawned process) and events by
the real ``EventRecorder``; the workload is a CPU busy loop with the same events.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from llm_powertrace_ds import layout
from llm_powertrace_ds.shards import read_run
from llm_powertrace_ds.staging import Staging, is_done, published_run_ids

REPO = Path(__file__).resolve().parents[2]
SETTINGS = {"batch_size": 2, "grad_accum": 1, "seq_len": 16}
COLUMNS = {"run_id": "r1", "workload": "finetune", "sweep": "adv", "repeat": 0,
           "model_family": "llama", "model_name": "llama-tiny", "model_source": "zoo",
           "method": "lora", "batch_size": 2, "seq_len": 16}


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def spool(sdir: Path, *, sampled_steps: int, unsampled_steps: int = 0) -> None:
    """What a killed attempt leaves: a spool covering ``sampled_steps``, then more events."""
    from generation.events import EventRecorder
    from generation.sampler import Sampler, SamplerConfig

    sdir.mkdir(parents=True, exist_ok=True)
    rec = EventRecorder(sdir, rank=0)
    step = 0
    with Sampler(SamplerConfig(source="cpu_proxy", period_ms=50), sdir):
        for _ in range(sampled_steps):
            step += 1
            rec.mark("step_begin", step=step)
            busy(0.1)
            rec.mark("step_end", step=step)
    for _ in range(unsampled_steps):  # the sampler was SIGKILLed; the workload went on
        step += 1
        rec.mark("step_begin", step=step)
        busy(0.1)
        rec.mark("step_end", step=step)
    rec.close()


def staged(root: Path) -> Path:
    sdir = layout.staging_dir(root, "r1")
    sdir.mkdir(parents=True)
    (sdir / "meta.json").write_text(json.dumps({"columns": COLUMNS, "settings": SETTINGS}))
    return sdir


def test_salvage_right_after_a_kill_then_counts_as_done_until_redo(tmp_path):
    """Item 14: status still ``running`` (owner SIGKILLed) is salvageable; salvaged = done."""
    from generation.attempts import request_redo, salvage

    sdir = staged(tmp_path)
    Staging(tmp_path, "r1").set_status("running", pid=2**22 + 1)
    spool(sdir, sampled_steps=3)
    res = salvage(tmp_path, "r1")
    assert "incomplete" in res.flags
    assert Staging(tmp_path, "r1").status() == "salvaged"
    assert (sdir / "attempt-1" / "spool").is_dir()  # kept until the user prunes it
    assert is_done(tmp_path, "r1", published_run_ids(tmp_path, "finetune"))
    assert request_redo(tmp_path, "r1")
    assert not is_done(tmp_path, "r1", published_run_ids(tmp_path, "finetune"))


def test_salvage_publishes_the_attempt_with_most_data_and_deletes_none(tmp_path):
    """Item 12: attempt-1 is short, attempt-2 (newer, longer) must be the one published."""
    from generation.attempts import salvage

    sdir = staged(tmp_path)
    spool(sdir / "attempt-2", sampled_steps=6)
    spool(sdir / "attempt-1", sampled_steps=1)
    long_samples = sorted(p.name for p in (sdir / "attempt-2").iterdir())
    salvage(tmp_path, "r1")
    run = read_run(tmp_path, "r1")
    assert run.meta["steps"] == 6
    assert sorted(p.name for p in sdir.glob("attempt-*")) == ["attempt-1", "attempt-2"]
    assert sorted(p.name for p in (sdir / "attempt-2").iterdir()) == long_samples
    assert Staging(tmp_path, "r1").status_record()["attempt"] == "attempt-2"


def test_salvage_counts_only_the_sampled_window(tmp_path):
    """Item 13: 2 steps sampled, 6 more after the sampler died: steps=2, tokens for 2 steps."""
    from generation.attempts import salvage

    sdir = staged(tmp_path)
    spool(sdir / "attempt-1", sampled_steps=2, unsampled_steps=6)
    salvage(tmp_path, "r1")
    run = read_run(tmp_path, "r1")
    assert run.meta["steps"] == 2
    assert run.meta["tokens"] == 2 * SETTINGS["batch_size"] * SETTINGS["seq_len"]


CTRL_C = textwrap.dedent("""
    import sys, time
    from generation.workloads import finetune
    def run(settings, ctx):
        for step in range(1, 1000):
            ctx.mark("step_begin", step=step)
            end = time.perf_counter() + 0.1
            while time.perf_counter() < end:
                pass
            ctx.mark("step_end", step=step)
    finetune.SPEC.run = run
    finetune.SPEC.prepare = lambda: None
    from llm_powertrace_ds.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def sigint_at_default() -> None:
    """In the child before exec: SIGINT at its default (Python makes it ``KeyboardInterrupt``)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def event_kinds(sdir: Path) -> set[str]:
    """The kinds of the events flushed so far (a line being appended is skipped)."""
    kinds = set()
    for f in (sdir / "events").glob("*.jsonl"):
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                kinds.add(json.loads(line)[1])
            except (ValueError, IndexError):
                continue
    return kinds


def wait_for_step_begin(out: Path, proc: subprocess.Popen, *, limit_s: float) -> Path:
    """The run's ``status.json`` once it says ``running`` and its events hold a ``step_begin``.

    ``limit_s`` only bounds a failure: the wait ends at the event, not after a set time.
    """
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        for status in (out / ".staging").glob("*/status.json") if out.exists() else []:
            if json.loads(status.read_text())["status"] == "running" and \
                    "step_begin" in event_kinds(status.parent):
                return status
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    raise AssertionError(f"no step_begin within {limit_s:g} s: {proc.communicate()}")


def test_ctrl_c_marks_interrupted_prints_one_line_exits_130(tmp_path):
    """Item 15."""
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: cc\nworkload: finetune\nsampler: {source: cpu_proxy, period_ms: 50}\n"
                     "base: {model: llama-tiny, seq_len: 16, max_steps: 3, batch_size: 1}\n")
    out = tmp_path / "ds"
    # SIGINT at its default, as under a terminal: a test run in the background (`pytest &`)
    # inherits it ignored, and a process started so never sees a Ctrl-C
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C, "generate", str(sweep), "--out",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                            preexec_fn=sigint_at_default)
    # the signal is sent once the workload marked a step (it runs for 100 s), however long the
    # start took on a loaded machine
    status = wait_for_step_begin(out, proc, limit_s=240)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert [line for line in err.splitlines() if line.strip()][-1].startswith("interrupted: ")
    assert json.loads(status.read_text())["status"] == "interrupted"


def test_sampler_sigkill_stops_the_workload_within_two_seconds(tmp_path):
    """Item 16: the workload (a 60 s busy loop here) stops ~0.5 s after its sampler dies."""
    import pytest

    from generation.runner import RunError, stop_on_sampler_death
    from generation.sampler import Sampler, SamplerConfig

    sampler = Sampler(SamplerConfig(source="cpu_proxy", period_ms=50), tmp_path,
                      pids=[os.getpid()])
    sampler.start()
    try:
        with pytest.raises(RunError, match="the sampler process died"), \
                stop_on_sampler_death(sampler):
            busy(0.5)
            os.kill(sampler.pid, signal.SIGKILL)
            killed = time.monotonic()
            end = killed + 60
            while time.monotonic() < end:
                pass
        assert time.monotonic() - killed < 2.0
    finally:
        sampler.stop()
