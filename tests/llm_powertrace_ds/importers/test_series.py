"""``import series``: a plain time/power CSV of a device, a node or a cluster total."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from llm_powertrace_ds import layout
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.series import import_series
from llm_powertrace_ds.shards import publish_run, read_table


def cluster_csv(tmp_path, rows=None, name="cluster.csv", tail="\n"):
    rows = rows if rows is not None else [
        f"2026-05-01T12:00:{k:02d},{1.2 + 0.1 * (k % 3):.3f}" for k in range(40)]
    path = tmp_path / name
    path.write_text("time,MW\n" + "\n".join(rows) + tail)
    return path


def test_a_cluster_total_in_mw_is_one_flagged_series(tmp_path):
    path = cluster_csv(tmp_path)
    run = import_series(path, time_col="time", power_col="MW", unit="MW", num_gpus=1024,
                        workload="finetune", platform="h100_sxm_80gb", tz="UTC")
    assert run.meta["sampler"] == "import:series" and run.meta["num_gpus"] == 1024
    assert len(run.devices) == 1 and "aggregate_series" in run.flags
    assert run.devices[0].signals["power_w"][0] == pytest.approx(1.2e6)
    assert list(run.devices[0].t_ms[:3]) == [0, 1000, 2000]
    assert run.meta["start_time"].isoformat() == "2026-05-01T12:00:00+00:00"
    res = publish_run(tmp_path / "ds", run)
    assert "missing_gpu" not in res.flags and "implausible_value" not in res.flags
    (row,) = read_table(layout.runs_path(tmp_path / "ds", "finetune", run.platform,
                                         run.run_id)).to_pylist()
    # node totals are computed; per-device lists stay null, with the reason
    assert row["energy_j"] == pytest.approx(np.trapezoid(run.devices[0].signals["power_w"],
                                                         dx=1.0), rel=1e-6)
    assert row["gpu_energy_j"] is None and row["gpu_peak_power_w"] is None
    assert any(n.startswith("gpu_energy_j: aggregate_series") for n in row["metric_notes"])


def test_one_device_is_not_an_aggregate(tmp_path):
    path = cluster_csv(tmp_path, [f"{k * 0.1:.1f},{300 + k}" for k in range(20)])
    run = import_series(path, time_col="time", power_col="MW", unit="W", num_gpus=1,
                        workload="inference")
    assert "aggregate_series" not in run.flags and run.meta.get("start_time") is None
    assert list(run.devices[0].t_ms[:3]) == [0, 100, 200]
    row = publish_run(tmp_path / "ds", run)
    assert row.run_id.startswith("import-series-")


def test_the_mean_device_is_range_checked_not_the_total(tmp_path):
    # 40 kW over 8 GPUs is 5 kW per GPU... over 4 GPUs 10 kW per GPU is not physical
    path = cluster_csv(tmp_path, [f"{k},{40}" for k in range(5)])
    import_series(path, time_col="time", power_col="MW", unit="kW", num_gpus=8,
                  workload="finetune")
    with pytest.raises(InputError, match="outside the physical range") as info:
        import_series(path, time_col="time", power_col="MW", unit="kW", num_gpus=4,
                      workload="finetune")
    assert info.value.field == "MW" and info.value.line == 2


@pytest.mark.parametrize(("rows", "line", "field", "value"), [
    (["0,0.001", "1,lots"], 3, "MW", "lots"),
    (["0,0.001", "yesterday,0.001"], 3, "time", "yesterday"),
    (["0,0.001", "1,0.001", "1,0.001"], 4, "time", "must increase"),
    (["0,0.001", "1"], 3, None, "1 cells where the header has 2"),
])
def test_a_bad_line_is_named(tmp_path, rows, line, field, value):
    path = cluster_csv(tmp_path, rows)
    with pytest.raises(InputError) as info:
        import_series(path, time_col="time", power_col="MW", unit="MW", num_gpus=8,
                      workload="finetune")
    assert info.value.line == line and info.value.field == field
    assert str(path) in str(info.value) and value in str(info.value)


def test_empty_power_is_null_and_a_cut_last_line_is_dropped(tmp_path, caplog):
    path = cluster_csv(tmp_path, ["0,1.0", "1,", "2,NaN", "3,1.1", "4"], tail="")  # kW
    with caplog.at_level(logging.WARNING, logger="llm_powertrace_ds.importers"):
        run = import_series(path, time_col="time", power_col="MW", unit="kW", num_gpus=8,
                            workload="finetune")
    power = run.devices[0].signals["power_w"]
    assert len(power) == 4 and np.isnan(power[1]) and np.isnan(power[2])
    assert "line 6 is cut off" in caplog.text


def test_an_unknown_column_is_named(tmp_path):
    path = cluster_csv(tmp_path)
    with pytest.raises(InputError, match="no column 'power'") as info:
        import_series(path, time_col="time", power_col="power", unit="MW", num_gpus=8,
                      workload="finetune")
    assert info.value.field == "power" and info.value.line == 1


def test_the_cli_imports_a_series_and_asks_for_what_it_needs(tmp_path, capsys):
    path = cluster_csv(tmp_path)
    out = tmp_path / "ds"
    assert main(["import", "series", str(path), "--out", str(out), "--workload", "finetune",
                 "--time-col", "time", "--power-col", "MW"]) == 2
    assert "--unit, --num-gpus" in capsys.readouterr().err
    assert main(["import", "series", str(path), "--out", str(out), "--workload", "finetune",
                 "--time-col", "time", "--power-col", "MW", "--unit", "MW", "--num-gpus",
                 "1024", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["num_gpus"] == 1024 and "aggregate_series" in row["flags"]
