"""The sampler process (monitor layer): absolute-deadline ticks into the spool.

The parent side is :class:`Sampler` (a context manager): it validates the configuration, starts a
**fresh Python interpreter** (``python -m generation.sampler``: the *spawn* start method, but
without re-running the parent's ``__main__`` as ``multiprocessing`` would, so the sampler never
imports torch or datasets — only the source, the standard library, psutil and numpy), waits for
the first tick and, at the end, asks it to stop through its stdin.

The child's loop (:class:`TickLoop`) ticks on absolute deadlines ``t_start + k * period`` of
``time.monotonic_ns()`` — never ``sleep(period)``. Each tick records, per device, the monotonic
time before and after its reads (``t_after`` is the sample's time: the end of the interval an
averaged reading covers). A tick that wakes after the *next* deadline has passed is recorded late
(one row, never back-dated) and the deadlines it overran are counted as missed; the schedule moves
on to the next future deadline. A tick reads the power of every device first, then the slower
signals, then the driver's own power samples (a second spool file). A device that is lost (fell
off the bus) ends its own series with a ``gpu_lost`` row; the others go on, and the loop ends
only when every device is lost. The spool is flushed every ``flush_s`` (<= 1 s). A
(monotonic, UTC) anchor pair is written at start and at stop.

The child stops cleanly on ``STOP`` (state ``stopped``), when its stdin reaches EOF or its parent
changes (the workload process died: ``parent_gone``), on SIGTERM (``terminated``) and when every
device is lost (``gpu_lost``); each writes ``summary.json`` (with the devices lost on the way).
SIGKILL loses at most the last ``flush_s``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from llm_powertrace_ds.atomic import write_json_atomic, write_text_atomic

from .base import (
    EMPTY_READING,
    FAULT_GPU_LOST,
    PIDS_DIR,
    DeviceInfo,
    Reading,
    Source,
)
from .config import SamplerConfig
from .errors import GpuLost, SamplerConfigError, SamplerError
from .sources import make_source, resolve_source
from .spool import (
    PROVENANCE_FILE,
    SPOOL_DIR,
    SamplerSummary,
    SpoolWriter,
    anchor_pair,
    read_spool,
)

log = logging.getLogger(__name__)

HEAVY_MODULES = ("torch", "datasets", "transformers", "peft", "trl", "accelerate")
"""Modules the sampler process must never import (checked and recorded in its provenance)."""

MAX_SLEEP_S = 0.25
"""Longest single sleep of the loop (bounds how late a stop request is seen)."""
READY = "READY"
STOP = "STOP"
FIFO_PRIORITY = 10
NICE_VALUE = -10


# ---------------------------------------------------------------------------------------------
# The tick loop
# ---------------------------------------------------------------------------------------------

class TickLoop:
    """Absolute-deadline ticks of one source into one spool.

    Args:
        source: an opened source.
        writer: an opened spool writer.
        devices: the source's devices (from ``open``).
        period_ns: tick period.
        flush_ns: flush the spool at least this often.
        rescan_ns: call ``source.rescan()`` this often.
        clock: ``time.monotonic_ns`` (tests pass a deterministic clock).
        sleep: ``sleep(seconds)`` (default ``time.sleep``; tests pass a fake that advances their
            clock). Sleeps are cut into slices of at most ``MAX_SLEEP_S`` so a stop request is
            seen quickly; ``time.sleep`` costs fewer instructions per tick than
            ``Event.wait``, which matters for the sampler's CPU budget.
        on_first_tick: called once with t0 (ns) after the first tick is on disk.
        maintenance: extra callable run about every ``rescan_ns`` (e.g. the parent check).
    """

    def __init__(self, source: Source, writer: SpoolWriter, devices: list[DeviceInfo],
                 period_ns: int, *, flush_ns: int = 500_000_000, rescan_ns: int = 1_000_000_000,
                 clock: Callable[[], int] = time.monotonic_ns,
                 sleep: Callable[[float], None] = time.sleep,
                 on_first_tick: Callable[[int], None] | None = None,
                 maintenance: Callable[[], None] | None = None) -> None:
        if period_ns <= 0:
            raise SamplerConfigError(f"period_ns={period_ns} must be > 0")
        self.source = source
        self.writer = writer
        self.devices = list(devices)
        self.period_ns = int(period_ns)
        self.flush_ns = int(flush_ns)
        self.rescan_ns = int(rescan_ns)
        self.clock = clock
        self.stop_event = threading.Event()
        self._sleep = sleep
        self.on_first_tick = on_first_tick
        self.maintenance = maintenance
        self.state = "stopped"
        self.message = ""
        self.ticks = 0
        self.missed = 0
        self.lost: dict[int, str] = {}
        """slot -> what happened, for each device lost during the run."""
        self.t_start_ns: int | None = None

    def request_stop(self, state: str = "stopped", message: str = "") -> None:
        """Ask the loop to end after the current tick (thread- and signal-safe)."""
        if not self.stop_event.is_set():
            self.state, self.message = state, message
        self.stop_event.set()

    def _sleep_until(self, deadline_ns: int) -> bool:
        """Sleep until ``deadline_ns``; True when a stop was requested."""
        stop = self.stop_event
        while not stop.is_set():
            remaining = deadline_ns - self.clock()
            if remaining <= 0:
                return False
            self._sleep(min(remaining / 1e9, MAX_SLEEP_S))
        return True

    def run(self) -> None:
        """Tick until a stop is requested or every GPU is lost."""
        period = self.period_ns
        start = self.clock()
        self.t_start_ns = start
        deadline = start + period
        next_flush = start + self.flush_ns
        next_rescan = start + self.rescan_ns
        tick = 0
        while not self._sleep_until(deadline):
            woke = self.clock()
            missed = (woke - deadline) // period if woke > deadline else 0
            lost = self._tick(tick, deadline, missed)
            self.ticks += 1
            self.missed += missed
            if tick == 0:
                self.writer.flush()
                if self.on_first_tick is not None:
                    self.on_first_tick(start)
            tick += 1
            deadline += (missed + 1) * period
            if lost is not None:
                self.request_stop("gpu_lost", lost)
                break
            now = self.clock()
            if now >= next_flush:
                self.writer.flush()
                next_flush = now + self.flush_ns
            if now >= next_rescan:
                next_rescan = now + self.rescan_ns
                self._rescan()
        self.writer.flush()

    def _tick(self, tick: int, deadline: int, missed: int) -> str | None:
        """Read every device still present once; return a message when the last one was lost.

        Two phases: the power of every device (``read_power``; its before/after times are the
        sample's), then the slower signals of each (``read_rest``), then the driver's own
        samples. A device that is lost gets one row with the ``gpu_lost`` fault and is read no
        more; the others go on.
        """
        append = self.writer.append
        clock = self.clock
        source = self.source
        active = [d for d in self.devices if d.slot not in self.lost]
        readings = []
        for dev in active:
            t_before = clock()
            try:
                r = source.read_power(dev.slot)
            except GpuLost as exc:
                r = self._lose(dev, tick, exc)
            readings.append((dev, t_before, clock(), r))
        for dev, t_before, t_after, r in readings:
            if dev.slot not in self.lost:
                try:
                    r = source.read_rest(dev.slot, r)
                except GpuLost as exc:
                    self._lose(dev, tick, exc)
                    r = r._replace(faults=r.faults | FAULT_GPU_LOST)
                for ts_us, power_mw in source.driver_samples(dev.slot):
                    self.writer.append_driver(dev.slot, tick, ts_us, power_mw / 1000.0)
            append(tick, dev.slot, missed, deadline, t_before, t_after, r.faults,
                   r.power_mw / 1000.0, r.power_avg_mw / 1000.0, r.energy_mj, r.gpu_util_pct,
                   r.mem_util_pct, r.mem_used_bytes / 1048576.0, r.sm_clock_mhz,
                   r.mem_clock_mhz, r.temp_c, r.clock_event_reasons, r.power_ts_us)
        gpus = [d for d in self.devices if d.kind == "gpu"] or self.devices
        if active and all(d.slot in self.lost for d in gpus):
            return "; ".join(self.lost.values())
        return None

    def _lose(self, dev: DeviceInfo, tick: int, exc: BaseException) -> Reading:
        """Record that a device was lost at ``tick``; its last (empty) reading."""
        message = f"GPU {dev.gpu_index} (slot {dev.slot}) was lost at tick {tick}: {exc}"
        self.lost[dev.slot] = message
        log.error("%s", message)
        return EMPTY_READING._replace(faults=FAULT_GPU_LOST)

    def _rescan(self) -> None:
        new = self.source.rescan()
        if new:
            self.devices.extend(new)
            self.writer.set_devices([d.to_dict() for d in self.devices])
        if self.maintenance is not None:
            self.maintenance()


# ---------------------------------------------------------------------------------------------
# Priority
# ---------------------------------------------------------------------------------------------

def raise_priority(policy: str) -> str:
    """Ask for a higher scheduling priority; return what was obtained, in words.

    ``auto``: ``SCHED_FIFO`` (priority 10) if permitted, else nice -10, else unchanged.
    A plain user typically gets ``default (nice 0)``.
    """
    if policy == "none":
        return "default (not changed)"
    if policy in ("auto", "fifo") and hasattr(os, "sched_setscheduler"):
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))
            return f"SCHED_FIFO {FIFO_PRIORITY}"
        except (PermissionError, OSError) as exc:
            log.info("SCHED_FIFO not permitted (%s)", exc)
    if policy in ("auto", "nice"):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, NICE_VALUE)
            return f"nice {NICE_VALUE}"
        except (PermissionError, OSError) as exc:
            log.info("negative nice not permitted (%s)", exc)
    return f"default (nice {os.getpriority(os.PRIO_PROCESS, 0)})"


# ---------------------------------------------------------------------------------------------
# The child process
# ---------------------------------------------------------------------------------------------

def _watch_stdin(loop: TickLoop, stream: IO[str]) -> None:
    """Stop the loop on ``STOP`` or when the parent's end of the pipe closes."""
    try:
        for line in stream:
            if line.strip() == STOP:
                loop.request_stop("stopped", "stopped on request")
                return
    except (OSError, ValueError):
        pass
    loop.request_stop("parent_gone", "the workload process ended without stopping the sampler "
                                     "(stdin closed)")


def _child_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the sampler process's command line (the parent builds it)."""
    parser = argparse.ArgumentParser(prog="python -m generation.sampler")
    parser.add_argument("--staging", required=True)
    parser.add_argument("--source", required=True, choices=("nvml", "cpu_proxy"))
    parser.add_argument("--config", required=True, help="SamplerConfig as JSON")
    parser.add_argument("--parent-pid", type=int, required=True)
    return parser.parse_args(argv)


def _write_provenance(staging: Path, source: Source, config: SamplerConfig, priority: str,
                      devices: Sequence[DeviceInfo]) -> None:
    """Write the run's sampler provenance (source, period, devices, loaded heavy modules)."""
    provenance = {
        **source.provenance(),
        "sample_period_ms": config.period_ms,
        "priority": priority,
        "devices": [d.to_dict() for d in devices],
        "sampler_pid": os.getpid(),
        "python": sys.version.split()[0],
        "heavy_modules_loaded": sorted(m for m in HEAVY_MODULES if m in sys.modules),
    }
    write_json_atomic(staging / PROVENANCE_FILE, provenance)


def child_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the sampler process (``python -m generation.sampler``)."""
    args = _child_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s sampler[%(process)d] %(levelname)s %(message)s")
    config = SamplerConfig.from_dict(json.loads(args.config))
    staging = Path(args.staging)
    priority = raise_priority(config.priority)
    log.info("priority: %s", priority)
    import psutil

    me = psutil.Process()
    header = {"source": args.source, "period_ms": config.period_ms,
              "period_ns": config.period_ns, "config": config.to_dict(), "priority": priority,
              "sampler_pid": os.getpid(), "sampler_create_time": me.create_time(),
              "parent_pid": args.parent_pid}
    writer = SpoolWriter(staging / SPOOL_DIR, header)
    writer.open()
    source = make_source(args.source, config, staging, exclude_pids=(os.getpid(),))
    try:
        devices = source.open()
    except SamplerError as exc:
        log.error("could not open the source: %s", exc)
        writer.write_json("summary.json", {"state": "error", "message": str(exc)})
        writer.close()
        print(f"ERROR {exc}", flush=True)
        return 2
    writer.set_devices([d.to_dict() for d in devices])
    _write_provenance(staging, source, config, priority, devices)

    def ready(t_start_ns: int) -> None:
        try:
            print(f"{READY} {t_start_ns}", flush=True)
        except OSError:  # the parent is already gone; stdin will say so
            pass

    def parent_check() -> None:
        if os.getppid() != args.parent_pid:
            loop.request_stop("parent_gone", "the workload process ended without stopping the "
                                             "sampler (re-parented)")

    loop = TickLoop(source, writer, devices, config.period_ns,
                    flush_ns=int(config.flush_s * 1e9), rescan_ns=int(config.rescan_s * 1e9),
                    on_first_tick=ready, maintenance=parent_check)
    signal.signal(signal.SIGTERM, lambda *_: loop.request_stop("terminated", "SIGTERM"))
    # Ctrl-C reaches the whole foreground process group: let the workload decide (its
    # ``Sampler.__exit__`` stops us cleanly; if it dies instead, stdin closes).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_stdin, args=(loop, sys.stdin), name="stdin-watch",
                     daemon=True).start()
    anchors: dict[str, Any] = {"start": anchor_pair()}
    writer.write_json("anchors.json", anchors)
    try:
        loop.run()
    except Exception as exc:
        log.exception("sampler loop failed")
        loop.state, loop.message = "error", f"{type(exc).__name__}: {exc}"
    finally:
        anchors["stop"] = anchor_pair()
        writer.write_json("anchors.json", anchors)
        writer.close()
        try:
            source.close()
        except Exception as exc:  # noqa: BLE001 - closing must not hide the summary
            log.warning("closing the source failed: %s", exc)
        writer.write_json("summary.json", {
            "state": loop.state, "message": loop.message, "ticks": loop.ticks,
            "missed_ticks": loop.missed, "lost_devices": loop.lost,
            "heavy_modules_loaded": sorted(m for m in HEAVY_MODULES if m in sys.modules)})
        log.info("sampler ended: %s (%s); %d ticks, %d missed", loop.state, loop.message,
                 loop.ticks, loop.missed)
    return 0 if loop.state in ("stopped", "parent_gone", "terminated") else 1


# ---------------------------------------------------------------------------------------------
# The parent side
# ---------------------------------------------------------------------------------------------

def register_pid(staging_dir: str | os.PathLike[str], rank: int, pid: int | None = None) -> Path:
    """Announce a rank's process to the ``cpu_proxy`` sampler of ``staging_dir``.

    The sampler re-reads ``<staging>/pids/`` about once a second; a new rank becomes a new
    virtual device. Harmless with ``nvml`` (it ignores pids).

    Args:
        staging_dir: the run's staging folder.
        rank: the rank (global rank on one node; it becomes the device's ``gpu_index``).
        pid: the process; default the caller's.

    Returns:
        The pid file.

    Example:
        >>> register_pid(staging, rank=int(os.environ["RANK"]))  # doctest: +SKIP
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise SamplerConfigError(f"rank {rank!r} must be an integer >= 0")
    pid = os.getpid() if pid is None else int(pid)
    pids_dir = Path(staging_dir) / PIDS_DIR
    pids_dir.mkdir(parents=True, exist_ok=True)
    path = pids_dir / f"rank-{rank}.pid"
    write_text_atomic(path, f"{pid}\n", fsync=False)
    return path


def _project_root() -> str:
    return str(Path(__file__).resolve().parents[2])


class Sampler:
    """The sampler as a context manager: ``with Sampler(config, staging_dir) as s: ...``.

    Construction is cheap and touches nothing; :meth:`start` validates, spawns the sampler
    process and returns once its first tick (the run's t0) is on disk.

    Args:
        config: a :class:`SamplerConfig`.
        staging_dir: the run's staging folder (``.staging/<run_id>/``); created if missing.
        pids: ``cpu_proxy``: the workload processes to measure, one virtual device each (rank =
            position); default ``[os.getpid()]``. Ignored by ``nvml``.

    Attributes:
        source: the resolved source (after ``start``).
        provenance: the sampler's ``provenance.json`` (after ``start``).
        t_start_ns: monotonic start of the schedule (deadlines are ``t_start_ns + k period``).
        summary: the :class:`SamplerSummary` (after ``stop``).

    Example:
        >>> with Sampler(SamplerConfig(source="cpu_proxy"), tmp_path) as s:  # doctest: +SKIP
        ...     work()
        >>> s.summary.missed_ticks  # doctest: +SKIP
        0
    """

    def __init__(self, config: SamplerConfig, staging_dir: str | os.PathLike[str], *,
                 pids: Sequence[int] | None = None) -> None:
        self.config = config
        self.staging_dir = Path(staging_dir)
        self._pids = list(pids) if pids is not None else None
        self._proc: subprocess.Popen[str] | None = None
        self.source: str | None = None
        self.provenance: dict[str, Any] = {}
        self.t_start_ns: int | None = None
        self.summary: SamplerSummary | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def _validate(self) -> tuple[str, list[int]]:
        if not isinstance(self.config, SamplerConfig):
            raise SamplerConfigError(f"config must be a SamplerConfig, not "
                                     f"{type(self.config).__name__}")
        source = resolve_source(self.config)
        pids: list[int] = []
        if source == "cpu_proxy":
            import psutil

            pids = self._pids if self._pids is not None else [os.getpid()]
            if not pids:
                raise SamplerConfigError("cpu_proxy needs at least one pid to measure")
            for pid in pids:
                if isinstance(pid, bool) or not isinstance(pid, int) or not psutil.pid_exists(pid):
                    raise SamplerConfigError(f"pid {pid!r} is not a running process")
        if (self.staging_dir / SPOOL_DIR / "samples.bin").exists():
            raise SamplerError(f"'{self.staging_dir}' already holds a spool: archive the "
                               "previous attempt (archive_attempt) first")
        return source, pids

    def start(self) -> Sampler:
        """Validate, spawn the sampler process, and wait for its first tick.

        Raises:
            SamplerConfigError: bad configuration (nothing was started).
            SamplerError: the process failed to start (its log is quoted).
        """
        if self._proc is not None:
            raise SamplerError("this sampler was already started")
        source, pids = self._validate()
        self.staging_dir.mkdir(parents=True, exist_ok=True)
        for rank, pid in enumerate(pids):
            register_pid(self.staging_dir, rank, pid)
        (self.staging_dir / SPOOL_DIR).mkdir(exist_ok=True)
        log_path = self.staging_dir / SPOOL_DIR / "sampler.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [_project_root()] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [sys.executable, "-m", "generation.sampler", "--staging", str(self.staging_dir),
               "--source", source, "--config", json.dumps(self.config.to_dict()),
               "--parent-pid", str(os.getpid())]
        with open(log_path, "ab") as log_file:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=log_file, text=True, env=env, close_fds=True)
        self.source = source
        try:
            self.t_start_ns = self._wait_ready(log_path)
        except BaseException:
            self._kill()
            raise
        self.provenance = json.loads((self.staging_dir / PROVENANCE_FILE).read_text())
        log.info("sampler started: source %s, period %.0f ms, pid %d, priority %s", source,
                 self.config.period_ms, self._proc.pid, self.provenance.get("priority"))
        return self

    def _wait_ready(self, log_path: Path) -> int:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + self.config.start_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SamplerError(f"the sampler did not take its first tick within "
                                   f"{self.config.start_timeout_s:.0f} s; log: "
                                   f"{_tail(log_path)}")
            ready, _, _ = select.select([self._proc.stdout], [], [], remaining)
            if not ready:
                continue
            line = self._proc.stdout.readline()
            if line.startswith(READY):
                return int(line.split()[1])
            if not line or line.startswith("ERROR"):
                self._proc.wait(timeout=10)
                detail = line[len("ERROR"):].strip() if line else ""
                raise SamplerError(f"the sampler process failed to start: "
                                   f"{detail or _tail(log_path)}")

    def stop(self, timeout_s: float = 10.0) -> SamplerSummary:
        """Stop the sampler and return its summary (never raises because the sampler died).

        Raises:
            SamplerError: the sampler was never started.
        """
        if self._proc is None:
            raise SamplerError("the sampler was not started")
        proc = self._proc
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(STOP + "\n")
                proc.stdin.flush()
                proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("the sampler did not stop within %.0f s; terminating it", timeout_s)
                self._kill()
        self._close_pipes()
        self.summary = read_spool(self.staging_dir).summary
        if proc.returncode is not None and proc.returncode < 0 and not self.summary.complete:
            self.summary = _replace_state(self.summary, "unfinished",
                                          f"the sampler process was killed by signal "
                                          f"{-proc.returncode}")
        if not self.summary.complete:
            log.warning("sampler ended %s: %s", self.summary.state, self.summary.message)
        return self.summary

    def _kill(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            self._close_pipes()
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        self._close_pipes()

    def _close_pipes(self) -> None:
        proc = self._proc
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except (BrokenPipeError, OSError):
                    pass

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        if self._proc is not None and self.summary is None:
            self.stop()

    # -- while running -----------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The sampler process's pid."""
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        """Whether the sampler process is running."""
        return self._proc is not None and self._proc.poll() is None

    def add_pid(self, pid: int, rank: int) -> None:
        """Measure another rank's process (``cpu_proxy``); picked up within ``rescan_s``."""
        register_pid(self.staging_dir, rank, pid)


def _replace_state(summary: SamplerSummary, state: str, message: str) -> SamplerSummary:
    from dataclasses import replace

    return replace(summary, state=state, message=message)


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


__all__ = ["Sampler", "TickLoop", "child_main", "raise_priority", "register_pid"]
