"""``llm-powertrace record -- CMD``: run any command as one measured run.

Order of events::

    spawn a *gate* process (pid known, blocked on a pipe, no CPU)  -- its own process group
    Recording.start(): staging, sampler (t0; cpu_proxy measures the gate's pid = the child's
                       process tree from t0), idle_begin .. idle_before_s .. idle_end
    release the gate: it exec()s CMD in place (same pid, same process group)
    wait for CMD; SIGINT/SIGTERM sent to ``record`` are forwarded to CMD's process group
    Recording.stop(): idle_begin .. idle_after_s .. idle_end, sampler stop, publish

The gate is a few lines of Python run with ``-I -S`` (no site, no project imports) that read one
byte and ``execvp`` the command, so the measured process *is* the command (its pid, its
children) and nothing of ``record`` runs inside it. The work window — from the first
``idle_end`` to the last ``idle_begin`` — is the command's lifetime.

The run keeps the program's file name (``program``; never its arguments, which may hold paths
and secrets) and its exit status (``exit_code``: the code, or 128 + N when killed by signal N,
as shells report it). ``record`` exits with that status. A command that fails or is interrupted
leaves its run ``failed`` in ``.staging/`` (nothing in ``data/``, so nothing visible to
``load_dataset``) unless ``keep_failed``.

The program gets ``$LLM_POWERTRACE_RECORD_DIR`` (the run's staging folder): a training script's
:class:`~generation.record.callback.PowerTraceCallback` or :func:`generation.record.attach`
writes its events and results there, on the sampler's clock.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_powertrace_ds import layout
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.procs import group_alive

from .session import RECORD_DIR_ENV, RecordConfig, Recording, make_run_id

if TYPE_CHECKING:  # a CSV log streamed into the staged shard (imported where used)
    from llm_powertrace_ds.importers.requests import StreamedRequests

log = logging.getLogger(__name__)

GATE_CODE = """\
import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM):  # record forwards them: the command must act on them
    signal.signal(s, signal.SIG_DFL)
fd = int(sys.argv[1])
go = os.read(fd, 1)
os.close(fd)
if go != b"1":
    os._exit(125)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write("record: cannot run %r: %s\\n" % (sys.argv[2], exc.strerror))
    os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
"""
"""Runs in the child before the command: wait for ``1`` on the pipe, then become the command
(exit 127 when it does not exist, 126 when it cannot be executed, as shells do). SIGINT and
SIGTERM are put back to their default first: a ``record`` started with them ignored (``nohup``,
``cmd &`` in a script) still forwards them, and the command, in its own process group, receives
them only from ``record``."""

FORWARDED = (signal.SIGINT, signal.SIGTERM)
KILL_GRACE_S = 10.0


@dataclass
class CommandOutcome:
    """What ``record`` did.

    Attributes:
        run_id: the run.
        status: ``published`` or ``failed`` (kept in staging).
        exit_code: the command's exit status (128 + N for signal N).
        published: the ``PublishResult`` or ``None``.
        interrupted: the signal that interrupted ``record`` (``None`` when none did).
        record_start_ns: monotonic time ``record_command`` began.
        child_start_ns: monotonic time the command was released (after idle padding).
        child_end_ns: monotonic time its exit was seen.
        idle_before_s: idle padding before the command.
    """

    run_id: str
    status: str
    exit_code: int
    published: Any
    interrupted: int | None
    record_start_ns: int
    child_start_ns: int | None
    child_end_ns: int | None
    idle_before_s: float


def exit_status(returncode: int) -> int:
    """Shell convention: the code, or 128 + N when the process died from signal N."""
    return 128 - returncode if returncode < 0 else returncode


def program_name(cmd: Sequence[str]) -> str:
    """The command's file name only (``/opt/x/bin/vllm`` -> ``vllm``), scrubbed of identities."""
    from llm_powertrace_ds.importers.common import scrub_text

    name = scrub_text(Path(cmd[0]).name) if cmd and cmd[0] else None
    if not name:
        raise InputError(f"the program name {cmd[0]!r} cannot be recorded (it names a host, an "
                         "address or a user)", field="command")
    return name


