"""``llm-powertrace mitigate`` end to end: CSV and ``facility --out`` inputs, JSON, files, errors."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from llm_powertrace_ds import mitigation as mit
from llm_powertrace_ds import shards
from llm_powertrace_ds.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_facility import step_run  # noqa: E402  (the facility tests' synthetic training run)

P_LO, P_HI, T = 1.0e6, 3.0e6, 400.0


def square_csv(path: Path, *, dt: float = 0.1, periods: int = 3) -> Path:
    n = int(round(T / dt))
    power = np.concatenate([np.full(n, v) for v in [P_LO, P_HI] * periods + [P_LO]])
    t = np.arange(len(power)) * dt
    path.write_text("t_s,power_w\n" + "".join(f"{a:.3f},{b:.1f}\n" for a, b in zip(t, power, strict=True)),
                    encoding="utf-8")
    return path


def run_json(capsys, *argv: str) -> dict:
    assert main(["mitigate", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_storage_json_is_the_librarys_and_the_ramp_limit_takes_units(tmp_path, capsys):
    path = square_csv(tmp_path / "sq.csv")
    data = run_json(capsys, str(path), "--ramp-limit", "1.2MW/min")
    ref = mit.apply(mit.read_profile(path), mit.Plan(ramp_limit_w_per_s=2.0e4)).summary
    assert data["storage"]["ramp_limit_w_per_s"] == pytest.approx(2.0e4, rel=1e-12)
    for key in ("energy_j", "power_w", "time_constant_s", "energy_with_starts_stops_j"):
        assert data["storage"][key] == pytest.approx(ref["storage"][key], rel=1e-12)
    assert data["storage"]["energy_mwh"] == pytest.approx(data["storage"]["energy_j"] / 3.6e9)
    assert math.isclose(data["resolution_s"], 0.1, rel_tol=1e-9)
    assert data["input"]["regular"] is True
    # the older spelling and a bare number (W/s) give the same
    same = run_json(capsys, str(path), "--ramp-limit-w-per-s", "20000")
    assert same["storage"] == data["storage"]
    # the table speaks the site's units: MW, MWh, MW/min
    assert main(["mitigate", str(path), "--ramp-limit", "1.2MW/min"]) == 0
    out = capsys.readouterr().out
    assert "ramp_limit" in out and "1.2 MW/min" in out and "MWh" in out and "range (MW)" in out


def test_floor_json_matches_the_formulas(tmp_path, capsys):
    data = run_json(capsys, str(square_csv(tmp_path / "sq.csv")), "--floor-pct", "60")
    f = 0.6 * P_HI
    time_low = 4 * T
    assert math.isclose(data["floor"]["extra_energy_j"], (f - P_LO) * time_low, rel_tol=0.01)
    assert math.isclose(data["floor"]["range_w"], P_HI - f, rel_tol=0.01)


def test_cap_json_and_table(tmp_path, capsys):
    prof = square_csv(tmp_path / "sq.csv")
    data = run_json(capsys, str(prof), "--cap-pct", "90")
    assert math.isclose(data["cap"]["energy_above_cap_j"], 0.1 * P_HI * 3 * T, rel_tol=0.01)
    assert main(["mitigate", str(prof), "--cap-pct", "90", "--floor-pct", "50",
                 "--ramp-limit-w-per-s", "1e5"]) == 0
    out = capsys.readouterr().out
    assert "computed at 0.1 s" in out and "storage:" in out and "slowdown" in out


def test_an_irregular_time_base_is_read_as_sample_and_hold(tmp_path, capsys):
    path = tmp_path / "irregular.csv"
    path.write_text("t_s,power_w\n0,100\n0.5,300\n0.6,100\n2.0,100\n", encoding="utf-8")
    data = run_json(capsys, str(path))
    assert data["input"]["regular"] is False
    # 100 W for 0.5 s, 300 W for 0.1 s, 100 W for 1.4 s, then the median interval (0.5 s)
    assert math.isclose(data["load"]["energy_j"], 50 + 30 + 140 + 50, rel_tol=1e-12)
    assert data["load"]["peak_w"] == 300.0


def test_mitigate_reads_a_facility_profile_and_conserves_energy(tmp_path, capsys):
    root = tmp_path / "ds"
    shards.publish_run(root, step_run("run-a", seconds=120, seed=1), refresh_card=False)
    site = tmp_path / "site.parquet"
    assert main(["facility", str(root), "--gpus", "64", "--sync", "lockstep", "--out",
                 str(site), "--format", "json"]) == 0
    capsys.readouterr()
    table = pq.read_table(site).to_pandas()
    fine = table[table.resolution_s == 0.1]
    site_energy_j = float((fine.facility_kw * 1e3 * fine.length_s).sum())
    data = run_json(capsys, str(site), "--ramp-limit-w-per-s", "1000", "--efficiency", "1")
    assert data["input"]["kind"] == "facility" and data["input"]["measured"] is False
    assert math.isclose(data["resolution_s"], 0.1, rel_tol=1e-9)
    assert math.isclose(data["load"]["energy_j"], site_energy_j, rel_tol=1e-9)
    s = data["storage"]
    # energy in = energy out: the grid's energy plus what the storage gave net is the load's
    assert math.isclose(data["grid"]["energy_j"] + s["net_discharged_j"],
                        data["load"]["energy_j"], rel_tol=1e-9)
    assert data["grid"]["ramp_up_max_w_per_s"] <= 1000 * (1 + 1e-9)
    assert any("composed" in n for n in data["notes"])
    minute = run_json(capsys, str(site), "--resolution-s", "60")
    assert minute["resolution_s"] == 60.0
    assert math.isclose(minute["load"]["energy_j"], site_energy_j, rel_tol=1e-6)


def test_a_facility_profile_of_1s_average_sources_warns_on_bands(tmp_path, capsys):
    """A summary that says its sources report 1 s averages makes the band figures flagged."""
    import pyarrow as pa

    n = 6000
    t = np.arange(n) * 0.1
    table = pa.table({"resolution_s": np.full(n, 0.1), "start_s": t, "length_s": np.full(n, 0.1),
                      "gpu_kw": np.full(n, 1.0), "it_kw": np.full(n, 1.0),
                      "facility_kw": 1.0 + 0.5 * (np.sin(2 * np.pi * 0.5 * t) > 0)})
    summary = {"limits": ["source run-x: power_is_1s_average: band power above 0.5 Hz is "
                          "filtered"], "sources": []}
    table = table.replace_schema_metadata({b"llm_powertrace_facility": json.dumps(summary)})
    path = tmp_path / "site.parquet"
    pq.write_table(table, path)
    data = run_json(capsys, str(path))
    assert data["input"]["sensor_average_s"] == 1.0
    assert any("under-reported" in n for n in data["notes"])


def test_out_csv_and_figure(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    prof = square_csv(tmp_path / "sq.csv", dt=1.0)
    out, fig = tmp_path / "grid.csv", tmp_path / "m.png"
    assert main(["mitigate", str(prof), "--ramp-limit-w-per-s", "2e4", "--out", str(out),
                 "--figure", str(fig)]) == 0
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "t_s,load_w,grid_w,soc_j" and len(lines) == 1 + 7 * 400
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(("content", "where"), [
    ("", "line 1"),
    ("time,power\n0,1\n1,2\n", "line 1"),
    ("t_s,power_w\n0,1\n", "field 't_s'"),
    ("t_s,power_w\n0,1\n1,nan\n", "line 3, field 'power_w'"),
    ("t_s,power_w\n0,1\n1,inf\n", "line 3, field 'power_w'"),
    ("t_s,power_w\n0,1\n1,-5\n", "line 3, field 'power_w'"),
    ("t_s,power_w\n0,1\n1,2\n1,3\n", "line 4, field 't_s'"),
    ("t_s,power_w\n0,1\n2,2\n1,3\n", "line 4, field 't_s'"),
    ("t_s,power_w\n0,1\n1,abc\n", "line 3, field 'power_w'"),
    ("t_s,power_w\n0,1\n1,2,3\n", "line 3"),
    ("t_s,power_w\n0,1\n1,1e300\n", "line 3, field 'power_w'"),
])
def test_bad_csv_is_one_line_naming_file_and_line(tmp_path, capsys, content, where):
    path = tmp_path / "bad.csv"
    path.write_text(content, encoding="utf-8")
    assert main(["mitigate", str(path), "--ramp-limit-w-per-s", "10"]) == 1
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith("error: 'bad.csv'") and where in first, err
    assert "Traceback" not in err and "hint" not in err


@pytest.mark.parametrize(("option", "value"), [
    ("--ramp-limit-w-per-s", "0"), ("--ramp-limit-w-per-s", "-3"),
    ("--ramp-limit-w-per-s", "1e300"), ("--floor-pct", "0"), ("--floor-pct", "150"),
    ("--cap-pct", "-1"), ("--efficiency", "1.5"), ("--efficiency", "0"),
    ("--resolution-s", "0.01"), ("--resolution-s", "1e9"), ("--ceiling-w", "1e300"),
    ("--sensor-average-s", "-1"),
])
def test_absurd_options_are_refused_naming_the_option(tmp_path, capsys, option, value):
    prof = square_csv(tmp_path / "sq.csv", dt=1.0)
    assert main(["mitigate", str(prof), option, value]) == 2
    err = capsys.readouterr().err
    named = {"--ramp-limit-w-per-s": "--ramp-limit", "--ceiling-w": "--ceiling"}.get(option, option)
    assert named in err and len(err.strip().splitlines()) == 1, err


def test_non_finite_option_values_are_usage_errors(tmp_path, capsys):
    prof = square_csv(tmp_path / "sq.csv", dt=1.0)
    with pytest.raises(SystemExit) as exc:
        main(["mitigate", str(prof), "--floor-pct", "nan"])
    assert exc.value.code == 2
    assert "--floor-pct" in capsys.readouterr().err


def test_a_fifo_or_folder_is_refused_without_reading(tmp_path, capsys):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    assert main(["mitigate", str(fifo)]) == 1
    assert "not a regular file" in capsys.readouterr().err
    assert main(["mitigate", str(tmp_path)]) == 1
    assert "not a regular file" in capsys.readouterr().err


def test_too_many_rows_stop_at_the_bound_before_growing(tmp_path, monkeypatch):
    monkeypatch.setattr(mit.profile, "MAX_SAMPLES", 100)
    path = tmp_path / "long.csv"
    path.write_text("t_s,power_w\n" + "".join(f"{i},1\n" for i in range(500)), encoding="utf-8")
    with pytest.raises(mit.profile.InputError, match="more than 100 samples") as exc:
        mit.read_csv(path)
    assert exc.value.line == 102


def test_a_parquet_that_is_not_a_facility_profile_is_refused(tmp_path, capsys):
    import pyarrow as pa

    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), path)
    assert main(["mitigate", str(path)]) == 1
    assert "not a profile written by 'llm-powertrace facility --out'" in capsys.readouterr().err


def test_a_site_composed_from_cpu_proxy_runs_is_labelled(tmp_path, capsys):
    root = tmp_path / "ds"
    shards.publish_run(root, step_run("run-p", seconds=60, seed=4, platform="cpu_proxy",
                                      sampler="cpu_proxy", devices=2), refresh_card=False)
    site = tmp_path / "site.parquet"
    assert main(["facility", str(root), "--gpus", "16", "--out", str(site), "--format",
                 "json"]) == 0
    capsys.readouterr()
    data = run_json(capsys, str(site), "--floor-pct", "50")
    assert data["input"]["cpu_proxy"] is True
    assert data["notes"][0].startswith("cpu_proxy sources")
    assert main(["mitigate", str(site)]) == 0
    assert "cpu_proxy sources: NOT GPU data" in capsys.readouterr().out.splitlines()[0]
