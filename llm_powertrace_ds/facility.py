"""From GPUs to the grid: node, rack and site load profiles composed from measured runs.

A site of ``gpus`` GPUs in nodes of ``gpus_per_node`` is filled with *jobs*. Each job replays one
measured source run; the composed load is what a utility would see, and everything that is not
a measurement is listed in :attr:`FacilityResult.limits` (and so in every output).

Composition (what is measured, what is assumed)
    * **Source template.** A source run's devices on the common 0.1 s grid of
      :func:`llm_powertrace_ds.metrics.node_total` (linear interpolation over the span where all
      devices are present; gaps bridged linearly, the run's ``gap_s`` says how much).
    * **Jobs occupy whole nodes.** A job of a run measured on n devices takes
      ⌈n / gpus_per_node⌉ nodes and all their GPUs; job GPU j replays device (j mod n), in
      phase, so a job keeps the measured cross-device relation of its source run and GPUs beyond
      the n measured ones are in-phase data-parallel replicas (an extrapolation when
      gpus_per_node > n). When the site has fewer nodes left than a job needs, the last job
      is cut to the nodes that remain.
    * **Mix.** Nodes are shared between source runs in proportion to ``mix`` (equal shares when
      no mix is given): jobs are assigned one at a time to the run whose node count lags its
      target most (exact up to one job; deterministic, not sampled).
    * **Tiling.** A horizon longer than a run is filled by repeating the run's *block*: from the
      first to the last ``step_begin`` event (whole optimiser steps), else the ``steady_begin`` /
      ``steady_end`` window, else the whole run (the output says which). Tiles join at step
      boundaries; nothing is ever stretched or resampled in time.
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

import csv
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from . import metrics as metrics_mod
from . import schema
from .errors import InputError
from .run import DeviceSeries, Run

Sync = Literal["lockstep", "independent", "measured"]
SYNC_MODES: tuple[str, ...] = ("lockstep", "independent", "measured")
GRID_MS = metrics_mod.GRID_MS
"""Step of every composed profile (ms): the metrics' common grid."""
RESOLUTIONS_S: tuple[float, ...] = (0.1, 1.0, 60.0, 900.0)
"""Profile resolutions (s): the sampler's grid, 1 s, 1 min, and the 15-min utility demand interval."""
RESOLUTION_NAMES = {0.1: "100ms", 1.0: "1s", 60.0: "1min", 900.0: "15min"}
LDC_PERCENT: tuple[float, ...] = (0, 1, 5, 10, 25, 50, 75, 90, 95, 99, 100)
"""Points of the load-duration curve: the load exceeded during this % of the horizon."""
DEFAULT_NODES_PER_RACK = 4
"""Nodes per rack when not given: four 8-GPU DGX H100 systems per rack, the rack of NVIDIA's
DGX SuperPOD reference architecture (an assumption for other platforms; override it)."""
JSON_SHAPE = "llm-powertrace/facility/1"


# ---------------------------------------------------------------------------------------------
# Node overhead and PUE models
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeOverhead:
    """Non-GPU power of one node: P_other(t) = idle_w + fraction · P_gpu,node(t).

    Attributes:
        name: preset name, ``custom`` or ``none``.
        idle_w: constant part per node (W).
        fraction: proportional part, W of non-GPU power per W of GPU power.
        source: where the numbers come from (printed in every output).
    """

    name: str
    idle_w: float
    fraction: float
    source: str

    def __post_init__(self) -> None:
        if not (math.isfinite(self.idle_w) and self.idle_w >= 0):
            raise InputError(f"idle power {self.idle_w!r} W must be >= 0", field="--node-overhead")
        if not (math.isfinite(self.fraction) and self.fraction >= 0):
            raise InputError(f"fraction {self.fraction!r} must be >= 0", field="--node-overhead")

    def node_w(self, gpu_w: np.ndarray | float) -> np.ndarray | float:
        """Node IT power (W) for a node GPU power (W): P_gpu + idle_w + fraction · P_gpu."""
        return self.idle_w + (1.0 + self.fraction) * gpu_w


def _split_preset(name: str, system_max_w: float, gpus: int, gpu_max_w: float,
                  source: str) -> NodeOverhead:
    """Half of the non-GPU headroom at full GPU power as constant, half proportional."""
    headroom = system_max_w - gpus * gpu_max_w
    return NodeOverhead(name, headroom / 2, (headroom / 2) / (gpus * gpu_max_w),
                        source + f" -> non-GPU {headroom:.0f} W at full GPU power ({gpus} x "
                        f"{gpu_max_w:.0f} W); split half constant, half proportional to GPU "
                        "power (the split is an assumption, not a published figure)")


