"""The real sampler process: isolation from heavy imports, lifecycle, SIGKILLs, a cpu_proxy burst.

These start real processes on a shared machine, so their timing assertions are loose where the
scheduler decides and exact where our own logic does.
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

import numpy as np
import psutil
import pytest

from generation.attempts import archive_attempt
from generation.events import EventRecorder
from generation.sampler import (
    Sampler,
    SamplerConfig,
    SamplerError,
    read_spool,
    register_pid,
    spool_to_run,
)
from generation.sampler.errors import SamplerConfigError
from generation.sampler.process import HEAVY_MODULES

REPO = Path(__file__).resolve().parents[3]
META = {"run_id": "proc", "workload": "finetune"}
CPU = SamplerConfig(source="cpu_proxy", period_ms=100.0)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while psutil.pid_exists(pid):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        assert time.monotonic() < deadline, f"process {pid} is still running"
        time.sleep(0.05)


def test_sampler_modules_import_neither_torch_nor_datasets():
    code = textwrap.dedent(f"""
        import sys
        import generation.sampler, generation.sampler.process, generation.sampler.cpu_proxy
        import generation.sampler.nvml, generation.sampler.spool, generation.sampler.base
        import generation.sampler.sources
        import generation.sampler.__main__
        print([m for m in {list(HEAVY_MODULES)!r} if m in sys.modules])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(), cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


def test_sampler_process_stays_light_even_when_the_workload_is_heavy(tmp_path):
    import datasets  # noqa: F401 - the workload side has heavy modules loaded

    pytest.importorskip("torch")
    with Sampler(CPU, tmp_path) as s:
        assert s.provenance["heavy_modules_loaded"] == []
    summary = json.loads((tmp_path / "spool" / "summary.json").read_text())
    assert summary["heavy_modules_loaded"] == []


def test_lifecycle(tmp_path):
    sampler = Sampler(CPU, tmp_path, pids=[os.getpid()])
    with sampler as s:
        assert s.alive() and s.source == "cpu_proxy"
        # start() returned after the first tick is on disk: t0 exists, events come after it
        first = read_spool(tmp_path)
        assert len(first.samples) >= 1
        assert first.t0_ns <= time.monotonic_ns()
        assert s.t_start_ns < first.t0_ns
        time.sleep(1.0)
        with pytest.raises(SamplerError, match="already started"):
            s.start()
    summary = sampler.summary
    assert not sampler.alive()
    assert summary.state == "stopped" and summary.complete
    assert 5 <= summary.ticks <= 16  # ~1.1 s of 100 ms ticks (missed ones are counted)
    assert summary.priority
    spool = read_spool(tmp_path)
    assert set(spool.anchors) == {"start", "stop"}
    assert spool.anchors["start"]["monotonic_ns"] < spool.t0_ns
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov["sampler"] == "cpu_proxy"
    assert prov["cpu_proxy"] == {"idle_w": 60.0, "max_w": 300.0, "model": prov["cpu_proxy"]["model"]}
    assert prov["priority"] == summary.priority
    assert (tmp_path / "spool" / "sampler.log").read_text()
    # a second attempt in the same folder needs the first archived
    with pytest.raises(SamplerError, match="archive"):
        Sampler(CPU, tmp_path).start()


def test_a_rank_that_starts_later_joins(tmp_path):
    late = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])
    try:
        with Sampler(CPU, tmp_path, pids=[os.getpid()]):
            time.sleep(0.3)
            register_pid(tmp_path, 1, late.pid)
            time.sleep(2.0)
    finally:
        late.kill()
        late.wait()
    spool = read_spool(tmp_path)
    assert [d["rank"] for d in spool.devices] == [0, 1]
    assert len(spool.device_samples(1)) >= 5
    run = spool_to_run(tmp_path, META)
    assert run.meta["num_gpus"] == 2 and [d.gpu_index for d in run.devices] == [0, 1]


def test_sigterm_stops_cleanly(tmp_path):
    s = Sampler(CPU, tmp_path).start()
    time.sleep(0.3)
    os.kill(s.pid, signal.SIGTERM)
    _wait_gone(s.pid)
    summary = s.stop()
    assert summary.state == "terminated"


WORKLOAD = """
import os, sys, time
from generation.events import EventRecorder
from generation.sampler import Sampler, SamplerConfig

staging = sys.argv[1]
s = Sampler(SamplerConfig(source="cpu_proxy", period_ms=100.0), staging).start()
rec = EventRecorder(staging, rank=0)
print("READY", s.pid, flush=True)
step = 0
while True:
    rec.mark("step_begin", step=step)
    t = time.time()
    while time.time() - t < 0.05:
        pass
    rec.mark("step_end", step=step)
    step += 1
    time.sleep(0.05)
"""


