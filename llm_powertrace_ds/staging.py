"""The run lifecycle in one place: staging statuses, the measure lock, attempts, atomic writes.

A run in progress lives in ``.staging/<run_id>/`` (see ``docs/design.md``, "Run lifecycle"):
``status.json`` (a :class:`RunStatus` plus details), ``meta.json`` (the planned columns and
settings), the sampler's spool, events, requests, and archived attempts ``attempt-N/``. This
module is the only reader of ``status.json`` and the only place that knows which statuses make
a run done. Its files are written through :mod:`llm_powertrace_ds.atomic`.

Statuses (issue 12, item 14)::

    running --(publish)--> complete --> published            (staging removed, attempts kept)
    running --(Ctrl-C / SIGTERM)--> interrupted --(generate)--> running ...
    running --(fails)--> failed --(generate)--> running ...
    running --(SIGKILL: owner dead, its lock free)--> killed (spool archived as attempt-N)
    killed/interrupted/failed --(salvage)--> salvaged        (done; attempts kept)
    salvaged --(generate --redo-salvaged)--> redo --> running --> published (attempts kept)

An archived attempt's own ``attempt-N/status.json`` says ``incomplete``. Attempts are never
deleted by the tools; the user prunes them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from . import layout
from .atomic import write_json_atomic, write_text_atomic
from .errors import LockTimeout


class RunStatus(StrEnum):
    """What ``.staging/<run_id>/status.json`` says about a run (or an archived attempt)."""

    RUNNING = "running"
    COMPLETE = "complete"
    PUBLISHED = "published"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    KILLED = "killed"
    SALVAGED = "salvaged"
    REDO = "redo"
    INCOMPLETE = "incomplete"


DONE_STATUSES = frozenset({RunStatus.PUBLISHED, RunStatus.SALVAGED})
"""Statuses of a done run: a published (or salvaged) run may keep a staging folder that holds
its killed attempts."""

STATUS_FILE = "status.json"
META_FILE = "meta.json"
RUNNER_FILES = (STATUS_FILE, META_FILE)
"""Files of a staging folder that belong to the run, not to one attempt: they stay in place when
an attempt is archived."""
ATTEMPT_PREFIX = "attempt-"
MEASURE_LOCK_PREFIX = "measure-"


# ---------------------------------------------------------------------------------------------
# Status files
# ---------------------------------------------------------------------------------------------

def read_status_file(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``<folder>/status.json`` as a mapping, or ``None`` when it is missing or unreadable.

    ``folder`` is a run's staging folder or an archived ``attempt-N/``. A half-written or
    hand-damaged file reads as ``None`` (no status), never as an exception: the run is then
    treated as not done, which re-measures it rather than publishing a doubt.
    """
    try:
        record = json.loads((Path(folder) / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def status_at(folder: str | os.PathLike[str]) -> str | None:
    """The ``status`` string of :func:`read_status_file`, or ``None``."""
    record = read_status_file(folder)
    status = record.get("status") if record else None
    return status if isinstance(status, str) else None


def utc_now() -> str:
    """The current UTC time in ISO 8601 (the timestamps of status files)."""
    return dt.datetime.now(dt.timezone.utc).isoformat()


def attempt_number(path: Path) -> int | None:
    """N of an ``attempt-N`` folder name, or ``None`` for any other name."""
    if not path.name.startswith(ATTEMPT_PREFIX):
        return None
    tail = path.name[len(ATTEMPT_PREFIX):]
    return int(tail) if tail.isdigit() else None


class Staging:
    """One run's staging folder, ``<root>/.staging/<run_id>/``.

    Cheap to construct (nothing is read or created until a method is called).

    Args:
        root: the dataset folder.
        run_id: the run.

    Example:
        >>> st = Staging(out, run_id)  # doctest: +SKIP
        >>> with st.measure_lock():
        ...     st.set_status(RunStatus.RUNNING, pid=os.getpid())
    """

    def __init__(self, root: str | os.PathLike[str], run_id: str) -> None:
        self.root = Path(root)
        self.run_id = run_id
        self.dir = layout.staging_dir(self.root, run_id)

    @classmethod
    def at(cls, directory: str | os.PathLike[str]) -> Staging:
        """The staging of a folder given by its path (``<root>/.staging/<run_id>``)."""
        directory = Path(directory)
        staging = cls(directory.parent.parent, directory.name)
        staging.dir = directory
        return staging

    def exists(self) -> bool:
        """Whether the staging folder exists."""
        return self.dir.is_dir()

    # -- status ---------------------------------------------------------------------------

    def status_record(self) -> dict[str, Any] | None:
        """The whole ``status.json`` (status and details), or ``None``."""
        return read_status_file(self.dir)

    def status(self) -> str | None:
        """The run's status string, or ``None`` when it has no readable one."""
        return status_at(self.dir)

    def set_status(self, status: RunStatus | str, **extra: Any) -> None:
        """Write ``status.json`` = ``{"status": status, **extra}`` atomically (fsynced)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.dir / STATUS_FILE,
                          json.dumps({"status": str(status), **extra}, default=str))

    def is_done(self, published: set[str]) -> bool:
        """Whether the run is done.

        Done = a trace file in ``data/`` (``run_id in published``) and no staging folder saying
        otherwise (none, or one whose status is in :data:`DONE_STATUSES`).
        """
        if self.run_id not in published:
            return False
        return not self.dir.exists() or self.status() in DONE_STATUSES

    # -- meta -----------------------------------------------------------------------------

    def meta(self) -> dict[str, Any] | None:
        """``meta.json`` (``columns``, ``settings``, ...), or ``None`` when there is none.

        Raises:
            ValueError: the file exists but is not JSON.
        """
        path = self.dir / META_FILE
        if not path.exists():
            return None
        meta = json.loads(path.read_text(encoding="utf-8"))
        return meta if isinstance(meta, dict) else None

    def write_meta(self, meta: dict[str, Any]) -> None:
        """Write ``meta.json`` atomically (not fsynced: it is rewritten by every attempt)."""
        write_json_atomic(self.dir / META_FILE, meta, fsync=False, sort_keys=False)

    # -- the measure lock -----------------------------------------------------------------

    @contextmanager
    def measure_lock(self) -> Iterator[None]:
        """Hold the run's measure lock (``.staging/locks/measure-<run_id>.lock``) or fail now.

        One process measures or salvages a run at a time; a second one does not wait.

        Raises:
            LockTimeout: another process holds it.
        """
        lock = FileLock(str(layout.lock_path(self.root, MEASURE_LOCK_PREFIX + self.run_id)),
                        timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise LockTimeout(f"run {self.run_id!r} is being measured by another process") \
                from None
        try:
            yield
        finally:
            lock.release()

    # -- attempts -------------------------------------------------------------------------

    def attempts(self) -> list[Path]:
        """The archived ``attempt-N/`` folders, oldest first."""
        if not self.dir.is_dir():
            return []
        found = [(n, p) for p in self.dir.iterdir()
                 if p.is_dir() and (n := attempt_number(p)) is not None]
        return [p for _, p in sorted(found)]

    def attempt_leftovers(self) -> list[Path]:
        """What an earlier attempt left in the folder.

        Anything but the run's own files, hidden names and archived attempts.
        """
        if not self.dir.is_dir():
            return []
        return [p for p in self.dir.iterdir() if p.name not in RUNNER_FILES
                and not p.name.startswith((ATTEMPT_PREFIX, "."))]

    def archive_attempt(self, reason: str, *, keep: Iterable[str] = RUNNER_FILES,
                        **details: Any) -> Path:
        """Move an attempt's measurements into ``attempt-N/`` and mark that ``incomplete``.

        Everything except ``keep``, lock files, hidden names and earlier attempts moves into
        ``attempt-N/`` (N = 1 + the highest so far), whose ``status.json`` says ``incomplete``
        with ``reason``, the names moved and ``details`` (e.g. the sampler's final state). The
        caller makes sure no process still writes into the folder.

        Returns:
            The ``attempt-N`` folder.
        """
        numbers = [attempt_number(p) or 0 for p in self.attempts()]
        n = max(numbers, default=0) + 1
        dest = self.dir / f"{ATTEMPT_PREFIX}{n}"
        dest.mkdir(parents=True)
        skip = set(keep)
        moved = []
        for entry in sorted(self.dir.iterdir()):
            name = entry.name
            if (name in skip or name.startswith(ATTEMPT_PREFIX) or name.endswith(".lock")
                    or name.startswith(".")):
                continue
            shutil.move(str(entry), str(dest / name))
            moved.append(name)
        write_json_atomic(dest / STATUS_FILE, {
            "status": str(RunStatus.INCOMPLETE), "attempt": n, "reason": reason, **details,
            "archived_utc": utc_now(), "files": moved})
        return dest

    def remove_after_publish(self) -> None:
        """Remove the folder of a published run, except its archived attempts and status.

        Killed attempts are measurements: they stay until the user prunes them, with
        ``status.json`` saying what was published (issue 12, items 12 and 14).
        """
        if not self.dir.exists():
            return
        attempts = [p for p in self.dir.glob(f"{ATTEMPT_PREFIX}*") if p.is_dir()]
        if not attempts:
            shutil.rmtree(self.dir)
            return
        for entry in self.dir.iterdir():
            if entry in attempts or entry.name == STATUS_FILE:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


# ---------------------------------------------------------------------------------------------
# Done-ness over a folder
# ---------------------------------------------------------------------------------------------

def published_run_ids(root: str | os.PathLike[str], workload: str) -> set[str]:
    """Run ids with a per-run trace file in ``data/<workload>/`` (one directory walk)."""
    base = layout.data_root(Path(root)) / workload
    if not base.is_dir():
        return set()
    return {p.stem for p in base.rglob(f"*{layout.SHARD_SUFFIX}")
            if not p.name.startswith(".") and "-of-" not in p.stem}


def is_done(root: str | os.PathLike[str], run_id: str, published: set[str]) -> bool:
    """:meth:`Staging.is_done` of ``run_id`` in ``root``."""
    return Staging(root, run_id).is_done(published)


def unpublished_runs(root: str | os.PathLike[str]) -> list[str]:
    """Run ids whose staging folder does not say they are done (running, failed, killed...)."""
    base = layout.staging_root(Path(root))
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and p.name != layout.LOCKS_DIR
                  and status_at(p) not in DONE_STATUSES)


__all__ = [
    "DONE_STATUSES", "META_FILE", "RUNNER_FILES", "STATUS_FILE", "RunStatus", "Staging",
    "is_done", "published_run_ids", "read_status_file", "status_at", "unpublished_runs",
]