OVERHEAD_PRESETS: dict[str, NodeOverhead] = {
    "none": NodeOverhead("none", 0.0, 0.0, "no non-GPU power (GPUs only)"),
    "dgx-h100": _split_preset(
        "dgx-h100", 10_200.0, 8, 700.0,
        "NVIDIA DGX H100 user guide: system power 10.2 kW max with 8 x H100 SXM (700 W)"),
    "hgx-h100-measured": _split_preset(
        "hgx-h100-measured", 8_400.0, 8, 700.0,
        "Latif et al., 'Single-node power demand during AI training: measurements on an 8-GPU "
        "NVIDIA H100 system', IEEE Access 13 (2025) 61740: max observed 8.4 kW, 18 % below "
        "the rated 10.2 kW"),
    "dgx-a100": _split_preset(
        "dgx-a100", 6_500.0, 8, 400.0,
        "NVIDIA DGX A100 user guide: system power 6.5 kW max with 8 x A100 SXM4 (400 W)"),
}
"""Named node-overhead models. Presets describe an 8-GPU node; with another ``gpus_per_node``
the constant part is scaled by gpus_per_node / 8."""
DEFAULT_OVERHEAD = "auto"
"""``auto``: ``dgx-a100`` when every source run is on an A100 platform, else ``dgx-h100``
(the output says so when a platform has no preset of its own)."""


def auto_overhead(platforms: Sequence[str], gpus_per_node: int = 8) -> tuple[NodeOverhead, str]:
    """The preset for the source runs' platforms, and a sentence saying how it was chosen."""
    plats = sorted(set(platforms))
    if plats and all(p.startswith("a100") for p in plats):
        return parse_overhead("dgx-a100", gpus_per_node), "auto: A100 platform"
    own = [p for p in plats if not p.startswith(("h100", "h200"))]
    why = ("auto: H100/H200 platform" if not own else
           f"auto: no preset for platform(s) {', '.join(own)}; the DGX H100 figures stand in")
    return parse_overhead("dgx-h100", gpus_per_node), why


def parse_overhead(text: str, gpus_per_node: int = 8) -> NodeOverhead:
    """A preset name (:data:`OVERHEAD_PRESETS`) or ``IDLE_W:FRACTION`` (e.g. ``1500:0.3``).

    ``auto`` is resolved from the source runs' platforms by :func:`auto_overhead` (this function
    returns the ``dgx-h100`` preset for it).

    Raises:
        InputError: unknown name, or numbers that do not parse or are negative.
    """
    text = text.strip()
    if text == "auto":
        text = "dgx-h100"
    if text in OVERHEAD_PRESETS:
        preset = OVERHEAD_PRESETS[text]
        if gpus_per_node == 8 or preset.idle_w == 0:
            return preset
        scale = gpus_per_node / 8
        return NodeOverhead(preset.name, preset.idle_w * scale, preset.fraction,
                            preset.source + f"; constant part scaled by {gpus_per_node}/8 GPUs")
    idle, sep, frac = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return NodeOverhead("custom", float(idle), float(frac),
                            f"user-given: {float(idle):g} W per node + {float(frac):g} x GPU power")
    except ValueError:
        raise InputError(f"{text!r} is neither a preset ({', '.join(OVERHEAD_PRESETS)}) nor "
                         "IDLE_W:FRACTION (e.g. 1500:0.3)", field="--node-overhead") from None


@dataclass(frozen=True)
class Pue:
    """Power usage effectiveness: P_facility = PUE · P_IT.

    Attributes:
        constant: a constant PUE (≥ 1), or ``None`` for a curve.
        x: curve abscissa, increasing (IT load fraction of design IT power, or IT power in kW).
        y: PUE at each x (≥ 1); linear interpolation, held constant beyond the ends.
        x_name: ``it_load_fraction`` or ``it_power_kw``.
        source: the file or the constant (printed in every output).
    """

    constant: float | None = 1.0
    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()
    x_name: str = ""
    source: str = "constant"

    def __post_init__(self) -> None:
        values = (self.constant,) if self.constant is not None else self.y
        if not values or any(not (math.isfinite(v) and v >= 1.0) for v in values):
            raise InputError(f"PUE must be >= 1, got {values!r}", field="--pue")
        if self.constant is None and (len(self.x) != len(self.y) or
                                      any(b <= a for a, b in zip(self.x, self.x[1:]))):
            raise InputError("the PUE curve's first column must increase", field="--pue-curve")

    def apply(self, it_w: np.ndarray, design_it_w: float | None) -> np.ndarray:
        """Facility power (W) for IT power ``it_w`` (W); ``design_it_w`` for load fractions."""
        if self.constant is not None:
            return it_w * self.constant
        if self.x_name == "it_load_fraction":
            if not design_it_w:
                raise InputError("a PUE curve over it_load_fraction needs the GPUs' power limit, "
                                 "which the source runs do not report", field="--pue-curve")
            xs = it_w / design_it_w
        else:
            xs = it_w / 1000.0
        return it_w * np.interp(xs, self.x, self.y)

    def describe(self) -> str:
        if self.constant is not None:
            return f"constant PUE {self.constant:g}"
        return f"PUE curve over {self.x_name} from {self.source} ({len(self.x)} points)"


