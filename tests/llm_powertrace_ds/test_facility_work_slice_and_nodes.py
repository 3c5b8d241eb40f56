"""The facility's work-window slice of a run, and the whole nodes a job occupies.

A source run's work window is cut from its 0.1 s grid with both ends kept — devices on and off
the grid, events on grid points and between them, windows at the trace's ends. A job occupies
``ceil(devices / gpus_per_node)`` nodes (the last job fewer when the site is full): device
counts that are not multiples of the node size, several jobs, a partly filled last job; the
composed GPU power is then the sum of the GPUs each node replays.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_powertrace_ds import facility as fac
from llm_powertrace_ds import metrics
from llm_powertrace_ds.run import DeviceSeries, Event, Run


def _run(n_dev: int, offsets: list[int], events: list[Event], n: int = 600,
         power: list[float] | None = None, seed: int = 0) -> Run:
    rng = np.random.default_rng(seed)
    devs = []
    for g in range(n_dev):
        t = offsets[g % len(offsets)] + np.arange(n) * 100
        p = (np.full(n, power[g]) if power is not None
             else np.where((t % 2500) < 1500, 600.0, 450.0) + rng.normal(0.0, 5.0, n))
        devs.append(DeviceSeries(g, t.astype(np.int64), {"power_w": p}, power_limit_w=700.0,
                                 default_power_limit_w=700.0))
    meta = {"run_id": "fac", "workload": "finetune", "platform": "h100_sxm_80gb",
            "sample_period_ms": 100.0}
    return Run(meta, devs, sorted(events, key=lambda e: e.t_ms))


@settings(max_examples=40, deadline=None)
@given(offsets=st.lists(st.integers(0, 99), min_size=1, max_size=3),
       start=st.integers(0, 200), length=st.integers(50, 400), on_grid=st.booleans(),
       shift=st.integers(1, 99), to_end=st.booleans())
def test_the_work_slice_keeps_every_grid_point_of_the_window(offsets, start, length, on_grid,
                                                             shift, to_end):
    base = max(offsets)  # the grid starts at the latest first reading
    w0 = base + start * 100 + (0 if on_grid else shift)
    w1 = w0 + length * 100
    if to_end:  # the window ends at the end of the common span
        w1 = min(offsets) + 599 * 100
    run = _run(len(offsets), offsets, [Event(w0, "step_begin"), Event(w1, "step_end")])
    al = metrics.node_total(run)
    assert al is not None
    src = fac.source_from_run(run, window="work")
    inside = (al.grid_ms >= w0) & (al.grid_ms <= w1)
    assert src.length == int(inside.sum())
    np.testing.assert_array_equal(src.devices, np.vstack(al.devices)[:, inside])
    if on_grid:  # both ends are grid points, and both are kept
        assert al.grid_ms[inside][0] == w0
        if not to_end:
            assert al.grid_ms[inside][-1] == w1


@settings(max_examples=40, deadline=None)
@given(devices=st.integers(1, 20), gpn=st.integers(1, 8), full_jobs=st.integers(1, 3),
       extra=st.integers(0, 7))
def test_a_job_occupies_whole_nodes_rounded_up(devices, gpn, full_jobs, extra):
    need = math.ceil(devices / gpn)
    extra = extra % need  # a last job on fewer nodes when the site is full
    nodes = full_jobs * need + extra
    power = [100.0 + 7.0 * g for g in range(devices)]  # each device its own constant draw
    run = _run(devices, [0], [], n=300, power=power)
    cfg = fac.FacilityConfig(gpus=nodes * gpn, gpus_per_node=gpn, sync="lockstep")
    result = fac.compose([fac.source_from_run(run)], cfg)
    assert [j.nodes for j in result.jobs] == [need] * full_jobs + ([extra] if extra else [])
    assert sum(j.nodes for j in result.jobs) == nodes
    assert [j.first_node for j in result.jobs] == [k * need for k in range(len(result.jobs))]

    def job_w(k_nodes: int) -> float:  # the node's GPUs replay the run's devices in turn
        return sum(power[g % devices] for g in range(k_nodes * gpn))

    expected = full_jobs * job_w(need) + job_w(extra)
    np.testing.assert_allclose(result.gpu_w, expected, rtol=1e-9)
    if devices % gpn == 0 and not extra:  # sizes exact: the run's total once per job
        np.testing.assert_allclose(result.gpu_w, nodes * gpn / devices * sum(power),
                                   rtol=1e-9)


@pytest.mark.parametrize(("devices", "gpn", "need"), [(12, 8, 2), (9, 4, 3), (1, 8, 1),
                                                       (16, 8, 2), (7, 1, 7)])
def test_assign_jobs_rounds_each_run_up_to_whole_nodes(devices, gpn, need):
    cfg = fac.FacilityConfig(gpus=gpn * need * 3, gpus_per_node=gpn)
    jobs = fac.assign_jobs([1.0], [devices], cfg)
    assert jobs == [(0, need)] * 3
