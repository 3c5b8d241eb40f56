"""The sampler's on-disk spool: crash-safe, append-only, cheap to write.

Layout of ``<staging>/spool/``:

* ``header.json`` — format, record layout, source, period, the sampler's pid.
* ``devices.json`` — the devices (rewritten atomically when a ``cpu_proxy`` rank joins).
* ``samples.bin`` — fixed-size little-endian records (:data:`RECORD_FIELDS`), one per device
  per tick, appended with one ``write`` per flush (every ``flush_s`` <= 1 s) and ``fsync``-ed
  every :data:`FSYNC_S`. A killed writer leaves at most a partial last record, which readers
  drop.
* ``driver_samples.bin`` — the devices' own power samples (NVML's driver buffer), fixed-size
  records (:data:`DRIVER_FIELDS`): slot, the tick that fetched them, the driver's CPU-clock
  timestamp (µs) and the power (W). Written with the samples; absent where no device has a
  buffer.
* ``anchors.json`` — (CLOCK_MONOTONIC ns, UTC ns) pairs taken at start and at stop.
* ``summary.json`` — written at a clean end: ``state`` and what happened.
* ``sampler.log`` — the sampler process's log (stderr).

The writer needs only the standard library (the sampler process imports numpy just for
reading); :func:`read_spool` returns numpy arrays.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llm_powertrace_ds.atomic import write_json_atomic

from .base import FAULT_NAMES, PIDS_DIR
from .errors import SamplerError

log = logging.getLogger(__name__)

SPOOL_DIR = "spool"
PROVENANCE_FILE = "provenance.json"
EVENTS_DIR = "events"
FORMAT = "llm-powertrace-spool/1"

SPOOL_SIGNALS = (
    "power_w", "power_avg_w", "energy_mj", "gpu_util_pct", "mem_util_pct", "mem_used_mib",
    "sm_clock_mhz", "mem_clock_mhz", "temp_c", "clock_event_reasons",
)
"""Signals of a record, in the column contract's units (NaN = null); ``t_ms`` is derived."""

RECORD_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("tick", "<i8", "q"),         # tick number, 0 = the run's first tick (t0)
    ("slot", "<i4", "i"),         # device slot
    ("missed", "<i4", "i"),       # deadlines overrun (skipped) just before this tick
    ("deadline_ns", "<i8", "q"),  # the deadline this tick served (CLOCK_MONOTONIC)
    ("t_before_ns", "<i8", "q"),  # monotonic time before this device's reads
    ("t_after_ns", "<i8", "q"),   # ... and after (the sample's time)
    ("faults", "<i8", "q"),       # FAULT_* bits of the reading
) + tuple((name, "<f8", "d") for name in SPOOL_SIGNALS) + (
    ("power_ts_us", "<f8", "d"),  # the source's own timestamp of power_w (NVML: CPU µs), NaN
)

RECORD_DTYPE = np.dtype([(n, t) for n, t, _ in RECORD_FIELDS])
RECORD_STRUCT = struct.Struct("<" + "".join(c for _, _, c in RECORD_FIELDS))
assert RECORD_DTYPE.itemsize == RECORD_STRUCT.size

DRIVER_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("slot", "<i4", "i"),         # device slot
    ("tick", "<i8", "q"),         # the tick whose read fetched the sample
    ("ts_us", "<i8", "q"),        # the driver's timestamp (CPU wall clock, µs)
    ("power_w", "<f8", "d"),      # the sample's power, W
)
DRIVER_DTYPE = np.dtype([(n, t) for n, t, _ in DRIVER_FIELDS])
DRIVER_STRUCT = struct.Struct("<" + "".join(c for _, _, c in DRIVER_FIELDS))
assert DRIVER_DTYPE.itemsize == DRIVER_STRUCT.size
DRIVER_FILE = "driver_samples.bin"

STATES = ("stopped", "gpu_lost", "parent_gone", "terminated", "error", "unfinished")
"""``stopped`` = a clean stop on request; ``gpu_lost``; ``parent_gone`` (the workload process
died); ``terminated`` (SIGTERM); ``error``; ``unfinished`` (no summary: the sampler was killed
or is still running)."""


def anchor_pair() -> dict[str, Any]:
    """A (CLOCK_MONOTONIC, UTC) pair: the wall clock read between two monotonic reads."""
    m1 = time.monotonic_ns()
    wall = time.time_ns()
    m2 = time.monotonic_ns()
    return {"monotonic_ns": (m1 + m2) // 2, "utc_ns": wall, "uncertainty_ns": m2 - m1,
            "utc": dt.datetime.fromtimestamp(wall / 1e9, dt.timezone.utc).isoformat()}


