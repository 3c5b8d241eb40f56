"""Runs built straight from device arrays, for the metric tests (shared by tests/.../metrics/)."""

from __future__ import annotations

import numpy as np

from llm_powertrace_ds.run import DeviceSeries, Run


def run_of_devices(*devices: tuple[np.ndarray, np.ndarray], requests: list[dict] | None = None,
                   workload: str = "finetune") -> Run:
    """A 100 ms L40S run whose device g has times ``devices[g][0]`` (ms) and power ``[1]`` (W)."""
    devs = [DeviceSeries(g, np.asarray(t, dtype=np.int64), {"power_w": np.asarray(p, float)},
                         power_limit_w=400.0, default_power_limit_w=400.0)
            for g, (t, p) in enumerate(devices)]
    return Run({"run_id": "metric-test", "workload": workload, "platform": "l40s",
                "sample_period_ms": 100.0}, devs, [], requests)
