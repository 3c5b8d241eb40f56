"""From GPUs to the grid: node, rack and site load profiles composed from measured runs.

A site of ``gpus`` GPUs in nodes of ``gpus_per_node`` is filled with *jobs*. Each job replays one
measured source run; the composed load is what a utility would see, and everything that is not
a measurement is listed in :attr:`FacilityResult.limits` (and so in every output).

Composition (what is measured, what is assumed)
    * **Source template.** A source run's devices on the common 0.1 s grid of
      :func:`llm_powertrace_ds.metrics.node_total` (linear interpolation over the span where all
      devices are present; gaps bridged linearly, the run's ``gap_s`` says how much), cut to
      the run's work window (``metrics.window``: no idle head or tail, which would otherwise
      be repeated with a fake stop/start ramp at every tile) unless ``window="whole"``.
    * **Jobs occupy whole nodes.** A job of a run measured on n devices takes
      ⌈n / gpus_per_node⌉ nodes and all their GPUs; job GPU j replays device (j mod n), in
      phase, so a job keeps the measured cross-device relation of its source run and GPUs beyond
      the n measured ones are in-phase data-parallel replicas (an extrapolation when
      gpus_per_node > n). When the site has fewer nodes left than a job needs, the last job
      is cut to the nodes that remain.
    * **Mix.** Nodes are shared between source runs in proportion to ``mix`` (equal shares when
      no mix is given): jobs are assigned one at a time to the run whose node count lags its
      target most (exact up to one job; deterministic, not sampled).
    * **Jobs start once** (:mod:`.steady`). A job is its run's measured ramp-up, its steady
      *block* repeated with no restart between repeats, and its measured ramp-down, at its start
      and end only. The block is cut at matching phase: whole optimiser steps (first to last
      ``step_begin``), else whole periods of the steady window's autocorrelation, else where the
      next samples match best (the output says which). Nothing is ever stretched or resampled
      in time; dips inside the steady window repeat at their measured offsets.
    * **Jobs over time** (:mod:`.schedule`). A schedule file or a seeded arrival model gives
      each job its start and end; GPUs without a job draw their measured idle power.
    * **Phase (``sync``).** ``lockstep``: every job starts at its run's t0 at the start of the
      horizon (one synchronous job across the site, e.g. a large data-parallel training run).
      ``independent``: each job enters its block at a uniformly random point (seeded).
      ``measured``: each job joins one site-wide common phase with probability √ρ̄ and is
      otherwise independent, ρ̄ = max(0, ``synchrony_index``) of its source run, so two jobs are
      in phase with probability ρ̄ and the expected cross-job correlation equals the measured
      cross-device correlation — the assumption of ``projected_swing_1000_w``.
    * **Node overhead.** Non-GPU node power (CPUs, memory, NICs, fans) =
      idle_w + fraction · P_gpu,node(t) (:class:`NodeOverhead`; presets with their published
      source in :data:`OVERHEAD_PRESETS`).
    * **Facility.** P_facility(t) = PUE(P_IT(t)) · P_IT(t), P_IT = Σ_nodes (P_gpu + overhead), PUE
      a constant or a curve (:class:`Pue`) applied to every 0.1 s sample (no thermal inertia).

Outputs
    Site profiles at 0.1 s, 1 s, 1 min and 15 min (means of complete-or-partial intervals, so
    Σ mean · length is the same energy at every resolution), site metrics computed by
    :func:`llm_powertrace_ds.metrics.compute_run_metrics` on the facility profile and converted
    to kW/MW (see :func:`site_metrics` for the formulas), rack sums, a load-duration curve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import InputError
from .compose import (
    DEFAULT_NODES_PER_RACK,
    SYNC_MODES,
    FacilityConfig,
    FacilityResult,
    Job,
    Sync,
    assign_jobs,
    compose,
    compose_schedule,
)
from .models import (
    DEFAULT_OVERHEAD,
    OVERHEAD_PRESETS,
    NodeOverhead,
    Pue,
    auto_overhead,
    load_pue_curve,
    parse_overhead,
)
from .schedule import Arrivals, ScheduledJob, draw_arrivals, read_schedule
from .site import (
    JSON_SHAPE,
    LDC_PERCENT,
    RESOLUTIONS_S,
    load_duration_curve,
    profiles,
    resample,
    site_metrics,
    to_json,
    write_profile,
)
from .sources import (
    GRID_MS,
    WINDOWS,
    Selection,
    Source,
    default_config,
    load_sources,
    select_rows,
    select_sources,
    source_from_run,
)

CARD_LIMITS: tuple[str, ...] = (
    "They are composed, not measured: every job replays a measured run of this dataset.",
    "Jobs occupy whole nodes; GPUs beyond a run's measured devices replay them in phase "
    "(data-parallel replicas).",
    "The phase between jobs is a model (`lockstep`, `independent`, or `measured`: inferred from "
    "a run's cross-device `synchrony_index`), always stated in the output.",
    "Each run is replayed from its work window (idle head and tail left out); a job runs its "
    "measured ramp-up, repeats its steady window cut at matching phase (whole steps, else whole "
    "periods of its autocorrelation) with no restart between repeats, and runs its measured "
    "ramp-down at its end only; nothing is stretched.",
    "Sites of jobs over time follow a schedule file or a seeded arrival model (stated in the "
    "output); GPUs without a job draw the idle power measured outside the runs' work windows.",
    "Runs whose power is a 1 s average (`power_is_1s_average`) under-report oscillation above "
    "about 0.5 Hz: the composed band metrics inherit that.",
    "Non-GPU node power is an idle + proportional model whose presets rest on vendor maximums or "
    "one published measurement (below); PUE is a constant or a user-given curve, applied without "
    "cooling inertia.",
    "Sources on the `cpu_proxy` split are modelled CPU activity, not GPU data; so is anything "
    "composed from them.",
)
"""What the dataset card says about composed site profiles (also listed in every output)."""

__all__ = [
    "CARD_LIMITS",
    "DEFAULT_NODES_PER_RACK", "DEFAULT_OVERHEAD", "GRID_MS", "JSON_SHAPE", "LDC_PERCENT",
    "OVERHEAD_PRESETS", "RESOLUTIONS_S", "SYNC_MODES", "FacilityConfig", "FacilityResult", "Job",
    "NodeOverhead", "Pue", "Source", "Sync", "WINDOWS", "auto_overhead", "compose",
    "default_config", "load_duration_curve",
    "load_pue_curve", "parse_overhead", "profiles", "resample", "run_facility", "select_sources",
    "Selection", "assign_jobs", "load_sources", "select_rows",
    "site_metrics", "source_from_run", "to_json", "write_profile",
    "Arrivals", "ScheduledJob", "compose_schedule", "draw_arrivals", "read_schedule",
]


def _scheduled(root: str | Path, cfg: FacilityConfig, selection: Selection,
               schedule: str | Path | None, arrivals: Arrivals | None) -> FacilityResult:
    """A site of jobs over time: a schedule file's jobs or drawn arrivals (:mod:`.schedule`)."""
    ids = [r["run_id"] for r in selection.rows]
    file = None
    if schedule is not None:
        file = Path(schedule).name
        jobs = read_schedule(schedule)
        everything = select_rows(root, config=selection.config)
        by_id = {r["run_id"]: r for r in everything.rows}
        picked: list[str] = []
        for job in jobs:
            kind, _, what = job.pick.partition(":")
            if kind == "trace":
                if what not in by_id:
                    raise InputError(f"value {what!r} is not a run of {selection.config}",
                                     file=file, line=job.line, field="trace")
                picked.append(what)
                continue
            filters = [f.strip() for f in what.split(",") if f.strip()]
            try:
                found = select_rows(root, config=selection.config, where=filters).rows
            except InputError as exc:
                raise InputError(f"value {what!r}: {exc.reason}", file=file, line=job.line,
                                 field="selection") from None
            picked.append(found[0]["run_id"])
        rows = [by_id[i] for i in dict.fromkeys(picked)]
    else:
        assert arrivals is not None and cfg.duration_s is not None
        jobs = draw_arrivals(arrivals, cfg.duration_s, cfg.gpus_per_node,
                             [f"trace:{i}" for i in ids], selection.shares)
        picked = [j.pick.partition(":")[2] for j in jobs]
        rows = [r for r in selection.rows if r["run_id"] in set(picked)]
    chosen = Selection(selection.config, rows, [1.0 / len(rows)] * len(rows), selection.where)
    sources = load_sources(root, chosen, window=cfg.window)
    index = {s.run_id: i for i, s in enumerate(sources)}
    return compose_schedule(sources, cfg, jobs, [index[p] for p in picked], arrivals=arrivals,
                            file=file)


