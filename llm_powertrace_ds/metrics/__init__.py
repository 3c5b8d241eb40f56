"""Power-grid-facing per-run metrics: energy, levels, ramps, oscillations, synchrony, states.

How the node total is formed (alignment)
    Every device keeps its own timestamps. The node total is formed by linear interpolation of
    every device onto one common grid (default 0.1 s, :data:`GRID_MS`) over the span where all
    devices are present (from the latest first sample to the earliest last sample) and summing
    — never by grouping equal timestamps, so two samples of one device can never be added into
    one bucket. A *gap* is an interval between two valid readings of a device longer than
    :data:`GAP_PERIODS` sample periods; grid points strictly inside a gap of any device are
    invalid, so the total splits into gap-free *segments*. Shape metrics (percentiles, peaks,
    ramps, spectra, coincidence, states) use gap-free segments only. Energy integrates across
    gaps (the device drew power while the logger stalled); ``gap_s`` says how much of the run
    rests on that bridging.

Level statistics at the sampling instants
    Interpolating onto the grid averages neighbouring readings and shaves spikes of
    instantaneous-power GPUs. Peak, percentiles, PAR, swing and coincidence are therefore taken
    on the node total at the sampling instants: summed per common sampling tick, else by
    sample-and-hold at the union of the devices' instants (``metrics.levels``;
    ``metric_notes`` says which). Ramps, window peaks, spectra and states keep the grid.

Sample hold
    A run's ``sample_hold`` says how a reading holds until the next one. ``linear`` (the
    default; a null in older rows): the power between two readings is their linear
    interpolation, energies are trapezoids and the grid interpolates. ``previous`` (a
    change-only source such as Zeus' ``PowerMonitor``, which logs a reading only when it
    changes): each reading holds until the next, energies are sums of steps
    E = Σ_i P_i · (t_i+1 − t_i), the grid takes the last reading at or before each point, a
    long interval is a held value and not a gap, and the level statistics are taken on that
    step-held grid, where every point weighs the same time.

Which window
    Unprefixed metrics are over the whole trace, idle padding included. Each ``work_<metric>``
    column is the same metric over the run's work window (the workload without its padding:
    steady window, steps, between idle paddings, stage labels, or detected from power; see
    ``metrics.window``); ``work_window_source`` says which rule found it. Without events,
    checkpoint dips and the step period are detected from power (``metrics.detect``) and
    flagged.

The seed authors
    The authors of the power traces and catalog this dataset started from (their canonical long
    CSV is imported with ``llm-powertrace import powertrace-csv``). The *seed-compatible*
    metrics (the ``ramp_up_p95/p99`` and ``ramp_down_p99`` columns at 1 s, 5 s and 10 s, and
    ``ramp_event_frequency_1s``) follow their definitions and names number for number, so that
    the two catalogs can be compared column for column; the project's own definitions keep
    their own names.

Conventions
    P(t) is the node total on the grid (W), Δ = 0.1 s the grid step, C = Σ_d limit_d the sum of
    the devices' power limits (N × limit for identical devices), D the run's duration.
    Percentiles are linear-interpolated (``numpy.percentile``). A metric that cannot be computed
    is ``None`` and ``metric_notes`` gets ``"<metric>: <reason>"`` — never a crash, never a
    made-up number.

The formulas are in the docstrings of the ``_group`` functions of this package's modules
(``energy``, ``ramps``, ``spectral``, ``states``; :data:`METRIC_GROUPS` lists them in column
order), one ``- ``name`` =`` line per metric; :func:`metric_formulas` returns them (the dataset
card prints the same text).
Everything is vectorised (interpolation, lagged differences, cumulative sums, filters, FFTs);
there is no per-sample Python loop.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..run import Run
from .core import (
    ACROSS_NAMES,
    BACKGROUND_BINS,
    BANDS_HZ,
    CHECKPOINT_BASELINE_S,
    ENERGY_NAMES,
    GAP_NAMES,
    GAP_PERIODS,
    GRID_MS,
    IDLE_FRACTION_OF_LIMIT,
    INT_METRICS,
    LEVEL_NAMES,
    METRIC_NAMES,
    MIN_CYCLES,
    MIN_PEAK_RATIO,
    MIN_SPECTRUM_S,
    NEAR_LIMIT_FRACTION,
    OSCILLATION_NAMES,
    PEAK_FALSE_ALARM,
    PER_DEVICE_NAMES,
    PROJECTED_DEVICES,
    RAMP_NAMES,
    RAMP_WINDOWS,
    SAMPLING_NAMES,
    SEED_RAMP_NAMES,
    SPECTRUM_BAND_HZ,
    STATE_NAMES,
    STEP_FRACTION_OF_LIMIT,
    STEP_WINDOW_S,
    SYNC_HIGHPASS_HZ,
    WELCH_SEGMENT_S,
    WORK_BASE_NAMES,
    WORK_NAMES,
    WORK_PREFIX,
    Aligned,
    _capacity_w,
    _EventIndex,
    _events,
    _Out,
    _prepare_device,
    _steady_tokens,
    _tokens,
    align,
    event_windows,
    interval_median,
    node_total,
)
from .detect import detect_dips, detect_step_period
from .energy import (
    _group_energy,
    counter_energy_j,
    device_energy_j,
    device_mismatch_pct,
    mismatch_pct,
)
from .levels import sample_levels
from .ramps import _group_level, _group_ramps, _group_seed_ramps, seed_ramps
from .spectral import (
    _group_across,
    _group_oscillations,
    welch_psd,
    welch_windows,
)
from .states import _group_gaps, _group_sampling, _group_states
from .window import WorkWindow, crop_device, work_window


def compute_run_metrics(run: Run, *, grid_ms: int = GRID_MS) -> dict[str, Any]:
    """All metrics of a run: node totals, per-device lists and ``metric_notes``.

    Every name of :data:`METRIC_NAMES` and :data:`PER_DEVICE_NAMES` is a key (``None`` when it
    cannot be computed, with the reason in ``metric_notes``). Never raises on bad signals (an
    empty trace, one sample, all-null power, no tokens).

    Args:
        run: the run.
        grid_ms: step of the common grid of the node total (default 100 ms).

    Returns:
        ``{metric: value}`` plus ``metric_notes`` (list of ``"<metric>: <reason>"``).

    numpy's BLAS runs on one thread here (``threadpoolctl``): a run's arrays are too small for threads to
    pay (OpenBLAS worker threads spun for up to 3x the metrics' own CPU time on a loaded 2-core
    machine), and a multi-threaded dot product sums in an order that depends on the thread
    count, so the last digits of ``gpu_energy_j`` and the like varied from machine to machine.
    """
    with _blas_controller().limit(limits=1, user_api="blas"):
        return _compute(run, grid_ms)


@functools.lru_cache(maxsize=1)
def _blas_controller() -> Any:
    """The process's ``threadpoolctl`` controller (inspecting the loaded libraries costs ~1 ms)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


