"""The work window: each rule's bounds, windows at the trace's ends, and cropping.

The rules are in ``llm_powertrace_ds/metrics/window.py``. Each property here varies what real
traces vary: readings on and off a common grid, events on reading instants and between them,
idle paddings of several shapes, stage labels as other tools spell them, gaps inside the
window, and windows that start at the first reading or end at the last.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds import metrics
from llm_powertrace_ds.run import DeviceSeries, Event, Run

PERIOD_MS = 100
IDLE_LABELS = ["idle", "Setup", "INIT", "loading", "load", "TEARDOWN", "teardown", "shutdown",
               "done", "Finished!", "end", "startup", " initialization "]
WORK_LABELS = ["train", "Prefill", "decode 1", "eval", "benchmark", "warmup", "step-2"]


def _run(devices: list[tuple[np.ndarray, np.ndarray]], events: list[Event] | None = None,
         workload: str = "finetune") -> Run:
    devs = [DeviceSeries(g, np.asarray(t, dtype=np.int64), {"power_w": np.asarray(p, float)},
                         power_limit_w=700.0, default_power_limit_w=700.0)
            for g, (t, p) in enumerate(devices)]
    meta = {"run_id": "ww", "workload": workload, "platform": "h100_sxm_80gb",
            "tokens": 1_000_000}
    return Run(meta, devs, sorted(events or [], key=lambda e: e.t_ms))


def _devices(seed: int, n_dev: int, n: int, offsets: list[int], flat: bool = False
             ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Devices read every 100 ms from their own offset: flat power or a training square wave.

    Flat power has no window to detect; the square wave is noisy, like training.
    """
    rng = np.random.default_rng(seed)
    out = []
    for g in range(n_dev):
        t = offsets[g] + np.arange(n) * PERIOD_MS
        if flat:
            p = 300.0 + rng.uniform(-5.0, 5.0, n)
        else:
            p = np.where((t % 2500) < 1500, 620.0, 470.0) + rng.normal(0.0, 20.0, n)
        out.append((t, p))
    return out


def _window(run: Run) -> tuple[float, float, str]:
    w = metrics.run_work_window(run)
    assert w is not None
    return w.start_ms, w.end_ms, w.source


def _trapezoid_j(t: np.ndarray, p: np.ndarray, w0: int, w1: int) -> float:
    keep = (t >= w0) & (t <= w1)
    t, p = t[keep].astype(float), p[keep]
    return float(np.sum((p[1:] + p[:-1]) / 2 * np.diff(t))) / 1000.0


# --------------------------------------------------------------------------------------------
# stage labels
# --------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(labels=st.lists(st.sampled_from(IDLE_LABELS + WORK_LABELS), min_size=1, max_size=7),
       gaps=st.lists(st.integers(1, 4000), min_size=7, max_size=7),
       first=st.integers(0, 3000))
def test_stage_window_runs_from_the_first_work_stage_to_the_stage_after_the_last(labels, gaps,
                                                                                 first):
    devices = _devices(1, 2, 400, [0, 37], flat=True)  # flat: nothing detected from power
    times = list(np.cumsum([first, *gaps[:len(labels) - 1]]))
    events = [Event(int(t), "stage", label=label) for t, label in zip(times, labels, strict=True)]
    start, end, source = _window(_run(devices, events[::-1]))  # any order in the events column
    work = [i for i, label in enumerate(labels) if label in WORK_LABELS]
    last_ms = int(devices[1][0][-1])
    expected_end = times[work[-1] + 1] if work and work[-1] + 1 < len(times) else last_ms
    if work and expected_end > times[work[0]]:
        assert (start, end, source) == (times[work[0]], expected_end, "stage")
    else:
        assert (start, end, source) == (0, last_ms, "whole")


def test_stage_window_reported_in_the_work_columns():
    devices = _devices(2, 2, 600, [0, 5])
    events = [Event(0, "stage", label="Loading"), Event(4_000, "stage", label="train"),
              Event(30_000, "stage", label="eval"), Event(41_000, "stage", label="teardown")]
    m = metrics.compute_run_metrics(_run(devices, events))
    assert (m["work_window_source"], m["work_window_start_s"], m["work_window_end_s"]) == \
        ("stage", 4.0, 41.0)
    expected = sum(_trapezoid_j(t, p, 4_000, 41_000) for t, p in devices)
    assert m["work_energy_j"] == pytest.approx(expected, rel=1e-12)