def load_pue_curve(path: str | Path) -> Pue:
    """Read a PUE curve: CSV with header ``it_load_fraction,pue`` or ``it_power_kw,pue``.

    Raises:
        InputError: naming the file, the line, the field and the value.
    """
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=path.name) from None
    header = [c.strip() for c in rows[0]] if rows else []
    if len(header) != 2 or header[1] != "pue" or header[0] not in ("it_load_fraction",
                                                                     "it_power_kw"):
        raise InputError(f"header {','.join(header)!r} is not 'it_load_fraction,pue' or "
                         "'it_power_kw,pue'", file=path.name, line=1)
    xs, ys = [], []
    for i, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        for name, cell in zip(header, row + [""] * (2 - len(row))):
            try:
                value = float(cell)
            except ValueError:
                raise InputError(f"value {cell!r} is not a number", file=path.name, line=i,
                                 field=name) from None
            if not math.isfinite(value) or value < (1.0 if name == "pue" else 0.0):
                raise InputError(f"value {cell!r} is out of range", file=path.name, line=i,
                                 field=name)
        xs.append(float(row[0]))
        ys.append(float(row[1]))
    if not xs:
        raise InputError("no data rows", file=path.name)
    order = np.argsort(xs, kind="stable")
    x = tuple(float(xs[i]) for i in order)
    if any(b <= a for a, b in zip(x, x[1:])):
        raise InputError("a load value appears twice", file=path.name, field=header[0])
    return Pue(None, x, tuple(float(ys[i]) for i in order), header[0], path.name)


# ---------------------------------------------------------------------------------------------
# Configuration and sources
# ---------------------------------------------------------------------------------------------

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
    """

    gpus: int
    gpus_per_node: int = 8
    nodes_per_rack: int = DEFAULT_NODES_PER_RACK
    overhead: NodeOverhead | None = None
    pue: Pue = field(default_factory=Pue)
    sync: Sync = "lockstep"
    duration_s: float | None = None
    seed: int = 0

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
        if self.duration_s is not None and not (self.duration_s >= GRID_MS / 1000.0):
            raise InputError(f"{self.duration_s!r} s is shorter than one 0.1 s step",
                             field="--duration")

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node


@dataclass
class Source:
    """One source run, ready to replay.

    Attributes:
        run_id, platform: the run.
        devices: float64 (n_devices, T) power on the common 0.1 s grid (W).
        block: (b0, b1) grid indices of the tiled block; ``tile`` says how it was found.
        share: its share of the site's nodes.
        synchrony_index: the run's ρ̄ (``None`` when it has fewer than 2 devices).
        power_limit_w: the largest device power limit, when reported.
        cpu_proxy: the run is a ``cpu_proxy`` model, not a GPU measurement.
        gap_s: seconds of the run bridged across missing readings.
    """

    run_id: str
    platform: str
    devices: np.ndarray
    block: tuple[int, int]
    tile: str
    share: float = 1.0
    synchrony_index: float | None = None
    power_limit_w: float | None = None
    cpu_proxy: bool = False
    gap_s: float | None = None

    @property
    def num_devices(self) -> int:
        return int(self.devices.shape[0])

    @property
    def length(self) -> int:
        return int(self.devices.shape[1])


def _first_rank(run: Run, kind: str) -> list[int]:
    """Times (ms) of one event kind: run-level events, else the lowest rank's."""
    evs = [e for e in run.events if e.kind == kind]
    ranks = {e.rank for e in evs}
    if evs and None not in ranks:
        low = min(r for r in ranks if r is not None)
        evs = [e for e in evs if e.rank == low]
    elif evs:
        evs = [e for e in evs if e.rank is None]
    return sorted({int(e.t_ms) for e in evs})


