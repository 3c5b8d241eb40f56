"""Exact pins of the sampler process: schedule edges, log lines, the child's wiring, its log file.

The mutation run of ``generation/sampler/process.py`` showed what the lifecycle tests leave
loose: the exact flush and rescan instants, a wake-up 1 ns early, the words of every log line
(the sampler's log is what a user reads when a run goes wrong), the child's options reaching
its loop, and the READY handshake without ``PYTHONUNBUFFERED``. These pin each one.
"""

from __future__ import annotations

import json
import locale
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from generation.sampler import SamplerConfig, read_spool, register_pid
from generation.sampler import process as proc_mod
from generation.sampler.process import (
    MAX_SLEEP_S,
    Sampler,
    TickLoop,
    _child_args,
    _tail,
    raise_priority,
)
from generation.sampler.spool import SpoolWriter

from .conftest import FakeClock, ScriptedSource
from .fake_nvml import FakeGpu
from .test_child import UUID0, _run_child, _Sched, _stop_after, _summary

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


# -- the tick loop ----------------------------------------------------------------------------

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


# -- priority ---------------------------------------------------------------------------------

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


# -- the child's command line and the log tail ------------------------------------------------

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


# -- the child, run here ------------------------------------------------------------------------

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


# -- the real sampler process -------------------------------------------------------------------

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


# -- the loop's defaults --------------------------------------------------------------------------

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


# -- the parent side, with a stand-in interpreter -------------------------------------------------
# ``Sampler.start`` runs ``sys.executable -m generation.sampler --staging DIR ...``; a shell
# script in its place plays the sampler's side of the handshake exactly as told (its mode file),
# so every answer the parent must handle is reproduced without timing luck.

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