class _Forwarder:
    """SIGINT/SIGTERM handlers: before the command runs, end the gate; after, forward."""

    def __init__(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        self.released = False
        self.signum: int | None = None
        self.count = 0
        self.kill_at: float | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in FORWARDED:
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        """Forward the first signal; escalate on the next ones, like ``docker stop``.

        1st: the signal itself; 2nd: SIGTERM, and SIGKILL after ``KILL_GRACE_S`` if the command
        still runs; 3rd: SIGKILL at once. A command that ignores signals is stopped anyway.
        """
        self.signum = self.signum or signum
        self.count += 1
        try:
            if not self.released:
                self.child.kill()  # the command never started
            elif self.count == 1:
                os.killpg(self.child.pid, signum)
            elif self.count == 2:
                os.killpg(self.child.pid, signal.SIGTERM)
                self.kill_at = time.monotonic() + KILL_GRACE_S  # the wait loop enforces it
            else:
                self._kill()
        except ProcessLookupError:
            pass

    def _kill(self) -> None:
        try:
            os.killpg(self.child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


CHILDREN_WAIT_S = 10.0
"""How long ``record`` keeps measuring after the command exited while processes of its process
group still run (a shell that backgrounded a worker); then the run ends, flagged
``children_outlived``. Processes that leave the group (``setsid``, daemons) are not seen."""


def _wait_for_group(pgid: int, limit_s: float) -> bool:
    """Wait until the process group ``pgid`` is gone; True when it outlived ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.05)
    return False


def _wait_escalating(child: subprocess.Popen[bytes], forwarder: _Forwarder) -> int:
    """Wait for the command; SIGKILL its group once a second signal's grace has run out."""
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            if forwarder.kill_at is not None and time.monotonic() >= forwarder.kill_at:
                forwarder._kill()
                forwarder.kill_at = None


def _terminate(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM the command's process group, SIGKILL after ``KILL_GRACE_S``."""
    if child.poll() is not None:
        return
    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(timeout=KILL_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()


def _default_recording(config: RecordConfig, pids: list[int]) -> Recording:
    return Recording(config=config, pids=pids)


def _spawn_gated(cmd: list[str], sdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``cmd`` behind the gate (:data:`GATE_CODE`) in its own process group.

    The child waits on a pipe until the recording has started; the caller writes one byte to
    the returned descriptor to release it (or closes it to let the gate exit unreleased).
    """
    env = dict(os.environ)
    env[RECORD_DIR_ENV] = str(sdir.resolve())
    read_fd, write_fd = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-I", "-S", "-c", GATE_CODE, str(read_fd),
                                  *cmd], pass_fds=(read_fd,), env=env, process_group=0)
    finally:
        os.close(read_fd)
    return child, write_fd


def record_command(cmd: Sequence[str], config: RecordConfig, *,
                   requests_from: (Callable[..., Sequence[dict[str, Any]] | StreamedRequests]
                                   | None) = None,
                   recording: Callable[[RecordConfig, list[int]], Any] | None = None
                   ) -> CommandOutcome:
    """Run ``cmd`` under the sampler as one run (see the module docstring).

    Args:
        cmd: the command and its arguments.
        config: where and what to record (``program`` is set from ``cmd``).
        requests_from: called after the command ended with the staging folder (and
            ``run_id``, ``platform``, ``run_end_ms``), returns the request rows on the run clock
            or a CSV log streamed into the run's staged shard
            (:func:`generation.record.requests.loader`).
        recording: makes the recording from the config and the command's pid (default
            :class:`Recording`); anything with its ``start()``, ``stop(error)``, ``exit_code``
            and ``requests_from``. ``bench/record_overhead.py`` passes one without a sampler,
            so that its two arms run the command through this same function.

    Returns:
        A :class:`CommandOutcome`.

    Raises:
        InputError: an empty command.
        SamplerConfigError: the sampler cannot be used (the command is not started).
    """
    record_start_ns = time.monotonic_ns()
    cmd = list(cmd)
    if not cmd:
        raise InputError("no command to record: give it after `--`", field="command")
    program = program_name(cmd)
    run_id = config.run_id or make_run_id(config.workload, program, config.axes,
                                          dt.datetime.now(dt.timezone.utc))
    config = replace(config, program=program, run_id=run_id)
    child, write_fd = _spawn_gated(cmd, layout.staging_dir(config.out, run_id))
    forwarder = _Forwarder(child)
    forwarder.install()
    rec = (recording or _default_recording)(config, [child.pid])
    rec.requests_from = requests_from
    child_start = child_end = None
    try:
        try:
            rec.start()
        except BaseException:
            os.close(write_fd)
            _terminate(child)
            raise
        try:
            if forwarder.signum is None:
                child_start = time.monotonic_ns()
                forwarder.released = True
                os.write(write_fd, b"1")
            os.close(write_fd)
            returncode = _wait_escalating(child, forwarder)
            child_end = time.monotonic_ns()
            if forwarder.signum is None and _wait_for_group(child.pid, CHILDREN_WAIT_S):
                # processes of the command (sh -c 'worker & exit 0') still run: measured up to
                # the bound, then flagged; never killed (they are the user's)
                flags = getattr(rec, "extra_flags", None)
                if flags is not None:
                    flags.append("children_outlived")
                log.warning("%s exited, but processes it started still run after %g s: the run "
                            "ends here and is flagged children_outlived", program,
                            CHILDREN_WAIT_S)
        except BaseException:
            _terminate(child)
            rec.exit_code = exit_status(child.returncode or -signal.SIGTERM)
            rec.stop(error="record itself failed while the command ran")
            raise
        code = exit_status(returncode)
        rec.exit_code = code
        error = None
        if forwarder.signum is not None:
            error = f"interrupted by {signal.Signals(forwarder.signum).name}"
            if child_start is None or code == 0:  # never exit 0 after an interruption
                code = 128 + forwarder.signum
                rec.exit_code = code
        elif code != 0:
            error = f"{program} exited with status {code}"
        published = rec.stop(error)
    finally:
        forwarder.restore()
    return CommandOutcome(run_id=run_id, status="published" if published is not None else "failed",
                          exit_code=code, published=published, interrupted=forwarder.signum,
                          record_start_ns=record_start_ns, child_start_ns=child_start,
                          child_end_ns=child_end, idle_before_s=config.idle_before_s)


__all__ = ["GATE_CODE", "CommandOutcome", "exit_status", "program_name", "record_command"]
