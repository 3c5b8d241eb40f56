"""A journal of original GPU settings, written before any setting changes, so they always return.

``device_settings`` restores power caps and clock locks in a ``finally``. A process killed by
SIGKILL, a node crash, or anything else that skips the ``finally`` would leave a GPU capped, and
the next run would read that leftover cap as the "original". So, before the first set call,
every GPU's original values are written here (per GPU **UUID**, which survives renumbering),
with the writing process's pid; a clean restore removes them again. At start-up ``generate``
restores whatever a dead process left (:func:`restore_orphans`), and ``llm-powertrace
restore-gpu-settings`` does the same by hand.

The journal is node-local state, never published, and keyed by **host**: a home folder shared by
the nodes of a cluster holds one file per node, ``$LLM_POWERTRACE_GPU_JOURNAL``, else
``$XDG_STATE_HOME/llm-powertrace/gpu-settings-journal-<host>.json`` (``~/.local/state/...``), and
every entry names its host and its user (uid). A pid means something only on its own host: a
restore acts only on entries of the host it runs on and leaves the others (their GPUs are not
this node's, their processes cannot be checked from here). A Slurm epilog runs
``llm-powertrace restore-gpu-settings --all-mine`` on each node after a job (docs/generating.md), so a job
killed with SIGKILL leaves no cap on the node. The file is rewritten atomically (temporary name,
fsync, rename) under a file lock.

Vendor-free: NVML is reached through ``generation.sampler.nvml``'s public functions.

Example::

    from generation.sampler.journal import restore_orphans

    restore_orphans()      # [{'gpu': 'GPU 0', 'power_limit_w': 700.0, 'clocks_reset': True}]
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llm_powertrace_ds.atomic import write_json_atomic
from llm_powertrace_ds.procs import pid_alive as _pid_alive

from .errors import SamplerError, SourceError

log = logging.getLogger(__name__)

JOURNAL_ENV = "LLM_POWERTRACE_GPU_JOURNAL"
FORMAT = "llm-powertrace-gpu-settings-journal/1"
INDEX_KEY_PREFIX = "nvml-index-"
"""Key of a GPU whose UUID NVML cannot report (the NVML index instead)."""


def this_host() -> str:
    """This node's host name (short form: Slurm's node name)."""
    return socket.gethostname().split(".")[0]


def journal_path() -> Path:
    """Where this host's journal lives (see the module docstring)."""
    explicit = os.environ.get(JOURNAL_ENV)
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                             "state")
    return Path(state) / "llm-powertrace" / f"gpu-settings-journal-{this_host()}.json"


def _here(entry: dict[str, Any]) -> bool:
    """Whether an entry was written on this host (entries without a host are older, local)."""
    host = entry.get("host")
    return host is None or host == this_host()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_name(path.name + ".lock")), timeout=30):
        yield


