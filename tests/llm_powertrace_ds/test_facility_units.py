"""Unit conversions of ``facility`` and the energy metrics, checked on known numbers.

A PUE curve over ``it_power_kw`` is read at IT power in kW (W / 1000); site metrics are SI
(W, J, W/s), printed in MW, MWh and MW/min; energy counters are mJ / 1000 (J); the power integral
reads ``t_ms`` / 1000 (s); a preset's constant part per node scales with GPUs per node / 8.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from llm_powertrace_ds import facility as fac
from llm_powertrace_ds import metrics, shards
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.run import DeviceSeries, Run


def constant_run(power_w: float = 500.0, *, devices: int = 8, seconds: float = 60.0) -> Run:
    """``devices`` GPUs drawing ``power_w`` each, read every 100 ms for ``seconds``."""
    n = int(seconds * 10)
    t = np.arange(n, dtype=np.int64) * 100
    devs = [DeviceSeries(g, t, {"power_w": np.full(n, power_w)}, power_limit_w=700.0)
            for g in range(devices)]
    meta = {"run_id": "flat", "workload": "finetune", "platform": "h100_sxm_80gb",
            "num_gpus": devices, "sample_period_ms": 100.0, "sampler": "nvml"}
    return Run(meta, devs, [])


def kw_curve(tmp_path) -> fac.Pue:
    path = tmp_path / "pue_kw.csv"
    path.write_text("it_power_kw,pue\n0,1.6\n40,1.2\n", encoding="utf-8")
    return fac.load_pue_curve(path)


def test_a_pue_curve_over_it_power_is_read_in_kilowatts(tmp_path):
    curve = kw_curve(tmp_path)
    it_w = np.array([0.0, 10_000.0, 20_000.0, 40_000.0, 80_000.0])
    # PUE(10 kW) = 1.6 - 0.01 * 10 = 1.5; PUE(20 kW) = 1.4; held at 1.2 beyond 40 kW
    np.testing.assert_allclose(curve.apply(it_w, None),
                               it_w * np.array([1.6, 1.5, 1.4, 1.2, 1.2]))


def test_a_composed_site_applies_the_kilowatt_curve_to_its_it_power(tmp_path):
    # five 8-GPU nodes at 8 x 500 W, no overhead: 20 kW of IT power, PUE 1.4
    cfg = fac.FacilityConfig(gpus=40, overhead=fac.OVERHEAD_PRESETS["none"],
                             pue=kw_curve(tmp_path), window="whole")
    res = fac.compose([fac.source_from_run(constant_run(), window="whole")], cfg)
    np.testing.assert_allclose(res.it_w, 20_000.0)
    np.testing.assert_allclose(res.facility_w, 28_000.0)
    m, _ = fac.site_metrics(res)
    assert m["mean_w"] == pytest.approx(28_000.0)
    assert m["it_mean_w"] == pytest.approx(20_000.0)


def test_site_metrics_convert_watts_to_kilowatts_and_joules_to_megawatt_hours(tmp_path):
    ov = fac.parse_overhead("1000:0.5")
    cfg = fac.FacilityConfig(gpus=16, overhead=ov, nodes_per_rack=1, pue=fac.Pue(1.25),
                             window="whole")
    res = fac.compose([fac.source_from_run(constant_run(), window="whole")], cfg)
    m, _ = fac.site_metrics(res)
    # per node: 4000 W of GPUs + 1000 W + 0.5 x 4000 W = 7000 W; two nodes; PUE 1.25
    assert m["gpu_mean_w"] == pytest.approx(8e3) and m["gpu_peak_w"] == pytest.approx(8e3)
    assert m["it_mean_w"] == pytest.approx(14e3) and m["it_peak_w"] == pytest.approx(14e3)
    assert m["rack_peak_w"] == pytest.approx(7e3)  # one node per rack
    assert m["peak_w"] == pytest.approx(17_500.0)
    duration_s = len(res.facility_w) * res.step_s
    assert m["duration_s"] == pytest.approx(duration_s)
    assert m["energy_j"] == pytest.approx(17_500.0 * duration_s)


def test_a_preset_overhead_scales_its_constant_part_with_gpus_per_node():
    eight = fac.parse_overhead("dgx-h100", 8)
    four = fac.parse_overhead("dgx-h100", 4)
    assert four.idle_w == pytest.approx(eight.idle_w * 4 / 8)
    assert four.fraction == eight.fraction
    # the vendor's 10.2 kW maximum of 8 x 700 W, and the half node's share of it
    assert eight.node_w(8 * 700.0) == pytest.approx(10_200.0)
    assert four.node_w(4 * 700.0) == pytest.approx(10_200.0 / 2)


def test_an_energy_counter_in_millijoules_is_reported_in_joules():
    t = np.arange(11, dtype=np.int64) * 100
    counter_mj = 5e6 + np.arange(11) * 1000.0  # 1 J per 100 ms: 10 J over the run
    assert metrics.counter_energy_j(t, counter_mj) == pytest.approx(10.0)


def test_the_power_integral_reads_milliseconds_as_seconds():
    t = np.arange(101, dtype=np.int64) * 100  # 10 s
    dev = DeviceSeries(0, t, {"power_w": np.full(101, 250.0)})
    assert metrics.device_energy_j(dev) == pytest.approx(2500.0)
    run = Run({"run_id": "e", "workload": "finetune", "platform": "l40s", "num_gpus": 1,
               "sample_period_ms": 100.0}, [dev], [])
    assert metrics.compute_run_metrics(run)["energy_j"] == pytest.approx(2500.0)


def test_power_and_time_options_take_units():
    assert fac.parse_overhead("1.5kW:0.3").idle_w == pytest.approx(1500.0)
    assert fac.parse_overhead("1500:0.3").idle_w == pytest.approx(1500.0)  # a bare number is W
    with pytest.raises(InputError, match=r"field '--node-overhead'.*'1MW/min:0\.3'"):
        fac.parse_overhead("1MW/min:0.3")  # a ramp is not a power


def test_the_cli_reads_a_horizon_with_units_and_prints_site_figures_in_mw(tmp_path, capsys):
    root = tmp_path / "ds"
    shards.publish_run(root, constant_run(), refresh_card=False)
    assert main(["facility", str(root), "--gpus", "8", "--duration", "1.5min", "--window",
                 "whole", "--node-overhead", "0.5kW:0", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["site"]["duration_s"] == pytest.approx(90.0)
    assert data["node_overhead"]["idle_w"] == pytest.approx(500.0)
    # SI in JSON, named by unit: 8 x 500 W + 500 W per node
    assert data["metrics"]["mean_w"] == pytest.approx(4500.0)
    assert data["metrics"]["energy_j"] == pytest.approx(4500.0 * 90.0)
    assert main(["facility", str(root), "--gpus", "8", "--duration", "1.5min", "--window",
                 "whole", "--node-overhead", "0.5kW:0"]) == 0
    text = capsys.readouterr().out
    assert "0.0045 MW\n" in text and " MWh\n" in text and " MW/s\n" in text
    with pytest.raises(SystemExit) as exc:
        main(["facility", str(root), "--gpus", "8", "--duration", "20MW"])
    assert exc.value.code == 2
    assert "'MW' is a unit of power, not of time" in capsys.readouterr().err
