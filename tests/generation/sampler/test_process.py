"""The real sampler process: isolation from heavy imports, lifecycle, SIGKILLs, a cpu_proxy burst.

These start real processes on a shared machine, so their timing assertions are loose where the
scheduler decides and exact where our own logic does: the flush and rescan instants, a wake-up
1 ns early, the words of every log line (the sampler's log is what a user reads when a run goes
wrong), the child's options reaching its loop, and the READY handshake without
``PYTHONUNBUFFERED``.
"""

from __future__ import annotations

import json
import locale
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
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
from generation.sampler import process as proc_mod
from generation.sampler.errors import SamplerConfigError
from generation.sampler.process import (
    HEAVY_MODULES,
    MAX_SLEEP_S,
    TickLoop,
    _child_args,
    _tail,
    raise_priority,
)
from generation.sampler.spool import SpoolWriter

from .conftest import FakeClock, ScriptedSource
from .fake_nvml import FakeGpu
from .test_child import UUID0, _run_child, _Sched, _stop_after, _summary

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


PERIOD_NS = 100_000_000


LOGGER = "generation.sampler.process"


def _loop(tmp_path: Path, source: ScriptedSource, clock: FakeClock, *, ticks: int,
          writer_cls: type[SpoolWriter] = SpoolWriter, **kwargs) -> tuple[TickLoop, SpoolWriter]:
    devices = source.open()
    writer = writer_cls(tmp_path / "spool", {"source": "cpu_proxy", "period_ms": 100.0})
    writer.open()
    writer.set_devices([d.to_dict() for d in devices])
    loop = TickLoop(source, writer, devices, PERIOD_NS, clock=clock,
                    sleep=kwargs.pop("sleep", clock.sleep), **kwargs)
    clock.on_sleep = lambda: loop.ticks >= ticks and loop.request_stop()
    return loop, writer


