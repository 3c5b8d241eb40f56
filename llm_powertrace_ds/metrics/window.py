"""The work window of a run: where the workload ran, without the idle padding around it.

Metrics over the whole trace mix the idle padding (``idle_before_s`` / ``idle_after_s``) into
workload numbers, so two runs with different padding would differ by their padding. Every run
gets one window [w0, w1] on the run clock, found by the first rule that applies
(``work_window_source`` says which):

``steady``
    The first ``steady_begin`` and the next ``steady_end`` (inference steady state).
``steps``
    The first ``step_begin`` to the last ``step_end`` (run-level events, else the lowest rank's;
    without ``step_end`` events, to the last ``step_begin``: whole steps only).
``idle_events``
    Between the idle paddings: the end of the first ``idle_begin``/``idle_end`` window when it
    opens the run, to the begin of the last one when it closes the run (a recorded command's
    lifetime; a sweep run without step events).
``stage``
    Imported runs with stage labels: from the first ``stage`` event whose label is not one of
    :data:`IDLE_STAGE_LABELS` to the next ``stage`` event after the last such one (or the
    last reading).
``detected``
    No events: the active window found from power. On the node total's 1 s moving mean M(t),
    with lo = min M and hi = max M over the gap-free points, the threshold is
    θ = lo + :data:`ACTIVE_FRACTION` · (hi − lo); w0 is the start of the first stretch with
    M ≥ θ lasting at least :data:`ACTIVE_HOLD_S`, w1 the end of the last such stretch (M(t)
    taken at the centre of its 1 s window). Flagged
    ``work_window_detected``. lo and hi are extremes, so adding idle padding (which lies at
    or below lo and never above hi) does not move the window.
``whole``
    None of the above (or a flat trace, hi − lo < :data:`FLAT_FRACTION` · hi): the whole trace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .core import Aligned, _Dev, _EventIndex, _events, event_windows, hold_energy_j

ACTIVE_FRACTION = 0.3
"""Share of the range (lowest to highest 1 s mean) above the lowest at which the run is active."""
ACTIVE_HOLD_S = 5.0
"""Shortest stretch above the threshold that counts as activity (s)."""
FLAT_FRACTION = 0.1
"""A trace whose 1 s means vary by less than this share of their largest value has no idle
padding to cut: its work window is the whole trace."""
IDLE_STAGE_LABELS = frozenset({"idle", "setup", "init", "initialization", "startup", "load",
                               "loading", "teardown", "shutdown", "done", "finished", "end"})
"""Stage labels (lower case, non-letters as ``_``) that are not the workload."""

SOURCES = ("steady", "steps", "idle_events", "stage", "detected", "whole")


@dataclass(frozen=True)
class WorkWindow:
    """The work window [start_ms, end_ms] on the run clock and the rule that found it."""

    start_ms: int
    end_ms: int
    source: str

    @property
    def detected(self) -> bool:
        return self.source == "detected"


def _stage_key(label: str | None) -> str:
    return re.sub(r"[^a-z]+", "_", str(label or "").lower()).strip("_")


def _from_events(ev: _EventIndex, first_ms: int, last_ms: int) -> WorkWindow | None:
    steady = event_windows(ev, "steady_begin", "steady_end")
    if steady and steady[0][1] > steady[0][0]:
        return WorkWindow(steady[0][0], steady[0][1], "steady")
    begins = _events(ev, "step_begin")
    ends = _events(ev, "step_end") or begins[1:]  # no step_end: whole steps, begin to begin
    if begins and ends and ends[-1].t_ms > begins[0].t_ms:
        return WorkWindow(int(begins[0].t_ms), int(ends[-1].t_ms), "steps")
    idle = event_windows(ev, "idle_begin", "idle_end")
    if idle:
        lead = [w for w in idle if w[0] <= first_ms + 1000]  # the padding that opens the run
        w0 = lead[0][1] if lead else first_ms
        tail = [w for w in idle if w[0] > w0]
        w1 = tail[-1][0] if tail else last_ms
        if w1 > w0 and (lead or tail):
            return WorkWindow(int(w0), int(w1), "idle_events")
    stages = sorted((e for e in ev.by_kind.get("stage", [])), key=lambda e: e.t_ms)
    work = [i for i, e in enumerate(stages) if _stage_key(e.label) not in IDLE_STAGE_LABELS]
    if work:
        w0 = int(stages[work[0]].t_ms)
        w1 = int(stages[work[-1] + 1].t_ms) if work[-1] + 1 < len(stages) else last_ms
        if w1 > w0:
            return WorkWindow(w0, w1, "stage")
    return None


def _detect(al: Aligned) -> WorkWindow | None:
    """The active window from power (rule ``detected`` of the module docstring)."""
    w = max(1, int(round(1.0 / al.step_s)))
    x = np.where(al.valid, al.total, 0.0)
    if len(x) < w:
        return None
    cs = np.concatenate(([0.0], np.cumsum(x)))
    cv = np.concatenate(([0], np.cumsum(al.valid.astype(np.int64))))
    mean = (cs[w:] - cs[:-w]) / w  # window [j, j + w)
    full = (cv[w:] - cv[:-w]) == w
    if not full.any():
        return None
    lo, hi = float(mean[full].min()), float(mean[full].max())
    if hi <= 0 or hi - lo < FLAT_FRACTION * hi:
        return None
    above = full & (mean >= lo + ACTIVE_FRACTION * (hi - lo))
    edges = np.diff(np.concatenate(([0], above.astype(np.int8), [0])))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    hold = int(round(ACTIVE_HOLD_S / al.step_s))
    keep = (stops - starts) >= hold
    if not keep.any():
        return None
    i0 = int(starts[keep][0]) + w // 2  # the centre of the first window above θ
    i1 = min(int(stops[keep][-1]) - 1 + w // 2, len(al.grid_ms) - 1)  # ... of the last
    return WorkWindow(int(al.grid_ms[i0]), int(al.grid_ms[i1]), "detected")


def work_window(ev: _EventIndex, devs: list[_Dev | None], al: Aligned | None
                ) -> WorkWindow | None:
    """The run's work window (rules in the module docstring); ``None`` without readings."""
    valid = [d for d in devs if d is not None and len(d.t_ms)]
    if not valid:
        return None
    first = min(int(d.t_ms[0]) for d in valid)
    last = max(int(d.t_ms[-1]) for d in valid)
    found = _from_events(ev, first, last)
    if found is None and al is not None:
        found = _detect(al)
    return found or WorkWindow(first, last, "whole")


def crop_device(d: _Dev, w: WorkWindow) -> _Dev:
    """The device's readings with w0 ≤ t ≤ w1 (its gaps and energy recomputed on them)."""
    a = int(np.searchsorted(d.t_ms, w.start_ms, side="left"))
    b = int(np.searchsorted(d.t_ms, w.end_ms, side="right"))
    t, p = d.t_ms[a:b], d.p[a:b]
    gap = d.gap_idx[(d.gap_idx >= a) & (d.gap_idx + 1 < b)] - a
    if d.hold == "previous" and len(t):
        # a held reading lasts into the window: its value at w0 and at w1 bound the steps
        if 0 < a and t[0] > w.start_ms:
            t, p = np.concatenate(([w.start_ms], t)), np.concatenate((d.p[a - 1:a], p))
        if b < len(d.t_ms) and t[-1] < w.end_ms:
            t, p = np.concatenate((t, [w.end_ms])), np.concatenate((p, p[-1:]))
        t = t.astype(np.int64)
    energy = hold_energy_j(t, p, d.hold) if len(t) > 1 else None
    return _Dev(d.index, t, p, d.period_ms, gap, energy, hold=d.hold)