def source_from_run(run: Run, *, share: float = 1.0,
                    synchrony_index: float | None = None) -> Source:
    """Build a :class:`Source` from a run (its devices on the 0.1 s grid and its tile block).

    Raises:
        InputError: the run's devices share no common span of at least one grid step.
    """
    al = metrics_mod.node_total(run, GRID_MS)
    if al is None:
        raise InputError("its devices share no common span of power readings",
                         field=f"run {run.run_id}")
    devices = np.vstack(al.devices)
    grid = al.grid_ms
    n = len(grid)
    steps = _first_rank(run, "step_begin")
    idx = np.searchsorted(grid, steps) if steps else np.zeros(0, dtype=np.int64)
    idx = idx[idx < n] if idx.size else idx
    block, tile = (0, n), "whole run (no step or steady-state events)"
    if idx.size >= 2 and idx[-1] > idx[0]:
        block, tile = (int(idx[0]), int(idx[-1])), f"{idx.size - 1} whole steps"
    else:
        begins = _first_rank(run, "steady_begin")
        ends = [e for e in _first_rank(run, "steady_end") if begins and e > begins[0]]
        if begins and ends:
            b0 = int(np.searchsorted(grid, begins[0]))
            b1 = min(int(np.searchsorted(grid, ends[0])), n)
            if b1 - b0 >= 2:
                block, tile = (b0, b1), "steady-state window"
    limits = [d.power_limit_w or d.default_power_limit_w for d in run.devices]
    known = [float(x) for x in limits if x]
    return Source(run.run_id, run.platform, devices, block, tile, share, synchrony_index,
                  max(known) if known else None, "cpu_proxy" in run.flags,
                  None)


def _matches(row: Mapping[str, Any], axis: str, value: str) -> bool:
    have = row.get(axis)
    if have is None:
        return value.lower() in ("none", "null", "")
    if str(have) == value:
        return True
    try:
        return math.isclose(float(have), float(value), rel_tol=1e-9)
    except (TypeError, ValueError):
        return False


def select_sources(root: str | Path, *, config: str = "finetune_runs",
                   where: Sequence[str] = (), mix: Mapping[str, float] | None = None,
                   need_synchrony: bool = False) -> list[Source]:
    """Source runs of a dataset folder, through the library's readers.

    Args:
        root: dataset folder.
        config: ``finetune_runs`` or ``inference_runs``.
        where: ``AXIS=VALUE`` filters on the runs table (all must hold).
        mix: ``{run_id: share}``; ``None``: every selected run, equal shares.
        need_synchrony: compute ``synchrony_index`` for runs whose row lacks it.

    Raises:
        InputError: unknown config or axis, a bad filter or share, no run selected.
    """
    from .shards import iter_rows, read_run

    if config not in schema.RUNS_CONFIGS:
        raise InputError(f"{config!r} is not one of {', '.join(schema.RUNS_CONFIGS)}",
                         field="--config")
    rows = list(iter_rows(root, config))
    columns = set(rows[0]) if rows else set()
    for item in where:
        axis, sep, value = item.partition("=")
        if not sep or not axis.strip():
            raise InputError(f"{item!r} is not AXIS=VALUE", field="--where")
        if rows and axis.strip() not in columns:
            raise InputError(f"axis {axis.strip()!r} is not a column of {config}",
                             field="--where")
        rows = [r for r in rows if _matches(r, axis.strip(), value.strip())]
    by_id = {r["run_id"]: r for r in rows}
    if mix:
        for run_id, share in mix.items():
            if run_id not in by_id:
                raise InputError(f"run {run_id!r} is not among the selected runs of {config}",
                                 field="--mix")
            if not (math.isfinite(share) and share > 0):
                raise InputError(f"share {share!r} of run {run_id!r} must be > 0", field="--mix")
        chosen = [(by_id[r], float(s)) for r, s in mix.items()]
    else:
        chosen = [(r, 1.0) for r in sorted(rows, key=lambda r: r["run_id"])]
    if not chosen:
        raise InputError(f"no run of {config} in {root} matches "
                         f"{' '.join(where) if where else 'the selection'}", field="--where")
    total = sum(s for _, s in chosen)
    out = []
    for row, share in chosen:
        run = read_run(root, row["run_id"])
        rho = row.get("synchrony_index")
        if rho is None and need_synchrony and len(run.devices) >= 2:
            rho = metrics_mod.compute_run_metrics(run)["synchrony_index"]
        src = source_from_run(run, share=share / total, synchrony_index=rho)
        src.gap_s = row.get("gap_s")
        out.append(src)
    return out


# ---------------------------------------------------------------------------------------------
# Composition
# ---------------------------------------------------------------------------------------------

@dataclass
class Job:
    """One job on the site: its source, its nodes and its phase offset (grid steps)."""

    source: int
    first_node: int
    nodes: int
    offset: int
    common_phase: bool


@dataclass
class FacilityResult:
    """A composed site.

    Attributes:
        config: what was composed.
        sources: the source runs.
        jobs: the jobs placed on the site.
        step_s: profile step (s).
        gpu_w, it_w, facility_w: site power on the 0.1 s grid (W).
        rack_it_w: IT power per rack (racks × samples, W).
        design_it_w: IT power of the site with every GPU at its limit (``None`` if unknown).
        limits: what is extrapolated rather than measured (stated in every output).
        notes: other facts about the composition.
    """

    config: FacilityConfig
    sources: list[Source]
    jobs: list[Job]
    step_s: float
    gpu_w: np.ndarray
    it_w: np.ndarray
    facility_w: np.ndarray
    rack_it_w: np.ndarray
    design_it_w: float | None
    limits: list[str]
    notes: list[str]

    @property
    def duration_s(self) -> float:
        return len(self.facility_w) * self.step_s


