"""The ``cpu_proxy`` source: a virtual device per workload rank, for machines without a GPU.

**Not a GPU measurement.** Each rank's device reports a documented linear model of its process
tree's *real* CPU activity, so that the whole pipeline (sampler, events, metrics, shards) runs
and can be tested anywhere, and its rows can never pass for GPU data (platform ``cpu_proxy``,
flag ``cpu_proxy``, ``power_field = cpu_proxy_model``).

The model, per tick, for the tree rooted at the rank's pid::

    u       = min(1, cpu_seconds_in_tick / (wall_seconds_in_tick * threads_allowed))
    power_w = idle_w + (max_w - idle_w) * u          (defaults 60 W and 300 W)

``cpu_seconds_in_tick`` is the CPU time (user + system, all threads) the tree's live processes
used since the previous tick, read from each process's CPU-time clock (``clock_getcpuclockid``:
one system call, ns resolution; ``/proc/<pid>/stat`` has only 10 ms); ``threads_allowed`` is
``len(os.sched_getaffinity(pid))``.
``gpu_util_pct = 100 u``; ``mem_used_mib`` is the tree's summed RSS; the energy counter is the
running integral of the modelled power (``power_w x interval``, exact for this model); clocks,
temperature, 1 s-average power and memory utilisation are null. The tree's children are
re-scanned about once a second (not every tick, to keep the sampler cheap): a child's CPU time is
counted from its discovery, and the last partial tick of a child that exits is lost; the sampler
process itself is excluded.

When the rank's own process ends (``record``'s command exits, then ``idle_after_s`` follows),
the device keeps reading the model of what is left of its tree: the children already found
that still run (no more re-scans: the pid may be reused), and when none is left, a tree that
uses no CPU, ``u = 0`` and ``power_w = idle_w`` — the same model the idle padding of a live
rank reads. Those readings carry the fault bit ``process_gone``, so the summary counts them. A
rank whose process had ended before the sampler first saw it was never measured: its readings
are null.

Ranks are found through ``<staging>/pids/rank-<r>.pid`` files (one line: the pid), re-read on
every re-scan, so ranks that start later join the run as new devices.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from .base import FAULT_PROCESS_GONE, NAN, DeviceInfo, Reading, Source
from .errors import SamplerConfigError

log = logging.getLogger(__name__)

GPU_NAME = "cpu_proxy"
POWER_FIELD = "cpu_proxy_model"
_PID_FILE_RE = re.compile(r"^rank-(\d+)\.pid$")


def proxy_power_w(cpu_s: float, wall_s: float, threads_allowed: int, idle_w: float,
                  max_w: float) -> tuple[float, float]:
    """The model: ``(power_w, u)`` for ``cpu_s`` CPU seconds in ``wall_s`` wall seconds.

    Example:
        >>> proxy_power_w(0.1, 0.1, 2, 60.0, 300.0)
        (180.0, 0.5)
    """
    if not wall_s > 0 or threads_allowed < 1:
        return NAN, NAN
    u = min(1.0, max(0.0, cpu_s / (wall_s * threads_allowed)))
    return idle_w + (max_w - idle_w) * u, u


def read_pid_files(pids_dir: Path) -> dict[int, int]:
    """``{rank: pid}`` from ``rank-<r>.pid`` files (unreadable or half-written ones skipped)."""
    out: dict[int, int] = {}
    try:
        entries = list(os.scandir(pids_dir))
    except FileNotFoundError:
        return out
    for entry in entries:
        m = _PID_FILE_RE.match(entry.name)
        if not m:
            continue
        try:
            text = Path(entry.path).read_text(encoding="utf-8").strip()
            out[int(m.group(1))] = int(text)
        except (OSError, ValueError):
            continue
    return dict(sorted(out.items()))


def cpu_clock_id(pid: int) -> int:
    """Linux clock id of a process's CPU-time clock (all its threads; ns resolution).

    ``clock_getcpuclockid(3)``: ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``. Reading it costs
    one system call, far less than parsing ``/proc/<pid>/stat`` (10 ms resolution).
    """
    return ((~pid) << 3) | 2


class _Proc:
    """One process of a tree: its CPU clock and an open ``/proc/<pid>/statm``.

    The open ``statm`` gives the RSS and, because reading it fails once *that* process is gone
    (even if its pid is reused), a liveness check.
    """

    __slots__ = ("clock_id", "last_cpu_ns", "pid", "statm_fd")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.clock_id = cpu_clock_id(pid)
        self.last_cpu_ns: int | None = None
        try:
            self.statm_fd: int | None = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
        except OSError:
            self.statm_fd = None

    def sample(self) -> tuple[int, float]:
        """(CPU time so far in ns, RSS in bytes); raises ``OSError`` when the process is gone."""
        rss = 0.0
        if self.statm_fd is not None:
            data = os.pread(self.statm_fd, 128, 0)
            if not data:
                raise ProcessLookupError(self.pid)
            rss = float(int(data.split()[1]) * _PAGE_SIZE)
        return time.clock_gettime_ns(self.clock_id), rss

    def close(self) -> None:
        if self.statm_fd is not None:
            os.close(self.statm_fd)
            self.statm_fd = None


def _proc_children_supported() -> bool:
    tid = threading.get_native_id() if hasattr(threading, "get_native_id") else os.getpid()
    return os.path.exists(f"/proc/{os.getpid()}/task/{tid}/children")


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid``.

    From ``/proc/<pid>/task/<tid>/children`` when the kernel has it (~20x cheaper than scanning
    all of ``/proc``), else psutil.
    """
    if not _PROC_CHILDREN:
        try:
            return [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []
    out: list[int] = []
    stack = [pid]
    seen = {pid}
    while stack:
        parent = stack.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            for token in data.split():
                child = int(token)
                if child not in seen:
                    seen.add(child)
                    out.append(child)
                    stack.append(child)
    return out


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PROC_CHILDREN = _proc_children_supported()


@dataclass
class _Tree:
    """One rank's process tree and its CPU-time bookkeeping."""

    rank: int
    pid: int
    procs: dict[int, _Proc] = field(default_factory=dict)
    threads_allowed: int = 1
    last_ns: int = 0
    energy_mj: float = 0.0
    alive: bool = True
    root_gone: bool = False


class CpuProxySource(Source):
    """One virtual device per rank pid.

    Args:
        pids_dir: the staging folder's ``pids/`` (``rank-<r>.pid`` files).
        idle_w: model power at u = 0, W.
        max_w: model power at u = 1, W (also the device's ``power_limit_w``).
        exclude_pids: pids never counted (the sampler process itself).
        clock: monotonic clock in ns (tests pass a deterministic one).
    """

    name = "cpu_proxy"

    def __init__(self, pids_dir: Path, *, idle_w: float = 60.0, max_w: float = 300.0,
                 exclude_pids: Iterable[int] = (), clock: Callable[[], int] = time.monotonic_ns
                 ) -> None:
        self.pids_dir = Path(pids_dir)
        self.idle_w = float(idle_w)
        self.max_w = float(max_w)
        self.exclude = set(exclude_pids) | {os.getpid()}
        self.clock = clock
        self.power_field = POWER_FIELD
        self._trees: list[_Tree] = []
        self._ranks: dict[int, int] = {}  # rank -> slot
        self._warned: set[int] = set()
        self._pids_key: tuple[int, tuple[str, ...]] | None = None

    def _pid_files_changed(self) -> bool:
        """Whether ``pids/`` changed since the last look (its mtime or its file names).

        Reading every pid file once a second costs more than the ticks in between; a new rank's
        file (written by rename) changes both.
        """
        try:
            key = (os.stat(self.pids_dir).st_mtime_ns, tuple(sorted(os.listdir(self.pids_dir))))
        except FileNotFoundError:
            key = (0, ())
        changed = key != self._pids_key
        self._pids_key = key
        return changed

    def open(self) -> list[DeviceInfo]:
        found = read_pid_files(self.pids_dir)
        if not found:
            raise SamplerConfigError(f"cpu_proxy has no process to measure: no rank-<r>.pid "
                                     f"file in '{self.pids_dir}'")
        return [self._add(rank, pid) for rank, pid in found.items()]

    def _add(self, rank: int, pid: int) -> DeviceInfo:
        slot = len(self._trees)
        tree = _Tree(rank, pid)
        root = _Proc(pid)
        try:
            root.sample()
        except OSError:
            root.close()
            tree.alive = False
        else:
            tree.procs[pid] = root
        self._refresh_tree(tree)
        self._sample_cpu(tree)  # baseline
        tree.last_ns = self.clock()
        self._trees.append(tree)
        self._ranks[rank] = slot
        log.info("cpu_proxy: rank %d = pid %d (slot %d, %d threads allowed)", rank, pid, slot,
                 tree.threads_allowed)
        return DeviceInfo(slot=slot, gpu_index=rank, rank=rank, name=GPU_NAME,
                          uuid_hash=None, power_limit_w=self.max_w,
                          default_power_limit_w=self.max_w,
                          details={"pid": pid, "threads_allowed": tree.threads_allowed,
                                   "alive_at_start": tree.alive})

    def _refresh_tree(self, tree: _Tree) -> None:
        """Re-read the tree's children and its affinity (about once a second)."""
        if not tree.alive or tree.root_gone:  # the root's pid may be another process's now
            return
        try:
            tree.threads_allowed = max(1, len(os.sched_getaffinity(tree.pid)))
        except OSError:
            pass
        wanted = {tree.pid} | {c for c in descendants(tree.pid) if c not in self.exclude}
        for pid in list(tree.procs):
            if pid not in wanted:
                tree.procs.pop(pid).close()
        for pid in wanted:
            if pid not in tree.procs:
                tree.procs[pid] = _Proc(pid)

    @staticmethod
    def _drop_tree(tree: _Tree) -> None:
        tree.alive = False
        for proc in tree.procs.values():
            proc.close()
        tree.procs.clear()

    def _sample_cpu(self, tree: _Tree) -> tuple[float, float]:
        """CPU seconds the tree used since the last call, and its summed RSS in bytes.

        A process seen for the first time only sets its baseline (its earlier CPU time is not
        attributed to this tick).
        """
        cpu_ns = 0
        rss = 0.0
        for pid, proc in list(tree.procs.items()):
            try:
                now, proc_rss = proc.sample()
            except (OSError, ValueError, IndexError):  # it exited
                tree.procs.pop(pid).close()
                if pid == tree.pid:  # the rest of the tree, if any, is still measured
                    tree.root_gone = True
                continue
            if proc.last_cpu_ns is not None and now > proc.last_cpu_ns:
                cpu_ns += now - proc.last_cpu_ns
            proc.last_cpu_ns = now
            rss += proc_rss
        return cpu_ns / 1e9, rss

    def read(self, slot: int) -> Reading:
        tree = self._trees[slot]
        if not tree.alive:
            return Reading(faults=FAULT_PROCESS_GONE)
        cpu_s, rss = self._sample_cpu(tree)
        now = self.clock()
        wall_s = (now - tree.last_ns) / 1e9
        tree.last_ns = now
        power_w, u = proxy_power_w(cpu_s, wall_s, tree.threads_allowed, self.idle_w, self.max_w)
        if power_w == power_w:  # not NaN
            tree.energy_mj += power_w * wall_s * 1000.0
        return Reading(power_mw=power_w * 1000.0, energy_mj=tree.energy_mj,
                       gpu_util_pct=100.0 * u, mem_used_bytes=rss,
                       faults=FAULT_PROCESS_GONE if tree.root_gone else 0)

    def rescan(self) -> list[DeviceInfo]:
        for tree in self._trees:
            self._refresh_tree(tree)
        new: list[DeviceInfo] = []
        if not self._pid_files_changed():
            return new
        for rank, pid in read_pid_files(self.pids_dir).items():
            slot = self._ranks.get(rank)
            if slot is None:
                new.append(self._add(rank, pid))
            elif self._trees[slot].pid != pid and rank not in self._warned:
                self._warned.add(rank)
                log.warning("cpu_proxy: rank %d changed pid %d -> %d; keeping the first", rank,
                            self._trees[slot].pid, pid)
        return new

    def close(self) -> None:
        for tree in self._trees:
            self._drop_tree(tree)

    def provenance(self) -> dict[str, Any]:
        return {"sampler": self.name, "power_field": self.power_field,
                "cpu_proxy": {"idle_w": self.idle_w, "max_w": self.max_w,
                              "model": "power_w = idle_w + (max_w - idle_w) * u; u = min(1, "
                                       "cpu_s_in_tick / (wall_s_in_tick * threads_allowed))"},
                "driver_version": None, "nvml_version": None, "cuda_version": None}
