"""Source runs of ``facility``: selection (``--where``, ``--mix``), the 0.1 s template, the tile block."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .. import metrics as metrics_mod
from .. import schema
from ..errors import InputError
from ..run import Run
from . import steady
from .steady import Shape

GRID_MS = metrics_mod.GRID_MS
"""Step of every composed profile (ms): the metrics' common grid."""
Window = Literal["work", "whole"]
WINDOWS: tuple[str, ...] = ("work", "whole")


@dataclass
class Source:
    """One source run, ready to replay.

    Attributes:
        run_id, platform: the run.
        devices: float64 (n_devices, T) power on the common 0.1 s grid (W).
        block: (b0, b1) grid indices of the repeated steady block; ``tile`` says how it was
            found (``shape`` holds the details, :mod:`.steady`).
        share: its share of the site's nodes.
        synchrony_index: the run's ρ̄ (``None`` when it has fewer than 2 devices).
        power_limit_w: the largest device power limit, when reported.
        cpu_proxy: the run is a ``cpu_proxy`` model, not a GPU measurement.
        gap_s: seconds of the run bridged across missing readings.
        window: which part of the run the template holds: ``work (<rule>) [a s, b s]`` (its
            work window, ``metrics.window``) or ``whole trace``.
        one_s_average: the run's power_w is a 1 s average (flag ``power_is_1s_average``).
        shape: ramp-up, steady block, ramp-down and where a job may leave the block.
        idle_w: per-device median power outside the work window (W), when at least
            :data:`MIN_IDLE_S` of it was measured.
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
    window: str = "whole trace"
    one_s_average: bool = False
    shape: Shape | None = None
    idle_w: np.ndarray | None = None

    @property
    def sh(self) -> Shape:
        """Ramp-up, steady block and ramp-down (the whole template as block when not given)."""
        if self.shape is not None:
            return self.shape
        return Shape(self.block, self.block, (0,), None, "whole")

    @property
    def idle_device_w(self) -> tuple[np.ndarray, bool]:
        """Per-device idle power (W) and whether it was measured.

        Without a measured idle, each device's lowest power in the template stands in.
        """
        if self.idle_w is not None:
            return self.idle_w, True
        return self.devices.min(axis=1), False

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


def source_from_run(run: Run, *, share: float = 1.0, synchrony_index: float | None = None,
                    window: Window = "work") -> Source:
    """Build a :class:`Source` from a run (its devices on the 0.1 s grid and its tile block).

    Args:
        run: the source run.
        share: its share of the site's nodes.
        synchrony_index: the run's ρ̄.
        window: ``work``: only the run's work window (``metrics.window``: steady window, steps,
            between idle paddings, stage labels, or the active window detected from power), so
            idle head and tail are never repeated; ``whole``: the whole trace.

    Raises:
        InputError: the run's devices share no common span of at least one grid step.
    """
    if window not in WINDOWS:
        raise InputError(f"{window!r} is not one of {', '.join(WINDOWS)}", field="--window")
    al = metrics_mod.node_total(run, GRID_MS)
    if al is None:
        raise InputError("its devices share no common span of power readings",
                         field=f"run {run.run_id}")
    devices = np.vstack(al.devices)
    grid = al.grid_ms
    described = "whole trace"
    if window == "work":
        win = metrics_mod.run_work_window(run, al)
        if win is not None:
            i0 = int(np.searchsorted(grid, win.start_ms, side="left"))
            i1 = int(np.searchsorted(grid, win.end_ms, side="right"))
            if i1 - i0 >= 2:
                devices, grid = devices[:, i0:i1], grid[i0:i1]
                described = (f"work window ({win.source}) [{win.start_ms / 1000:.1f} s, "
                             f"{win.end_ms / 1000:.1f} s]")
    n = len(grid)
    steps = _first_rank(run, "step_begin")
    idx = np.searchsorted(grid, steps) if steps else np.zeros(0, dtype=np.int64)
    idx = idx[idx <= n] if idx.size else idx  # n: a block may end with the template
    steady_window = None
    begins = _first_rank(run, "steady_begin")
    ends = [e for e in _first_rank(run, "steady_end") if begins and e > begins[0]]
    if begins and ends:
        s0 = int(np.searchsorted(grid, begins[0]))
        s1 = min(int(np.searchsorted(grid, ends[0])), n)
        if s1 - s0 >= 2:
            steady_window = (s0, s1)
    sh = steady.shape(devices.sum(axis=0), GRID_MS / 1000.0,
                      steps=idx if idx.size >= 2 else None, steady=steady_window)
    tile = {"steps": f"{len(sh.cuts)} whole steps", "events": "steady-state window",
            "period": f"steady window, {len(sh.cuts)} periods of {sh.period_s or 0:.2f} s",
            "matched": "steady window, cut at matching samples",
            "whole": ("whole work window" if described != "whole trace"
                      else "whole run (no steady window found)")}[sh.how]
    idle = _idle_w(np.vstack(al.devices), al.grid_ms, grid)
    limits = [d.power_limit_w or d.default_power_limit_w for d in run.devices]
    known = [float(x) for x in limits if x]
    # the same test as validate.py's cpu_proxy flag, so an unflagged proxy run is caught too
    proxy = ("cpu_proxy" in run.flags or run.meta.get("sampler") == "cpu_proxy"
             or run.platform == "cpu_proxy")
    return Source(run.run_id, run.platform, devices, sh.block, tile, share, synchrony_index,
                  max(known) if known else None, proxy, window=described,
                  one_s_average="power_is_1s_average" in run.flags, shape=sh, idle_w=idle)


MIN_IDLE_S = 1.0
"""Least measured time outside the work window for a device's idle power to be measured."""


