"""``record`` against commands that misbehave.

Background workers, ignored signals, absurd timing options, a bad --meta file: real processes,
the cpu_proxy sampler.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _record(out: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "llm_powertrace_ds.cli", "record", "--out",
                             str(out), "--workload", "finetune", "--sampler", "cpu_proxy",
                             "--idle-before-s", "0", "--idle-after-s", "0", "--format", "json",
                             *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def test_a_worker_that_outlives_the_command_is_flagged(tmp_path, monkeypatch):
    """``sh -c 'worker & exit 0'``: the run is flagged children_outlived, never a plain ok."""
    from generation.record import command

    monkeypatch.setattr(command, "CHILDREN_WAIT_S", 1.0, raising=False)  # a shorter bound
    from generation.record import RecordConfig, record_command

    pidfile = tmp_path / "worker.pid"
    cfg = RecordConfig(out=tmp_path / "ds", workload="finetune", sampler="cpu_proxy")
    outcome = record_command(["sh", "-c", f"sleep 30 & echo $! > {pidfile}; exit 0"], cfg)
    try:
        assert outcome.status == "published"
        assert "children_outlived" in outcome.published.flags
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_command_that_ignores_signals_is_stopped_and_never_exits_0(tmp_path):
    started = tmp_path / "started"
    child = ("import signal, sys, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nopen(sys.argv[1], 'w').write('x')\n"
             "time.sleep(120)\n")
    proc = _record(tmp_path / "ds", "--", sys.executable, "-c", child, str(started))
    deadline = time.monotonic() + 90
    while not started.exists():  # wait on the event, not on time
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)  # the third: SIGKILL at once
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and proc.returncode >= 128, (out, err)


@pytest.mark.parametrize(("option", "value"), [("--period-ms", "60000"), ("--period-ms", "0"),
                                               ("--idle-before-s", "1e9")])
def test_timing_options_are_bounded_up_front(tmp_path, option, value):
    t0 = time.monotonic()
    proc = _record(tmp_path / "ds", option, value, "--", "true")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (1, 2) and time.monotonic() - t0 < 30
    assert option.lstrip("-").replace("-", "_") in err.replace("-", "_"), err


def test_an_error_from_the_meta_file_names_the_file(tmp_path):
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps({"dataset_name": "alice@node7"}), encoding="utf-8")
    proc = _record(tmp_path / "ds", "--meta", str(meta), "--", "true")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    line = [x for x in err.splitlines() if x.startswith("error:")][0]
    assert "m.json" in line and "--set" not in line
