"""A site of jobs over time: a schedule file, or a seeded arrival model, placed on whole nodes.

Each job replays one source run (a ``trace``, by run id, or the first run of a ``selection``,
``AXIS=VALUE`` filters on the runs table) on ``gpus`` GPUs from ``start`` to ``end``: its measured
ramp-up at the start, its steady block repeated with no restart (:mod:`.steady`), its measured
ramp-down at the end. GPUs without a job draw their idle power. Starts, stops and overlaps are
what a utility sees of a site over a day.

Schedule file (CSV with a header, or YAML: a list of mappings, or ``{jobs: [...]}``), read
through :mod:`llm_powertrace_ds.bounded`::

    job,trace,gpus,start,end
    pretrain,powertraces-pt100array_pt017_r1_7536307_1-50f3a1a4a0,8000,0,20h
    tune,selection:model_family=ds7bchat,1024,2h,6h30min

``start`` and ``end`` are times from the start of the horizon (``90min``, ``2h``, a bare number is
seconds). Jobs must fit the site: at no time may running jobs need more nodes than it has.

Arrival model (:class:`Arrivals`): ``jobs`` arrivals uniformly distributed over the horizon (the
arrival times of a Poisson process conditioned on its count), each job's size log-uniform in
whole nodes between ``gpus_min`` and ``gpus_max``, its duration log-uniform between
``duration_min_s`` and ``duration_max_s``, its source drawn by the runs' shares; all from one
seeded generator. A job starts when it arrives if enough nodes are free, else when they are
(first come, first served); a job still running at the horizon is cut there.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import bounded
from ..errors import InputError, UsageError
from ..units import parse_quantity

MAX_SCHEDULE_BYTES = 4 << 20
"""Largest schedule file read (4 MiB: tens of thousands of jobs)."""
MAX_JOBS = 100_000
"""Most jobs a schedule may hold."""
COLUMNS = ("job", "gpus", "start", "end")
"""Required columns, beside one of ``trace`` or ``selection``."""


@dataclass(frozen=True)
class ScheduledJob:
    """One job of a site over time.

    Attributes:
        name: the job's name.
        pick: ``trace:RUN_ID`` or ``selection:AXIS=VALUE[,AXIS=VALUE...]``.
        gpus: GPUs it takes (rounded up to whole nodes when placed).
        start_s, end_s: when it starts and ends, s from the start of the horizon.
        line: where the schedule file names it (``None`` for a drawn job).
    """

    name: str
    pick: str
    gpus: int
    start_s: float
    end_s: float
    line: int | None = None


@dataclass(frozen=True)
class Arrivals:
    """The seeded arrival model (module docstring).

    Attributes:
        jobs: number of arrivals over the horizon.
        gpus_min, gpus_max: job size bounds (GPUs, log-uniform in whole nodes).
        duration_min_s, duration_max_s: job duration bounds (s, log-uniform).
        seed: the generator's seed.
    """

    jobs: int
    gpus_min: int
    gpus_max: int
    duration_min_s: float
    duration_max_s: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.jobs <= MAX_JOBS:
            raise UsageError(f"{self.jobs} must be 1 to {MAX_JOBS}", field="--arrivals")
        if not 1 <= self.gpus_min <= self.gpus_max:
            raise UsageError(f"{self.gpus_min}:{self.gpus_max} is not MIN:MAX with "
                             "1 <= MIN <= MAX", field="--job-gpus")
        if not 0 < self.duration_min_s <= self.duration_max_s:
            raise UsageError(f"{self.duration_min_s:g}:{self.duration_max_s:g} s is not "
                             "MIN:MAX with 0 < MIN <= MAX", field="--job-duration")

    def describe(self) -> str:
        return (f"{self.jobs} arrivals uniform over the horizon (Poisson arrival times given "
                f"their count), sizes log-uniform in whole nodes over {self.gpus_min}-"
                f"{self.gpus_max} GPUs, durations log-uniform over "
                f"{self.duration_min_s:g}-{self.duration_max_s:g} s, first come first served "
                f"(seed {self.seed})")


def _time(value: Any, *, file: str, line: int, field: str) -> float:
    if isinstance(value, bool) or value is None:
        raise InputError(f"value {value!r} is not a time", file=file, line=line, field=field)
    try:
        t = (float(value) if isinstance(value, (int, float))
             else parse_quantity(str(value), "time", option=field))
    except UsageError as exc:
        raise InputError(exc.reason, file=file, line=line, field=field) from None
    if not (math.isfinite(t) and t >= 0):
        raise InputError(f"value {value!r} is not a time >= 0", file=file, line=line,
                         field=field)
    return t


def _job(row: dict[str, Any], *, file: str, line: int) -> ScheduledJob:
    missing = [c for c in COLUMNS if row.get(c) in (None, "")]
    if missing:
        raise InputError(f"missing {', '.join(missing)}", file=file, line=line, field=missing[0])
    trace, sel = row.get("trace"), row.get("selection")
    if bool(trace) == bool(sel):
        raise InputError("give one of trace (a run id) or selection (AXIS=VALUE[,...])",
                         file=file, line=line, field="trace")
    pick = f"trace:{str(trace).strip()}" if trace else f"selection:{str(sel).strip()}"
    gpus = row["gpus"]
    try:
        if isinstance(gpus, bool) or float(gpus) != int(float(gpus)):
            raise ValueError
        n = int(float(gpus))
    except (TypeError, ValueError):
        raise InputError(f"value {gpus!r} is not a whole number of GPUs", file=file, line=line,
                         field="gpus") from None
    if n < 1:
        raise InputError(f"value {gpus!r} must be >= 1", file=file, line=line, field="gpus")
    start = _time(row["start"], file=file, line=line, field="start")
    end = _time(row["end"], file=file, line=line, field="end")
    if end <= start:
        raise InputError(f"value {row['end']!r} is not after start {row['start']!r}", file=file,
                         line=line, field="end")
    return ScheduledJob(str(row["job"]).strip(), pick, n, start, end, line)


def read_schedule(path: str | Path) -> list[ScheduledJob]:
    """Jobs of a schedule file (CSV, or YAML by its ``.yaml``/``.yml`` suffix).

    Raises:
        InputError: naming the file, the line, the field and the value.
    """
    p = Path(path)
    text = bounded.read_text(p, max_bytes=MAX_SCHEDULE_BYTES, field="--schedule")
    name = p.name
    rows: list[tuple[int, dict[str, Any]]] = []
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            bounded.check_yaml_depth(text, file=name, field="--schedule")
            nodes = yaml.compose(text, Loader=yaml.SafeLoader)
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise InputError("not YAML", file=name,
                             line=None if mark is None else mark.line + 1) from None
        items, seq = data, nodes
        if isinstance(data, dict) and "jobs" in data:
            items = data["jobs"]
            seq = next(v for k, v in nodes.value if k.value == "jobs")
        if not isinstance(items, list):
            raise InputError("expected a list of jobs (or a mapping with 'jobs')", file=name)
        for item, node in zip(items, seq.value, strict=True):
            line = node.start_mark.line + 1
            if not isinstance(item, dict):
                raise InputError(f"a job is a mapping, got {type(item).__name__}", file=name,
                                 line=line)
            rows.append((line, item))
    else:
        reader = csv.DictReader(io.StringIO(text))
        header = [h.strip() for h in reader.fieldnames or []]
        reader.fieldnames = header
        for col in COLUMNS:
            if col not in header:
                raise InputError(f"the header has no column {col!r} (needs job, trace or "
                                 "selection, gpus, start, end)", file=name, line=1, field=col)
        for row in reader:
            if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                continue
            rows.append((reader.line_num, {k: (v.strip() if isinstance(v, str) else v)
                                           for k, v in row.items()}))
    if not rows:
        raise InputError("no jobs", file=name)
    if len(rows) > MAX_JOBS:
        raise InputError(f"{len(rows)} jobs; at most {MAX_JOBS}", file=name)
    return [_job(row, file=name, line=line) for line, row in rows]


def draw_arrivals(model: Arrivals, horizon_s: float, gpus_per_node: int,
                  picks: Sequence[str], shares: Sequence[float]) -> list[ScheduledJob]:
    """Jobs drawn from the arrival model (module docstring); start and end before placement."""
    rng = np.random.default_rng(model.seed)
    arrive = np.sort(rng.uniform(0.0, horizon_s, model.jobs))
    lo = max(1, math.ceil(model.gpus_min / gpus_per_node))
    hi = max(lo, math.floor(model.gpus_max / gpus_per_node))
    nodes = np.floor(np.exp(rng.uniform(math.log(lo), math.log(hi + 1), model.jobs))).astype(int)
    nodes = np.clip(nodes, lo, hi)
    dur = np.exp(rng.uniform(math.log(model.duration_min_s), math.log(model.duration_max_s),
                             model.jobs))
    p = np.asarray(shares, dtype=np.float64)
    which = rng.choice(len(picks), size=model.jobs, p=p / p.sum())
    return [ScheduledJob(f"job-{i + 1:03d}", picks[int(which[i])],
                         int(nodes[i]) * gpus_per_node, float(arrive[i]),
                         float(arrive[i] + dur[i])) for i in range(model.jobs)]


@dataclass(frozen=True)
class Placement:
    """Where and when a job runs: its node indices and its start and end (grid steps)."""

    nodes: np.ndarray
    start: int
    end: int
    waited_s: float


def place(jobs: Sequence[ScheduledJob], site_nodes: int, gpus_per_node: int, horizon: int,
          step_s: float, *, queue: bool, file: str | None = None) -> list[Placement]:
    """Whole nodes for each job, lowest free node indices first.

    ``queue`` (arrivals): a job that does not fit waits until enough nodes are free (first come,
    first served). Otherwise (a schedule file) it is an error naming the job's line.

    Raises:
        InputError: a job needs more nodes than the site has, or (without ``queue``) more than
            are free at its start.
    """
    free_at = np.zeros(site_nodes)  # grid step at which each node is free
    out: list[Placement] = []
    last_start = 0
    for job in jobs:  # in order of their start (the caller sorts them)
        k = math.ceil(job.gpus / gpus_per_node)
        if k > site_nodes:
            raise InputError(f"value {job.gpus} needs {k} nodes; the site has {site_nodes}",
                             file=file, line=job.line, field="gpus")
        start = int(round(job.start_s / step_s))
        length = max(1, int(round((job.end_s - job.start_s) / step_s)))
        if queue:
            start = max(start, last_start)
            ready = int(np.sort(free_at)[k - 1])
            begin = max(start, ready)
        else:
            begin = start
        free = np.flatnonzero(free_at <= begin)
        if len(free) < k:
            raise InputError(f"value {job.gpus} GPUs of job {job.name!r} do not fit: "
                             f"{len(free) * gpus_per_node} GPUs are free at "
                             f"{job.start_s:g} s", file=file, line=job.line, field="gpus")
        nodes = free[:k]
        free_at[nodes] = begin + length
        last_start = begin
        out.append(Placement(nodes, begin, begin + length,
                             (begin - int(round(job.start_s / step_s))) * step_s))
    return out