def run_facility(root: str | Path, cfg: FacilityConfig, *, config: str | None = None,
                 where: Sequence[str] = (), mix: Mapping[str, float] | None = None,
                 schedule: str | Path | None = None, arrivals: Arrivals | None = None
                 ) -> FacilityResult:
    """Select the source runs of a dataset folder and compose the site (the CLI's one call).

    ``config`` ``None``: the runs table the folder holds (``finetune_runs`` first). Each run
    is replayed from its work window unless ``cfg.window`` is ``whole``. ``schedule`` (a file)
    or ``arrivals`` (a model, with ``cfg.duration_s``) compose a site of jobs over time instead
    of every node running from the start (:func:`compose_schedule`).

    Example:
        >>> cfg = FacilityConfig(gpus=1024, sync="independent", duration_s=3600)  # doctest: +SKIP
        >>> res = run_facility("llm-powertrace", cfg)  # doctest: +SKIP
        >>> to_json(res)["metrics"]["demand_peak_15min_kw"]  # doctest: +SKIP
    """
    selection = select_rows(root, config=config, where=where, mix=mix)
    if schedule is not None or arrivals is not None:
        if arrivals is not None and cfg.duration_s is None:
            raise InputError("an arrival model needs a horizon", field="--duration")
        if arrivals is not None and arrivals.gpus_max > cfg.gpus:
            raise InputError(f"jobs of up to {arrivals.gpus_max} GPUs do not fit a site of "
                             f"{cfg.gpus}", field="--job-gpus")
        return _scheduled(root, cfg, selection, schedule, arrivals)
    devices = [int(r.get("num_gpus") or 1) for r in selection.rows]
    with_jobs = sorted({i for i, _ in assign_jobs(selection.shares, devices, cfg)})
    sources = load_sources(root, selection, with_jobs, need_synchrony=cfg.sync == "measured",
                           window=cfg.window)
    if [s.num_devices for s in sources] != [devices[i] for i in with_jobs]:
        # a runs row's num_gpus differs from its trace's devices: assign from the traces
        sources = load_sources(root, selection, need_synchrony=cfg.sync == "measured",
                               window=cfg.window)
    result = (compose(sources, cfg) if len(sources) == len(selection.rows)
              else compose(sources, cfg, selected=selection.describe()))
    if selection.summary_only:
        result.limits.insert(1, f"{selection.summary_only} summary-only run(s) of "
                             f"{selection.config} left out: published summaries without a power "
                             "trace cannot be replayed")
    return result
