"""Stopping still works in a process started with SIGINT ignored.

``nohup``, ``cmd &`` in a script and background CI jobs start processes with SIGINT ignored.
There ``_thread.interrupt_main`` does nothing, and a command inherits the ignored SIGINT
through ``exec``. A dead sampler must still stop the inline workload, a SIGINT that ``record``
forwards must still stop its command, and a real SIGINT stays ignored where it was.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from generation.runner import RunError, stop_on_sampler_death
from llm_powertrace_ds import layout

REPO = Path(__file__).resolve().parents[2]


class DyingSampler:
    """A sampler double whose process dies when the test says so."""

    def __init__(self) -> None:
        self.dead = threading.Event()
        self.died_at: float | None = None

    def alive(self) -> bool:
        return not self.dead.is_set()

    def die(self) -> None:
        self.died_at = time.monotonic()
        self.dead.set()


@pytest.fixture
def sigint(request) -> Iterator[None]:
    """SIGINT set to ``request.param`` for the test, put back afterwards."""
    previous = signal.signal(signal.SIGINT, request.param)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("sigint", [signal.SIG_IGN, signal.SIG_DFL,
                                    signal.default_int_handler], indirect=True)
def test_a_dead_sampler_stops_the_workload_whatever_sigint_is(sigint):
    disposition = signal.getsignal(signal.SIGINT)
    sampler = DyingSampler()
    with pytest.raises(RunError, match="the sampler process died"), \
            stop_on_sampler_death(sampler, poll_s=0.05):  # type: ignore[arg-type]
        sampler.die()
        end = time.monotonic() + 60
        while time.monotonic() < end:  # the workload: a busy loop that never looks up
            pass
    assert sampler.died_at is not None
    assert time.monotonic() - sampler.died_at < 2.0  # from the death, not from the start
    assert signal.getsignal(signal.SIGINT) == disposition  # put back as it was


@pytest.mark.parametrize("sigint", [signal.SIG_IGN], indirect=True)
def test_a_real_sigint_stays_ignored_while_the_sampler_is_watched(sigint):
    sampler = DyingSampler()
    with stop_on_sampler_death(sampler, poll_s=0.05):  # type: ignore[arg-type]
        signal.raise_signal(signal.SIGINT)  # delivered before it returns
        done = sum(range(1000))  # the handler has run by now
    assert done == 499500


AT_DEFAULT = """
import signal, sys
from generation.runner import stop_on_sampler_death
class Alive:
    def alive(self):
        return True
signal.signal(signal.SIGINT, signal.SIG_DFL)
try:
    with stop_on_sampler_death(Alive(), poll_s=0.05):
        signal.raise_signal(signal.SIGINT)
        sum(range(1000))
except KeyboardInterrupt:
    print("KeyboardInterrupt")
    sys.exit(0)
print("not interrupted")
sys.exit(1)
"""


def test_a_real_sigint_at_its_default_still_interrupts_while_watched():
    # in a child: at SIG_DFL without the watch's handler the signal would end the process
    proc = subprocess.run([sys.executable, "-c", AT_DEFAULT], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (proc.returncode, proc.stdout.strip()) == (0, "KeyboardInterrupt"), proc.stderr


def sigint_ignored() -> None:
    """In the child before exec: SIGINT ignored, as ``nohup`` or ``cmd &`` leave it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_record_started_with_sigint_ignored_still_stops_its_command(tmp_path):
    out = tmp_path / "ds"
    started = tmp_path / "started"
    child = ("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n"
             "time.sleep(300)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_powertrace_ds.cli", "record", "--out", str(out),
         "--workload", "inference", "--sampler", "cpu_proxy", "--idle-before-s", "0",
         "--idle-after-s", "0", "--", sys.executable, "-c", child, str(started)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=sigint_ignored)
    try:
        deadline = time.monotonic() + 240  # bounds a failure only: the wait ends at the file
        while not started.exists() or not started.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, proc.poll()
            time.sleep(0.05)
        child_pid = int(started.read_text())
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    with pytest.raises(ProcessLookupError):
        os.kill(child_pid, 0)
    statuses = [json.loads(p.read_text()) for p in layout.staging_root(out).glob("*/status.json")]
    assert [s["status"] for s in statuses] == ["failed"]
    assert "SIGINT" in statuses[0]["error"]


RETURNS_NOTHING = """
import sys
from generation.workloads import finetune
def run(settings, ctx):
    for step in (1, 2):
        ctx.mark("step_begin", step=step)
        sum(range(100_000))
        ctx.mark("step_end", step=step)
finetune.SPEC.run = run
finetune.SPEC.prepare = lambda: None
from llm_powertrace_ds.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a whole generate run: about 40 s on a loaded machine
def test_a_workload_that_returns_nothing_is_published_without_result_columns(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: rn\nworkload: finetune\nsampler: {source: cpu_proxy, period_ms: 50}\n"
                     "idle_before_s: 0\nidle_after_s: 0\n"
                     "base: {model: llama-tiny, seq_len: 16, max_steps: 2, batch_size: 1}\n")
    out = tmp_path / "ds"
    proc = subprocess.run([sys.executable, "-c", RETURNS_NOTHING, "generate", str(sweep),
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert "AttributeError" not in proc.stderr
    assert len(list(layout.data_root(out).rglob("*.arrow"))) >= 2  # runs row and trace