# --------------------------------------------------------------------------------------------
# idle events alone
# --------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(opening=st.sampled_from([None, 0, 1, 500, 1000]), closing=st.booleans(),
       pauses=st.integers(0, 3), offset=st.integers(0, 99), seed=st.integers(0, 1000))
def test_idle_events_window_runs_between_the_opening_and_closing_paddings(opening, closing,
                                                                          pauses, offset, seed):
    devices = _devices(seed, 2, 800, [offset, offset + 3])  # 80 s
    first, last = offset, int(devices[1][0][-1])
    events: list[Event] = []
    w0, w1 = first, last
    if opening is not None:  # the padding that opens the run, begun up to 1 s after t0
        w0 = first + opening + 7_000
        events += [Event(first + opening, "idle_begin"), Event(w0, "idle_end")]
    if closing:  # the padding that closes the run, after short idle pauses in the workload
        for k in range(pauses):
            b = first + 20_000 + k * 12_000
            events += [Event(b, "idle_begin"), Event(b + 2_000, "idle_end")]
        w1 = last - 9_000
        events += [Event(w1, "idle_begin"), Event(last, "idle_end")]
    start, end, source = _window(_run(devices, events))
    if opening is None and not closing:
        assert source != "idle_events"
        return
    assert (start, end, source) == (w0, w1, "idle_events")


def test_idle_window_opening_after_the_first_second_does_not_open_the_run():
    devices = _devices(3, 1, 600, [0])
    events = [Event(1_001, "idle_begin"), Event(5_000, "idle_end"),
              Event(50_000, "idle_begin"), Event(59_900, "idle_end")]
    assert _window(_run(devices, events)) == (0, 50_000, "idle_events")


# --------------------------------------------------------------------------------------------
# windows at the trace's ends: a window's energy is the sum of its parts
# --------------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n_dev=st.integers(1, 3), split=st.integers(20, 380),
       offsets=st.lists(st.integers(0, 60), min_size=3, max_size=3))
def test_windows_touching_either_end_add_up_to_the_whole_trace(seed, n_dev, split, offsets):
    devices = _devices(seed, n_dev, 400, [0] * 3)  # one common grid
    t = devices[0][0]
    first, cut, last = int(t[0]), int(t[split]), int(t[-1])
    head = metrics.compute_run_metrics(_run(devices, [Event(first, "step_begin"),
                                                      Event(cut, "step_end")]))
    tail = metrics.compute_run_metrics(_run(devices, [Event(cut, "step_begin"),
                                                      Event(last, "step_end")]))
    whole = metrics.compute_run_metrics(_run(devices, [Event(first, "step_begin"),
                                                       Event(last, "step_end")]))
    assert (head["work_window_start_s"], head["work_window_end_s"]) == (first / 1e3, cut / 1e3)
    assert (tail["work_window_start_s"], tail["work_window_end_s"]) == (cut / 1e3, last / 1e3)
    assert head["work_energy_j"] + tail["work_energy_j"] == pytest.approx(whole["energy_j"],
                                                                          rel=1e-12)
    assert whole["work_energy_j"] == pytest.approx(whole["energy_j"], rel=1e-12)
    assert head["work_duration_s"] + tail["work_duration_s"] == pytest.approx(
        whole["duration_s"])
    for name in ("peak_power_w", "p50_power_w", "p99_power_w", "mean_power_w", "par"):
        assert whole["work_" + name] == pytest.approx(whole[name], rel=1e-12), name
    # devices off the grid: each device's readings inside [w0, w1], both ends included
    shifted = _devices(seed, n_dev, 400, offsets)
    for w0, w1 in ((int(shifted[0][0][0]), cut), (cut, int(shifted[0][0][-1]))):
        m = metrics.compute_run_metrics(_run(shifted, [Event(w0, "step_begin"),
                                                       Event(w1, "step_end")]))
        expected = sum(_trapezoid_j(tt, pp, w0, w1) for tt, pp in shifted)
        assert m["work_energy_j"] == pytest.approx(expected, rel=1e-12)


