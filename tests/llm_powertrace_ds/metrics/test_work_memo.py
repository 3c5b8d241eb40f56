"""A work window that is the whole trace: its ``work_*`` twins are read, not computed twice."""

from __future__ import annotations

import traceback

import numpy as np

from llm_powertrace_ds import metrics
from llm_powertrace_ds.metrics import core, spectral
from llm_powertrace_ds.run import DeviceSeries, Run


def _run(n: int = 6000) -> Run:
    t = np.arange(n) * 100
    devs = [DeviceSeries(g, t, {"power_w": 300 + 50 * np.sin(t / 700.0 + g)}) for g in range(2)]
    return Run({"run_id": "r", "workload": "finetune", "platform": "h100_sxm_80gb"}, devs)


def test_whole_window_twins_equal_and_computed_once(monkeypatch):
    calls = {"welch": 0, "percentiles in work": 0}
    real_welch, real_pct = spectral.welch_psd, core._percentiles

    def welch(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - spy
        calls["welch"] += 1
        return real_welch(*args, **kwargs)

    def pct(x, qs):  # noqa: ANN001, ANN202 - spy
        if any(f.name == "_group_work" for f in traceback.extract_stack()):
            calls["percentiles in work"] += 1
        return real_pct(x, qs)

    monkeypatch.setattr(spectral, "welch_psd", welch)
    for module in (core, metrics.ramps, spectral):
        monkeypatch.setattr(module, "_percentiles", pct, raising=False)
    m = metrics.compute_run_metrics(_run())
    assert m["work_window_source"] == "whole"
    twins = [n for n in metrics.WORK_BASE_NAMES if n in m and f"work_{n}" in m]
    assert len(twins) > 30
    for name in twins:
        assert m[f"work_{name}"] == m[name], name
    assert calls["welch"] == 1  # the whole trace's spectrum, read again for work_*
    assert calls["percentiles in work"] == 0  # levels and ramps: read, not sorted again