def test_sigkill_of_the_workload_keeps_the_spool(tmp_path):
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD)
    staging = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(script), str(staging)], stdout=subprocess.PIPE,
                            text=True, env=_env(), cwd=REPO)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line
        sampler_pid = int(line.split()[1])
        time.sleep(2.5)
        kill_ns = time.monotonic_ns()
        proc.kill()
        proc.wait()
        _wait_gone(sampler_pid)  # the sampler notices its workload is gone and ends
    finally:
        proc.kill()
        proc.stdout.close()
    attempt = archive_attempt(staging)
    assert attempt == staging / "attempt-1"
    assert json.loads((attempt / "status.json").read_text())["status"] == "incomplete"
    assert not (staging / "spool").exists()
    spool = read_spool(attempt)
    assert spool.summary.state == "parent_gone"
    ticks = spool.ticks()
    assert ticks["t_after_ns"][-1] >= kill_ns - 1_000_000_000  # <= 1 s missing
    assert (ticks["t_after_ns"][0] - spool.t0_ns) == 0
    assert len(ticks) >= 20
    run = spool_to_run(attempt, META)
    assert "incomplete" in run.flags
    steps = [e for e in run.events if e.kind == "step_end"]
    assert len(steps) >= 10
    t_kill_ms = (kill_ns - spool.t0_ns) // 1_000_000
    assert steps[-1].t_ms >= t_kill_ms - 1000  # events lose at most their flush interval


def test_sigkill_of_the_sampler_keeps_the_spool(tmp_path):
    s = Sampler(CPU, tmp_path).start()
    rec = EventRecorder(tmp_path, rank=0)
    rec.mark("warmup_begin")
    time.sleep(2.5)
    kill_ns = time.monotonic_ns()
    os.kill(s.pid, signal.SIGKILL)
    _wait_gone(s.pid)
    summary = s.stop()  # does not raise: the summary says what happened
    rec.close()
    assert summary.state == "unfinished" and "signal 9" in summary.message
    assert not summary.complete
    spool = read_spool(tmp_path)
    last = spool.ticks()["t_after_ns"][-1]
    assert last >= kill_ns - 1_000_000_000  # flushed at least once a second
    expected = (kill_ns - spool.t0_ns) // 100_000_000
    assert len(spool.ticks()) >= expected - 10
    attempt = archive_attempt(tmp_path)
    assert json.loads((attempt / "status.json").read_text())["sampler_state"] == "unfinished"
    run = spool_to_run(attempt, META)
    assert "incomplete" in run.flags and len(run.events) == 1


def test_cpu_proxy_burst_rises_and_falls_with_its_events(tmp_path):
    period_ms = 100
    a = np.random.default_rng(0).random((96, 96))  # small: single-threaded BLAS, no spinning
    with Sampler(SamplerConfig(source="cpu_proxy", period_ms=period_ms), tmp_path):
        rec = EventRecorder(tmp_path, rank=0)
        rec.mark("stage", label="idle")
        time.sleep(2.0)
        rec.mark("stage", label="burst")
        t = time.monotonic()
        while time.monotonic() - t < 3.0:
            a = a @ a
            a /= np.abs(a).max()
        rec.mark("stage", label="idle")
        time.sleep(2.0)
        rec.close()
    run = spool_to_run(tmp_path, META)
    dev = run.devices[0]
    t, p, u = dev.t_ms, dev.power_w, dev.signals["gpu_util_pct"]
    stages = [e for e in run.events if e.kind == "stage"]
    assert [e.label for e in stages] == ["idle", "burst", "idle"]
    begin, end = stages[1].t_ms, stages[2].t_ms
    idle_before = (t > 300) & (t <= begin)
    inside = (t > begin + 2 * period_ms) & (t <= end)
    idle_after = t > end + 2 * period_ms
    p_idle, p_burst, p_after = (float(np.mean(p[m])) for m in (idle_before, inside, idle_after))
    levels = f"idle {p_idle:.0f} W, burst {p_burst:.0f} W, after {p_after:.0f} W"
    # One busy thread of the 2 allowed gives u ~ 0.5 (180 W) on an idle machine; other tenants
    # of a shared machine can take part of it, hence the modest margins.
    assert p_burst > p_idle + 25, levels
    assert p_after < p_burst - 25, levels
    assert np.mean(u[inside]) > np.mean(u[idle_before]) + 10, levels
    assert np.mean(u[idle_after]) < np.mean(u[inside]) - 10, levels
    swing = p_burst - p_idle
    rise = t[np.flatnonzero((t > begin) & (p > p_idle + 0.25 * swing))[0]]
    fall = t[np.flatnonzero((t > end) & (p < p_idle + 0.5 * swing))[0]]
    # a sample covers the tick before it: the edge lies in (t_edge - period, t_edge], and the
    # event falls within one tick of that interval
    assert rise - 2 * period_ms <= begin <= rise, (begin, rise, levels)
    assert fall - 2 * period_ms <= end <= fall, (end, fall, levels)
    assert "cpu_proxy" in run.flags


