"""``dcgmi dmon`` logs (written here in dmon's documented text layout)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.shards import publish_run, read_run

HEADER = "#Entity   POWER   TOTEC      TMPTR  GPUTL  SMCLK  MMCLK\nID        W       mJ         C      %      MHZ    MHZ\n"


def write_log(tmp_path, n=30, gpus=2, extra=""):
    lines = [HEADER]
    for k in range(n):
        if k == 10:
            lines.append(HEADER)  # dmon reprints its header
        for g in range(gpus):
            power = 100.0 + 300.0 * (k >= 5) + g
            lines.append(f"GPU {g}     {power:.2f}  {1_000_000 + k * int(power * 100)}  "
                         f"{40 + g}     {90 if k >= 5 else 0}     1980   2619\n")
    path = tmp_path / "dmon.txt"
    path.write_text("".join(lines) + extra)
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"sample_period_ms": 100, "gpu_name": "NVIDIA H100 80GB HBM3",
                                "model_name": "Llama-3.1-8B",
                                "start_time": "2026-11-30T12:00:00Z"}))
    return path, meta


def test_dmon_log_imports_like_nvidia_smi(tmp_path):
    path, meta = write_log(tmp_path)
    run = import_file("dcgm", path, workload="inference", meta_path=meta)
    assert len(run.devices) == 2 and run.platform == "h100_sxm_80gb"
    assert run.meta["sampler"] == "import:dcgm" and run.meta["power_field"] == "power_usage"
    assert "power_is_1s_average" in run.flags  # field 155 on Hopper
    dev = run.devices[0]
    assert list(dev.t_ms[:3]) == [0, 100, 200] and len(dev.t_ms) == 30
    assert dev.signals["energy_mj"][0] == 0 and dev.signals["power_w"][5] == pytest.approx(400)
    assert np.all(dev.signals["sm_clock_mhz"] == 1980) and dev.signals["temp_c"][0] == 40
    assert run.meta["start_time"].isoformat().startswith("2026-11-30T12:00:00")
    res = publish_run(tmp_path / "ds", run)
    assert read_run(tmp_path / "ds", res.run_id).meta["sampler"] == "import:dcgm"


def test_a_log_needs_the_period(tmp_path):
    path, meta = write_log(tmp_path)
    meta.write_text(json.dumps({"gpu_name": "NVIDIA H100 80GB HBM3"}))
    with pytest.raises(InputError, match="sample_period_ms"):
        import_file("dcgm", path, workload="inference", meta_path=meta)


def test_bad_values_name_line_and_field(tmp_path):
    path, meta = write_log(tmp_path, extra="GPU 0     fast  1  1  1  1  1\nGPU 1 1 1 1 1 1 1\n")
    with pytest.raises(InputError) as info:
        import_file("dcgm", path, workload="inference", meta_path=meta)
    assert info.value.field == "POWER" and info.value.line == 65 and "dmon.txt" in str(info.value)


def test_a_cut_off_last_line_is_dropped(tmp_path):
    path, meta = write_log(tmp_path, extra="GPU 0     101.0  12")
    run = import_file("dcgm", path, workload="inference", meta_path=meta)
    assert len(run.devices[0].t_ms) == 30
