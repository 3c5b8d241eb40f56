"""A run whose readings hold until the next one (``sample_hold`` ``previous``) integrates steps."""

from __future__ import annotations

import numpy as np
import pytest
from metric_runs import run_of_devices

from llm_powertrace_ds import metrics, validate
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.run import Event, coerce_meta, sample_hold

IDLE_W, LOW_W, HIGH_W = 70.0, 589.0, 605.3


def change_only() -> tuple[np.ndarray, np.ndarray]:
    """10 s at 70 W, then 20 s of load alternating each second, logged only on change."""
    t = [0] + [10_000 + 1000 * k for k in range(21)]
    p = [IDLE_W] + [HIGH_W if k % 2 else LOW_W for k in range(21)]
    return np.array(t), np.array(p)


def held(hold: str | None):
    run = run_of_devices(change_only())
    if hold is not None:
        run.meta["sample_hold"] = hold
    return run


def test_previous_integrates_steps_and_linear_stays_the_trapezoid():
    steps = metrics.compute_run_metrics(held("previous"))
    assert steps["energy_j"] == pytest.approx(70 * 10 + 10 * LOW_W + 10 * HIGH_W, rel=1e-9)
    assert steps["energy_j"] == pytest.approx(12_643, rel=1e-4)
    assert steps["mean_power_w"] == pytest.approx(12_643 / 30, rel=1e-4)
    assert steps["gpu_energy_j"] == [pytest.approx(steps["energy_j"])]
    linear = metrics.compute_run_metrics(held(None))  # a row before schema 1.4.0: null = linear
    assert linear["energy_j"] == pytest.approx(15_238, rel=1e-4)
    assert metrics.compute_run_metrics(held("linear"))["energy_j"] == linear["energy_j"]


def test_previous_levels_are_time_weighted_and_holds_are_not_gaps():
    m = metrics.compute_run_metrics(held("previous"))
    # 10 of 30 s at 70 W: the 5th percentile is idle (at the readings it would be 1 of 22)
    assert m["p5_power_w"] == pytest.approx(IDLE_W)
    assert m["p50_power_w"] in (pytest.approx(LOW_W), pytest.approx(HIGH_W),
                                pytest.approx((LOW_W + HIGH_W) / 2))
    assert m["peak_power_w"] == pytest.approx(HIGH_W)
    assert m["gap_count"] == 0
    assert any("step-held" in n for n in m["metric_notes"])
    linear = metrics.compute_run_metrics(held("linear"))
    assert linear["gap_count"] == 1  # the 10 s interval of 1 s readings
    assert "gap" not in validate.validate_run(held("previous")).flags
    assert "gap" in validate.validate_run(held("linear")).flags


def test_windows_and_the_work_frame_hold_the_reading_before_them():
    run = held("previous")
    run.events = [Event(5_000, "steady_begin"), Event(15_000, "steady_end"),
                  Event(0, "idle_begin"), Event(5_000, "idle_end")]
    m = metrics.compute_run_metrics(run)
    # 5..10 s holds the idle reading, 10..15 s the load: 5·70 + 589 + 605.3 + 589 + 605.3 + 589
    assert m["steady_energy_j"] == pytest.approx(5 * IDLE_W + 3 * LOW_W + 2 * HIGH_W)
    assert m["idle_power_w"] == pytest.approx(IDLE_W)
    assert m["work_energy_j"] == pytest.approx(m["steady_energy_j"])


def test_a_hold_outside_the_vocabulary_is_refused_by_name():
    with pytest.raises(InputError, match="sample_hold.*'nearest' is not a sample hold"):
        coerce_meta({"sample_hold": "nearest"}, "finetune", file="meta.json")
    assert sample_hold({}) == "linear" and sample_hold({"sample_hold": None}) == "linear"