def test_a_sampler_that_cannot_start_raises_with_its_log(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(SamplerError, match="failed to start"):
        Sampler(CPU, tmp_path).start()


def test_register_pid_writes_one_pid_file_per_rank_and_refuses_bad_ranks(tmp_path):
    from generation.sampler.base import PIDS_DIR

    path = register_pid(tmp_path, rank=3, pid=4242)
    assert path == tmp_path / PIDS_DIR / "rank-3.pid"
    assert path.read_text(encoding="utf-8") == "4242\n"
    assert register_pid(tmp_path, rank=0).read_text(encoding="utf-8") == f"{os.getpid()}\n"
    assert sorted(p.name for p in (tmp_path / PIDS_DIR).iterdir()) == ["rank-0.pid", "rank-3.pid"]
    for bad in (-1, True, 1.0, "2"):
        with pytest.raises(SamplerConfigError, match="must be an integer >= 0"):
            register_pid(tmp_path, rank=bad)  # type: ignore[arg-type]


def test_log_tail_for_error_messages(tmp_path):
    from generation.sampler.process import _tail

    log = tmp_path / "sampler.log"
    assert _tail(log) == "(no log)"
    log.write_text("", encoding="utf-8")
    assert _tail(log) == "(empty log)"
    log.write_text("\n".join(f"line {i}" for i in range(12)) + "\n", encoding="utf-8")
    assert _tail(log) == " | ".join(f"line {i}" for i in range(4, 12))  # the last 8
    assert _tail(log, lines=2) == "line 10 | line 11"


def test_start_refuses_bad_configs_before_spawning_anything(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cases = [
        (Sampler({"source": "cpu_proxy"}, tmp_path / "a"),  # type: ignore[arg-type]
         SamplerConfigError, "config must be a SamplerConfig, not dict"),
        (Sampler(CPU, tmp_path / "b", pids=[]), SamplerConfigError,
         "cpu_proxy needs at least one pid to measure"),
        (Sampler(CPU, tmp_path / "c", pids=[dead.pid]), SamplerConfigError,
         f"pid {dead.pid} is not a running process"),
        (Sampler(CPU, tmp_path / "d", pids=[True]), SamplerConfigError,  # type: ignore[list-item]
         "pid True is not a running process"),
    ]
    for sampler, error, words in cases:
        with pytest.raises(error) as info:
            sampler.start()
        assert str(info.value) == words
        assert sampler._proc is None and not sampler.staging_dir.exists()  # nothing touched


def test_stop_before_start_is_an_error_with_its_words(tmp_path):
    with pytest.raises(SamplerError) as info:
        Sampler(CPU, tmp_path).stop()
    assert str(info.value) == "the sampler was not started"


def test_stop_of_a_frozen_sampler_terminates_then_kills_it(tmp_path, caplog):
    """A sampler that does not stop in time is terminated, then killed; the summary says so."""
    caplog.set_level("INFO", logger="generation.sampler.process")
    s = Sampler(CPU, tmp_path).start()
    time.sleep(0.3)
    os.kill(s.pid, signal.SIGSTOP)  # frozen: it cannot read STOP, and SIGTERM stays pending
    started = time.monotonic()
    summary = s.stop(timeout_s=0.3)
    took = time.monotonic() - started
    assert not s.alive() and s._proc.returncode == -signal.SIGKILL
    assert summary.state == "unfinished"
    assert summary.message == f"the sampler process was killed by signal {signal.SIGKILL}"
    assert not summary.complete
    assert 5.0 <= took < 15.0  # the stop timeout, then 5 s for SIGTERM, then SIGKILL
    assert summary.ticks >= 1  # what was flushed before the freeze is kept
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "the sampler did not stop within 0 s; terminating it",  # %.0f of 0.3 s
        f"sampler ended unfinished: the sampler process was killed by signal {signal.SIGKILL}"]