def test_flushes_happen_exactly_when_due(tmp_path):
    # read_ns=0: after tick k the clock reads exactly its deadline, start + (k+1) * 100 ms, so
    # the flush due at start + 500 ms happens after tick 4 (>=), then every 500 ms after it
    clock = FakeClock()
    start = clock.t
    flushed: list[int] = []

    class Recording(SpoolWriter):
        def flush(self, *, fsync: bool = False) -> None:
            flushed.append(clock.t - start)
            super().flush(fsync=fsync)

    loop, writer = _loop(tmp_path, ScriptedSource(), clock, ticks=12, writer_cls=Recording,
                         flush_ns=500_000_000, rescan_ns=10**12)
    loop.run()
    writer.close()
    ms = [t // 1_000_000 for t in flushed]
    # the first tick's flush (before READY), the due ones after ticks 4 and 9, the loop's last
    # (stopped at the 13th deadline) and the writer's own on close
    assert ms == [100, 500, 1000, 1300, 1300]


def test_rescans_happen_exactly_when_due(tmp_path):
    clock = FakeClock()
    start = clock.t
    at: list[int] = []

    class Recording(ScriptedSource):
        def rescan(self):  # noqa: ANN202
            at.append((clock.t - start) // 1_000_000)
            return super().rescan()

    loop, writer = _loop(tmp_path, Recording(), clock, ticks=25, rescan_ns=1_000_000_000)
    loop.run()
    writer.close()
    assert at == [1000, 2000]  # due at +1 s (>=), then 1 s after the previous one


def test_a_wake_up_one_ns_early_sleeps_again_and_never_back_dates(tmp_path):
    clock = FakeClock(oversleep_ns=[-1, 0, 0])
    loop, writer = _loop(tmp_path, ScriptedSource(), clock, ticks=2, flush_ns=10**12)
    loop.run()
    writer.close()
    ticks = read_spool(tmp_path).ticks()
    assert (ticks["t_before_ns"] >= ticks["deadline_ns"]).all()
    assert ticks["t_before_ns"][0] == ticks["deadline_ns"][0]  # woke 1 ns early, slept 1 ns
    assert clock.sleeps == 4  # the early wake-up cost one more sleep


def test_sleeps_are_the_remaining_time_in_seconds_capped(tmp_path):
    clock = FakeClock()
    asked: list[float] = []

    def sleep(seconds: float) -> None:
        asked.append(seconds)
        clock.sleep(seconds)

    loop, writer = _loop(tmp_path, ScriptedSource(), clock, ticks=2, sleep=sleep)
    loop.run()
    writer.close()
    assert asked[:2] == [0.1, 0.1]
    # a 1 s period: the first sleep is cut to MAX_SLEEP_S (a stop is seen within it)
    other = SpoolWriter(tmp_path / "other", {"source": "cpu_proxy", "period_ms": 1000.0})
    other.open()
    loop2 = TickLoop(ScriptedSource(), other, [], 1_000_000_000, clock=FakeClock(),
                     sleep=lambda s: (asked.append(s), loop2.request_stop()))
    asked.clear()
    loop2.run()
    other.close()
    assert asked == [MAX_SLEEP_S] and loop2.ticks == 0


def test_a_lost_gpu_tick_is_on_disk_when_the_loop_returns(tmp_path):
    # no periodic flush before the loss: the loop's own last flush must write the fault row
    from .test_loop import _FullReading

    clock = FakeClock()
    # (one device: losing it ends the loop; with more, the others go on)
    loop, writer = _loop(tmp_path, _FullReading(1, lose_slot=0, lose_at=3), clock, ticks=50,
                         flush_ns=10**12)
    loop.run()
    assert loop.state == "gpu_lost"
    samples = read_spool(tmp_path).samples  # before close: what the loop itself wrote
    assert sorted(set(samples["tick"].tolist())) == [0, 1, 2, 3]
    writer.close()


def test_a_lost_gpu_is_logged_with_its_message(tmp_path, caplog):
    from .test_loop import _FullReading

    caplog.set_level(logging.ERROR, logger=LOGGER)
    clock = FakeClock()
    loop, writer = _loop(tmp_path, _FullReading(1, lose_slot=0, lose_at=1), clock, ticks=50)
    loop.run()
    writer.close()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", "GPU 0 (slot 0) was lost at tick 1: fell off the bus")]
    assert loop.message == "GPU 0 (slot 0) was lost at tick 1: fell off the bus"


@pytest.mark.skipif(not hasattr(os, "SCHED_FIFO"), reason="POSIX scheduling")
def test_priority_refusals_are_logged_and_the_default_is_our_own_nice(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    _Sched(monkeypatch, fifo_ok=False, nice_ok=False)
    asked: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "getpriority", lambda which, who: asked.append((which, who)) or 4)
    assert raise_priority("auto") == "default (nice 4)"
    assert asked == [(os.PRIO_PROCESS, 0)]
    assert [r.getMessage() for r in caplog.records] == [
        "SCHED_FIFO not permitted (not permitted)", "negative nice not permitted (not permitted)"]


def test_child_help_names_the_module_and_the_config_option(capsys):
    with pytest.raises(SystemExit):
        _child_args(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m generation.sampler ")
    assert re.search(r"^  --config CONFIG +SamplerConfig as JSON$", out, re.MULTILINE), out


def test_tail_replaces_undecodable_bytes(tmp_path):
    log = tmp_path / "sampler.log"
    log.write_bytes(b"one\n\xff\xfe broken\nthree \xe2\x98\x83\n")
    assert _tail(log) == "one | \ufffd\ufffd broken | three \u2603"
    assert _tail(log, lines=1) == "three \u2603"
    assert _tail(tmp_path / "absent.log") == "(no log)"
    (tmp_path / "empty.log").write_text("  \n")
    assert _tail(tmp_path / "empty.log") == "(empty log)"


def test_tail_reads_utf8_whatever_the_locale(tmp_path):
    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode reads every file as UTF-8")
    log = tmp_path / "sampler.log"
    log.write_text("GPU \u00e9t\u00e9 lost \u2603\n", encoding="utf-8")
    saved = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")  # an ASCII locale
        tail = _tail(log)
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)
    assert tail == "GPU \u00e9t\u00e9 lost \u2603"


def test_child_logs_its_priority_and_its_end(tmp_path, monkeypatch, capsys, fake_nvml, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake_nvml([FakeGpu(uuid=UUID0)])
    code, _ = _run_child(tmp_path, monkeypatch, capsys, after_ready=_stop_after(0.35))
    assert code == 0
    summary = _summary(tmp_path)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert messages[0] == "priority: default (not changed)"
    assert messages[-1] == (f"sampler ended: stopped (stopped on request); {summary['ticks']} "
                            f"ticks, {summary['missed_ticks']} missed")
    assert summary["heavy_modules_loaded"] == sorted(
        m for m in proc_mod.HEAVY_MODULES if m in sys.modules)


def test_child_watches_stdin_on_a_daemon_thread_and_anchors_early(tmp_path, monkeypatch, capsys,
                                                                  fake_nvml):
    fake_nvml([FakeGpu(uuid=UUID0)])
    seen: dict[str, object] = {}

    def look(stdin) -> None:  # noqa: ANN001
        try:
            watchers = [t for t in threading.enumerate() if t.name == "stdin-watch"]
            seen["daemon"] = [t.daemon for t in watchers]
            seen["anchors"] = json.loads((tmp_path / "spool" / "anchors.json").read_text())
        finally:  # stop the child whatever was found
            _stop_after(0.1)(stdin)

    code, _ = _run_child(tmp_path, monkeypatch, capsys, after_ready=look)
    assert code == 0
    assert seen["daemon"] == [True]
    anchors = seen["anchors"]
    assert isinstance(anchors, dict) and set(anchors) == {"start"}  # written before the loop
    assert set(anchors["start"]) >= {"monotonic_ns"}


def test_child_hands_its_flush_and_rescan_periods_to_the_loop(tmp_path, monkeypatch, capsys,
                                                              fake_nvml):
    fake_nvml([FakeGpu(uuid=UUID0)])
    got: dict[str, int] = {}
    real_init = TickLoop.__init__

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        got.update(flush_ns=kwargs["flush_ns"], rescan_ns=kwargs["rescan_ns"])
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(TickLoop, "__init__", spy)
    cfg = SamplerConfig(source="nvml", period_ms=100.0, priority="none", flush_s=1.0,
                        rescan_s=2.5)
    code, _ = _run_child(tmp_path, monkeypatch, capsys, config=cfg,
                         after_ready=_stop_after(0.1))
    assert code == 0
    assert got == {"flush_ns": 1_000_000_000, "rescan_ns": 2_500_000_000}


def test_child_measures_the_registered_ranks_with_cpu_proxy(tmp_path, monkeypatch, capsys):
    register_pid(tmp_path, 0, os.getppid())
    cfg = SamplerConfig(source="cpu_proxy", period_ms=100.0, priority="none")
    code, out = _run_child(tmp_path, monkeypatch, capsys, config=cfg,
                           after_ready=_stop_after(0.25))
    assert code == 0 and out[0].startswith("READY ")
    spool = read_spool(tmp_path)
    assert [d["gpu_index"] for d in spool.devices] == [0]
    assert _summary(tmp_path)["state"] == "stopped"


def test_child_reports_a_source_that_fails_to_close(tmp_path, monkeypatch, capsys, fake_nvml,
                                                   caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake_nvml([FakeGpu(uuid=UUID0)])
    real_make = proc_mod.make_source

    def make(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        source = real_make(*args, **kwargs)
        real_close = source.close

        def close() -> None:
            real_close()
            raise OSError("handle already gone")

        source.close = close
        return source

    monkeypatch.setattr(proc_mod, "make_source", make)
    code, _ = _run_child(tmp_path, monkeypatch, capsys, after_ready=_stop_after(0.15))
    assert code == 0 and _summary(tmp_path)["state"] == "stopped"  # the summary is still written
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["closing the source failed: handle already gone"]


_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} sampler\[(\d+)\] (INFO|WARNING|"
                       r"ERROR) (.*)$")


def test_real_sampler_starts_without_unbuffered_output_and_logs_in_its_format(tmp_path,
                                                                             monkeypatch, caplog):
    # READY must be flushed by the child itself: a user's shell has no PYTHONUNBUFFERED
    caplog.set_level(logging.INFO, logger=LOGGER)
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    cfg = SamplerConfig(source="cpu_proxy", period_ms=100.0, priority="none",
                        start_timeout_s=20.0)
    sampler = Sampler(cfg, tmp_path).start()
    try:
        time.sleep(0.3)
    finally:
        summary = sampler.stop()
    assert summary.state == "stopped" and summary.complete
    assert [r for r in caplog.records if r.levelname == "WARNING"] == []  # a clean stop
    lines = (tmp_path / "spool" / "sampler.log").read_text().splitlines()
    parsed = [_LOG_LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert {int(m.group(1)) for m in parsed if m} == {sampler.pid}
    infos = [m.group(3) for m in parsed if m and m.group(2) == "INFO"]
    assert infos[0] == "priority: default (not changed)"
    assert infos[-1].startswith("sampler ended: stopped (stopped on request); ")


def test_a_new_loop_starts_stopped_with_its_documented_periods(tmp_path):
    loop = TickLoop(ScriptedSource(), None, [], 1)  # type: ignore[arg-type]  # 1 ns is > 0
    assert (loop.flush_ns, loop.rescan_ns) == (500_000_000, 1_000_000_000)
    assert (loop.state, loop.message, loop.ticks, loop.missed) == ("stopped", "", 0, 0)
    assert loop.t_start_ns is None
    loop.request_stop()
    assert (loop.state, loop.message) == ("stopped", "")
    with pytest.raises(proc_mod.SamplerConfigError) as exc:
        TickLoop(ScriptedSource(), None, [], -5)  # type: ignore[arg-type]
    assert str(exc.value) == "period_ns=-5 must be > 0"


_STAND_IN = """#!/bin/sh
staging="$4"
env > "$staging/child_env.txt"
ls -l /proc/$$/fd > "$staging/child_fds.txt" 2>/dev/null
mode=$(cat "$staging/../../mode")
case "$mode" in
  ready) printf '{"priority": "nice 5"}' > "$staging/provenance.json"
         echo "READY 4242"; exec sleep 30 ;;
  error) echo "starting" >&2; echo "ERROR  no GPU here "; exit 2 ;;
  crash) echo "Traceback: boom" >&2; exit 1 ;;
  silent) echo "warming up" >&2; exec sleep 3 ;;
esac
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):  # noqa: ANN201
    """Point ``sys.executable`` at the stand-in; return a function making a staging for a mode."""
    if not Path("/bin/sh").exists():
        pytest.skip("needs a POSIX shell")
    script = tmp_path / "python-stand-in"
    script.write_text(_STAND_IN)
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))
    started: list[Sampler] = []

    def make(mode: str, **config) -> Sampler:  # noqa: ANN003
        (tmp_path / "mode").write_text(mode)
        cfg = SamplerConfig(**{"source": "cpu_proxy", "period_ms": 100.0, **config})
        sampler = Sampler(cfg, tmp_path / "runs" / "r1", pids=[os.getppid()])
        started.append(sampler)
        return sampler

    yield make
    for sampler in started:
        sampler._kill()


def test_start_spawns_the_module_with_the_project_on_its_path(stand_in, tmp_path, monkeypatch,
                                                              caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    monkeypatch.setenv("PYTHONPATH", "/opt/extra")
    inheritable = open(tmp_path / "inherited.txt", "w")  # noqa: SIM115
    os.set_inheritable(inheritable.fileno(), True)
    try:
        sampler = stand_in("ready", start_timeout_s=5.0).start()  # a staging two levels down
    finally:
        inheritable.close()
    staging = tmp_path / "runs" / "r1"
    assert sampler.t_start_ns == 4242 and sampler.provenance == {"priority": "nice 5"}
    assert (staging / "pids" / "rank-0.pid").read_text() == f"{os.getppid()}\n"
    env = dict(line.split("=", 1) for line in
               (staging / "child_env.txt").read_text().splitlines() if "=" in line)
    root = str(Path(proc_mod.__file__).resolve().parents[2])
    assert env["PYTHONPATH"] == os.pathsep.join([root, "/opt/extra"])
    assert "inherited.txt" not in (staging / "child_fds.txt").read_text()  # close_fds
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        f"sampler started: source cpu_proxy, period 100 ms, pid {sampler.pid}, priority nice 5"]
    with pytest.raises(proc_mod.SamplerError) as exc:
        sampler.start()
    assert str(exc.value) == "this sampler was already started"
    sampler._kill()
    assert sampler._proc is not None and sampler._proc.stdout.closed
    assert sampler._proc.stdin.closed


def test_start_without_pythonpath_puts_only_the_project(stand_in, tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    stand_in("ready", start_timeout_s=5.0).start()
    env = (tmp_path / "runs" / "r1" / "child_env.txt").read_text().splitlines()
    root = str(Path(proc_mod.__file__).resolve().parents[2])
    assert f"PYTHONPATH={root}" in env


def test_start_reuses_a_spool_folder_left_by_a_failed_start(stand_in, tmp_path):
    (tmp_path / "runs" / "r1" / "spool").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "spool" / "sampler.log").write_text("an earlier failure\n")
    # READY comes at once: the whole 1 s start timeout is waited for, not a second less
    assert stand_in("ready", start_timeout_s=1.0).start().t_start_ns == 4242


def test_start_refuses_a_staging_that_holds_a_spool(stand_in, tmp_path):
    (tmp_path / "runs" / "r1" / "spool").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "spool" / "samples.bin").write_bytes(b"")
    with pytest.raises(proc_mod.SamplerError) as exc:
        stand_in("ready").start()
    assert str(exc.value) == (f"'{tmp_path / 'runs' / 'r1'}' already holds a spool: archive "
                              "the previous attempt (archive_attempt) first")


def test_a_first_tick_that_never_comes_times_out_with_the_log(stand_in):
    with pytest.raises(proc_mod.SamplerError) as exc:
        stand_in("silent", start_timeout_s=1.0).start()
    assert str(exc.value) == "the sampler did not take its first tick within 1 s; log: warming up"


def test_an_error_line_is_quoted_and_a_crash_quotes_the_log(stand_in):
    with pytest.raises(proc_mod.SamplerError) as exc:
        stand_in("error", start_timeout_s=5.0).start()
    assert str(exc.value) == "the sampler process failed to start: no GPU here"
    with pytest.raises(proc_mod.SamplerError) as exc:
        stand_in("crash", start_timeout_s=5.0).start()
    # no ERROR line: the log's tail, which the same staging's attempts append to
    assert str(exc.value) == ("the sampler process failed to start: starting | Traceback: "
                              "boom")


def test_nvml_registers_no_pid_files(stand_in, tmp_path, fake_nvml):
    fake_nvml([FakeGpu(uuid=UUID0)])
    sampler = stand_in("ready", start_timeout_s=5.0)
    object.__setattr__(sampler, "config", SamplerConfig(source="nvml", period_ms=100.0,
                                                        start_timeout_s=5.0))
    assert sampler.start().source == "nvml"
    assert not (tmp_path / "runs" / "r1" / "pids").exists()


def test_register_pid_does_not_fsync(tmp_path, monkeypatch):
    # a rank announces itself at start-up; the sampler re-reads the folder every second, so
    # the write is atomic (rename) but not synced to the disk
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    register_pid(tmp_path, 2, 1234)
    assert synced == [] and (tmp_path / "pids" / "rank-2.pid").read_text() == "1234\n"