def spool_dir(path: str | os.PathLike[str]) -> Path:
    """The spool folder of a staging (or ``attempt-N``) folder, or the spool folder itself."""
    path = Path(path)
    return path if (path / "header.json").exists() and path.name == SPOOL_DIR else path / SPOOL_DIR


FSYNC_S = 5.0
"""How often the writer ``fsync``s. A ``write`` (every ``flush_s``) already survives a SIGKILL of
either process; ``fsync`` bounds what a machine crash loses."""


class SpoolWriter:
    """Append-only writer of one spool (used inside the sampler process).

    ``append`` packs a record in memory; ``flush`` writes everything pending with one
    ``os.write`` (after which a SIGKILL of the sampler or the workload loses nothing) and
    ``fsync``s when :data:`FSYNC_S` has passed since the last one. Everything happens in the
    caller's thread, right after a tick, so no helper thread wakes up.
    """

    def __init__(self, directory: Path, header: dict[str, Any], *,
                 fsync_s: float = FSYNC_S) -> None:
        self.directory = Path(directory)
        self.header = header
        self.fsync_ns = int(fsync_s * 1e9)
        self._pending: list[bytes] = []
        self._pending_driver: list[bytes] = []
        self._fd: int | None = None
        self._driver_fd: int | None = None
        self._last_fsync = 0
        self.records = 0

    def open(self) -> None:
        """Create the folder and the files; refuses to overwrite an existing spool."""
        self.directory.mkdir(parents=True, exist_ok=True)
        samples = self.directory / "samples.bin"
        if samples.exists():
            raise SamplerError(f"'{samples}' already exists: archive the previous attempt "
                               "(archive_attempt) before sampling again")
        header = {"format": FORMAT, "record_fields": [[n, t] for n, t, _ in RECORD_FIELDS],
                  "record_size": RECORD_STRUCT.size, **self.header}
        write_json_atomic(self.directory / "header.json", header)
        self._fd = os.open(samples, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._last_fsync = time.monotonic_ns()

    def set_devices(self, devices: list[dict[str, Any]]) -> None:
        write_json_atomic(self.directory / "devices.json", devices)

    def write_json(self, name: str, obj: Any) -> None:
        write_json_atomic(self.directory / name, obj)

    def append(self, *values: Any) -> None:
        """Pack one record (fields in :data:`RECORD_FIELDS` order)."""
        self._pending.append(RECORD_STRUCT.pack(*values))
        self.records += 1

    def append_driver(self, slot: int, tick: int, ts_us: int, power_w: float) -> None:
        """Pack one driver sample (:data:`DRIVER_FIELDS`); written with the next flush."""
        self._pending_driver.append(DRIVER_STRUCT.pack(slot, tick, int(ts_us), power_w))

    def flush(self, *, fsync: bool = False) -> None:
        """Write pending records (one ``write``); ``fsync`` if asked or :data:`FSYNC_S` passed."""
        if self._fd is None:
            return
        _write_all(self._fd, self._pending)
        if self._pending_driver:
            if self._driver_fd is None:
                self._driver_fd = os.open(self.directory / DRIVER_FILE,
                                          os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            _write_all(self._driver_fd, self._pending_driver)
        now = time.monotonic_ns()
        if fsync or now - self._last_fsync >= self.fsync_ns:
            self._last_fsync = now
            for fd in (self._fd, self._driver_fd):
                if fd is None:
                    continue
                try:
                    os.fsync(fd)
                except OSError as exc:  # pragma: no cover - disk trouble
                    log.warning("fsync of the spool failed: %s", exc)

    def close(self) -> None:
        if self._fd is not None:
            self.flush(fsync=True)
            os.close(self._fd)
            self._fd = None
            if self._driver_fd is not None:
                os.close(self._driver_fd)
                self._driver_fd = None


def _write_all(fd: int, pending: list[bytes]) -> None:
    """Write and clear ``pending`` with one ``write`` (more if the kernel takes less)."""
    if not pending:
        return
    data = b"".join(pending)
    pending.clear()
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SamplerSummary:
    """What a sampler run did, from its spool (and its ``summary.json`` when it ended cleanly).

    Attributes:
        state: one of :data:`STATES`.
        message: what happened, in words.
        ticks: ticks taken.
        missed_ticks: deadlines skipped because the loop woke after the next one had passed.
        drift_ms: the last tick's time minus its deadline.
        lateness_p50_ms: median of (tick time - deadline); tick time = first device's
            ``t_after``, the sample's timestamp.
        lateness_p99_ms: 99th percentile of the same.
        lateness_max_ms: its maximum.
        read_latency_mean_ms: mean time one device's reads took.
        read_latency_max_ms: the longest.
        faults: fault name -> number of device-ticks with it.
        devices: number of devices.
        priority: the scheduling priority the sampler obtained.
        lost_devices: slot (as text) -> what happened, for each device lost during the run (its
            series ends there; the others went on).
        read_phase_p99_ms: 99th percentile over ticks of the power phase's span: first device's
            ``t_before`` to the last device's ``t_after`` (how far apart the devices' power
            readings of one tick are).
    """

    state: str
    message: str = ""
    ticks: int = 0
    missed_ticks: int = 0
    drift_ms: float | None = None
    lateness_p50_ms: float | None = None
    lateness_p99_ms: float | None = None
    lateness_max_ms: float | None = None
    read_latency_mean_ms: float | None = None
    read_latency_max_ms: float | None = None
    faults: dict[str, int] = field(default_factory=dict)
    devices: int = 0
    priority: str | None = None
    lost_devices: dict[str, str] = field(default_factory=dict)
    read_phase_p99_ms: float | None = None

    @property
    def complete(self) -> bool:
        """Whether the sampler ran until it was asked to stop."""
        return self.state == "stopped"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Spool:
    """A spool read back.

    Attributes:
        directory: the staging (or ``attempt-N``) folder.
        header: ``header.json``.
        devices: ``devices.json`` (one dict per slot).
        samples: structured array of records (:data:`RECORD_DTYPE`), in write order.
        driver_samples: the devices' own power samples (:data:`DRIVER_DTYPE`), in write order
            (empty when none was recorded).
        anchors: ``{"start": pair, "stop": pair}`` (stop absent after a crash).
        summary: the :class:`SamplerSummary`.
        provenance: ``provenance.json`` of the folder (empty if absent).
        dropped_bytes: bytes of a partial last record that were dropped.
    """

    directory: Path
    header: dict[str, Any]
    devices: list[dict[str, Any]]
    samples: np.ndarray
    anchors: dict[str, Any]
    summary: SamplerSummary
    provenance: dict[str, Any]
    dropped_bytes: int = 0
    driver_samples: np.ndarray = field(default_factory=lambda: np.zeros(0, DRIVER_DTYPE))

    @property
    def t0_ns(self) -> int | None:
        """The run's t0: the first tick's earliest sample time (CLOCK_MONOTONIC ns)."""
        if len(self.samples) == 0:
            return None
        first = self.samples[self.samples["tick"] == self.samples["tick"].min()]
        return int(first["t_after_ns"].min())

    def device_samples(self, slot: int) -> np.ndarray:
        """The records of one device, in tick order."""
        rows = self.samples[self.samples["slot"] == slot]
        return rows[np.argsort(rows["tick"], kind="stable")]

    def ticks(self) -> np.ndarray:
        """One record per tick (its first device row), in tick order."""
        s = self.samples
        if len(s) == 0:
            return s
        order = np.lexsort((s["slot"], s["tick"]))
        s = s[order]
        first = np.concatenate(([True], s["tick"][1:] != s["tick"][:-1]))
        return s[first]


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        raise SamplerError(f"Failed to read '{path}': {type(exc).__name__}: {exc}") from exc


def read_spool(path: str | os.PathLike[str]) -> Spool:
    """Read the spool of a staging or ``attempt-N`` folder (also while it is being written).

    Raises:
        SamplerError: no spool there, or a file that cannot be read.
    """
    sdir = spool_dir(path)
    base = sdir.parent
    header = _read_json(sdir / "header.json", None)
    if header is None:
        raise SamplerError(f"no sampler spool in '{base}' (missing '{sdir / 'header.json'}')")
    if header.get("format") != FORMAT:
        raise SamplerError(f"'{sdir / 'header.json'}': unknown spool format "
                           f"{header.get('format')!r} (expected {FORMAT!r})")
    raw = b""
    samples_path = sdir / "samples.bin"
    if samples_path.exists():
        raw = samples_path.read_bytes()
    dtype = _record_dtype(header)
    usable = len(raw) - len(raw) % dtype.itemsize
    samples = np.frombuffer(raw[:usable], dtype=dtype).copy()
    devices = _read_json(sdir / "devices.json", [])
    anchors = _read_json(sdir / "anchors.json", {})
    written = _read_json(sdir / "summary.json", None)
    summary = summarize(samples, header, written, n_devices=len(devices))
    provenance = _read_json(base / PROVENANCE_FILE, {})
    driver_raw = b""
    if (sdir / DRIVER_FILE).exists():
        driver_raw = (sdir / DRIVER_FILE).read_bytes()
    whole = len(driver_raw) - len(driver_raw) % DRIVER_DTYPE.itemsize
    driver = np.frombuffer(driver_raw[:whole], dtype=DRIVER_DTYPE).copy()
    return Spool(base, header, devices, samples, anchors, summary, provenance,
                 dropped_bytes=len(raw) - usable, driver_samples=driver)


def _record_dtype(header: dict[str, Any]) -> np.dtype:
    """The record layout a spool was written with.

    Its header says; older spools lack fields added since, e.g. ``power_ts_us``.
    """
    fields = header.get("record_fields")
    if not fields:
        return RECORD_DTYPE
    try:
        return np.dtype([(str(n), str(t)) for n, t in fields])
    except (TypeError, ValueError) as exc:
        raise SamplerError(f"spool header: bad record_fields {fields!r}: {exc}") from exc


def summarize(samples: np.ndarray, header: dict[str, Any], written: dict[str, Any] | None,
              *, n_devices: int = 0) -> SamplerSummary:
    """Compute a :class:`SamplerSummary` from records (+ the sampler's own ``summary.json``)."""
    written = written or {}
    state = written.get("state", "unfinished")
    message = written.get("message") or ("" if written else
                                         "no summary: the sampler was killed or is still running")
    faults: dict[str, int] = {}
    kw: dict[str, Any] = {}
    if len(samples):
        order = np.lexsort((samples["slot"], samples["tick"]))
        s = samples[order]
        first = np.concatenate(([True], s["tick"][1:] != s["tick"][:-1]))
        ticks = s[first]
        late_ms = (ticks["t_after_ns"] - ticks["deadline_ns"]) / 1e6
        read_ms = (s["t_after_ns"] - s["t_before_ns"]) / 1e6
        starts = np.flatnonzero(first)  # rows sorted by tick: each tick's first row
        phase_ms = (np.maximum.reduceat(s["t_after_ns"], starts)
                    - np.minimum.reduceat(s["t_before_ns"], starts)) / 1e6
        kw = {
            "ticks": int(len(ticks)),
            "missed_ticks": int(ticks["missed"].sum()),
            "drift_ms": float(late_ms[-1]),
            "lateness_p50_ms": float(np.percentile(late_ms, 50)),
            "lateness_p99_ms": float(np.percentile(late_ms, 99)),
            "lateness_max_ms": float(late_ms.max()),
            "read_latency_mean_ms": float(read_ms.mean()),
            "read_latency_max_ms": float(read_ms.max()),
            "read_phase_p99_ms": float(np.percentile(phase_ms, 99)),
        }
        for bit, name in FAULT_NAMES.items():
            n = int(((s["faults"] & bit) != 0).sum())
            if n:
                faults[name] = n
    lost = {str(k): str(v) for k, v in (written.get("lost_devices") or {}).items()}
    return SamplerSummary(state=state, message=message, faults=faults, lost_devices=lost,
                          devices=n_devices, priority=header.get("priority"), **kw)


# ---------------------------------------------------------------------------------------------
# The sampler of a spool
# ---------------------------------------------------------------------------------------------

def _sampler_alive(header: dict[str, Any]) -> bool:
    import psutil

    pid, created = header.get("sampler_pid"), header.get("sampler_create_time")
    if not pid:
        return False
    try:
        proc = psutil.Process(int(pid))
        return created is None or abs(proc.create_time() - float(created)) < 1.0
    except psutil.NoSuchProcess:
        return False


def wait_sampler_exit(staging_dir: str | os.PathLike[str], *, wait_s: float = 10.0) -> str:
    """Wait until the sampler that writes ``<staging_dir>/spool/`` has exited; return its state.

    A workload killed mid-run leaves its sampler running until it notices (``parent_gone``);
    its spool can be moved (archived as an attempt) only after that.

    Args:
        staging_dir: ``.staging/<run_id>/`` (or any folder holding a ``spool/``).
        wait_s: how long to wait for a still-running sampler to exit.

    Returns:
        The sampler's final state (:data:`STATES`; ``unfinished`` when it wrote no summary).

    Raises:
        SamplerError: the spool's sampler process is still running after ``wait_s``.
    """
    sdir = Path(staging_dir)
    header = _read_json(sdir / SPOOL_DIR / "header.json", {})
    deadline = time.monotonic() + wait_s
    while header and _sampler_alive(header):
        if time.monotonic() > deadline:
            raise SamplerError(f"the sampler (pid {header.get('sampler_pid')}) of '{sdir}' is "
                               "still running; stop it before archiving the attempt")
        time.sleep(0.05)
    summary = _read_json(sdir / SPOOL_DIR / "summary.json", {})
    return str(summary.get("state", "unfinished"))


__all__ = [
    "DRIVER_DTYPE", "DRIVER_FIELDS", "EVENTS_DIR", "PIDS_DIR", "PROVENANCE_FILE", "RECORD_DTYPE", "RECORD_FIELDS", "SPOOL_DIR",
    "SPOOL_SIGNALS", "SamplerSummary", "Spool", "SpoolWriter", "anchor_pair", "read_spool",
    "summarize", "wait_sampler_exit",
]
