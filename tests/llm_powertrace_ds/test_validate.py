import numpy as np

from llm_powertrace_ds.validate import validate_run


def test_clean_run_has_no_flags(make_run):
    assert validate_run(make_run()).flags == []


def test_each_flag(make_run):
    run = make_run(n=400)
    d = run.devices[0]
    d.t_ms[200:] += 2000  # a 2 s stall (gap + stall)
    d.signals["power_w"][10] = -5  # negative (error)
    d.signals["power_w"][20] = 1000  # > 2 x 350 W
    d.signals["power_w"][250:380] = 123.0  # constant for > 10 s
    flags = validate_run(run).flags
    for f in ("gap", "stall", "negative_power", "implausible_power", "stuck_sensor"):
        assert f in flags, f
    run = make_run(num_gpus=4)
    assert "missing_gpu" in validate_run(run).flags
    run = make_run()
    run.devices[1].signals["gpu_util_pct"] = np.zeros(3)
    assert validate_run(run).errors == ["unequal_lengths"]
    run = make_run()
    run.devices[0].t_ms = np.array([], dtype=np.int64)
    run.devices[0].signals = {}
    assert "empty" in validate_run(run).errors


def test_energy_mismatch_and_cpu_proxy(make_run):
    run = make_run(platform="cpu_proxy", sampler="cpu_proxy")
    for d in run.devices:
        t = d.t_ms / 1000.0
        d.signals["energy_mj"] = (t - t[0]) * 1000 * 150  # 150 W vs ~200 W measured
    flags = validate_run(run).flags
    assert "energy_mismatch" in flags and "cpu_proxy" in flags
