"""Plots: a run, a sweep, a fit; the one-line error without matplotlib."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from test_scaling import loglinear_rows

from llm_powertrace_ds import plots, scaling
from llm_powertrace_ds.errors import InputError, PowerTraceError
from llm_powertrace_ds.run import DeviceSeries, Event, Run

PNG = b"\x89PNG\r\n\x1a\n"


def _run(n: int = 1200, devices: int = 2) -> Run:
    t = np.arange(n) * 100
    devs = [DeviceSeries(g, t + 3 * g, {"power_w": 200 + 100 * ((t // 900) % 2) + g},
                         power_limit_w=400.0) for g in range(devices)]
    events = [Event(0, "idle_begin"), Event(5000, "idle_end"),
              Event(40_000, "checkpoint_begin", rank=0), Event(45_000, "checkpoint_end", rank=0),
              Event(10_000, "steady_begin"), Event(100_000, "steady_end")]
    return Run({"run_id": "plot-run", "workload": "finetune", "platform": "l40s"}, devs, events)


def test_plot_run_writes_png(tmp_path):
    out = plots.plot_run(_run(), tmp_path / "sub" / "run.png")
    assert out.read_bytes()[:8] == PNG


def test_plot_run_degenerate_runs(tmp_path):
    empty = Run({"run_id": "e", "workload": "finetune", "platform": "l40s"}, [])
    assert plots.plot_run(empty, tmp_path / "empty.png").read_bytes()[:8] == PNG
    short = _run(n=5, devices=1)
    assert plots.plot_run(short, tmp_path / "short.png").read_bytes()[:8] == PNG


def test_plot_sweep(tmp_path):
    rows = [{"platform": p, "model_params": n, "energy_per_token_j": n ** 0.5 * k, "run_id": i}
            for i, (p, k) in enumerate([("l40s", 1.0), ("h100_sxm_80gb", 0.6)])
            for n in (1e8, 1e9, 7e9)]
    out = plots.plot_sweep(rows, "energy_per_token_j", "model_params", tmp_path / "sweep.png")
    assert out.read_bytes()[:8] == PNG
    with pytest.raises(InputError):
        plots.plot_sweep(rows, "nope", "model_params", tmp_path / "x.png")


def test_plot_fit_with_holdout(tmp_path):
    res = scaling.fit(loglinear_rows(120), holdout="N=top", n_boot=50)
    path = tmp_path / "fit.json"
    res.save(path)
    out = plots.plot_fit(path, tmp_path / "fit.png")
    assert out.read_bytes()[:8] == PNG
    no_holdout = scaling.fit(loglinear_rows(120), n_boot=20).to_json()
    assert plots.plot_fit(no_holdout, tmp_path / "fit2.png").read_bytes()[:8] == PNG


def test_missing_matplotlib_is_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(plots.MissingExtra) as info:
        plots.plot_run(_run(), tmp_path / "x.png")
    assert "pip install 'llm-powertrace[plot]'" in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, PowerTraceError)
