"""WattAMeter power logs (``nvml_*.log``): one file per node, the nodes of a Slurm job joined.

WattAMeter (NREL/NLR, BSD-3-Clause) runs one tracker per node and appends to one text log per
reader. What this module reads, as WattAMeter writes it:

- **File name** ``nvml_<dt>[_<n>]_wattameter_<suffix>.log``: ``<dt>`` is the read interval with
  its dot removed (``01`` for 0.1 s), ``<suffix>`` is ``<job id>-<host name>`` when WattAMeter
  was started with ``-i $SLURM_JOB_ID`` (its Slurm helper script), else the host name or the
  user's own suffix.
- **Run line** ``# <timestamp> - WattAMeter run <id>``: written when a tracker starts (the id
  is the job id under Slurm). A restart appends another run line to the same file.
- **Header** ``# timestamp reading-time[ns] gpu-0[mW] gpu-1[mW] ...``: one column per GPU and
  quantity, the unit in brackets (power ``mW`` or ``W``, energy ``mJ``, temperature ``C``).
- **Rows** ``  <YYYY-MM-DD_HH:MM:SS.ffffff> <read time ns> <value> ...``, whitespace-separated.
  The timestamp is the **midpoint** of the NVML read, on the node's wall clock, in local time
  without a zone (``--tz`` says which; default UTC).

Columns:

=====================  =====================================================================
WattAMeter column      our column
=====================  =====================================================================
``timestamp``          ``t_ms`` (ms since the run's first sample on any node) and ``start_time``
``reading-time[ns]``   not a column: its largest half is the timestamp uncertainty stated in
                       ``clock_alignment``
``gpu-<k>[mW]``/``[W]``  ``power_w`` of GPU ``k`` (÷ 1000 for mW); ``power_field``
                       ``power_usage`` for the 0.7 format (``nvmlDeviceGetPowerUsage``: a 1 s
                       average on Hopper, so H100 runs carry ``power_is_1s_average``); for the
                       0.8+ format null with ``power_field_unknown`` (0.8 to 0.9.1 read the
                       1 s average, 0.9.2 on field 186, in the same format) unless ``--meta``
                       says which
``gpu-<k>[mJ]``        ``energy_mj`` (re-based to 0 at the device's first sample)
``gpu-<k>[C]``         ``temp_c``
``gpu-<k>[%gpu]``      ``gpu_util_pct``; ``[%mem]`` ``mem_util_pct``
anything else          dropped, named in the log (NVLink throughput, utilisation of unknown
                       kind, power WattAMeter *derived* from energy when no power was read)
=====================  =====================================================================

A reading of exactly 0 mW is what WattAMeter writes when an NVML read fails (its readers
return 0 on error), so it is imported as **null**, not as 0 W, and the run is flagged
``zero_power_samples``.

**Formats and trackers.** WattAMeter 0.7 wrote ``nvml_wattameter[_<suffix>].log`` with a
``# <time> - Power data for run <id>`` line and a ``Tracking started`` note, and the
utilisation in ``nvml_util_data_wattameter[_<suffix>].log``; 0.8 on writes one
``nvml_<dt>[_<n>]_wattameter_<suffix>.log`` per tracker (``--tracker 1.0,nvml-util``) under a
``WattAMeter run`` line. A log without a power column is a tracker's: its columns are merged
into its node's power log (:func:`merge_tracker`), and one whose node has no power log is
skipped with a log line, never fatal.

**One run per job.** Files whose names (or run lines) carry the same job id are one
multi-node run: ``node_index`` is the node's rank among the job's host names in sorted order
(host names are never stored), ``gpu_index`` its NVML index on that node. Every node's samples
are put on one time line through their wall clocks (UTC): WattAMeter records no clock-sync
data, so the offset between nodes is **not measured**; ``clock_alignment`` says so and gives
the timestamp uncertainty the read times allow.

**Missing nodes.** The job's other outputs name its nodes: ``slurm-<job>-wattameter.txt``
(``Logging execution on <host> to ...``) and ``wattameter-<job>-<host>.txt``. A node named
there without an ``nvml`` log is reported (log line) and counted in ``num_gpus`` (its GPU count
taken as the largest of the nodes present), so validation flags ``missing_gpu``; ``--num-gpus``
overrides the count.

**Bad lines.** A last line without its newline (a node killed while writing) is dropped with a
log line naming file and line; any other malformed line stops the import with an error naming
the file, the line, the column and the value. The ``rapl_*.log`` files (CPU package and DRAM
energy) are not imported: a CPU domain is not a GPU, and every device row of our schema is one
(``gpu_index``, ``gpu_name``, per-GPU metrics) — docs/importing.md says so under "WattAMeter
logs".
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..run import Run
from .common import (
    DeviceData,
    assemble_run,
    base_meta,
    check_run_id,
    finish_meta,
    load_meta_file,
    resolve_zone,
    scrub_meta,
)
from .timestamps import local_to_utc_ms

FORMAT = "wattameter"
log = logging.getLogger("llm_powertrace_ds.importers")

FILE_RE = re.compile(r"^nvml_(?:\d+(?:_\d+)?_|util_data_)?wattameter(?:_(?P<suffix>.+))?\.log$")
"""The names WattAMeter gives an NVML reader's log: ``nvml_<dt>[_<n>]_wattameter_<suffix>.log``
(0.8 on, one per tracker), ``nvml_wattameter[_<suffix>].log`` and
``nvml_util_data_wattameter[_<suffix>].log`` (0.7, power and utilisation)."""
_JOB_SUFFIX_RE = re.compile(r"^(?P<job>\d+)-(?P<host>.+)$")
_RUN_LINE_RE = re.compile(r"^#\s*\S+\s+-\s+(?:WattAMeter run|(?P<old>Power|Utilization) data "
                          r"for run)\s+(?P<id>\S+)\s*$")
"""``# <time> - WattAMeter run <id>`` (0.8 on) or ``# <time> - Power data for run <id>`` (0.7)."""
_NOTE_RE = re.compile(r"^#\s*\d{4}-\d{2}-\d{2}_\S+\s+-\s")
"""Any other ``# <time> - ...`` line (0.7's ``Tracking started``): a note, not a header."""
_TAG_RE = re.compile(r"^gpu-(?P<gpu>\d+)\[(?P<unit>[^\]]*)\]$")
_HOST_LINE_RE = re.compile(r"^Logging execution on (?P<host>\S+) to ")
_TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}_\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?$")