def _idle_w(all_devices: np.ndarray, all_grid: np.ndarray, kept: np.ndarray) -> np.ndarray | None:
    """Per-device median power outside the work window, or ``None`` when too little was measured."""
    if not len(kept):
        return None
    outside = (all_grid < kept[0]) | (all_grid > kept[-1])
    if outside.sum() * GRID_MS / 1000.0 < MIN_IDLE_S:
        return None
    return np.median(all_devices[:, outside], axis=1)


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


def default_config(root: str | Path) -> str:
    """The runs table a folder holds: ``finetune_runs`` if it has any, else ``inference_runs``."""
    from .. import layout

    for config in schema.RUNS_CONFIGS:
        if layout.config_globs(root).get(config):
            return config
    return schema.RUNS_CONFIGS[0]


TRACE_COLUMNS = ("run_id", "platform", "workload", "sampler", "sample_period_ms", "quality_flags",
                 "node_index", "gpu_index", "gpu_name", "gpu_uuid_hash", "power_limit_w",
                 "default_power_limit_w", "device_kind", "events", "t_ms", "power_w")
"""The trace columns :func:`source_from_run` uses (``metrics.node_total``, the work window): a
trace row has about a hundred columns, each compressed on its own in a packed shard."""

SELECTION_COLUMNS = ("num_gpus", "synchrony_index", "gap_s")
"""The runs-table columns ``facility`` reads beside ``run_id`` and the ``--where`` axes."""


@dataclass(frozen=True)
class Selection:
    """The runs ``--where`` and ``--mix`` chose, before any trace is read.

    Attributes:
        config: the runs table they come from.
        rows: their runs rows (``run_id``, :data:`SELECTION_COLUMNS` and the ``--where`` axes),
            in the order the site assigns nodes.
        shares: each run's share of the site's nodes (they sum to 1).
        where: the filters that chose them (for the one line that states the selection).
    """

    config: str
    rows: list[dict[str, Any]]
    shares: list[float]
    where: tuple[str, ...] = ()
    summary_only: int = 0
    """Runs left out because they are published summaries without a power trace."""

    def describe(self) -> str:
        """One line: how many runs of which table, chosen how."""
        how = f"matching {' '.join(self.where)}" if self.where else "(every run)"
        return f"{len(self.rows)} run(s) of {self.config} {how}"


