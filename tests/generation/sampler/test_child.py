"""The sampler process's own entry point, run in this process: handshake, stops, provenance.

``test_process.py`` starts the real sampler process; these run its ``child_main`` here (with the
NVML test double or the cpu_proxy source), so what it writes and prints is checked directly and
mutation testing sees the code run. ``priority="none"``: the real ``SCHED_FIFO``/nice calls
would change the scheduling of the test runner itself; ``raise_priority``'s branches are checked
with recording stand-ins for the two system calls (and for real in the sampler process by the
end-to-end tests).
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from generation.sampler import SamplerConfig, read_spool
from generation.sampler import process as proc_mod
from generation.sampler.process import (
    FIFO_PRIORITY,
    NICE_VALUE,
    READY,
    STOP,
    Sampler,
    TickLoop,
    _child_args,
    _watch_stdin,
    child_main,
    raise_priority,
)

from .fake_nvml import FakeGpu

UUID0 = "GPU-11111111-2222-3333-4444-555555555555"


class _Stdin:
    """A pipe standing in for the sampler's stdin: the test writes the parent's side."""

    def __init__(self) -> None:
        r, w = os.pipe()
        self.reader = io.TextIOWrapper(os.fdopen(r, "rb"), encoding="utf-8")
        self._w = os.fdopen(w, "w")

    def send(self, text: str) -> None:
        self._w.write(text)
        self._w.flush()

    def close(self) -> None:
        if not self._w.closed:
            self._w.close()


def _run_child(tmp_path: Path, monkeypatch, capsys, *, source: str = "nvml",
               after_ready=None, parent_pid: int | None = None,
               config: SamplerConfig | None = None) -> tuple[int, list[str]]:
    """Run ``child_main`` here until ``after_ready(stdin)`` ends it; return (code, stdout lines).

    Signal handlers the child installs are restored afterwards.
    """
    cfg = config or SamplerConfig(source=source, period_ms=100.0, priority="none")
    stdin = _Stdin()
    monkeypatch.setattr("sys.stdin", stdin.reader)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    real_print = print
    ready = threading.Event()

    def watching_print(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        real_print(*args, **kwargs)
        if args and str(args[0]).startswith(READY):
            ready.set()

    monkeypatch.setattr("builtins.print", watching_print)

    done = threading.Event()  # the child returned (with or without READY)

    def driver() -> None:
        if ready.wait(20) and not done.is_set() and after_ready is not None:
            after_ready(stdin)
        else:
            stdin.close()

    thread = threading.Thread(target=driver, daemon=True)
    thread.start()
    try:
        code = child_main(["--staging", str(tmp_path), "--source", cfg.source if cfg.source
                           != "auto" else source, "--config", json.dumps(cfg.to_dict()),
                           "--parent-pid", str(os.getppid() if parent_pid is None
                                               else parent_pid)])
    finally:
        done.set()
        ready.set()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        stdin.close()
        thread.join(5)
        monkeypatch.setattr("builtins.print", real_print)
    return code, capsys.readouterr().out.splitlines()


def _stop_after(seconds: float):  # noqa: ANN202
    def act(stdin: _Stdin) -> None:
        time.sleep(seconds)
        stdin.send("hello\n" + STOP + "\n")

    return act


def _summary(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "spool" / "summary.json").read_text())


def test_child_ticks_until_stop_and_writes_everything(tmp_path, monkeypatch, capsys, fake_nvml):
    fake_nvml([FakeGpu(uuid=UUID0), FakeGpu(uuid=UUID0.replace("1", "9"))])
    code, out = _run_child(tmp_path, monkeypatch, capsys, after_ready=_stop_after(0.55))
    assert code == 0
    (line,) = [ln for ln in out if ln.startswith(READY)]
    t0 = int(line.split()[1])
    summary = _summary(tmp_path)
    assert summary["state"] == "stopped" and summary["message"] == "stopped on request"
    assert 4 <= summary["ticks"] <= 12 and summary["missed_ticks"] >= 0
    assert set(summary["heavy_modules_loaded"]) <= set(proc_mod.HEAVY_MODULES)
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov["priority"] == "default (not changed)"
    assert prov["sample_period_ms"] == 100.0 and prov["sampler_pid"] == os.getpid()
    assert len(prov["devices"]) == 2 and prov["python"].count(".") == 2
    assert UUID0 not in json.dumps(prov)  # only salted hashes leave the sampler
    spool = read_spool(tmp_path)
    assert set(spool.anchors) == {"start", "stop"}
    assert spool.anchors["start"]["monotonic_ns"] <= spool.anchors["stop"]["monotonic_ns"]
    assert len(spool.devices) == 2 and spool.summary.ticks == summary["ticks"]
    assert spool.t0_ns >= t0  # READY is printed once the first tick is on disk
    header = spool.header
    assert header["source"] == "nvml" and header["period_ns"] == 100_000_000
    assert header["sampler_pid"] == os.getpid() and header["parent_pid"] == os.getppid()
    assert header["priority"] == "default (not changed)"
    assert header["period_ms"] == 100.0 and header["config"]["period_ms"] == 100.0
    assert header["sampler_create_time"] > 0
    assert prov["heavy_modules_loaded"] == sorted(
        m for m in proc_mod.HEAVY_MODULES if m in sys.modules)


def test_child_stops_as_parent_gone_when_stdin_closes(tmp_path, monkeypatch, capsys, fake_nvml):
    fake_nvml([FakeGpu(uuid=UUID0)])

    def close(stdin: _Stdin) -> None:
        time.sleep(0.3)
        stdin.close()

    code, _ = _run_child(tmp_path, monkeypatch, capsys, after_ready=close)
    assert code == 0
    summary = _summary(tmp_path)
    assert summary["state"] == "parent_gone"
    assert summary["message"] == ("the workload process ended without stopping the sampler "
                                  "(stdin closed)")


def test_child_notices_a_new_parent(tmp_path, monkeypatch, capsys, fake_nvml):
    fake_nvml([FakeGpu(uuid=UUID0)])
    # a parent pid that is not ours: the maintenance check sees the process re-parented
    code, _ = _run_child(tmp_path, monkeypatch, capsys, parent_pid=os.getppid() + 999_999,
                         after_ready=lambda stdin: None)
    assert code == 0
    summary = _summary(tmp_path)
    assert summary["state"] == "parent_gone"
    assert summary["message"] == ("the workload process ended without stopping the sampler "
                                  "(re-parented)")


def test_child_on_sigterm_ends_terminated(tmp_path, monkeypatch, capsys, fake_nvml):
    fake_nvml([FakeGpu(uuid=UUID0)])

    def term(stdin: _Stdin) -> None:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)  # the child's handler is installed: it stops

    code, _ = _run_child(tmp_path, monkeypatch, capsys, after_ready=term)
    assert code == 0
    assert (_summary(tmp_path)["state"], _summary(tmp_path)["message"]) == ("terminated",
                                                                             "SIGTERM")


def test_child_that_cannot_open_its_source_says_error(tmp_path, monkeypatch, capsys, fake_nvml,
                                                     caplog):
    caplog.set_level("INFO", logger="generation.sampler.process")
    fake_nvml(init_code=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    code, out = _run_child(tmp_path, monkeypatch, capsys)
    assert code == 2
    (line,) = out
    assert line.startswith("ERROR ") and "NVML" in line
    summary = _summary(tmp_path)
    assert summary["state"] == "error" and summary["message"] == line[len("ERROR "):]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [f"could not open the source: {line[len('ERROR '):]}"]


def test_child_loop_failure_is_an_error_exit(tmp_path, monkeypatch, capsys, fake_nvml, caplog):
    caplog.set_level("INFO", logger="generation.sampler.process")
    fake_nvml([FakeGpu(uuid=UUID0)])

    def boom(self):  # noqa: ANN001, ANN202
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(TickLoop, "run", boom)
    code, _ = _run_child(tmp_path, monkeypatch, capsys)
    assert code == 1
    summary = _summary(tmp_path)
    assert summary["state"] == "error" and summary["message"] == "RuntimeError: disk on fire"
    assert summary["ticks"] == 0
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage() == "sampler loop failed"
    assert record.exc_info is not None and str(record.exc_info[1]) == "disk on fire"


def test_child_args_need_every_option():
    args = _child_args(["--staging", "s", "--source", "cpu_proxy", "--config", "{}",
                        "--parent-pid", "7"])
    assert (args.staging, args.source, args.config, args.parent_pid) == ("s", "cpu_proxy", "{}",
                                                                          7)
    with pytest.raises(SystemExit):
        _child_args(["--staging", "s", "--source", "gpu", "--config", "{}", "--parent-pid", "7"])
    full = {"--staging": "s", "--source": "nvml", "--config": "{}", "--parent-pid": "7"}
    for missing in full:  # every option is required
        argv = [x for k, v in full.items() if k != missing for x in (k, v)]
        with pytest.raises(SystemExit):
            _child_args(argv)


class _Loop:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def request_stop(self, state: str, message: str) -> None:
        self.calls.append((state, message))


def test_watch_stdin_reads_until_stop_or_eof():
    loop = _Loop()
    _watch_stdin(loop, io.StringIO("noise\n  STOP  \nmore\n"))  # type: ignore[arg-type]
    assert loop.calls == [("stopped", "stopped on request")]
    loop = _Loop()
    _watch_stdin(loop, io.StringIO("noise\nSTOPPED\n"))  # type: ignore[arg-type]
    assert loop.calls == [("parent_gone", "the workload process ended without stopping the "
                                          "sampler (stdin closed)")]

    class Broken:
        def __iter__(self):  # noqa: ANN204
            raise OSError("bad descriptor")

    loop = _Loop()
    _watch_stdin(loop, Broken())  # type: ignore[arg-type]
    assert [state for state, _ in loop.calls] == ["parent_gone"]


class _Sched:
    """Recording stand-ins for ``sched_setscheduler`` and ``setpriority`` (see the docstring)."""

    def __init__(self, monkeypatch, *, fifo_ok: bool, nice_ok: bool) -> None:
        self.calls: list[tuple] = []
        self.fifo_ok, self.nice_ok = fifo_ok, nice_ok
        monkeypatch.setattr(os, "sched_setscheduler", self.sched, raising=False)
        monkeypatch.setattr(os, "setpriority", self.nice)
        monkeypatch.setattr(os, "getpriority", lambda which, who: 3)

    def sched(self, pid: int, policy: int, param: os.sched_param) -> None:
        self.calls.append(("fifo", pid, policy, param.sched_priority))
        if not self.fifo_ok:
            raise PermissionError("not permitted")

    def nice(self, which: int, who: int, value: int) -> None:
        self.calls.append(("nice", which, who, value))
        if not self.nice_ok:
            raise PermissionError("not permitted")


@pytest.mark.skipif(not hasattr(os, "SCHED_FIFO"), reason="POSIX scheduling")
def test_raise_priority_tries_fifo_then_nice_then_reports_the_default(monkeypatch):
    s = _Sched(monkeypatch, fifo_ok=True, nice_ok=True)
    assert raise_priority("auto") == f"SCHED_FIFO {FIFO_PRIORITY}"
    assert s.calls == [("fifo", 0, os.SCHED_FIFO, FIFO_PRIORITY)]
    s = _Sched(monkeypatch, fifo_ok=False, nice_ok=True)
    assert raise_priority("auto") == f"nice {NICE_VALUE}"
    assert s.calls == [("fifo", 0, os.SCHED_FIFO, FIFO_PRIORITY),
                       ("nice", os.PRIO_PROCESS, 0, NICE_VALUE)]
    s = _Sched(monkeypatch, fifo_ok=False, nice_ok=False)
    assert raise_priority("auto") == "default (nice 3)"
    assert len(s.calls) == 2
    s = _Sched(monkeypatch, fifo_ok=True, nice_ok=True)
    assert raise_priority("nice") == f"nice {NICE_VALUE}"  # nice only: no FIFO attempt
    assert [c[0] for c in s.calls] == ["nice"]
    s = _Sched(monkeypatch, fifo_ok=False, nice_ok=True)
    assert raise_priority("fifo") == "default (nice 3)"  # fifo only: no nice fallback
    assert [c[0] for c in s.calls] == ["fifo"]
    s = _Sched(monkeypatch, fifo_ok=True, nice_ok=True)
    assert raise_priority("none") == "default (not changed)"
    assert s.calls == []


def test_sampler_before_start_and_add_pid(tmp_path):
    s = Sampler(SamplerConfig(source="cpu_proxy"), tmp_path / "st")
    assert s.pid is None and s.alive() is False
    assert (s.source, s.t_start_ns, s.summary, s.provenance) == (None, None, None, {})
    s.add_pid(os.getppid(), 3)  # another process than ours: the pid given is the one written
    assert (tmp_path / "st" / "pids" / "rank-3.pid").read_text() == f"{os.getppid()}\n"
    s._kill()  # nothing started: nothing to do, no error
    s.__exit__(None, None, None)  # not started: exit does not try to stop
    assert s.summary is None