UNITS: dict[str, tuple[str, float]] = {
    "mW": ("power_w", 1e-3),
    "W": ("power_w", 1.0),
    "mJ": ("energy_mj", 1.0),
    "J": ("energy_mj", 1e3),
    "C": ("temp_c", 1.0),
    "%gpu": ("gpu_util_pct", 1.0),
    "%mem": ("mem_util_pct", 1.0),
}
"""Unit in a column's brackets -> (our signal, factor to its unit)."""
GPU_INDEX_STRIDE = 1000
"""Devices are keyed ``node * stride + gpu`` while the run is assembled (node-major order)."""
MAX_GPU = GPU_INDEX_STRIDE - 1
"""Largest GPU index of a column (``gpu-<k>[...]``); a larger one is refused, never published
as a phantom device of another node."""
MAX_READ_NS = 3_600 * 10**9
"""Longest ``reading-time[ns]`` accepted (1 h): a longer read is not a reading of this tracker."""
TRACKER_HOLD_PERIODS = 2.0
"""A tracker's reading (utilisation, temperature) is merged onto a power row when it is at most
this many of the tracker's periods older than the row; otherwise the row's value is null."""
WRITER_FORMATS = {
    "0.7": "WattAMeter 0.7: '# <time> - Power data for run <id>', nvml_wattameter[_<suffix>].log; "
    "power read with nvmlDeviceGetPowerUsage (a 1 s average on Ampere except GA100 and newer)",
    "0.8+": "WattAMeter 0.8 and later: '# <time> - WattAMeter run <id>', "
    "nvml_<dt>_wattameter_<suffix>.log; power read with nvmlDeviceGetPowerUsage up to 0.9.1 and "
    "NVML field 186 (instant) from 0.9.2 on, which the log does not say",
}
"""The log formats WattAMeter has written, by the first version that wrote each."""
FIELD_MAP: dict[str, str] = {
    "# <time> - WattAMeter run <id>": "the job id (run_id `wattameter-<id>`); the 0.8+ format "
    "in source_metadata (writer_format)",
    "# <time> - Power data for run <id>": "the job id (run_id `wattameter-<id>`); the 0.7 "
    "format in source_metadata (writer_format), power_field `power_usage`",
    "# <time> - Utilization data for run <id>": "the job id of a 0.7 utilisation tracker log",
    "# <time> - Tracking started": "dropped: 0.7's note of the start, the first row says when",
    "timestamp": "t_ms (ms since the run's first sample on any node) and start_time (local "
    "time converted with --tz)",
    "reading-time[ns]": "not a column: half the longest is the timestamp uncertainty stated in "
    "clock_alignment",
    "gpu-<k>[mW], gpu-<k>[W]": "power_w of GPU k (÷ 1000 for mW; a 0 mW failed read is null); "
    "power_field `power_usage` for 0.7 logs, null with flag power_field_unknown for 0.8+ "
    "unless --meta gives it (0.8 to 0.9.1 read the 1 s average, 0.9.2 on field 186)",
    "gpu-<k>[mJ], gpu-<k>[J]": "energy_mj (re-based to 0 at the device's first sample)",
    "gpu-<k>[C]": "temp_c",
    "gpu-<k>[%gpu]": "gpu_util_pct (in the power log, or merged from a tracker log)",
    "gpu-<k>[%mem]": "mem_util_pct (in the power log, or merged from a tracker log)",
    "gpu-<k>[W] beside gpu-<k>[mJ] without [mW]": "dropped: WattAMeter derived it from energy "
    "deltas, it is not a reading",
    "gpu-<k>[TX KiB], gpu-<k>[RX KiB]": "dropped: NVLink throughput has no column (listed in "
    "source_metadata columns_not_imported)",
}
"""Every line and column of a WattAMeter NVML log (``docs/importers.md`` renders it)."""


