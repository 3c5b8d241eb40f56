"""Through the command line, a composed site's storage is a size one can build to.

``facility --out`` composes a lock-step site from a measured-like run (a job that starts once,
repeats its steady window and stops once); ``mitigate --ramp-limit 1MW/min`` sizes storage for it.
The size must not grow with the horizon nor depend on where the profile starts, and the grid
side's 60 s ramp must not exceed the load's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from llm_powertrace_ds import shards
from llm_powertrace_ds.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_facility import step_run  # noqa: E402  (the facility tests' synthetic training run)


@pytest.fixture(scope="module")
def sites(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("sites")
    root = tmp / "ds"
    shards.publish_run(root, step_run("run-a", seconds=300, seed=2, devices=8),
                       refresh_card=False)
    out = {}
    for horizon in ("1h", "2h", "4h"):
        out[horizon] = tmp / f"site-{horizon}.parquet"
        assert main(["-q", "facility", str(root), "--gpus", "4096", "--sync", "lockstep",
                     "--duration", horizon, "--out", str(out[horizon]), "--format",
                     "json"]) == 0
    return out


def mitigate(capsys, site: Path, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["mitigate", str(site), "--ramp-limit", "1MW/min", "--format", "json",
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_storage_for_a_site_does_not_grow_with_the_horizon_or_move_with_the_start(sites, capsys):
    runs = {h: mitigate(capsys, p) for h, p in sites.items()}
    later = mitigate(capsys, sites["1h"], "--skip", "30s")
    sizes = [r["storage"]["energy_j"] for r in runs.values()]
    assert min(sizes) > 0
    assert max(sizes) <= min(sizes) * 1.01
    assert later["storage"]["energy_j"] == pytest.approx(sizes[0], rel=0.01)
    for r in [*runs.values(), later]:
        assert r["storage"]["ramp_limit_w_per_s"] == pytest.approx(1e6 / 60)
        assert r["grid"]["ramp_max_w_per_s"]["60"] <= r["load"]["ramp_max_w_per_s"]["60"]
        assert r["grid"]["ramp_up_max_w_per_s"] <= 1e6 / 60 * (1 + 1e-9)
    # the job's start and stop are sized apart from the periodic swing
    s = runs["1h"]["storage"]
    assert s["stop"] is not None and s["stop"]["delta_w"] > 0
    assert s["stop"]["storage_energy_j"] == pytest.approx(
        s["stop"]["delta_w"] ** 2 / (2 * 1e6 / 60))
    assert s["energy_with_starts_stops_j"] > s["energy_j"]


def test_a_power_given_for_a_ramp_is_refused_naming_the_option(sites, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["mitigate", str(sites["1h"]), "--ramp-limit", "20MW"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --ramp-limit/--ramp-limit-w-per-s: '20MW'" in err and "unit of power, not of ramp" in err