def _assign_jobs(sources: list[Source], cfg: FacilityConfig) -> list[tuple[int, int]]:
    """(source index, nodes) per job: the run whose node count lags its share most goes next."""
    target = np.array([s.share for s in sources]) * cfg.nodes
    need = [max(1, math.ceil(s.num_devices / cfg.gpus_per_node)) for s in sources]
    have = np.zeros(len(sources))
    jobs = []
    left = cfg.nodes
    while left > 0:
        i = int(np.argmax(target - have))
        k = min(need[i], left)
        jobs.append((i, k))
        have[i] += k
        left -= k
    return jobs


def _timeline(src: Source, horizon: int, offset: int, plain: bool) -> np.ndarray:
    """Grid indices into the source for samples 0..horizon-1 of a job entering at ``offset``.

    ``plain``: the run is replayed from t0 as measured (it covers the horizon). Otherwise
    indices below the block's end replay the run, later ones repeat the block [b0, b1).
    """
    k = np.arange(offset, offset + horizon, dtype=np.int64)
    if plain:
        return k
    b0, b1 = src.block
    length = b1 - b0
    late = k >= b1
    k[late] = b0 + (k[late] - b0) % length
    return k


def compose(sources: list[Source], cfg: FacilityConfig) -> FacilityResult:
    """Compose the site's GPU, IT and facility power from the source runs.

    Args:
        sources: from :func:`select_sources` or :func:`source_from_run` (shares sum to 1).
        cfg: the site.

    Returns:
        A :class:`FacilityResult`; ``limits`` lists every extrapolation made.
    """
    step_s = GRID_MS / 1000.0
    longest = max(s.length for s in sources)
    horizon = longest if cfg.duration_s is None else int(round(cfg.duration_s / step_s))
    rng = np.random.default_rng(cfg.seed)
    gpn = cfg.gpus_per_node
    racks = math.ceil(cfg.nodes / cfg.nodes_per_rack)
    rack_dtype = np.float64 if racks * horizon <= 20_000_000 else np.float32
    rack_gpu = np.zeros((racks, horizon), dtype=rack_dtype)
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
        plain = cfg.sync == "lockstep" and horizon <= src.length
        if not plain:
            tiled.add(si)
        idx = _timeline(src, horizon, offset, plain)
        jobs.append(Job(si, node, k_nodes, offset, common))
        for kn in range(k_nodes):
            gpus = np.arange(kn * gpn, (kn + 1) * gpn) % src.num_devices
            weights = tuple(np.bincount(gpus, minlength=src.num_devices).tolist())
            key = (si, weights)
            if key not in templates:
                templates[key] = np.asarray(weights, dtype=np.float64) @ src.devices
            series = templates[key][idx]
            site_gpu += series
            rack_gpu[(node + kn) // cfg.nodes_per_rack] += series
        node += k_nodes

    auto_note = None
    if cfg.overhead is None:
        chosen, auto_note = auto_overhead([s.platform for s in sources], gpn)
        cfg = replace(cfg, overhead=chosen)
    ov = cfg.overhead
    assert ov is not None
    nodes_in_rack = np.full(racks, cfg.nodes_per_rack, dtype=np.float64)
    nodes_in_rack[-1] = cfg.nodes - cfg.nodes_per_rack * (racks - 1)
    rack_it = rack_gpu * (1.0 + ov.fraction)
    rack_it += (nodes_in_rack * ov.idle_w)[:, None]
    it_w = cfg.nodes * ov.idle_w + (1.0 + ov.fraction) * site_gpu
    limit = max((s.power_limit_w for s in sources if s.power_limit_w), default=None)
    design = None if limit is None else cfg.nodes * float(ov.node_w(gpn * limit))
    facility_w = cfg.pue.apply(it_w, design)

    limits, notes = _limits(sources, cfg, jobs, tiled, horizon, step_s)
    if auto_note:
        limits.append(f"node overhead chosen {auto_note}")
    return FacilityResult(cfg, sources, jobs, step_s, site_gpu, it_w, facility_w, rack_it,
                          design, limits, notes)


def _limits(sources: list[Source], cfg: FacilityConfig, jobs: list[Job], tiled: set[int],
            horizon: int, step_s: float) -> tuple[list[str], list[str]]:
    limits = [f"composed, not measured: {cfg.gpus} GPUs from {len(sources)} measured run(s)"]
    if any(s.cpu_proxy for s in sources):
        names = ", ".join(s.run_id for s in sources if s.cpu_proxy)
        limits.insert(0, f"cpu_proxy: source run(s) {names} are modelled from CPU activity, "
                      "NOT GPU measurements; so is everything composed from them")
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
        missing = [s.run_id for s in sources if s.synchrony_index is None]
        if missing:
            limits.append(f"synchrony_index unknown (fewer than 2 devices or a flat trace) for "
                          f"{', '.join(missing)}: its jobs are treated as independent")
        joined = sum(j.common_phase for j in jobs)
        limits.append(f"{joined} of {len(jobs)} jobs drawn into the common phase")
    for i, s in enumerate(sources):
        if s.num_devices < cfg.gpus_per_node or s.num_devices % cfg.gpus_per_node:
            limits.append(f"replicas: run {s.run_id} measured {s.num_devices} device(s); a "
                          f"job's GPU j replays device j mod {s.num_devices} in phase")
        if i in tiled:
            b0, b1 = s.block
            limits.append(f"tiling: run {s.run_id} ({s.length * step_s:.1f} s) repeats its "
                          f"{s.tile} [{b0 * step_s:.1f} s, {b1 * step_s:.1f} s) to fill "
                          f"{horizon * step_s:.1f} s (joined at block boundaries, never "
                          "stretched)")
        if s.gap_s:
            limits.append(f"gaps: run {s.run_id} bridges {s.gap_s:g} s of missing readings "
                          "by linear interpolation")
    ov = cfg.overhead
    if ov is not None and ov.name != "none":
        limits.append(f"node overhead model '{ov.name}': {ov.idle_w:.0f} W + {ov.fraction:.3f} x "
                      f"GPU power per node ({ov.source})")
    limits.append(f"{cfg.pue.describe()}, applied to every 0.1 s sample (cooling inertia "
                  "ignored)")
    notes = [f"{len(jobs)} jobs on {cfg.nodes} nodes of {cfg.gpus_per_node} GPUs; "
             f"{math.ceil(cfg.nodes / cfg.nodes_per_rack)} racks of {cfg.nodes_per_rack} nodes"]
    cut = [j for j in jobs if j.nodes < max(1, math.ceil(sources[j.source].num_devices
                                                             / cfg.gpus_per_node))]
    if cut:
        notes.append(f"{len(cut)} job(s) cut to the nodes left on the site")
    return limits, notes


# ---------------------------------------------------------------------------------------------
# Profiles and metrics
# ---------------------------------------------------------------------------------------------

def resample(power_w: np.ndarray, step_s: float, resolution_s: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Interval means: (start_s, length_s, mean_w) of consecutive ``resolution_s`` intervals.

    P̄_k = mean of the 0.1 s samples in [k·R, (k+1)·R); the last interval may be partial (its
    length says so), so Σ_k P̄_k · length_k = Σ_i P_i · Δ at every resolution (energy is
    conserved).
    """
    w = max(1, int(round(resolution_s / step_s)))
    n = len(power_w)
    starts = np.arange(0, n, w)
    counts = np.minimum(w, n - starts)
    sums = np.add.reduceat(power_w, starts) if n else np.zeros(0)
    return starts * step_s, counts * step_s, sums / counts


def _interval_ramps(mean_w: np.ndarray, length_s: np.ndarray, resolution_s: float
                    ) -> tuple[float | None, float | None]:
    """Largest rise and fall between consecutive complete interval means (W per interval)."""
    full = mean_w[np.isclose(length_s, resolution_s)]
    if len(full) < 2:
        return None, None
    d = np.diff(full)
    return max(0.0, float(d.max())), max(0.0, float(-d.min()))


def site_metrics(result: FacilityResult) -> tuple[dict[str, Any], list[str]]:
    """Grid metrics of the site's facility profile, in kW and MW.

    The 0.1 s profile is passed as one series to
    :func:`llm_powertrace_ds.metrics.compute_run_metrics` (its formulas, in ``metric_formulas()``),
    then converted:

    - ``energy_mwh`` = Σ_i P_i · Δ / 3.6e9 (Δ = 0.1 s); the same at every resolution.
    - ``mean_kw``, ``peak_kw``, ``p5_kw`` … ``p99_kw`` = ``mean_power_w``, ``peak_power_w``, … / 1000.
    - ``par`` = peak_kw / mean_kw; ``load_factor`` = mean_kw / peak_kw.
    - ``swing_kw`` = p95 − p5 of the 0.1 s profile (``swing_w`` / 1000).
    - ``ramp_up_max_1s_mw_per_s``, ``ramp_down_max_1s_mw_per_s``, ``ramp_abs_p99_1s_mw_per_s`` =
      the metrics' 1 s ramps r(t) = (P(t + 1 s) − P(t)) / 1 s on the 0.1 s grid, / 1e6.
    - ``ramp_up_max_1min_mw_per_min``, ``ramp_down_max_1min_mw_per_min`` = largest rise / fall
      between consecutive complete 1-min means, / 1e6 (likewise ``_15min_mw_per_15min``).
    - ``band_rms_low_kw``, ``band_rms_mid_kw``, ``band_rms_high_kw`` = RMS of the Welch spectrum
      in 0.1–1, 1–2.5, 2.5–5 Hz, / 1000; ``dominant_freq_hz`` its peak.
    - ``peak_1min_kw`` = max complete 1-min mean; ``demand_peak_15min_kw`` = max complete 15-min
      mean, the utility's billing demand (null when the horizon holds no complete interval).
    - ``it_mean_kw``, ``it_peak_kw``, ``gpu_mean_kw``, ``gpu_peak_kw`` = the same for IT and GPU
      power; ``rack_peak_kw`` = max over racks and samples of rack IT power.

    Returns:
        (metrics, notes): a metric that cannot be computed is ``None`` with its reason in notes.
    """
    step = result.step_s
    n = len(result.facility_w)
    t_ms = np.arange(n, dtype=np.int64) * GRID_MS
    run = Run({"run_id": "site", "workload": "finetune", "platform": "site",
               "sample_period_ms": float(GRID_MS)},
              [DeviceSeries(0, t_ms, {"power_w": result.facility_w})])
    m = metrics_mod.compute_run_metrics(run)
    notes = [n_ for n_ in m["metric_notes"]
             if n_.split(":")[0] in ("peak_power_w", "swing_w", "band_rms_low_w",
                                     "dominant_freq_hz", "ramp_up_max_1s_w_per_s")]

    def kw(name: str) -> float | None:
        v = m.get(name)
        return None if v is None else v / 1e3

    def mw(name: str) -> float | None:
        v = m.get(name)
        return None if v is None else v / 1e6

    energy_j = float(result.facility_w.sum()) * step
    mean_kw = energy_j / (n * step) / 1e3 if n else None
    out: dict[str, Any] = {
        "duration_s": n * step, "energy_mwh": energy_j / 3.6e9, "mean_kw": mean_kw,
        "peak_kw": kw("peak_power_w"), "p5_kw": kw("p5_power_w"), "p50_kw": kw("p50_power_w"),
        "p95_kw": kw("p95_power_w"), "p99_kw": kw("p99_power_w"),
    }
    out["par"] = (out["peak_kw"] / mean_kw) if out["peak_kw"] and mean_kw else None
    out["load_factor"] = (mean_kw / out["peak_kw"]) if out["peak_kw"] and mean_kw else None
    out["swing_kw"] = kw("swing_w")
    out["ramp_up_max_1s_mw_per_s"] = mw("ramp_up_max_1s_w_per_s")
    out["ramp_down_max_1s_mw_per_s"] = mw("ramp_down_max_1s_w_per_s")
    out["ramp_abs_p99_1s_mw_per_s"] = mw("ramp_abs_p99_1s_w_per_s")
    for tag, res in (("1min", 60.0), ("15min", 900.0)):
        _, length, mean = resample(result.facility_w, step, res)
        up, down = _interval_ramps(mean, length, res)
        out[f"ramp_up_max_{tag}_mw_per_{tag.replace('1min', 'min')}"] = (
            None if up is None else up / 1e6)
        out[f"ramp_down_max_{tag}_mw_per_{tag.replace('1min', 'min')}"] = (
            None if down is None else down / 1e6)
        full = mean[np.isclose(length, res)]
        key = "peak_1min_kw" if tag == "1min" else "demand_peak_15min_kw"
        out[key] = float(full.max()) / 1e3 if full.size else None
        if up is None:
            notes.append(f"{tag} ramps: fewer than 2 complete {tag} intervals")
        if not full.size:
            notes.append(f"{key}: no complete {tag} interval in {n * step:g} s")
    for band in ("low", "mid", "high"):
        out[f"band_rms_{band}_kw"] = kw(f"band_rms_{band}_w")
    out["dominant_freq_hz"] = m.get("dominant_freq_hz")
    out["it_mean_kw"] = float(result.it_w.mean()) / 1e3
    out["it_peak_kw"] = float(result.it_w.max()) / 1e3
    out["gpu_mean_kw"] = float(result.gpu_w.mean()) / 1e3
    out["gpu_peak_kw"] = float(result.gpu_w.max()) / 1e3
    out["rack_peak_kw"] = float(result.rack_it_w.max()) / 1e3
    return out, notes


def load_duration_curve(power_w: np.ndarray, percent: Sequence[float] = LDC_PERCENT
                        ) -> list[tuple[float, float]]:
    """(p, load) pairs: the load (W) exceeded during p % of the horizon (sorted descending)."""
    values = np.percentile(power_w, [100.0 - p for p in percent])
    return [(float(p), float(v)) for p, v in zip(percent, values)]


def profiles(result: FacilityResult) -> dict[float, dict[str, np.ndarray]]:
    """Site profiles at :data:`RESOLUTIONS_S`: ``start_s``, ``length_s``, ``gpu_w``, ``it_w``,
    ``facility_w`` (interval means, see :func:`resample`)."""
    out = {}
    for res in RESOLUTIONS_S:
        start, length, fac = resample(result.facility_w, result.step_s, res)
        out[res] = {"start_s": start, "length_s": length,
                    "gpu_w": resample(result.gpu_w, result.step_s, res)[2],
                    "it_w": resample(result.it_w, result.step_s, res)[2], "facility_w": fac}
    return out


def to_json(result: FacilityResult) -> dict[str, Any]:
    """The ``--format json`` object (shape documented in the README, "From GPUs to the grid")."""
    cfg = result.config
    metrics, notes = site_metrics(result)
    per_source: dict[int, list[Job]] = {}
    for j in result.jobs:
        per_source.setdefault(j.source, []).append(j)
    return {
        "shape": JSON_SHAPE,
        "sync": cfg.sync,
        "measured": False,
        "site": {"gpus": cfg.gpus, "gpus_per_node": cfg.gpus_per_node, "nodes": cfg.nodes,
                 "nodes_per_rack": cfg.nodes_per_rack, "racks": len(result.rack_it_w),
                 "jobs": len(result.jobs), "duration_s": result.duration_s,
                 "step_s": result.step_s, "seed": cfg.seed},
        "node_overhead": (None if cfg.overhead is None else
                          {"model": cfg.overhead.name, "idle_w": cfg.overhead.idle_w,
                           "fraction": cfg.overhead.fraction, "source": cfg.overhead.source}),
        "pue": {"model": cfg.pue.describe(), "constant": cfg.pue.constant,
                "curve": ({"x_name": cfg.pue.x_name, "x": list(cfg.pue.x), "pue": list(cfg.pue.y)}
                          if cfg.pue.constant is None else None),
                "design_it_kw": None if result.design_it_w is None
                else result.design_it_w / 1e3},
        "sources": [{"run_id": s.run_id, "platform": s.platform, "devices": s.num_devices,
                     "share": s.share, "jobs": len(per_source.get(i, [])),
                     "nodes": sum(j.nodes for j in per_source.get(i, [])),
                     "duration_s": s.length * result.step_s, "tile": s.tile,
                     "tile_s": [s.block[0] * result.step_s, s.block[1] * result.step_s],
                     "synchrony_index": s.synchrony_index, "cpu_proxy": s.cpu_proxy}
                    for i, s in enumerate(result.sources)],
        "metrics": metrics,
        "load_duration_kw": [{"percent_of_time": p, "kw": v / 1e3}
                             for p, v in load_duration_curve(result.facility_w)],
        "limits": result.limits,
        "notes": result.notes + notes,
    }


def write_profile(result: FacilityResult, path: str | Path) -> Path:
    """Write the four profiles as one Parquet table, long format, atomically.

    Columns: ``resolution_s`` (0.1, 1, 60, 900), ``start_s``, ``length_s`` (the last interval
    may be partial), ``gpu_kw``, ``it_kw``, ``facility_kw``. The file's key-value metadata
    ``llm_powertrace_facility`` holds the JSON of :func:`to_json` (mode, models, limits).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("resolution_s", "start_s", "length_s",
                                                          "gpu_kw", "it_kw", "facility_kw")}
    for res, prof in profiles(result).items():
        cols["resolution_s"].append(np.full(len(prof["start_s"]), res))
        cols["start_s"].append(prof["start_s"])
        cols["length_s"].append(prof["length_s"])
        for key in ("gpu", "it", "facility"):
            cols[f"{key}_kw"].append(prof[f"{key}_w"] / 1e3)
    table = pa.table({k: np.concatenate(v) for k, v in cols.items()})
    meta = {b"llm_powertrace_facility": json.dumps(to_json(result)).encode()}
    table = table.replace_schema_metadata(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def run_facility(root: str | Path, cfg: FacilityConfig, *, config: str = "finetune_runs",
                 where: Sequence[str] = (), mix: Mapping[str, float] | None = None
                 ) -> FacilityResult:
    """Select the source runs of a dataset folder and compose the site (the CLI's one call).

    Example:
        >>> cfg = FacilityConfig(gpus=1024, sync="independent", duration_s=3600)  # doctest: +SKIP
        >>> res = run_facility("llm-powertrace", cfg)  # doctest: +SKIP
        >>> to_json(res)["metrics"]["demand_peak_15min_kw"]  # doctest: +SKIP
    """
    sources = select_sources(root, config=config, where=where, mix=mix,
                             need_synchrony=cfg.sync == "measured")
    return compose(sources, cfg)