def select_rows(root: str | Path, *, config: str | None = None, where: Sequence[str] = (),
                mix: Mapping[str, float] | None = None) -> Selection:
    """Choose the source runs from the runs table only (no trace is read).

    Args:
        root: dataset folder.
        config: ``finetune_runs`` or ``inference_runs``; ``None``: the one the folder holds
            (:func:`default_config`).
        where: ``AXIS=VALUE`` filters on the runs table (all must hold).
        mix: ``{run_id: share}``; ``None``: every selected run, equal shares.

    Raises:
        InputError: unknown config or axis, a bad filter or share, no run selected.
    """
    from .. import layout
    from ..shards import file_schema, iter_rows

    if config is None:
        config = default_config(root)
    if config not in schema.RUNS_CONFIGS:
        raise InputError(f"{config!r} is not one of {', '.join(schema.RUNS_CONFIGS)}",
                         field="--config")
    filters = []
    for item in where:
        axis, sep, value = item.partition("=")
        if not sep or not axis.strip():
            raise InputError(f"{item!r} is not AXIS=VALUE", field="--where")
        filters.append((axis.strip(), value.strip()))
    files = layout.shard_files(root, config)
    columns = set(file_schema(files[0]).names) if files else set()
    for axis, _ in filters:
        if files and axis not in columns:
            raise InputError(f"axis {axis!r} is not a column of {config}", field="--where")
    # only what the selection and the sources use: a runs row has a few hundred columns
    wanted = [c for c in dict.fromkeys(["run_id", "quality_flags", *SELECTION_COLUMNS,
                                        *(a for a, _ in filters)]) if c in columns]
    rows = list(iter_rows(root, config, columns=wanted)) if files else []
    for axis, value in filters:
        rows = [r for r in rows if _matches(r, axis, value)]
    # a published summary (ML.ENERGY) has no trace to replay: left out, and said so once
    summaries = [r for r in rows if "summary_only" in (r.get("quality_flags") or [])]
    rows = [r for r in rows if "summary_only" not in (r.get("quality_flags") or [])]
    if mix:
        for r in summaries:
            if r["run_id"] in mix:
                raise InputError(f"run {r['run_id']!r} is a published summary without a power "
                                 "trace; a site cannot replay it", field="--mix")
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
        extra = (f" ({len(summaries)} published summaries without a power trace cannot be "
                 "replayed)" if summaries else "")
        raise InputError(f"no run of {config} in {root} matches "
                         f"{' '.join(where) if where else 'the selection'}{extra}",
                         field="--where")
    total = sum(s for _, s in chosen)
    return Selection(config, [r for r, _ in chosen], [s / total for _, s in chosen],
                     tuple(where), summary_only=len(summaries))


def load_sources(root: str | Path, selection: Selection, indices: Sequence[int] | None = None,
                 *, need_synchrony: bool = False, window: Window = "work") -> list[Source]:
    """Read the traces of the selected runs (only ``indices`` of them) as :class:`Source` s.

    One :class:`~llm_powertrace_ds.shards.RunReader` for all of them: per-run files are read
    one each, a packed shard once for all the runs it holds. Each source keeps its share of
    the whole selection.

    Args:
        root: dataset folder.
        selection: from :func:`select_rows`.
        indices: which of ``selection.rows`` to read (``None``: all), in this order.
        need_synchrony: compute ``synchrony_index`` for runs whose row lacks it.
        window: ``work`` (default) or ``whole``, see :func:`source_from_run`.

    Raises:
        RunNotFound: a selected run has a runs row but no trace rows.
    """
    from ..errors import RunNotFound
    from ..shards import RunReader

    picked = list(range(len(selection.rows))) if indices is None else list(indices)
    ids = [selection.rows[i]["run_id"] for i in picked]
    # a run's synchrony computed from its trace needs all of it
    full = need_synchrony and any("synchrony_index" not in selection.rows[i] for i in picked)
    runs = {run.run_id: run for run in RunReader(root).read_many(
        ids, columns=None if full else TRACE_COLUMNS, requests=False)}
    out = []
    for i in picked:
        row, share = selection.rows[i], selection.shares[i]
        run = runs.get(row["run_id"])
        if run is None:
            raise RunNotFound(f"run {row['run_id']!r} is not in {root}")
        rho = row.get("synchrony_index")
        if "synchrony_index" not in row and need_synchrony and len(run.devices) >= 2:
            rho = metrics_mod.compute_run_metrics(run)["synchrony_index"]
        src = source_from_run(run, share=share, synchrony_index=rho, window=window)
        src.gap_s = row.get("gap_s")
        out.append(src)
    return out


def select_sources(root: str | Path, *, config: str | None = None,
                   where: Sequence[str] = (), mix: Mapping[str, float] | None = None,
                   need_synchrony: bool = False, window: Window = "work") -> list[Source]:
    """Every selected source run of a dataset folder (:func:`select_rows`, then read them all).

    ``facility`` itself reads only the runs that get a job (``run_facility``).

    Args:
        root: dataset folder.
        config: ``finetune_runs`` or ``inference_runs``; ``None``: the one the folder holds
            (:func:`default_config`).
        window: ``work`` (default) or ``whole``, see :func:`source_from_run`.
        where: ``AXIS=VALUE`` filters on the runs table (all must hold).
        mix: ``{run_id: share}``; ``None``: every selected run, equal shares.
        need_synchrony: compute ``synchrony_index`` for runs whose row lacks it.

    Raises:
        InputError: unknown config or axis, a bad filter or share, no run selected.
    """
    selection = select_rows(root, config=config, where=where, mix=mix)
    return load_sources(root, selection, need_synchrony=need_synchrony, window=window)
