"""Workload events on the sampler's clock (CLOCK_MONOTONIC), recorded cheaply per process.

A workload process marks events from the schema's vocabulary (``schema.EVENT_KINDS``)::

    from generation.events import EventRecorder

    rec = EventRecorder(staging_dir, rank=0)
    rec.mark("warmup_begin")
    with rec.span("step", step=3):        # step_begin ... step_end
        train_step()
    rec.mark("stage", label="burst")      # a named stage starts
    rec.close()                           # also done at exit

``mark`` reads ``time.monotonic_ns()`` and appends a tuple to an in-memory buffer under a lock
held for the append only — no IPC, no file I/O, no lock across a training step. A daemon thread
writes the buffer to ``<staging>/events/<rank>-<pid>-<n>.jsonl`` (one ``write`` of whole JSON
lines, appended) at most every ``flush_s`` (0.5 s) and at exit, so a killed workload loses at most
the last ``flush_s`` of events. Events of ``idle_*``, ``steady_*`` and ``request_*`` kinds are
run-level (``rank`` null) unless ``rank=`` is given; the others carry the recorder's rank.

:func:`load_events` reads every events file of a staging folder back as ``Event`` records with
``t_ms = floor((t_ns - t0_ns) / 1e6)`` — the same formula as the samples' ``t_ms``.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from llm_powertrace_ds import schema
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.run import Event

EVENTS_DIR = "events"
RUN_LEVEL_KINDS = frozenset(k for k in schema.EVENT_KINDS
                            if k.startswith(("idle_", "steady_", "request_")))
"""Kinds that are run-level (``rank`` null) by default."""

_KINDS = frozenset(schema.EVENT_KINDS)
_DEFAULT: Any = object()
_counter = itertools.count()
_recorders: weakref.WeakSet[EventRecorder] = weakref.WeakSet()


class EventRecorder:
    """Buffered, per-process event recorder for one run.

    Args:
        staging_dir: the run's staging folder (``.staging/<run_id>/``).
        rank: this process's rank; ``None`` for a recorder of run-level events only.
        flush_s: the buffer is written at most this often (and at exit).
        clock: ``time.monotonic_ns`` (tests may pass another).

    Raises:
        ValueError: ``rank`` or ``flush_s`` out of range.
    """

    def __init__(self, staging_dir: str | os.PathLike[str], rank: int | None = 0, *,
                 flush_s: float = 0.5, clock: Callable[[], int] = time.monotonic_ns) -> None:
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
            raise ValueError(f"rank {rank!r} must be an integer >= 0 or None")
        if not flush_s > 0:
            raise ValueError(f"flush_s={flush_s!r} must be > 0")
        self.directory = Path(staging_dir) / EVENTS_DIR
        self.rank = rank
        self.flush_s = float(flush_s)
        self.clock = clock
        self._buf: list[tuple] = []
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._path: Path | None = None
        _recorders.add(self)

    # -- recording ---------------------------------------------------------------------------
    def mark(self, kind: str, *, step: int | None = None, request_id: str | None = None,
             label: str | None = None, rank: int | None = _DEFAULT) -> int:
        """Record one event now; return its monotonic time in ns.

        Args:
            kind: one of ``schema.EVENT_KINDS``.
            step: optimiser step, when it applies.
            request_id: the request, for request events.
            label: free text (the stage's name for ``stage``).
            rank: override the rank (``None`` = run-level).

        Raises:
            ValueError: an unknown kind, or the recorder is closed.
        """
        t_ns = self.clock()
        if kind not in _KINDS:
            raise ValueError(f"event kind {kind!r} is not one of {', '.join(schema.EVENT_KINDS)}")
        if self._closed:
            raise ValueError("this EventRecorder is closed")
        if rank is _DEFAULT:
            rank = None if kind in RUN_LEVEL_KINDS else self.rank
        item = (t_ns, kind, None if step is None else int(step), rank,
                None if request_id is None else str(request_id),
                None if label is None else str(label))
        with self._lock:
            self._buf.append(item)
        if self._thread is None:
            self._start_thread()
        return t_ns

    @contextlib.contextmanager
    def span(self, name: str, *, step: int | None = None, request_id: str | None = None,
             label: str | None = None) -> Iterator[None]:
        """Mark ``<name>_begin`` on entry and ``<name>_end`` on exit (also on error)."""
        self.mark(f"{name}_begin", step=step, request_id=request_id, label=label)
        try:
            yield
        finally:
            self.mark(f"{name}_end", step=step, request_id=request_id, label=label)

    # -- writing -----------------------------------------------------------------------------
    def _start_thread(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._flush_loop, name="event-flush",
                                            daemon=True)
            self._thread.start()

    def _flush_loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_s)
            self.flush()

    def flush(self) -> None:
        """Write buffered events now (one appended ``write``)."""
        with self._lock:
            buf, self._buf = self._buf, []
        if not buf:
            return
        data = "".join(json.dumps(list(item), separators=(",", ":")) + "\n" for item in buf)
        with self._io_lock:
            if self._path is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                who = "run" if self.rank is None else f"rank{self.rank}"
                self._path = self.directory / f"{who}-{os.getpid()}-{next(_counter)}.jsonl"
            fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, data.encode())
            finally:
                os.close(fd)

    def close(self) -> None:
        """Flush and stop the writer thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.flush()

    def __enter__(self) -> EventRecorder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _after_fork(self) -> None:
        # A forked child (e.g. a DataLoader worker) must not write the parent's events again.
        self._buf = []
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._thread = None
        self._path = None
        self._pid = os.getpid()


def _close_all() -> None:
    for rec in list(_recorders):
        with contextlib.suppress(Exception):
            rec.close()


def _after_fork_in_child() -> None:
    for rec in list(_recorders):
        rec._after_fork()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------------------------
# Reading back
# ---------------------------------------------------------------------------------------------

def read_raw_events(staging_dir: str | os.PathLike[str]) -> list[tuple]:
    """Every recorded event as ``(t_ns, kind, step, rank, request_id, label)``, time-ordered.

    A partial last line (a writer killed mid-``write``) is skipped; any other bad line raises.

    Raises:
        InputError: a malformed line (names the file and line).
    """
    directory = Path(staging_dir) / EVENTS_DIR
    if not directory.is_dir():
        return []
    out: list[tuple] = []
    for path in sorted(directory.glob("*.jsonl")):
        text = path.read_text(encoding="utf-8")
        lines = text.split("\n")
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                t_ns, kind, step, rank, request_id, label = item
                if kind not in _KINDS:
                    raise ValueError(f"unknown event kind {kind!r}")
                out.append((int(t_ns), kind, step, rank, request_id, label))
            except (ValueError, TypeError) as exc:
                if lineno == len(lines) and not text.endswith("\n"):
                    continue  # partial last line
                raise InputError(f"bad event line: {exc}", file=path, line=lineno) from None
    out.sort(key=lambda e: e[0])
    return out


def load_events(staging_dir: str | os.PathLike[str], t0_ns: int) -> list[Event]:
    """Events of a staging folder as ``Event`` records on the run clock (ms since ``t0_ns``)."""
    return [Event(t_ms=(t_ns - t0_ns) // 1_000_000, kind=kind, step=step, rank=rank,
                  request_id=request_id, label=label)
            for t_ns, kind, step, rank, request_id, label in read_raw_events(staging_dir)]


__all__ = ["EVENTS_DIR", "RUN_LEVEL_KINDS", "EventRecorder", "load_events", "read_raw_events"]