THREAD_MIN_SAMPLES = 1_000_000
"""From this many power readings on, the seed-compatible ramps (about half of the work: a merge
of every device's timestamps) run in a second thread while the other groups run in this one;
numpy releases the GIL in the heavy loops. Smaller runs compute everything in this thread (a
thread's start costs more than it saves). The values and notes are the same either way: the seed
group reads only the prepared devices, writes only its own names, no other group reads them, and
its results are replayed with its notes in column order."""


class _Deferred(_Out):
    """An ``_Out`` that records ``set``/``null`` calls, to replay them into the real one later."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, Any, Any]] = []

    def set(self, name: str, value: Any) -> None:
        self.ops.append(("set", name, value))

    def null(self, names: str | tuple[str, ...] | list[str], reason: str) -> None:
        self.ops.append(("null", names, reason))


class _SeedRamps:
    """:func:`_group_seed_ramps`, started at once: inline, or in a second thread.

    See :data:`THREAD_MIN_SAMPLES`; :meth:`replay_into` waits for it and applies its results.
    """

    def __init__(self, devs: list[Any]) -> None:
        self.rec = _Deferred()
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        readings = sum(len(d.t_ms) for d in devs if d is not None)
        if readings >= THREAD_MIN_SAMPLES and (os.cpu_count() or 1) > 1:
            self.thread = threading.Thread(target=self._run, args=(devs,), daemon=True,
                                           name="seed-ramps")
            self.thread.start()
        else:
            _group_seed_ramps(devs, self.rec)

    def _run(self, devs: list[Any]) -> None:
        try:
            _group_seed_ramps(devs, self.rec)
        except BaseException as exc:  # re-raised in the caller's thread by replay_into
            self.error = exc

    def replay_into(self, out: _Out) -> None:
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        for op, names, arg in self.rec.ops:
            if op == "set":
                out.set(names, arg)
            else:
                out.null(names, arg)


def _compute(run: Run, grid_ms: int) -> dict[str, Any]:
    out = _Out()
    notes: list[str] = []
    devs = [_prepare_device(run, d, i, notes) for i, d in enumerate(run.devices)]
    ev = _EventIndex(run.events)
    _group_energy(run, devs, out, ev)
    al: Aligned | None = None
    reason = None
    own: tuple[str, ...] = ENERGY_NAMES + GAP_NAMES + SAMPLING_NAMES + (
        "duration_s", "mean_power_w", "limit_utilisation")
    if not run.devices:
        reason = "the run has no devices"
    elif any(d is None or len(d.t_ms) < 2 for d in devs):
        reason = "a device has fewer than 2 power readings"
    else:
        al = align([d for d in devs if d is not None], grid_ms)
        if al is None:
            reason = "devices share no common span"
            # the seed authors' aggregates need no common span (each device's last reading
            # carried forward): their group sets them, so they get no note here
            own += SEED_RAMP_NAMES
    cap = _capacity_w(run) if run.devices else None
    if al is None and reason:
        out.null([n for n in METRIC_NAMES if n not in own + WORK_NAMES], reason)
    seed = _SeedRamps(devs)
    ok_devs = [d for d in devs if d is not None]
    if al is not None:
        al.levels = sample_levels(ok_devs)
        if al.levels is not None:
            notes.append(al.levels.note(len(ok_devs)))
        elif run.sample_hold == "previous":
            notes.append("peak_power_w: with the percentiles, PAR and swing, taken on the "
                         "0.1 s grid of the step-held node total (sample_hold previous: each "
                         "reading holds until the next, so each grid point weighs the same time)")
    win = work_window(ev, devs, al)
    work = _work_frame(devs, al, win, grid_ms) if win is not None else None
    al_w = work[1] if work is not None else None
    dips = step = None
    if al_w is not None and not event_windows(ev, "checkpoint_begin", "checkpoint_end"):
        dips = detect_dips(al_w)
    if al_w is not None and len(_events(ev, "step_begin") or _events(ev, "step_end")) < 2:
        step = detect_step_period(_without(al_w, dips[0] if dips and dips[0] else []))
    one_s = "power_is_1s_average" in run.flags
    _group_level(run, devs, al, cap, out)
    _group_ramps(al, cap, out)
    mark = len(out.notes)  # the seed group's place in column order
    _group_oscillations(ev, al, out, step, one_s)  # no later group reads a seed-compatible value
    _group_across(al, out)
    _group_states(ev, al, cap, out, dips)
    _group_gaps(devs, out)
    _group_sampling(devs, out)
    _group_work(run, ev, win, work, cap, step, one_s, out)
    _detection_flags(run, win, dips, step, out, notes)
    later = out.notes[mark:]
    del out.notes[mark:]
    seed.replay_into(out)  # its notes go where the inline order puts them
    out.notes.extend(later)
    result: dict[str, Any] = {name: out.values.get(name) for name in METRIC_NAMES}
    for name in PER_DEVICE_NAMES:
        result[name] = out.values.get(name)
    result["metric_notes"] = notes + out.notes
    return result




def run_work_window(run: Run, al: Aligned | None = None) -> WorkWindow | None:
    """The run's work window (``metrics.window``), as ``work_window_*`` reports it.

    Args:
        run: the run.
        al: its node total (:func:`node_total`), when already formed.
    """
    devs = [_prepare_device(run, d, i, []) for i, d in enumerate(run.devices)]
    if al is None and devs and all(d is not None and len(d.t_ms) >= 2 for d in devs):
        al = align([d for d in devs if d is not None])
    return work_window(_EventIndex(run.events), devs, al)


def _work_frame(devs: list[Any], al: Aligned | None, win: WorkWindow, grid_ms: int
                ) -> tuple[list[Any], Aligned | None] | None:
    """The devices cropped to the work window and their node total (``al`` when uncropped)."""
    ok = [d for d in devs if d is not None]
    if not ok or len(ok) != len(devs) or any(len(d.t_ms) < 2 for d in ok):
        return None
    whole = (win.start_ms <= min(int(d.t_ms[0]) for d in ok)
             and win.end_ms >= max(int(d.t_ms[-1]) for d in ok))
    if whole:
        return ok, al
    cropped = [crop_device(d, win) for d in ok]
    if any(len(d.t_ms) < 2 for d in cropped):
        return cropped, None
    al_w = align(cropped, grid_ms)
    if al_w is not None:
        al_w.levels = sample_levels(cropped)
    return cropped, al_w


def _without(al: Aligned, spans: list[tuple[int, int]]) -> Aligned:
    """``al`` with the points inside the given (begin, end) ms spans marked invalid."""
    if not spans:
        return al
    valid = al.valid.copy()
    for b, e in spans:
        valid[(al.grid_ms >= b) & (al.grid_ms <= e)] = False
    total = np.where(valid, al.total, np.nan)
    return Aligned(al.grid_ms, al.devices, total, valid, al.step_s)


def _group_work(run: Run, ev: _EventIndex, win: WorkWindow | None,
                work: tuple[list[Any], Aligned | None] | None, cap: float | None,
                step: tuple[float | None, float, str] | None, one_s: bool, out: _Out) -> None:
    """Work window.

    Every run has a work window W = [w0, w1] on the run clock: where the workload ran, without
    the idle padding around it (inference: the steady window; fine-tuning: first
    ``step_begin`` to last ``step_end``; a recorded command: between its idle paddings;
    imported runs: their non-idle stage labels, else the active window detected from power,
    flagged ``work_window_detected``; else the whole trace — the rules are in
    ``llm_powertrace_ds/metrics/window.py``). Each ``work_<metric>`` column is ``<metric>``
    computed on the readings with w0 ≤ t ≤ w1 only; the unprefixed columns are over the whole
    trace, idle padding included.

    - ``work_window_start_s`` = w0 / 1000 (s on the run clock).
    - ``work_window_end_s`` = w1 / 1000.
    - ``work_window_source`` = the rule that found W: ``steady``, ``steps``, ``idle_events``,
      ``stage``, ``detected`` or ``whole``.
    - ``work_energy_per_token_j`` = work_energy_j / tokens in W: the training tokens for
      fine-tuning (every step lies in W); for inference the tokens generated in W (counted as
      for ``steady_energy_per_token_j``).
    - ``work_<metric>`` = <metric> over W.
    """
    if win is None:
        out.null(WORK_NAMES, "the run has no power readings")
        return
    out.set("work_window_start_s", win.start_ms / 1000.0)
    out.set("work_window_end_s", win.end_ms / 1000.0)
    out.set("work_window_source", win.source)
    names = [WORK_PREFIX + n for n in WORK_BASE_NAMES]
    if work is None:
        out.null(names, "a device has fewer than 2 power readings")
        return
    devs_w, al_w = work
    wo = _Out()
    energies = [d.energy_j for d in devs_w]
    if any(e is None for e in energies):
        wo.null("energy_j", "a device has fewer than 2 power readings in the work window")
    else:
        wo.set("energy_j", float(sum(energies)))
    _group_level(run, devs_w, al_w, cap, wo)
    _group_ramps(al_w, cap, wo)
    _group_oscillations(ev, al_w, wo, step, one_s)
    energy = wo.values.get("energy_j")
    if run.workload == "inference":
        tokens = _steady_tokens(run, win.start_ms, win.end_ms)
    else:
        tokens = _tokens(run)
    if energy is None:
        wo.null("energy_per_token_j", "energy_j is null")
    elif tokens is None or tokens <= 0:
        wo.null("energy_per_token_j", "no token count in the work window")
    else:
        wo.set("energy_per_token_j", energy / tokens)
    if al_w is None:
        wo.null(list(WORK_BASE_NAMES), "the devices share no span in the work window")
    for name in WORK_BASE_NAMES:
        out.values[WORK_PREFIX + name] = wo.values.get(name)
    for note in wo.notes:
        if note.split(":")[0] in WORK_BASE_NAMES:
            out.notes.append(WORK_PREFIX + note)


def _detection_flags(run: Run, win: WorkWindow | None,
                     dips: tuple[list[tuple[int, int]] | None, str] | None,
                     step: tuple[float | None, float, str] | None, out: _Out,
                     notes: list[str]) -> None:
    """Flag and note what was found from power alone (never where real events exist)."""
    if win is not None and win.detected:
        run.add_flags("work_window_detected")
        notes.append(f"work_window_source: detected from power ({win.start_ms / 1000:.1f}-"
                     f"{win.end_ms / 1000:.1f} s; no steady, step, idle or stage events)")
    if dips is not None and dips[0]:
        run.add_flags("checkpoint_dips_detected")
        notes.append(f"checkpoint_dip_count: {len(dips[0])} dips detected from power "
                     "(no checkpoint events)")
    if step is not None and step[0] is not None and out.values.get("step_freq_hz") is not None:
        run.add_flags("step_period_detected")
        notes.append(f"step_freq_hz: step period {step[0]:.3f} s detected from power "
                     f"(autocorrelation {step[1]:.2f}; no step events)")


_GROUPS: tuple[Callable[..., Any], ...] = (
    _group_energy, _group_level, _group_ramps, _group_seed_ramps, _group_oscillations,
    _group_across, _group_states, _group_gaps, _group_sampling, _group_work,
)
METRIC_GROUPS = _GROUPS
"""The metric groups in column order; each docstring's first line is the group's title."""
_BULLET_NAMES_RE = re.compile(r"^``[^`]+``(, ``[^`]+``)*$")


def metric_formulas() -> dict[str, str]:
    """``{metric name: formula}`` parsed from the metric groups' docstrings (for the card).

    A formula is a docstring bullet ``- ``name`` = formula`` (continuation lines joined); names
    listed together share one formula; ramp names are expanded for every δ.
    """
    bullets: list[str] = []
    for fn in _GROUPS:
        inside = False
        for line in (fn.__doc__ or "").splitlines():
            text = line.strip()
            if text.startswith("- ``"):
                bullets.append(text[2:])
                inside = True
            elif inside and text and not text.startswith("-"):
                bullets[-1] += " " + text
            else:
                inside = False
    out: dict[str, str] = {}
    for bullet in bullets:
        left, sep, right = bullet.partition(" = ")
        if not sep or not _BULLET_NAMES_RE.match(left.strip()) or "<" in left:
            continue
        for name in re.findall(r"``([^`]+)``", left):
            if "{δ}" in name:
                for tag, _ in RAMP_WINDOWS:
                    out[name.replace("{δ}", tag)] = right.strip().replace("{δ}", tag)
            else:
                out[name] = right.strip()
    for name in WORK_BASE_NAMES:  # the work-window twins: the same formula over W
        work = WORK_PREFIX + name
        if work not in out and name in out:
            out[work] = f"{out[name]} Over the work window W only (readings with w0 ≤ t ≤ w1)."
    return out


__all__ = [
    "ACROSS_NAMES",
    "Aligned",
    "BACKGROUND_BINS",
    "BANDS_HZ",
    "CHECKPOINT_BASELINE_S",
    "ENERGY_NAMES",
    "GAP_NAMES",
    "GAP_PERIODS",
    "GRID_MS",
    "IDLE_FRACTION_OF_LIMIT",
    "INT_METRICS",
    "LEVEL_NAMES",
    "METRIC_GROUPS",
    "METRIC_NAMES",
    "MIN_CYCLES",
    "MIN_PEAK_RATIO",
    "MIN_SPECTRUM_S",
    "NEAR_LIMIT_FRACTION",
    "OSCILLATION_NAMES",
    "PEAK_FALSE_ALARM",
    "PER_DEVICE_NAMES",
    "PROJECTED_DEVICES",
    "RAMP_NAMES",
    "RAMP_WINDOWS",
    "SAMPLING_NAMES",
    "SEED_RAMP_NAMES",
    "SPECTRUM_BAND_HZ",
    "STATE_NAMES",
    "STEP_FRACTION_OF_LIMIT",
    "STEP_WINDOW_S",
    "SYNC_HIGHPASS_HZ",
    "WELCH_SEGMENT_S",
    "align",
    "compute_run_metrics",
    "counter_energy_j",
    "device_energy_j",
    "device_mismatch_pct",
    "event_windows",
    "interval_median",
    "metric_formulas",
    "mismatch_pct",
    "node_total",
    "run_work_window",
    "seed_ramps",
    "welch_psd",
    "welch_windows",
]
