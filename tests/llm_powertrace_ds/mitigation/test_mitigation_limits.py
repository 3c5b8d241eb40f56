"""Grid limits as input: one strategy, a combination, or nothing meets them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llm_powertrace_ds import mitigation as mit
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError


def step_up(dt: float = 1.0, low_s: float = 100.0, high_s: float = 1000.0) -> mit.Profile:
    """1 MW for 100 s, then 3 MW to the end: a site that starts a job and keeps it running."""
    p = np.concatenate([np.full(int(low_s / dt), 1e6), np.full(int(high_s / dt), 3e6)])
    t = np.arange(len(p)) * dt
    return mit.Profile(start_s=t, dt_s=np.full(len(p), dt), power_w=p, kind="csv",
                       file="step.csv", column="power_w")


def write_csv(path, profile: mit.Profile) -> None:
    lines = ["t_s,power_w"] + [f"{t!r},{p!r}" for t, p in
                               zip(profile.start_s.tolist(), profile.power_w.tolist(),
                                   strict=True)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def ramp(window_s: float, max_w_per_s: float) -> mit.limits.RampLimit:
    return mit.limits.RampLimit(window_s, max_w_per_s)


def test_a_ramp_limit_alone_is_met_by_storage_alone():
    res = mit.search(step_up(), mit.Limits(ramps=(ramp(1.0, 1e4),)))
    assert res.feasible
    assert res.plan.cap_pct is None and res.plan.floor_pct is None
    assert res.plan.ramp_limit_w_per_s == pytest.approx(1e4)
    assert all(c.met for c in res.checks)


def test_limits_already_met_need_nothing():
    res = mit.search(step_up(), mit.Limits(max_range_w=5e6))
    assert res.feasible and mit.Plan(efficiency=res.plan.efficiency) == res.plan
    assert "as the profile is" in res.statement


def test_a_swing_and_ramp_limit_need_a_floor_and_storage():
    """A 70 % floor plus storage wastes less than storage alone.

    Storage alone would have to carry the whole step for the whole horizon; a 70 % floor
    (2.1 MW) leaves a 0.9 MW step that storage ramps in.
    """
    res = mit.search(step_up(), mit.Limits(ramps=(ramp(1.0, 1e4),), max_range_w=1e6))
    assert res.feasible
    assert res.plan.cap_pct is None
    assert res.plan.floor_pct == 70.0
    assert res.plan.ramp_limit_w_per_s == pytest.approx(1e4)
    applied = mit.apply(step_up(), res.plan).summary
    assert applied["grid"]["range_w"] <= 1e6
    assert applied["grid"]["ramp_max_w_per_s"]["1"] <= 1e4 * (1 + 1e-9)


def test_nothing_meets_an_impossible_swing_and_the_statement_says_what_fails():
    res = mit.search(step_up(), mit.Limits(ramps=(ramp(1.0, 1e4),), max_range_w=1.0))
    assert not res.feasible
    assert res.statement.startswith("no combination meets every limit")
    assert "range (W)" in res.statement
    assert any(not c.met for c in res.checks)


def test_limits_file_through_the_cli(tmp_path, capsys):
    prof = tmp_path / "step.csv"
    write_csv(prof, step_up())
    limits = tmp_path / "limits.yaml"
    limits.write_text("ramp:\n  - {window_s: 1, max_w_per_s: 10kW/s}\nmax_range_w: 1MW\n",
                      encoding="utf-8")
    assert main(["mitigate", str(prof), "--limits", str(limits), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["search"]["feasible"] is True
    assert data["search"]["plan"] == {"cap_pct": None, "floor_pct": 70.0,
                                      "ramp_limit_w_per_s": 1e4}
    assert data["order"] == ["floor", "storage"]
    assert data["grid"]["range_w"] <= 1e6
    limits.write_text("max_swing_w: 1.0\n", encoding="utf-8")  # the older spelling of the range
    assert main(["mitigate", str(prof), "--limits", str(limits)]) == 1
    out = capsys.readouterr().out
    assert "no combination meets every limit" in out and "FAIL range (W)" in out


@pytest.mark.parametrize(("text", "field"), [
    ("ramp: [{window_s: 1}]\n", "ramp"),
    ("ramp: [{window_s: -1, max_w_per_s: 5}]\n", "ramp[0].window_s"),
    ("max_range_w: .nan\n", "max_range_w"),
    ("ramp: [{window_s: 1, max_w_per_s: 20MW}]\n", "ramp[0].max_w_per_s"),
    ("ramp: [{window_s: 5 furlongs, max_w_per_s: 1MW/min}]\n", "ramp[0].window_s"),
    ("max_range_w: 3MW/min\n", "max_range_w"),
    ("max_range_w: 3MW\nmax_swing_w: 3MW\n", "max_swing_w"),
    ("bands: [{low_hz: 3, high_hz: 1, max_rms_w: 5}]\n", "bands[0]"),
    ("peak: 5\n", "peak"),
    ("{}\n", None),
])
def test_bad_limits_files_are_one_line_naming_the_field(tmp_path, text, field):
    path = tmp_path / "limits.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as exc:
        mit.load_limits(path)
    assert exc.value.file == "limits.yaml" and exc.value.field == field
    assert "\n" not in str(exc.value)


def test_a_band_the_profile_cannot_resolve_is_refused_before_the_search(tmp_path):
    limits = mit.Limits(bands=(mit.Band(1.0, 3.0, 1e3),), file="l.yaml")
    with pytest.raises(InputError, match="not resolved at Δt = 1 s") as exc:
        mit.search(step_up(dt=1.0), limits)
    assert exc.value.field == "bands[0]"


def test_limits_and_explicit_strategies_exclude_each_other(tmp_path, capsys):
    prof = tmp_path / "step.csv"
    write_csv(prof, step_up())
    limits = tmp_path / "limits.yaml"
    limits.write_text("max_swing_w: 1.0e6\n", encoding="utf-8")
    assert main(["mitigate", str(prof), "--limits", str(limits), "--floor-pct", "50"]) == 2
    assert "--floor-pct" in capsys.readouterr().err


@pytest.mark.parametrize("text", [
    "ramp: " + "[" * 100 + "]" * 100 + "\n",
    "ramp:\n" + "".join("  " * i + "- \n" for i in range(100)),
])
def test_a_limits_file_nested_past_the_depth_cap_is_refused_before_parsing(tmp_path, text):
    path = tmp_path / "limits.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match="nested deeper than 64 levels") as exc:
        mit.load_limits(path)
    assert exc.value.file == "limits.yaml" and "\n" not in str(exc.value)


def test_a_limits_file_that_is_a_fifo_is_refused_before_reading(tmp_path):
    import os

    fifo = tmp_path / "limits.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO, not a regular file") as exc:
        mit.load_limits(fifo)
    assert exc.value.field == "--limits"
