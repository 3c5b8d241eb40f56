"""The watchdog between the runner and an engine server: no orphan server, ever.

``python -m generation.serving.guard -- COMMAND...`` starts ``COMMAND`` (the engine's server)
in a new session, so the engine and every process it forks (tensor-parallel workers) share
one process group, and writes the engine's pid as one line on its standard output. Then it
reads its standard input — a pipe whose only writer is the runner — until end of file. End of
file comes when the runner closes the pipe (a clean stop) *or when the runner dies*, even by
``SIGKILL``, because the kernel closes a dead process's descriptors. Either way the guard sends
``SIGTERM`` to the engine's process group, waits ``--grace-s`` seconds for it to exit, sends
``SIGKILL`` to what is left and exits. If the engine exits first, the guard exits with its
status. ``SIGINT``/``SIGTERM``/``SIGHUP`` sent to the guard itself also stop the engine first.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

from llm_powertrace_ds.procs import group_alive

GRACE_S = 20.0
"""Seconds between ``SIGTERM`` and ``SIGKILL`` to the engine's process group."""


def stop_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """``SIGTERM`` the engine's process group, then ``SIGKILL`` it after ``grace_s``."""
    pgid = proc.pid  # the engine leads its own session and group
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(pgid):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def main(argv: list[str] | None = None) -> int:
    """Run the guard (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m generation.serving.guard")
    parser.add_argument("--grace-s", type=float, default=GRACE_S)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no engine command given")
    proc = subprocess.Popen(command, start_new_session=True, stdin=subprocess.DEVNULL)
    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    sys.stdout.write(f"{proc.pid}\n")
    sys.stdout.flush()

    def watch_stdin() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        stopping.set()

    threading.Thread(target=watch_stdin, name="guard-stdin", daemon=True).start()
    while not stopping.wait(0.2):
        if proc.poll() is not None:
            stop_group(proc, 0.0)  # its workers, if the engine left any behind
            return int(proc.returncode)
    stop_group(proc, args.grace_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
