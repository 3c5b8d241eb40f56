"""``import series``: change-only logs (``--hold previous``), the gap rule, energy columns."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from llm_powertrace_ds import layout
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.series import import_series
from llm_powertrace_ds.shards import read_table


def change_only_csv(tmp_path):
    """10 s idle at 70 W, then 20 s of load: a row only where the reading changed."""
    rows = ["0,70.0"] + [f"{10 + k},{605.3 if k % 2 else 589.0}" for k in range(21)]
    path = tmp_path / "power_timeline.csv"
    path.write_text("time,power\n" + "\n".join(rows) + "\n")
    return path


def _energy(tmp_path, capsys, *hold):
    out = tmp_path / f"ds{len(hold)}"
    assert main(["import", "series", str(change_only_csv(tmp_path)), "--out", str(out),
                 "--workload", "inference", "--time-col", "time", "--power-col", "power",
                 "--unit", "W", "--num-gpus", "1", "--format", "json", *hold]) == 0
    (res,) = json.loads(capsys.readouterr().out)
    (row,) = read_table(layout.runs_path(out, "inference", res["platform"],
                                         res["run_id"])).to_pylist()
    return row


def test_a_change_only_log_held_reads_the_held_energy(tmp_path, capsys):
    row = _energy(tmp_path, capsys, "--hold", "previous")
    held_j = 70 * 10 + 10 * 589.0 + 10 * 605.3  # 12,643 J
    assert row["sample_hold"] == "previous"
    assert row["energy_j"] == pytest.approx(held_j, rel=0.005)
    assert row["energy_j"] == pytest.approx(12_643, rel=1e-4)
    assert row["mean_power_w"] == pytest.approx(held_j / 30, rel=0.005)
    assert "gap" not in row["quality_flags"]
    linear = _energy(tmp_path, capsys)  # interpolated, as before: +20 %
    assert linear["sample_hold"] == "linear"
    assert linear["energy_j"] == pytest.approx(15_238, rel=1e-4)


def test_one_time_far_away_is_refused_by_the_gap_rule_before_any_grid(tmp_path):
    path = tmp_path / "far.csv"
    path.write_text("time,power\n0,100\n1,100\n2,100\n1000000000,100\n")
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as err:
            import_series(path, time_col="time", power_col="power", unit="W", num_gpus=1,
                          workload="finetune")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(err.value)
    assert "far.csv" in message and "line 5" in message and "'time'" in message
    assert "gap of" in message and "separate runs" in message
    assert peak < 50 * 2**20


def test_a_span_over_three_days_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "long.csv"
    hours = range(0, 5 * 24, 5)
    path.write_text("time,power\n" + "".join(f"{h * 3600},100\n" for h in hours))
    with pytest.raises(InputError, match=r"long\.csv.*spans 4\.79 days.*split it into runs"):
        import_series(path, time_col="time", power_col="power", unit="W", num_gpus=1,
                      workload="finetune")


@pytest.mark.parametrize("time", ["1e300", "9" * 400])
def test_a_time_beyond_any_clock_is_refused_by_line(tmp_path, time):
    path = tmp_path / "huge.csv"
    path.write_text(f"time,power\n0,100\n{time},100\n")
    with pytest.raises(InputError, match=r"huge\.csv.*line 3.*'time'.*not a finite time within"):
        import_series(path, time_col="time", power_col="power", unit="W", num_gpus=1,
                      workload="finetune")


@pytest.mark.parametrize("column", ["gpu0_energy", "energy_j", "E [mJ]", "kWh"])
def test_an_energy_column_is_never_read_as_watts(tmp_path, column):
    path = tmp_path / "zeus.csv"
    path.write_text(f"time,{column}\n0,10\n1,20\n2,30\n")
    with pytest.raises(InputError, match=r"holds energy, not power.*import zeus"):
        import_series(path, time_col="time", power_col=column, unit="W", num_gpus=1,
                      workload="finetune")