def read_entries(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """The journal's entries by GPU UUID (``{}`` when there is no journal).

    Raises:
        SamplerError: a journal that cannot be read (named, with the reason).
    """
    path = journal_path() if path is None else path
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise SamplerError(f"Failed to read '{path}': {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SamplerError(f"'{path}': field 'format' is {data.get('format') if isinstance(data, dict) else data!r}, "
                           f"expected {FORMAT!r}")
    return dict(data.get("entries") or {})


def _write(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    if not entries:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    write_json_atomic(path, {"format": FORMAT, "entries": entries}, mode=0o600)


def record(uuid: str, *, nvml_index: int, power_limit_mw: int | None, clocks_locked: bool,
           path: Path | None = None) -> None:
    """Journal a GPU's original settings before changing them (durable when this returns).

    An entry already there from a dead process is kept (its values are the true originals; the
    GPU still carries that process's leftover): restore it first (:func:`restore_orphans`).

    Raises:
        SamplerError: the GPU has an entry from another live process (two runs changing one
            GPU), or one from a dead process that was not restored.
    """
    path = journal_path() if path is None else path
    with _locked(path):
        entries = read_entries(path)
        old = entries.get(uuid)
        if old is not None and not _here(old):
            raise SamplerError(
                f"'{path}': GPU {nvml_index} has journalled settings of host {old.get('host')!r}, "
                f"not this host {this_host()!r}: set {JOURNAL_ENV} to a file of this node")
        if old is not None and int(old.get("pid", -1)) != os.getpid():
            alive = _pid_alive(int(old.get("pid", -1)))
            raise SamplerError(
                f"'{path}': GPU {nvml_index} already has journalled settings of "
                f"{'running' if alive else 'dead'} process {old.get('pid')}; "
                + ("another run is changing this GPU" if alive else
                   "run `llm-powertrace restore-gpu-settings` first"))
        entry = dict(old or {})
        entry.update(pid=os.getpid(), nvml_index=int(nvml_index), host=this_host(),
                     uid=os.getuid())
        if power_limit_mw is not None and entry.get("power_limit_mw") is None:
            entry["power_limit_mw"] = int(power_limit_mw)
        entry["clocks_locked"] = bool(entry.get("clocks_locked")) or bool(clocks_locked)
        entries[uuid] = entry
        _write(path, entries)


def clear(uuids: list[str], path: Path | None = None) -> None:
    """Remove this process's entries of ``uuids`` (their settings are restored)."""
    path = journal_path() if path is None else path
    if not path.exists():
        return
    with _locked(path):
        entries = read_entries(path)
        for uuid in uuids:
            if int(entries.get(uuid, {}).get("pid", -1)) == os.getpid():
                del entries[uuid]
        _write(path, entries)




def restore_orphans(*, include_own: bool = False, path: Path | None = None,
                    uid: int | None = None) -> list[dict[str, Any]]:
    """Restore the settings a dead process of this host journalled, then drop those entries.

    Cheap when there is no journal (NVML is not even initialised). Entries of another host are
    left alone (logged once): their pids say nothing here and their GPUs are not this node's.

    Args:
        include_own: also restore this process's own entries (after a signal handler ran).
        path: the journal (default :func:`journal_path`).
        uid: only entries written by this user (``--all-mine``); ``None`` = every user's.

    Returns:
        What was done, one dict per GPU: ``gpu`` (``GPU <nvml index>``), ``power_limit_w``
        restored (or ``None``), ``clocks_reset``, ``error`` (a restore NVML refused: the entry
        stays for the next try).
    """
    path = journal_path() if path is None else path
    if not path.exists():
        return []
    from . import nvml

    done: list[dict[str, Any]] = []
    with _locked(path):
        entries = read_entries(path)
        elsewhere = sorted({str(e.get("host")) for e in entries.values() if not _here(e)})
        if elsewhere:
            log.warning("'%s' holds entries of host(s) %s: left alone on %s (restore them there)",
                        path, ", ".join(elsewhere), this_host())
        mine = {u: e for u, e in entries.items() if _here(e)
                and (uid is None or e.get("uid") is None or int(e["uid"]) == uid)}
        orphans = {u: e for u, e in mine.items()
                   if not _pid_alive(int(e.get("pid", -1)))
                   or (include_own and int(e.get("pid", -1)) == os.getpid())}
        if not orphans:
            return []
        with nvml.session():
            for uuid, entry in orphans.items():
                report: dict[str, Any] = {"gpu": f"GPU {entry.get('nvml_index')}",
                                          "power_limit_w": None, "clocks_reset": False}
                try:
                    handle = (nvml.device_handle(int(uuid[len(INDEX_KEY_PREFIX):]))
                              if uuid.startswith(INDEX_KEY_PREFIX)
                              else nvml.device_handle_by_uuid(uuid))
                    if entry.get("clocks_locked"):
                        nvml.reset_gpu_locked_clocks(handle)
                        report["clocks_reset"] = True
                    if entry.get("power_limit_mw") is not None:
                        nvml.set_power_limit_mw(handle, int(entry["power_limit_mw"]))
                        report["power_limit_w"] = int(entry["power_limit_mw"]) / 1000.0
                    del entries[uuid]
                except SourceError as exc:
                    report["error"] = str(exc)
                    log.error("could not restore %s from the journal: %s", report["gpu"], exc)
                done.append(report)
        _write(path, entries)
    for report in done:
        if "error" not in report:
            log.warning("restored GPU settings left by a dead process: %s", report)
    return done