def test_a_window_ending_at_the_last_reading_keeps_that_reading():
    t = np.arange(300) * PERIOD_MS
    p = np.full(300, 200.0)
    p[-1] = 900.0  # the last reading is the peak
    run = _run([(t, p)], [Event(10_000, "step_begin"), Event(int(t[-1]), "step_end")])
    m = metrics.compute_run_metrics(run)
    assert m["work_peak_power_w"] == pytest.approx(900.0)
    assert m["work_energy_j"] == pytest.approx(_trapezoid_j(t, p, 10_000, int(t[-1])))


def test_a_window_starting_at_the_first_reading_keeps_that_reading():
    t = 40 + np.arange(300) * PERIOD_MS
    p = np.full(300, 200.0)
    p[0] = 900.0
    run = _run([(t, p)], [Event(40, "step_begin"), Event(20_040, "step_end")])
    m = metrics.compute_run_metrics(run)
    assert m["work_peak_power_w"] == pytest.approx(900.0)
    assert m["work_energy_j"] == pytest.approx(_trapezoid_j(t, p, 40, 20_040))


# --------------------------------------------------------------------------------------------
# cropping then measuring equals measuring the crop
# --------------------------------------------------------------------------------------------

def _crop(devices: list[tuple[np.ndarray, np.ndarray]], w0: int, w1: int
          ) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(t[(t >= w0) & (t <= w1)], p[(t >= w0) & (t <= w1)]) for t, p in devices]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_dev=st.integers(1, 3),
       offsets=st.lists(st.integers(0, 60), min_size=3, max_size=3),
       start=st.integers(20, 150), length=st.integers(200, 400),
       gap_at=st.integers(10, 150), gap_len=st.integers(5, 30), gap_dev=st.integers(0, 2))
def test_work_metrics_equal_the_metrics_of_the_cropped_trace(seed, n_dev, offsets, start,
                                                             length, gap_at, gap_len, gap_dev):
    devices = _devices(seed, n_dev, 700, offsets)
    # a logger stall inside the work window, on one device
    g = gap_dev % n_dev
    t, p = devices[g]
    keep = np.ones(len(t), dtype=bool)
    keep[start + gap_at:start + gap_at + gap_len] = False
    devices[g] = (t[keep], p[keep])
    w0 = int(devices[0][0][start]) + (seed % 2) * 30  # on a reading, or between two
    w1 = w0 + length * PERIOD_MS
    events = [Event(w0, "step_begin"), Event(w1, "step_end")]
    full = metrics.compute_run_metrics(_run(devices, events))
    crop = metrics.compute_run_metrics(_run(_crop(devices, w0, w1), events))
    assert full["work_window_source"] == "steps" and full["work_window_start_s"] == w0 / 1e3
    assert crop["gap_count"] >= 1  # the stall is inside the window
    compared = 0
    for name in metrics.WORK_BASE_NAMES:
        mine, theirs = full["work_" + name], crop[name]
        if theirs is None:
            assert mine is None, name
            continue
        assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-9), name
        compared += 1
    assert compared >= 30


# --------------------------------------------------------------------------------------------
# degenerate event windows fall through to the next rule
# --------------------------------------------------------------------------------------------

def test_zero_length_steady_and_step_windows_fall_through():
    devices = _devices(4, 1, 600, [0])
    events = [Event(10_000, "steady_begin"), Event(10_000, "steady_end"),
              Event(12_000, "step_begin"), Event(40_000, "step_end")]
    assert _window(_run(devices, events)) == (12_000, 40_000, "steps")
    events = [Event(12_000, "step_begin"), Event(12_000, "step_end"),
              Event(0, "idle_begin"), Event(5_000, "idle_end")]
    assert _window(_run(devices, events)) == (5_000, 59_900, "idle_events")


