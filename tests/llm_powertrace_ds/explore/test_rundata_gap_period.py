"""The explorer breaks a device's line at gaps of the period the logger really kept.

period = max(declared ``sample_period_ms``, median interval), the metrics' rule: a logger
declared at 100 ms that read every second draws one line, broken only at a real hole.
"""

from __future__ import annotations

import numpy as np

from llm_powertrace_ds.explore import rundata
from llm_powertrace_ds.run import DeviceSeries, Run


def logger_run(t_ms: np.ndarray, declared_ms: float | None) -> Run:
    t = np.asarray(t_ms, dtype=np.int64)
    power = 300 + 40 * np.sin(np.arange(len(t)) / 3.0)
    meta = {"run_id": "g", "workload": "finetune", "platform": "l40s", "sampler": "nvml",
            "num_gpus": 1, "sample_period_ms": declared_ms}
    return Run(meta, [DeviceSeries(0, t, {"power_w": power}, power_limit_w=350.0)], [], None)


def breaks_in_level_0(rd: rundata.RunData) -> int:
    """NaN breaks of device 0's power line over every level-0 chunk."""
    return sum(int(np.isnan(payload["series"]["d0"]["p"]).sum())
               for name, payload in rd.chunks() if name.startswith("L0-") and
               "d0" in payload["series"])


def test_one_second_readings_declared_at_100_ms_draw_one_unbroken_line():
    rd = rundata.RunData(logger_run(np.arange(61) * 1000, 100.0), "f", None)
    assert rd.period_ms == 1000.0
    assert breaks_in_level_0(rd) == 0


def test_a_real_hole_in_one_second_readings_still_breaks_the_line():
    steps = np.full(60, 1000)
    steps[30] = 10_000
    rd = rundata.RunData(logger_run(np.concatenate(([0], np.cumsum(steps))), 100.0), "f", None)
    assert breaks_in_level_0(rd) == 1


def test_a_declared_period_longer_than_the_readings_is_kept():
    rd = rundata.RunData(logger_run(np.arange(100) * 100, 500.0), "f", None)
    assert rd.period_ms == 500.0
