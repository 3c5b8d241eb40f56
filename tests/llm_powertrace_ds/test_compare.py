"""``llm-powertrace compare``: our figures beside the publisher's, in the publisher's units."""

from __future__ import annotations

import json
import math

import pytest
from importers.mlenergy_v3_writer import write_tree
from importers.powertrace_newest_writer import RUN_ID, write_compact

from llm_powertrace_ds.compare import CATALOG_FIGURES, compare_rows, diff_pct
from llm_powertrace_ds.shards import list_runs


def _by_figure(rows, run_id):
    return {r["figure"]: r for r in rows if r["run_id"] == run_id}


def test_an_ml_energy_task_prints_its_steady_state_figures_beside_ours(tmp_path, cli):
    tree = write_tree(tmp_path / "bench", gpus=2)
    out = tmp_path / "ds"
    assert cli(["import", "mlenergy-v3", tmp_path / "bench", "--out", out]).returncode == 0
    res = cli(["compare", out, "--format", "json"])
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    (run_id,) = {r["run_id"] for r in rows}
    got = _by_figure(rows, run_id)
    data = tree.data
    assert [(k, got[k]["unit"]) for k in got] == [
        ("steady-state energy", "J"), ("steady-state duration", "s"),
        ("steady-state mean power", "W"), ("steady-state energy per token", "J/token")]
    assert got["steady-state energy"]["theirs"] == data["steady_state_energy"]
    assert got["steady-state energy per token"]["theirs"] == (
        data["steady_state_energy_per_token"])
    assert got["steady-state mean power"]["theirs"] == pytest.approx(
        data["steady_state_energy"] / data["steady_state_duration"])
    for row in got.values():
        assert abs(row["diff_pct"]) < 0.1, row  # the writer's figures within 0.1 %
    table = cli(["compare", out]).stdout
    assert "steady-state energy per token" in table and "J/token" in table


def test_the_catalog_figures_are_in_their_units_with_the_difference(tmp_path, cli):
    out = tmp_path / "ds"
    path = write_compact(tmp_path / "export")
    assert cli(["import", "powertrace-csv", path, "--workload", "inference", "--out",
                out]).returncode == 0
    rows = json.loads(cli(["compare", out, "--run", RUN_ID, "--format", "json"]).stdout)
    got = _by_figure(rows, RUN_ID)
    (run,) = list_runs(out)
    assert got["energy"]["unit"] == "Wh"
    assert got["energy"]["ours"] == pytest.approx(run["energy_j"] / 3600)
    assert got["energy"]["theirs"] == 5.966
    assert got["energy"]["diff_pct"] == pytest.approx(
        100 * (run["energy_j"] / 3600 - 5.966) / 5.966)
    assert got["mean power per GPU"]["ours"] == pytest.approx(run["mean_power_w"] / 2)
    assert got["peak power"]["theirs"] == 903.0 and got["peak power"]["unit"] == "W"
    assert set(got) == {f.name for f in CATALOG_FIGURES}


@pytest.mark.external
def test_the_seed_catalog_entries_agree_with_our_figures(tmp_path, cli, external_dir):
    seed = external_dir / "powertraces-v6"
    out = tmp_path / "ds"
    for csv in sorted(seed.glob("*.csv")):
        assert cli(["import", "powertrace-csv", csv, "--meta", seed / "catalog" /
                    (csv.stem + ".json"), "--workload", "finetune", "--out",
                    out]).returncode == 0
    rows = json.loads(cli(["compare", out, "--format", "json"]).stdout)
    assert len({r["run_id"] for r in rows}) == len(list(seed.glob("*.csv")))
    close = {"energy", "mean power", "p95 power", "p99 power", "peak power", "duration",
             "ramp events (1 s)"}
    for row in rows:
        assert row["diff_pct"] is not None and math.isfinite(row["diff_pct"]), row
        if row["figure"] in close:  # the same trace, the same definitions: within 0.1 %
            assert abs(row["diff_pct"]) < 0.1, row
    assert {r["figure"] for r in rows} == {f.name for f in CATALOG_FIGURES}


def test_our_own_runs_have_nothing_to_compare_and_an_unknown_run_is_named(tmp_path, cli):
    assert compare_rows([{"run_id": "ours", "energy_j": 10.0, "mean_power_w": 1.0}]) == []
    tree = write_tree(tmp_path / "bench", gpus=1)
    assert tree.results.is_file()
    out = tmp_path / "ds"
    assert cli(["import", "mlenergy-v3", tmp_path / "bench", "--out", out]).returncode == 0
    res = cli(["compare", out, "--run", "nope"])
    assert res.returncode == 1
    assert "--run" in res.stderr and "'nope'" in res.stderr


@pytest.mark.parametrize("ours,theirs,expected", [
    (101.0, 100.0, 1.0), (99.0, 100.0, -1.0), (1.0, 0.0, None), (None, 1.0, None),
    (1.0, None, None)])
def test_diff_pct(ours, theirs, expected):
    got = diff_pct(ours, theirs)
    assert got == expected if expected is None else math.isclose(got, expected)