@dataclass
class NodeLog:
    """One node's ``nvml`` log, read.

    Attributes:
        path: the file.
        job: the Slurm job id (from the name, else the run line).
        host: the node's host name (never stored; orders the nodes).
        columns: per kept column ``(gpu, signal, factor, tag)``.
        dropped: tags of columns not imported.
        ts_local_ms: naive local wall-clock ms of each row.
        lines: the source line of each row.
        values: rows x kept columns, float64 (NaN = missing).
        max_read_ns: the longest ``reading-time[ns]`` of the file.
        zero_readings: power readings of exactly 0 (WattAMeter's failed reads), made null.
        writer: the log format (a key of :data:`WRITER_FORMATS`), ``None`` without a run line.
        trackers: names of the tracker files merged into this log's columns.
    """

    path: Path
    job: str
    host: str
    columns: list[tuple[int, str, float, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    ts_local_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lines: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    values: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    max_read_ns: int = 0
    zero_readings: int = 0
    writer: str | None = None
    trackers: list[str] = field(default_factory=list)

    @property
    def has_power(self) -> bool:
        """Whether the log holds a GPU power column (else it is a tracker's: utilisation, ...)."""
        return any(sig == "power_w" for _, sig, _, _ in self.columns)


def name_parts(path: Path) -> tuple[str | None, str]:
    """``(job id or None, host)`` from a log's file name; raises unless it is WattAMeter's."""
    m = FILE_RE.match(path.name)
    if not m:
        raise InputError("not a WattAMeter NVML log name (expected nvml_<dt>_wattameter_"
                         "<job>-<host>.log)", file=path, field="file name")
    suffix = m.group("suffix") or ""
    jm = _JOB_SUFFIX_RE.match(suffix)
    if jm:
        return jm.group("job"), jm.group("host")
    return None, suffix  # "" for a log named without a suffix (one node)


def _parse_header(line: str, *, path: Path, lineno: int) -> tuple[list[tuple[int, str, float,
                                                                             str]], list[str],
                                                                  list[int]]:
    tags = line.lstrip("#").split()
    if len(tags) < 3 or tags[0] != "timestamp" or not tags[1].startswith("reading-time"):
        raise InputError(f"expected '# timestamp reading-time[ns] gpu-0[mW] ...', got "
                         f"{line[:60]!r}", file=path, line=lineno)
    kept: list[tuple[int, str, float, str]] = []
    positions: list[int] = []
    dropped: list[str] = []
    energy_gpus = {int(m.group("gpu")) for t in tags[2:] if (m := _TAG_RE.match(t))
                   and m.group("unit") in ("mJ", "J")}
    power_read = {int(m.group("gpu")) for t in tags[2:] if (m := _TAG_RE.match(t))
                  and m.group("unit") == "mW"}
    for pos, tag in enumerate(tags[2:], start=2):
        m = _TAG_RE.match(tag)
        unit = m.group("unit") if m else None
        if m is None or unit not in UNITS:
            dropped.append(tag)
            continue
        digits = m.group("gpu")
        gpu = int(digits) if len(digits) <= 6 else MAX_GPU + 1
        if gpu > MAX_GPU:
            raise InputError(f"GPU index {m.group('gpu')[:20]} is outside 0..{MAX_GPU}: not a "
                             "device of this node", file=path, line=lineno, field=tag[:40])
        signal, factor = UNITS[unit]
        if unit == "W" and gpu in energy_gpus and gpu not in power_read:
            dropped.append(tag)  # WattAMeter's power derived from energy deltas: not a reading
            continue
        kept.append((gpu, signal, factor, tag))
        positions.append(pos)
    if not kept:
        raise InputError("no GPU column WattAMeter writes (gpu-<k>[mW], [mJ], [C], [%gpu], "
                         "[%mem])", file=path, line=lineno, field=tags[2][:40])
    seen = set()
    for gpu, sig, _, tag in kept:
        if (gpu, sig) in seen:
            raise InputError("the column repeats", file=path, line=lineno, field=tag)
        seen.add((gpu, sig))
    return kept, dropped, positions


def read_node_log(path: str | Path) -> NodeLog:
    """Read one ``nvml`` log (see the module docstring); nothing is assumed about its node.

    A log without a power column is a tracker's (utilisation, temperature): it is read the same
    way and merged into its node's power log by :func:`read_job`.

    Raises:
        InputError: a malformed line (file, line, column and value named), two different runs
            in one file, a header that changes, or no samples.
    """
    path = Path(path)
    job, host = name_parts(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Failed to read '{path}': {type(exc).__name__}: {exc}",
                         file=path) from None
    lines = text.split("\n")
    truncated_last = not text.endswith("\n")
    header: tuple[list[tuple[int, str, float, str]], list[str], list[int]] | None = None
    header_text: str | None = None
    run_id: str | None = None
    writer: str | None = None
    stamps: list[str] = []
    rows: list[list[float]] = []
    linenos: list[int] = []
    read_ns: list[int] = []
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        last = lineno == len(lines) and truncated_last
        if line.startswith("#"):
            m = _RUN_LINE_RE.match(line)
            if m:
                if run_id is not None and m.group("id") != run_id:
                    raise InputError(f"a second WattAMeter run {m.group('id')!r} after run "
                                     f"{run_id!r}: one file per run", file=path, line=lineno,
                                     field="run")
                run_id = m.group("id")
                writer = "0.7" if m.group("old") else "0.8+"
                continue
            if _NOTE_RE.match(line):  # "# <time> - Tracking started" (0.7)
                continue
            if last:
                log.warning("%s: line %d is cut off (no newline): dropped", path, lineno)
                continue
            if header_text is not None and line.split() != header_text.split():
                raise InputError("the header changed in the middle of the log", file=path,
                                 line=lineno)
            header_text = line
            header = _parse_header(line, path=path, lineno=lineno)
            continue
        if header is None:
            raise InputError("a sample before the '# timestamp ...' header", file=path,
                             line=lineno)
        cells = line.split()
        kept, _, positions = header
        width = len(header_text.lstrip("#").split()) if header_text else 0
        if len(cells) != width:
            if last:
                log.warning("%s: line %d is cut off (no newline): dropped", path, lineno)
                continue
            raise InputError(f"{len(cells)} values where the header has {width}", file=path,
                             line=lineno)
        if not _TS_RE.match(cells[0]):
            if last:
                log.warning("%s: line %d is cut off (no newline): dropped", path, lineno)
                continue
            raise InputError(f"value {cells[0][:40]!r} is not a YYYY-MM-DD_HH:MM:SS.ffffff "
                             "time", file=path, line=lineno, field="timestamp")
        if last:  # all fields present but the newline is not: the last number may be cut
            log.warning("%s: line %d is cut off (no newline): dropped", path, lineno)
            continue
        read_ns.append(_read_time_ns(cells[1], path=path, lineno=lineno))
        row = []
        for (_, _, factor, tag), pos in zip(kept, positions, strict=True):
            try:
                value = float(cells[pos])
            except ValueError:
                raise InputError(f"value {cells[pos][:40]!r} is not a number", file=path,
                                 line=lineno, field=tag) from None
            if not math.isfinite(value):
                raise InputError(f"value {cells[pos][:40]!r} is not a finite number",
                                 file=path, line=lineno, field=tag)
            row.append(value * factor)
        stamps.append(cells[0])
        rows.append(row)
        linenos.append(lineno)
    if header is None or not rows:
        raise InputError("no samples: is this a WattAMeter nvml log?", file=path)
    if job is None:
        job = run_id
    elif run_id is not None and run_id != job:
        log.info("%s: run line says %s, the file name job %s: the file name's job joins it",
                 path, run_id, job)
    if job is None:
        raise InputError("no job id: neither the file name (nvml_..._wattameter_<job>-<host>"
                         ".log) nor a '# ... WattAMeter run <id>' line gives one", file=path)
    kept, dropped, _ = header
    values = np.array(rows, dtype=np.float64)
    zeros = 0
    for j, (_, sig, _, _) in enumerate(kept):
        if sig == "power_w":
            mask = values[:, j] == 0.0
            zeros += int(mask.sum())
            values[mask, j] = np.nan
    return NodeLog(path=path, job=str(job), host=host, columns=kept, dropped=dropped,
                   ts_local_ms=_local_ms(stamps, linenos, path=path),
                   lines=np.array(linenos, dtype=np.int64),
                   values=values, max_read_ns=max(read_ns) if read_ns else 0,
                   zero_readings=zeros, writer=writer)


def _read_time_ns(text: str, *, path: Path, lineno: int) -> int:
    """The ``reading-time[ns]`` cell: an integer in 0..:data:`MAX_READ_NS`."""
    if not text.isdigit() or len(text) > 19 or int(text) > MAX_READ_NS:
        raise InputError(f"value {text[:40]!r} is not a read time of 0 to "
                         f"{MAX_READ_NS // 10**9} s in ns", file=path, line=lineno,
                         field="reading-time[ns]")
    return int(text)


def _local_ms(stamps: list[str], lines: list[int], *, path: Path) -> np.ndarray:
    """Naive local ms of ``YYYY-MM-DD_HH:MM:SS.ffffff`` stamps (already matched by the pattern).

    numpy parses them all at once; when it refuses one (a month 13, a 31 February), each is
    tried on its own so the error names the first bad stamp's line.
    """
    iso = np.array([s.replace("_", "T", 1) for s in stamps])
    try:
        return (iso.astype("datetime64[us]").astype(np.int64) + 500) // 1000
    except ValueError:
        pass
    for stamp, lineno in zip(stamps, lines, strict=True):
        try:
            dt.datetime.strptime(stamp[:26], "%Y-%m-%d_%H:%M:%S.%f" if "." in stamp
                                 else "%Y-%m-%d_%H:%M:%S")
        except ValueError:
            raise InputError(f"value {stamp[:40]!r} is not a calendar time", file=path,
                             line=lineno, field="timestamp") from None
    raise InputError("a timestamp numpy cannot read", file=path, line=lines[0], field="timestamp")


def expected_hosts(paths: Sequence[Path], job: str) -> set[str]:
    """The job's nodes as its other outputs name them (beside its ``nvml`` logs)."""
    hosts: set[str] = set()
    for folder in {p.parent for p in paths}:
        slurm = folder / f"slurm-{job}-wattameter.txt"
        if slurm.is_file():
            for line in slurm.read_text(encoding="utf-8", errors="replace").splitlines():
                m = _HOST_LINE_RE.match(line.strip())
                if m:
                    hosts.add(m.group("host"))
        for out in folder.glob(f"wattameter-{job}-*.txt"):
            hosts.add(out.name[len(f"wattameter-{job}-"):-len(".txt")])
    return hosts


def find_logs(paths: Iterable[str | Path]) -> list[Path]:
    """The ``nvml`` logs among ``paths`` (a folder is searched recursively)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(q for q in p.rglob("nvml_*wattameter*.log") if q.is_file())
        elif p.is_file():
            out.append(p)
        else:
            raise InputError("no such file or folder", file=p)
    if not out:
        raise InputError("no nvml_*_wattameter*.log file found", file=", ".join(map(str, paths)))
    return out


def job_of(path: Path) -> str:
    """A log's job id from its name, else from its first ``WattAMeter run`` line (read lazily)."""
    job, _ = name_parts(path)
    if job is not None:
        return job
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for _, line in zip(range(50), fh, strict=False):
                m = _RUN_LINE_RE.match(line.strip())
                if m:
                    return m.group("id")
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", file=path) from None
    raise InputError("no job id: neither the file name (nvml_..._wattameter_<job>-<host>.log) "
                     "nor a '# ... WattAMeter run <id>' line gives one", file=path)


def jobs_of(paths: Sequence[Path]) -> dict[str, list[Path]]:
    """The logs grouped by job id, without reading their samples."""
    jobs: dict[str, list[Path]] = {}
    for path in paths:
        jobs.setdefault(job_of(path), []).append(path)
    return jobs


def read_job(job: str, paths: Sequence[Path]) -> list[NodeLog]:
    """Read one job's node logs (sorted by host name), each node's trackers merged into it.

    A log without a power column (a tracker's: utilisation, temperature) is merged into its
    node's power log (:func:`merge_tracker`); one whose node has no power log is skipped with a
    log line. Two power logs of one node are refused.
    """
    logs = [read_node_log(p) for p in paths]
    nodes = sorted((n for n in logs if n.has_power), key=lambda n: n.host)
    hosts = [n.host for n in nodes]
    for a, b in zip(hosts, hosts[1:], strict=False):
        if a == b:
            dup = [str(n.path) for n in nodes if n.host == a]
            raise InputError(f"job {job} has two power logs of one node: {', '.join(dup)}",
                             file=dup[1], field="file name")
    by_host = {n.host: n for n in nodes}
    for tracker in (n for n in logs if not n.has_power):
        target = by_host.get(tracker.host)
        if target is None:
            log.warning("%s: a tracker log (no power column) whose node has no power log in "
                        "job %s: skipped", tracker.path, job)
            continue
        merge_tracker(target, tracker)
    if not nodes:
        raise InputError(f"job {job} has no log with a GPU power column (gpu-<k>[mW]): log "
                         "nvml-power with WattAMeter", file=paths[0], field="gpu-0[mW]")
    return nodes


def merge_tracker(node: NodeLog, tracker: NodeLog) -> None:
    """Add a tracker's columns to its node's power log, in place.

    Each power row takes the tracker's last reading at or before it (same node clock), null
    when that reading is more than :data:`TRACKER_HOLD_PERIODS` of the tracker's periods old
    or there is none yet. A column the power log already holds is kept from the power log.
    """
    have = {(g, sig) for g, sig, _, _ in node.columns}
    take = [j for j, (g, sig, _, _) in enumerate(tracker.columns) if (g, sig) not in have]
    node.dropped += [tracker.columns[j][3] for j in range(len(tracker.columns)) if j not in take]
    node.dropped += tracker.dropped
    node.trackers.append(tracker.path.name)
    if not take:
        return
    t_tr = tracker.ts_local_ms
    order = np.argsort(t_tr, kind="stable")
    t_tr, vals = t_tr[order], tracker.values[order][:, take]
    period = float(np.median(np.diff(t_tr))) if len(t_tr) > 1 else math.inf
    i = np.searchsorted(t_tr, node.ts_local_ms, side="right") - 1
    ok = i >= 0
    age = node.ts_local_ms - t_tr[np.maximum(i, 0)]
    ok &= age <= TRACKER_HOLD_PERIODS * period
    merged = np.full((len(node.ts_local_ms), len(take)), np.nan)
    merged[ok] = vals[i[ok]]
    node.values = np.concatenate((node.values, merged), axis=1)
    node.columns = node.columns + [tracker.columns[j] for j in take]


def _alignment_text(nodes: Sequence[NodeLog]) -> str:
    half_read_ms = max(n.max_read_ns for n in nodes) / 2e6
    return (f"{len(nodes)} node wall clocks (UTC, NTP); offset between nodes not measured "
            f"(no clock-sync data in WattAMeter logs); each stamp within {half_read_ms:.3g} ms "
            "of its read (half the longest read)")


def job_run(job: str, nodes: Sequence[NodeLog], *, workload: str,
            meta_in: dict[str, Any] | None = None, platform: str | None = None,
            num_gpus: int | None = None, tz: str | None = "UTC") -> Run:
    """Build one run from a job's node logs (see the module docstring).

    Raises:
        InputError: timestamps that do not increase on a node, or a bad ``num_gpus``.
    """
    zone = resolve_zone(tz)
    expected = expected_hosts([n.path for n in nodes], job)
    have = {n.host for n in nodes}
    missing = sorted(expected - have)
    all_hosts = sorted(have | expected)
    devices: list[DeviceData] = []
    per_node = 0
    for node in nodes:
        node_index = all_hosts.index(node.host)
        utc = local_to_utc_ms(node.ts_local_ms, zone)
        bad = np.flatnonzero(np.diff(utc) <= 0)
        if len(bad):
            i = int(bad[0])
            raise InputError(f"time goes back or repeats ({utc[i + 1] - utc[i]} ms after line "
                             f"{int(node.lines[i])}); a node's timestamps must increase",
                             file=node.path, line=int(node.lines[i + 1]), field="timestamp")
        gpus = sorted({g for g, _, _, _ in node.columns})
        per_node = max(per_node, len(gpus))
        for gpu in gpus:
            signals: dict[str, np.ndarray] = {}
            for j, (g, sig, _, _) in enumerate(node.columns):
                if g != gpu:
                    continue
                col = node.values[:, j].copy()
                if sig == "energy_mj":
                    finite = col[np.isfinite(col)]
                    if len(finite):
                        col = col - finite[0]
                signals[sig] = col
            devices.append(DeviceData(gpu_index=node_index * GPU_INDEX_STRIDE + gpu,
                                      ts_ms=utc, lines=node.lines, signals=signals))
        if node.dropped:
            log.info("%s: columns not imported: %s", node.path, ", ".join(node.dropped))
        if node.zero_readings:
            log.warning("%s: %d power readings of exactly 0 mW (WattAMeter's failed NVML "
                        "reads) imported as null", node.path, node.zero_readings)
    if missing:
        log.warning("job %s: %d of %d nodes have no nvml log (named by the job's other "
                    "outputs): %s", job, len(missing), len(all_hosts), ", ".join(missing))
    meta: dict[str, Any] = {**base_meta(FORMAT, workload), **(meta_in or {})}
    meta["run_id"] = check_run_id(str(meta.get("run_id") or f"wattameter-{job}"),
                                  file=nodes[0].path)
    writers = {n.writer for n in nodes}
    declared_field = meta.get("power_field")
    if declared_field is None and writers == {"0.7"}:
        meta["power_field"] = "power_usage"  # 0.7 reads nvmlDeviceGetPowerUsage
    elif declared_field is None:
        meta["power_field"] = None  # 0.8 to 0.9.1 power_usage, 0.9.2 on field 186: unknown
    if num_gpus is None and missing and meta.get("num_gpus") is None:
        meta["num_gpus"] = per_node * len(all_hosts)
    if len(all_hosts) > 1:
        meta["clock_alignment"] = _alignment_text(nodes)
    meta.setdefault("source_metadata", _source_metadata(job, nodes, missing, len(all_hosts)))
    flags = finish_meta(devices, meta, platform=platform, num_gpus=num_gpus, file=nodes[0].path)
    if meta.get("power_field") is None:
        flags.append("power_field_unknown")
    if any(n.zero_readings for n in nodes):
        flags.append("zero_power_samples")
    run = assemble_run(devices, meta, file=nodes[0].path, flags=flags,
                       fields={sig: tag for n in nodes for _, sig, _, tag in n.columns})
    for dev in run.devices:
        dev.node_index, dev.gpu_index = divmod(dev.gpu_index, GPU_INDEX_STRIDE)
        dev.rank = None
    return run


def _source_metadata(job: str, nodes: Sequence[NodeLog], missing: Sequence[str],
                     total: int) -> str:
    import json

    return json.dumps({
        "format": "WattAMeter nvml log",
        "slurm_job_id": job,
        "nodes_with_log": len(nodes),
        "nodes_named_by_job": total,
        "nodes_without_log": len(missing),
        "columns": sorted({tag for n in nodes for _, _, _, tag in n.columns}),
        "columns_not_imported": sorted({tag for n in nodes for tag in n.dropped}),
        "zero_power_readings_made_null": sum(n.zero_readings for n in nodes),
        "writer_format": sorted({n.writer for n in nodes if n.writer}),
        "tracker_logs_merged": sum(len(n.trackers) for n in nodes),
    }, sort_keys=True)


def iter_wattameter(paths: Iterable[str | Path], *, workload: str,
                    meta_path: str | Path | None = None, platform: str | None = None,
                    num_gpus: int | None = None, tz: str | None = "UTC") -> Iterator[Run]:
    """Import WattAMeter ``nvml`` logs: one :class:`Run` per Slurm job (nothing is written).

    Jobs are grouped by file name (or run line) first; each job's samples are read only when
    its run is asked for, so one job is in memory at a time.

    Args:
        paths: log files, or folders searched for ``nvml_*_wattameter*.log``.
        workload: ``finetune`` or ``inference``.
        meta_path: flat JSON/YAML of our column names applied to every job (model, ...).
        platform: the split slug (WattAMeter logs name no GPU; default ``unknown``).
        num_gpus: GPUs of the run, all nodes (default: those logged, plus missing nodes).
        tz: IANA zone of WattAMeter's zone-less local timestamps (default UTC).

    Yields:
        The runs, in job-id order.

    Raises:
        InputError: bad input, naming the file, the line and the column.

    Example:
        >>> runs = list(iter_wattameter(["logs/"], workload="finetune",  # doctest: +SKIP
        ...                             platform="h100_sxm_80gb", tz="America/Denver"))
    """
    meta_in = scrub_meta(load_meta_file(meta_path), source=str(meta_path)) if meta_path else {}
    for job, logs in sorted(jobs_of(find_logs(paths)).items()):
        yield job_run(job, read_job(job, logs), workload=workload, meta_in=dict(meta_in),
                      platform=platform, num_gpus=num_gpus, tz=tz)


def import_wattameter(paths: Iterable[str | Path], *, workload: str,
                      meta_path: str | Path | None = None, platform: str | None = None,
                      num_gpus: int | None = None, tz: str | None = "UTC") -> list[Run]:
    """Every run of :func:`iter_wattameter` as a list (all jobs in memory: small imports)."""
    return list(iter_wattameter(paths, workload=workload, meta_path=meta_path,
                                platform=platform, num_gpus=num_gpus, tz=tz))


__all__ = ["FIELD_MAP", "FILE_RE", "FORMAT", "NodeLog", "UNITS", "WRITER_FORMATS", "merge_tracker", "expected_hosts", "find_logs",
           "import_wattameter", "iter_wattameter", "job_of", "job_run", "jobs_of", "name_parts",
           "read_job", "read_node_log"]
