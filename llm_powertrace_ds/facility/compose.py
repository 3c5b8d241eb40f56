"""Composition of ``facility``: jobs on whole nodes, phases, tiling, node and facility sums."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from ..errors import InputError
from .models import NodeOverhead, Pue, auto_overhead
from .schedule import Arrivals, ScheduledJob, place
from .sources import GRID_MS, WINDOWS, Source, Window
from .steady import job_indices

Sync = Literal["lockstep", "independent", "measured"]
SYNC_MODES: tuple[str, ...] = ("lockstep", "independent", "measured")
DEFAULT_NODES_PER_RACK = 4
"""Nodes per rack when not given: four 8-GPU nodes (about 40 kW of DGX H100 systems at their
10.2 kW maximum) — an assumption, not a published standard; override it."""


@dataclass(frozen=True)
class FacilityConfig:
    """What to compose.

    Attributes:
        gpus: GPUs on the site (a multiple of ``gpus_per_node``).
        gpus_per_node: GPUs per node.
        nodes_per_rack: nodes per rack (default :data:`DEFAULT_NODES_PER_RACK`).
        overhead: the node overhead model; ``None``: chosen from the source runs' platforms
            (:func:`auto_overhead`).
        pue: the PUE model.
        sync: ``lockstep``, ``independent`` or ``measured`` (see the module docstring).
        duration_s: horizon (s); ``None``: the longest selected run.
        seed: seed of the phase draws.
        window: which part of each source run is replayed: ``work`` (default: its work window,
            without idle head and tail) or ``whole`` (the whole trace).
    """

    gpus: int
    gpus_per_node: int = 8
    nodes_per_rack: int = DEFAULT_NODES_PER_RACK
    overhead: NodeOverhead | None = None
    pue: Pue = field(default_factory=Pue)
    sync: Sync = "lockstep"
    duration_s: float | None = None
    seed: int = 0
    window: Window = "work"

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise InputError(f"{self.gpus_per_node} must be >= 1", field="--gpus-per-node")
        if self.gpus < 1 or self.gpus % self.gpus_per_node:
            raise InputError(f"{self.gpus} is not a positive multiple of --gpus-per-node "
                             f"{self.gpus_per_node} (jobs occupy whole nodes)", field="--gpus")
        if self.nodes_per_rack < 1:
            raise InputError(f"{self.nodes_per_rack} must be >= 1", field="--nodes-per-rack")
        if self.sync not in SYNC_MODES:
            raise InputError(f"{self.sync!r} is not one of {', '.join(SYNC_MODES)}",
                             field="--sync")
        if self.window not in WINDOWS:
            raise InputError(f"{self.window!r} is not one of {', '.join(WINDOWS)}",
                             field="--window")
        if self.duration_s is not None and not (self.duration_s >= GRID_MS / 1000.0):
            raise InputError(f"{self.duration_s!r} s is shorter than one 0.1 s step",
                             field="--duration")
        # bounded up front, before any allocation: the work grows with jobs x horizon samples
        if self.gpus > MAX_GPUS:
            raise InputError(f"{self.gpus} GPUs is more than the {MAX_GPUS:,} a site may have "
                             "here", field="--gpus")
        if self.duration_s is not None and self.duration_s > MAX_DURATION_S:
            raise InputError(f"{self.duration_s:g} s is longer than {MAX_DURATION_S:g} s "
                             f"({MAX_DURATION_S / 86400:g} days of 0.1 s samples)",
                             field="--duration")
        if isinstance(self.seed, bool) or not 0 <= self.seed < 2**63:
            raise InputError(f"{self.seed!r} is not a seed (a whole number from 0 to 2^63 - 1)",
                             field="--seed")

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node


MAX_GPUS = 10_000_000
"""Most GPUs a composed site may have (about 10 GW of H100s): beyond it, a typo."""
MAX_JOB_SAMPLES = 2_000_000_000
"""Most job samples (Σ over jobs of their 0.1 s samples in view) a site of jobs over time may
compose: about 6,000 job-days, a few seconds of numpy per 10^9."""
MAX_DURATION_S = 7 * 86400.0
"""Longest horizon (7 days = 6 M samples at 0.1 s, a few hundred MB of profiles)."""


@dataclass
class Job:
    """One job on the site: its source, its nodes and its phase offset (grid steps).

    ``start`` and ``end`` (grid steps; ``end`` ``None``: runs past the horizon) bound the job;
    ``ramp_up`` and ``ramp_down`` are the grid steps of its measured ramps on the site's clock,
    from its start to its steady window and from the end of its steady window to its end
    (``None`` when out of view: a job already running, or one cut by the horizon).
    """

    source: int
    first_node: int
    nodes: int
    offset: int
    common_phase: bool
    start: int = 0
    end: int | None = None
    ramp_up: tuple[int, int] | None = None
    ramp_down: tuple[int, int] | None = None
    name: str = ""
    waited_s: float = 0.0


@dataclass
class FacilityResult:
    """A composed site.

    Attributes:
        config: what was composed.
        sources: the source runs.
        jobs: the jobs placed on the site.
        step_s: profile step (s).
        gpu_w, it_w, facility_w: site power on the 0.1 s grid (W).
        rack_peak_it_w: peak IT power of each rack (W), max_t of idle_w · nodes +
            (1 + fraction) · Σ_rack P_gpu(t).
        design_it_w: IT power of the site with every GPU at its limit (``None`` if unknown).
        limits: what is extrapolated rather than measured (stated in every output).
        notes: other facts about the composition.
        timing: how jobs are laid out in time.
    """

    config: FacilityConfig
    sources: list[Source]
    jobs: list[Job]
    step_s: float
    gpu_w: np.ndarray
    it_w: np.ndarray
    facility_w: np.ndarray
    rack_peak_it_w: np.ndarray
    design_it_w: float | None
    limits: list[str]
    notes: list[str]
    timing: str = "horizon"
    """``horizon`` (every node busy from the start), ``schedule`` or ``arrivals``."""

    @property
    def duration_s(self) -> float:
        return len(self.facility_w) * self.step_s


def _assign_jobs(sources: list[Source], cfg: FacilityConfig) -> list[tuple[int, int]]:
    """(source index, nodes) per job: the run whose node count lags its share most goes next."""
    return assign_jobs([s.share for s in sources], [s.num_devices for s in sources], cfg)


def assign_jobs(shares: Sequence[float], devices: Sequence[int], cfg: FacilityConfig
                ) -> list[tuple[int, int]]:
    """(run index, nodes) per job from the runs' shares and device counts alone.

    Greedy: the run whose node count lags ``share x nodes`` most (the first on a tie) gets the
    next job, of ``ceil(devices / gpus_per_node)`` nodes (fewer when the site is nearly full).
    A run that gets no job never matters to the result, so dropping it from the list changes
    no other run's jobs: ``run_facility`` reads only the runs that get one.
    """
    target = np.array(shares, dtype=np.float64) * cfg.nodes
    need = [max(1, math.ceil(d / cfg.gpus_per_node)) for d in devices]
    have = np.zeros(len(shares))
    jobs = []
    left = cfg.nodes
    while left > 0:
        i = int(np.argmax(target - have))
        k = min(need[i], left)
        jobs.append((i, k))
        have[i] += k
        left -= k
    return jobs


def _timeline(src: Source, horizon: int, offset: int, lockstep: bool) -> np.ndarray:
    """Template indices for samples 0..horizon-1 of one job (index ``src.length``: idle).

    ``lockstep``: the job starts at sample 0 and ends at the horizon: its measured ramp-up, its
    steady block repeated seamlessly, its measured ramp-down (:func:`.steady.job_indices`);
    when it ends before the horizon (by less than one cut spacing) its GPUs are idle after it.
    Otherwise the job is already running: it enters its steady block at ``offset`` and repeats
    it through the horizon (no ramp in view).
    """
    if lockstep:
        idx = job_indices(src.sh, src.length, horizon)[:horizon]
        if len(idx) < horizon:
            idx = np.concatenate([idx, np.full(horizon - len(idx), src.length, dtype=np.int64)])
        return idx
    b0, b1 = src.block
    return b0 + (offset - b0 + np.arange(horizon, dtype=np.int64)) % (b1 - b0)


def _repeats(src: Source, horizon: int, lockstep: bool) -> bool:
    """Whether a job of ``horizon`` samples repeats its steady block (more than measured)."""
    b0, b1 = src.block
    return not lockstep or horizon - b0 - (src.length - b1) > b1 - b0


def compose(sources: list[Source], cfg: FacilityConfig, *, selected: str | None = None
            ) -> FacilityResult:
    """Compose the site's GPU, IT and facility power from the source runs.

    Args:
        sources: from :func:`select_sources` or :func:`source_from_run` (shares sum to 1), or
            the runs of a selection that get a job (their shares of the whole selection).
        cfg: the site.
        selected: the selection the sources come from, stated once in ``limits``
            (``Selection.describe``), when only the runs with a job were read.

    Returns:
        A :class:`FacilityResult`; ``limits`` lists every extrapolation made.

    Raises:
        InputError: no source run.
    """
    if not sources:
        raise InputError("no source run to compose a site from", field="sources")
    step_s = GRID_MS / 1000.0
    longest = max(s.length for s in sources)
    horizon = longest if cfg.duration_s is None else int(round(cfg.duration_s / step_s))
    rng = np.random.default_rng(cfg.seed)
    gpn = cfg.gpus_per_node
    auto_note = None
    if cfg.overhead is None:
        chosen, auto_note = auto_overhead([s.platform for s in sources], gpn)
        cfg = replace(cfg, overhead=chosen)
    ov = cfg.overhead
    assert ov is not None
    racks = math.ceil(cfg.nodes / cfg.nodes_per_rack)
    rack_peak = np.zeros(racks)
    rack_gpu = np.zeros(horizon)  # the rack being filled: nodes are placed in order

    def close_rack(r: int) -> None:
        n_nodes = min(cfg.nodes_per_rack, cfg.nodes - r * cfg.nodes_per_rack)
        rack_peak[r] = n_nodes * ov.idle_w + (1.0 + ov.fraction) * float(rack_gpu.max())
        rack_gpu[:] = 0.0

    site_gpu = np.zeros(horizon)
    common_u = float(rng.random())  # the site-wide phase of "measured" mode (block fraction)
    jobs: list[Job] = []
    templates: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
    node = 0
    tiled = set()
    for si, k_nodes in _assign_jobs(sources, cfg):
        src = sources[si]
        b0, b1 = src.block
        common = False
        if cfg.sync == "lockstep":
            offset = 0
        else:
            rho = max(0.0, src.synchrony_index or 0.0)
            common = cfg.sync == "measured" and float(rng.random()) < math.sqrt(rho)
            u = common_u if common else float(rng.random())
            offset = b0 + min(int(u * (b1 - b0)), b1 - b0 - 1)
        lockstep = cfg.sync == "lockstep"
        if _repeats(src, horizon, lockstep):
            tiled.add(si)
        idx = _timeline(src, horizon, offset, lockstep)
        job = Job(si, node, k_nodes, offset, common)
        if lockstep:
            length = len(job_indices(src.sh, src.length, horizon))
            head, tail = src.sh.steady[0], src.length - src.sh.steady[1]
            job.ramp_up = (0, min(head, horizon))
            if length <= horizon:
                job.end, job.ramp_down = length, (length - tail, length)
        jobs.append(job)
        for kn in range(k_nodes):
            gpus = np.arange(kn * gpn, (kn + 1) * gpn) % src.num_devices
            weights = tuple(np.bincount(gpus, minlength=src.num_devices).tolist())
            key = (si, weights)
            if key not in templates:
                wt = np.asarray(weights, dtype=np.float64)
                templates[key] = np.append(wt @ src.devices, wt @ src.idle_device_w[0])
            series = templates[key][idx]
            site_gpu += series
            rack_gpu += series
            if (node + kn + 1) % cfg.nodes_per_rack == 0 or node + kn + 1 == cfg.nodes:
                close_rack((node + kn) // cfg.nodes_per_rack)
        node += k_nodes

    it_w = cfg.nodes * ov.idle_w + (1.0 + ov.fraction) * site_gpu
    limit = max((s.power_limit_w for s in sources if s.power_limit_w), default=None)
    design = None if limit is None else cfg.nodes * float(ov.node_w(gpn * limit))
    facility_w = cfg.pue.apply(it_w, design)

    limits, notes = _limits(sources, cfg, jobs, tiled, horizon, step_s, selected)
    if auto_note:
        limits.append(f"node overhead chosen {auto_note}")
    return FacilityResult(cfg, sources, jobs, step_s, site_gpu, it_w, facility_w, rack_peak,
                          design, limits, notes)


def _limits(sources: list[Source], cfg: FacilityConfig, jobs: list[Job], tiled: set[int],
            horizon: int, step_s: float, selected: str | None = None
            ) -> tuple[list[str], list[str]]:
    ids = [s.run_id for s in sources]
    of = "" if selected is None else f" (those of the {selected} that get a job)"
    limits = [f"composed, not measured: {cfg.gpus} GPUs from {len(sources)} source run(s)"
              f"{of}: {', '.join(ids)}"]

    def which(selected: list[Source]) -> str:
        """The runs a line is about, named once: every source, or their ids."""
        if len(selected) == len(sources) and len(sources) > 1:
            return "every source run"
        return "run(s) " + ", ".join(s.run_id for s in selected)

    if any(s.cpu_proxy for s in sources):
        limits.insert(0, f"cpu_proxy: {which([s for s in sources if s.cpu_proxy])} are "
                      "modelled from CPU activity, NOT GPU measurements; so is everything "
                      "composed from them")
    if cfg.window == "work":
        cut = [s for s in sources if s.window != "whole trace"]
        limits.append("window: each source replays its work window (idle head and tail "
                      "left out; `work_window_source` of its runs row says how it was found): "
                      + "; ".join(f"{s.run_id} {s.window}" for s in cut)
                      + ("" if len(cut) == len(sources) else
                         f"; {which([s for s in sources if s not in cut])} whole trace "
                         "(no narrower work window)"))
    else:
        limits.append("window: every source replays its whole trace, idle head and tail "
                      "included (--window whole)")
    avg = [s for s in sources if s.one_s_average]
    if avg:
        limits.append(f"1 s averages: {which(avg)} report power_w as a 1 s average "
                      "(power_is_1s_average): oscillation above about 0.5 Hz was filtered away "
                      "by the sensor, not measured, so band_rms_mid_w, band_rms_high_w and "
                      "the 0.2-3 Hz band are under-reported")
    phase = {"lockstep": "lock-step: every job starts at its run's t0 together (one synchronous "
                         "job across the site)",
             "independent": "independent: each job enters its block at a random point "
                            f"(seed {cfg.seed}); real sites are neither fully independent nor "
                            "fully synchronous",
             "measured": "measured: a job joins the common phase with probability "
                         "sqrt(synchrony_index) of its run, else a random point (seed "
                         f"{cfg.seed}); cross-job coupling inferred from cross-device "
                         "correlation inside one run"}[cfg.sync]
    limits.append(f"phase model {phase}")
    if cfg.sync == "measured":
        missing = [s for s in sources if s.synchrony_index is None]
        if missing:
            limits.append(f"synchrony_index null (see the run's metric_notes) for "
                          f"{which(missing)}: its jobs are treated as independent")
        joined = sum(j.common_phase for j in jobs)
        limits.append(f"{joined} of {len(jobs)} jobs drawn into the common phase")
    short = [s for s in sources if s.num_devices % cfg.gpus_per_node]
    if short:
        counts = sorted({s.num_devices for s in short})
        limits.append(f"replicas: a node holds {cfg.gpus_per_node} GPUs but {which(short)} "
                      f"measured {'/'.join(map(str, counts))} device(s), fewer or not a whole "
                      "number of nodes; a job's GPU j replays device j mod n, in phase")
    if tiled:
        parts = [f"{s.run_id} ({s.length * step_s:.1f} s): {s.sh.describe(step_s)}"
                 for i, s in enumerate(sources) if i in tiled]
        how = ("each job runs its measured ramp-up, repeats its steady block with no restart "
               "between repeats, and runs its measured ramp-down at its end only"
               if cfg.sync == "lockstep" else
               "each job is already running: it repeats its steady block with no restart "
               "between repeats (no start or stop in view)")
        limits.append(f"steady repeat: to fill {horizon * step_s:.1f} s, {how}; never "
                      "stretched (times from the start of what each run replays): "
                      + "; ".join(parts))
        idle = [s for i, s in enumerate(sources) if i in tiled and not s.idle_device_w[1]]
        if cfg.sync == "lockstep":
            limits.append("job end: a job leaves its block at the last matching-phase cut "
                          "before its end (the horizon, or its end in a schedule), so it may end "
                          "up to one step or period early; its "
                          "GPUs are idle after it at "
                          + ("their measured idle power" if not idle else
                             f"their lowest measured power ({which(idle)}: no idle measured)"))
    gaps = [s for s in sources if s.gap_s]
    if gaps:
        limits.append("gaps: missing readings bridged by linear interpolation: "
                      + "; ".join(f"{s.run_id} {s.gap_s:g} s" for s in gaps))
    limits.append("0.1 s grid: every job replays its run's devices interpolated onto the "
                  "common 0.1 s grid, so spikes of instantaneous-power GPUs (A100 and older) "
                  "that fall between grid points are partly averaged away; a run's own "
                  "peak_power_w is taken at its sampling instants")
    ov = cfg.overhead
    if ov is not None and ov.name != "none":
        limits.append(f"node overhead model '{ov.name}': {ov.idle_w:.0f} W + {ov.fraction:.3f} x "
                      f"GPU power per node ({ov.source})")
    limits.append(f"{cfg.pue.describe()}, applied to every 0.1 s sample (cooling inertia "
                  "ignored)")
    notes = [f"{len(jobs)} jobs on {cfg.nodes} nodes of {cfg.gpus_per_node} GPUs; "
             f"{math.ceil(cfg.nodes / cfg.nodes_per_rack)} rack(s) of up to {cfg.nodes_per_rack} nodes"]
    short_jobs = [j for j in jobs if j.nodes < max(1, math.ceil(sources[j.source].num_devices
                                                                / cfg.gpus_per_node))]
    if short_jobs:
        notes.append(f"{len(short_jobs)} job(s) cut to the nodes left on the site")
    return limits, notes


def compose_schedule(sources: list[Source], cfg: FacilityConfig, jobs: Sequence[ScheduledJob],
                     source_of: Sequence[int], *, arrivals: Arrivals | None = None,
                     file: str | None = None) -> FacilityResult:
    """Compose a site of jobs over time (a schedule file or drawn arrivals, :mod:`.schedule`).

    Every GPU without a job draws its idle power; job j on k_j nodes adds its composed power
    (:func:`.steady.job_indices`: ramp-up, steady block repeated, ramp-down) minus k_j idle nodes
    while it runs: P_gpu(t) = N · P_idle,node + Σ_j [P_j(t) − k_j · P_idle,node] · 1[t in job j].

    Args:
        sources: the source runs; ``source_of[i]`` is job i's.
        cfg: the site (``duration_s`` ``None``: up to the last job's end).
        jobs: the jobs, each with its start and end (s).
        source_of: the index into ``sources`` of each job's run.
        arrivals: the model the jobs were drawn from (jobs then queue for free nodes).
        file: the schedule file's name, for errors.

    Raises:
        InputError: a job does not fit the site (naming its line in the schedule file).
    """
    if not sources:
        raise InputError("no source run to compose a site from", field="sources")
    step_s = GRID_MS / 1000.0
    horizon = (int(round(max(j.end_s for j in jobs) / step_s)) if cfg.duration_s is None
               else int(round(cfg.duration_s / step_s)))
    gpn = cfg.gpus_per_node
    auto_note = None
    if cfg.overhead is None:
        chosen, auto_note = auto_overhead([sources[i].platform for i in set(source_of)], gpn)
        cfg = replace(cfg, overhead=chosen)
    ov = cfg.overhead
    assert ov is not None
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].start_s)
    placed = place([jobs[i] for i in order], cfg.nodes, gpn, horizon, step_s,
                   queue=arrivals is not None, file=file)
    idle_node = gpn * float(np.median(np.concatenate([s.idle_device_w[0] for s in sources])))
    site_gpu = np.full(horizon, cfg.nodes * idle_node)
    out_jobs: list[Job] = []
    # per job in view: its source, its node templates (weights -> nodes), start, end, length;
    # series are recomputed where needed, never all held at once
    plan: list[tuple[Source, dict[tuple[int, ...], int], int, int, int]] = []
    for i, pl in zip(order, placed, strict=True):
        src = sources[source_of[i]]
        k = len(pl.nodes)
        length = len(job_indices(src.sh, src.length, pl.end - pl.start))
        start, end = pl.start, min(pl.start + length, horizon)
        job = Job(source_of[i], int(pl.nodes[0]), k, 0, False, start=start,
                  name=jobs[i].name, waited_s=pl.waited_s)
        head, tail = src.sh.steady[0], src.length - src.sh.steady[1]
        if start < horizon:
            job.ramp_up = (start, min(start + head, horizon))
        if pl.start + length <= horizon:
            job.end = pl.start + length
            job.ramp_down = (job.end - tail, job.end)
        out_jobs.append(job)
        if start >= horizon:
            continue
        counts: dict[tuple[int, ...], int] = {}
        for kn in range(k):
            w = tuple(np.bincount(np.arange(kn * gpn, (kn + 1) * gpn) % src.num_devices,
                                  minlength=src.num_devices).tolist())
            counts[w] = counts.get(w, 0) + 1
        plan.append((src, counts, start, end, pl.end - pl.start))
    work = sum(end - start for _, _, start, end, _ in plan)
    if work > MAX_JOB_SAMPLES:
        raise InputError(f"{len(plan)} jobs of {work * step_s / 3600:,.0f} job-hours in all "
                         f"need more than {MAX_JOB_SAMPLES:,} samples; fewer or shorter jobs",
                         file=file, field="--arrivals" if arrivals is not None else None)

    def job_gpu_w(j: int) -> np.ndarray:
        """GPU power of planned job j over [start, end) (W), all its nodes."""
        src, counts, start, end, length = plan[j]
        idx = job_indices(src.sh, src.length, length)[:end - start]
        series = np.zeros(end - start)
        for w, c in counts.items():
            series += c * (np.asarray(w, dtype=np.float64) @ src.devices)[idx]
        return series

    for j, (_, _, start, end, _) in enumerate(plan):
        site_gpu[start:end] += job_gpu_w(j) - len(placed[j].nodes) * idle_node
    # racks: each distinct mix of jobs' nodes is summed once (a job's nodes at its mean node)
    racks = math.ceil(cfg.nodes / cfg.nodes_per_rack)
    mixes: dict[tuple[tuple[int, int], ...], list[int]] = {}
    per_rack: list[dict[int, int]] = [{} for _ in range(racks)]
    for j in range(len(plan)):
        for r, c in zip(*np.unique(placed[j].nodes // cfg.nodes_per_rack, return_counts=True),
                        strict=True):
            per_rack[int(r)][j] = per_rack[int(r)].get(j, 0) + int(c)
    for r, in_rack in enumerate(per_rack):
        mixes.setdefault(tuple(sorted(in_rack.items())), []).append(r)
    rack_peak = np.zeros(racks)
    for mix, members in mixes.items():
        excess = np.zeros(horizon)
        for j, c in mix:
            _, _, a, b, _ = plan[j]
            excess[a:b] += c * (job_gpu_w(j) / len(placed[j].nodes) - idle_node)
        for r in members:
            n_nodes = min(cfg.nodes_per_rack, cfg.nodes - r * cfg.nodes_per_rack)
            rack_peak[r] = n_nodes * ov.idle_w + (1.0 + ov.fraction) * (
                n_nodes * idle_node + float(excess.max()))
    it_w = cfg.nodes * ov.idle_w + (1.0 + ov.fraction) * site_gpu
    limit = max((s.power_limit_w for s in sources if s.power_limit_w), default=None)
    design = None if limit is None else cfg.nodes * float(ov.node_w(gpn * limit))
    facility_w = cfg.pue.apply(it_w, design)
    used = sorted(set(source_of))
    limits, notes = _limits(sources, cfg, out_jobs, set(used), horizon, step_s, None)
    what = (f"arrival model: {arrivals.describe()}" if arrivals is not None
            else f"schedule file {file}: {len(jobs)} jobs at the times it gives")
    limits = [line if not line.startswith("phase model") else
              f"jobs over time ({what}); each job's phase is set by its start" for line in limits]
    measured_idle = all(sources[i].idle_device_w[1] for i in used)
    limits.append(f"idle: GPUs without a job draw {idle_node / gpn:.1f} W each, the median "
                  + ("measured idle power of the source runs' devices (outside their work "
                     "windows)" if measured_idle else
                     "of the source runs' devices' idle power, their lowest measured power "
                     "standing in where no idle was measured")
                  + "; a job steps from idle to its work window's first sample in one 0.1 s "
                  "step (what preceded the work window, e.g. model loading, is left out)")
    limits.append("racks: a job's nodes are counted at its mean node (exact when a run's "
                  "devices fill whole nodes)")
    waited = [j for j in out_jobs if j.waited_s > 0]
    if waited:
        notes.append(f"{len(waited)} job(s) waited for free nodes (longest "
                     f"{max(j.waited_s for j in waited):g} s)")
    if auto_note:
        limits.append(f"node overhead chosen {auto_note}")
    return FacilityResult(cfg, sources, out_jobs, step_s, site_gpu, it_w, facility_w, rack_peak,
                          design, limits, notes,
                          timing="arrivals" if arrivals is not None else "schedule")
