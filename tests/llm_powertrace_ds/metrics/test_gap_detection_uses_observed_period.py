"""A gap is measured against the period the logger really kept, not only the declared one.

period = max(declared ``sample_period_ms``, median interval); a gap is an interval longer than
``GAP_PERIODS`` periods. A logger declared at 100 ms that read every second has a 1 s period:
its regular readings are no gaps, a real hole of several seconds still is.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds import metrics
from llm_powertrace_ds.run import DeviceSeries, Run
from llm_powertrace_ds.validate import nominal_period_ms, validate_run


def logger_run(t_ms: np.ndarray, *, declared_ms: float | None) -> Run:
    """One device read at ``t_ms`` with a never-constant power near 300 W."""
    t = np.asarray(t_ms, dtype=np.int64)
    power = 300 + 40 * np.sin(np.arange(len(t)) / 3.0)
    meta = {"run_id": "g", "workload": "finetune", "platform": "l40s", "sampler": "nvml",
            "num_gpus": 1, "sample_period_ms": declared_ms}
    return Run(meta, [DeviceSeries(0, t, {"power_w": power}, power_limit_w=350.0)], [], None)


ONE_S_FOR_30_S = np.arange(31) * 1000


def with_hole(hole_ms: int) -> np.ndarray:
    """1 s readings for 30 s, then one interval of ``hole_ms``, then 1 s readings again."""
    steps = np.full(40, 1000)
    steps[30] = hole_ms
    return np.concatenate(([0], np.cumsum(steps)))


def test_one_second_readings_declared_at_100_ms_count_no_gap():
    m = metrics.compute_run_metrics(logger_run(ONE_S_FOR_30_S, declared_ms=100.0))
    assert m["gap_count"] == 0
    assert m["gap_s"] == 0


def test_one_second_readings_declared_at_100_ms_are_not_flagged_gap():
    flags = validate_run(logger_run(ONE_S_FOR_30_S, declared_ms=100.0)).flags
    assert "gap" not in flags


def test_the_observed_period_is_the_median_interval_when_longer_than_declared():
    run = logger_run(ONE_S_FOR_30_S, declared_ms=100.0)
    assert nominal_period_ms(run, ONE_S_FOR_30_S) == 1000.0
    assert nominal_period_ms(logger_run(ONE_S_FOR_30_S, declared_ms=2000.0),
                             ONE_S_FOR_30_S) == 2000.0


@pytest.mark.parametrize(("hole_ms", "gaps"), [(3000, 0), (3001, 1), (5000, 1)])
def test_a_hole_counts_against_the_observed_period(hole_ms, gaps):
    run = logger_run(with_hole(hole_ms), declared_ms=100.0)
    m = metrics.compute_run_metrics(run)
    assert m["gap_count"] == gaps
    assert m["gap_s"] == pytest.approx(hole_ms / 1000 if gaps else 0.0)
    assert ("gap" in validate_run(run).flags) == bool(gaps)