@pytest.mark.parametrize("idle_end", [59_900, 70_000])
def test_an_idle_padding_lasting_to_the_end_gives_no_idle_window(idle_end):
    devices = _devices(5, 1, 600, [0], flat=True)  # last reading at 59.9 s
    events = [Event(0, "idle_begin"), Event(idle_end, "idle_end")]
    assert _window(_run(devices, events)) == (0, 59_900, "whole")


def test_a_stall_right_after_the_window_is_not_a_gap_of_the_window():
    t = np.concatenate([np.arange(0, 30_001, PERIOD_MS), np.arange(35_000, 60_001, PERIOD_MS)])
    p = np.where((t % 2500) < 1500, 620.0, 470.0)
    events = [Event(10_000, "step_begin"), Event(30_000, "step_end")]  # the stall begins at w1
    full = metrics.compute_run_metrics(_run([(t, p)], events))
    keep = (t >= 10_000) & (t <= 30_000)
    crop = metrics.compute_run_metrics(_run([(t[keep], p[keep])], events))
    assert full["gap_count"] == 1 and crop["gap_count"] == 0
    for name in ("work_energy_j", "work_peak_power_1s_w", "work_p50_power_w",
                 "work_ramp_abs_p99_100ms_w_per_s"):
        assert full[name] == pytest.approx(crop[name.removeprefix("work_")], rel=1e-12), name


# --------------------------------------------------------------------------------------------
# detected from power: the docstring's rule, computed here on the node total
# --------------------------------------------------------------------------------------------

def _detect_reference(run: Run) -> tuple[int, int] | None:
    """The ``detected`` rule of ``metrics.window``, written out loop by loop."""
    al = metrics.node_total(run)
    assert al is not None
    w = max(1, round(1.0 / al.step_s))
    n = len(al.total)
    means, full = [], []
    for j in range(n - w + 1):
        span = range(j, j + w)
        full.append(all(al.valid[k] for k in span))
        means.append(sum(float(al.total[k]) for k in span if al.valid[k]) / w)
    values = [m for m, f in zip(means, full, strict=True) if f]
    lo, hi = min(values), max(values)
    if hi <= 0 or hi - lo < 0.1 * hi:
        return None
    theta = lo + 0.3 * (hi - lo)
    above = [f and m >= theta for m, f in zip(means, full, strict=True)]
    stretches, start = [], None
    for j, a in enumerate([*above, False]):
        if a and start is None:
            start = j
        elif not a and start is not None:
            stretches.append((start, j))
            start = None
    hold = round(5.0 / al.step_s)
    kept = [(s, e) for s, e in stretches if e - s >= hold]
    if not kept:
        return None
    return (int(al.grid_ms[kept[0][0] + w // 2]),
            int(al.grid_ms[min(kept[-1][1] - 1 + w // 2, n - 1)]))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), pad_before=st.integers(0, 150),
       pad_after=st.integers(0, 150), ramp=st.integers(1, 80), spike=st.booleans(),
       pause=st.booleans())
def test_detected_window_follows_the_rule_on_the_node_total(seed, pad_before, pad_after, ramp,
                                                            spike, pause):
    rng = np.random.default_rng(seed)
    work = np.where((np.arange(600) % 25) < 15, 620.0, 470.0) + rng.normal(0.0, 10.0, 600)
    up = np.linspace(80.0, 600.0, ramp)  # a warm-up ramp from idle (0.1 to 8 s)
    p = np.concatenate([80.0 + rng.normal(0.0, 2.0, pad_before), up, work,
                        80.0 + rng.normal(0.0, 2.0, pad_after)])
    if spike and pad_before > 2:  # one reading far above everything else, in the padding
        p[pad_before // 2] = 2_500.0
    if pause:  # a 3 s drop to idle inside the workload: shorter than the hold, not an end
        p[pad_before + ramp + 200:pad_before + ramp + 230] = 90.0
    t = 40 + np.arange(len(p)) * PERIOD_MS
    run = _run([(t, p)])
    found = metrics.run_work_window(run)
    expected = _detect_reference(run)
    assert found is not None
    if expected is None:
        assert found.source == "whole"
    else:
        assert (found.start_ms, found.end_ms, found.source) == (*expected, "detected")
