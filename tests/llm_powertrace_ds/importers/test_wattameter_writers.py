"""``import wattameter`` on logs written by WattAMeter itself (0.7.4, 0.8.0 and 0.9.3).

Each test runs WattAMeter's own command line in a process of its own
(``wattameter_writer.py``), with only the NVML binding replaced by the project's test double,
stops it with SIGINT as Slurm does, and imports the files it wrote, under the names it gave
them, through ``llm-powertrace import``. The figures are compared with the log's own integral,
read with WattAMeter's own reader (``wattameter.utils.postprocessing.file_to_df``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from llm_powertrace_ds import layout
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.shards import read_run, read_table

WRITER = Path(__file__).with_name("wattameter_writer.py")
JOB = "10989526"
OLD_WRITERS = Path(sys.prefix) / "writers"


def writer_path(version: str) -> str:
    """Where a WattAMeter version is installed (the Makefile's dev install puts old ones)."""
    if version == "0.9.3":
        from importlib.metadata import version as dist_version

        import wattameter  # noqa: F401 - the extra's version

        assert dist_version("wattameter") == "0.9.3"
        return "installed"
    folder = OLD_WRITERS / f"wattameter-{version}"
    if not (folder / "wattameter" / "cli" / "main.py").is_file():
        pytest.fail(f"WattAMeter {version} is not installed in {folder}: run `make test` (the "
                    "Makefile's dev install puts it there)")
    return str(folder)


def run_writer(version: str, work: Path, gpus: int, *args: str, seconds: float = 1.6) -> list[Path]:
    """Run WattAMeter ``version`` in ``work`` for ``seconds``, stop it with SIGINT."""
    work.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, str(WRITER), writer_path(version), str(work),
                             str(gpus), "--", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(seconds)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert f"wattameter-{version}" in out or version == "0.9.3", out
    return sorted(work.iterdir())


@pytest.fixture(autouse=True)
def _no_amd_gpu(monkeypatch):
    """No AMD GPU here, as on this machine.

    The amdsmi package (a dependency of zeus) fails at import without ROCm's library, with a
    KeyError WattAMeter's optional import does not catch.
    """
    if "wattameter" not in sys.modules:
        monkeypatch.setitem(sys.modules, "amdsmi", None)


def log_integral_j(path: Path, gpus: int) -> tuple[float, float]:
    """(Σ_g ∫ P_g dt in J, span in s) of a WattAMeter power log, read by WattAMeter's reader."""
    from wattameter.utils.postprocessing import file_to_df

    with open(path, encoding="utf-8") as fh:
        notes = 0
        for line in fh:
            if line.startswith("# timestamp"):
                break
            notes += 1
    with open(path, encoding="utf-8") as fh:
        df = file_to_df(fh, skip_lines=notes)
    t_s = (df.index - df.index[0]).total_seconds().to_numpy()
    energy = sum(float(np.trapezoid(df[f"gpu-{g}[mW]"].to_numpy() / 1000.0, t_s))
                 for g in range(gpus))
    return energy, float(t_s[-1])


def import_cli(tmp_path, capsys, *files, meta=None):
    out = tmp_path / "ds"
    extra = ["--meta", str(meta)] if meta else []
    assert main(["import", "wattameter", *map(str, files), "--out", str(out), "--workload",
                 "finetune", "--platform", "h100_sxm_80gb", "--format", "json", *extra]) == 0
    (res,) = json.loads(capsys.readouterr().out)
    (row,) = read_table(layout.runs_path(out, "finetune", res["platform"],
                                         res["run_id"])).to_pylist()
    return row, read_run(out, res["run_id"])


def test_a_0_7_job_folder_as_nlr_publishes_it(tmp_path, capsys):
    folder = tmp_path / JOB
    names = [p.name for p in run_writer("0.7.4", folder, 4, "--id", JOB)]
    assert {"nvml_wattameter.log", "nvml_util_data_wattameter.log"} <= set(names)
    row, run = import_cli(tmp_path, capsys, folder)
    energy, span = log_integral_j(folder / "nvml_wattameter.log", 4)
    assert row["run_id"] == f"wattameter-{JOB}" and row["num_gpus"] == 4
    assert row["energy_j"] == pytest.approx(energy, rel=1e-3)
    assert row["mean_power_w"] == pytest.approx(energy / span, rel=1e-3)
    # 0.7 reads nvmlDeviceGetPowerUsage: a 1 s average on an H100
    assert row["power_field"] == "power_usage" and "power_is_1s_average" in row["quality_flags"]
    meta = json.loads(row["source_metadata"])
    assert meta["writer_format"] == ["0.7"] and meta["tracker_logs_merged"] == 1
    # the utilisation tracker's columns are merged, the power log's temperature kept
    dev = run.devices[0]
    assert np.isfinite(dev.signals["gpu_util_pct"]).any()
    assert np.isfinite(dev.signals["mem_util_pct"]).any() and dev.signals["temp_c"][0] == 41


def test_a_0_7_single_file_imports_alone(tmp_path, capsys):
    folder = tmp_path / "w"
    run_writer("0.7.4", folder, 2, "--id", JOB)
    row, _ = import_cli(tmp_path, capsys, folder / "nvml_wattameter.log")
    energy, _ = log_integral_j(folder / "nvml_wattameter.log", 2)
    assert row["energy_j"] == pytest.approx(energy, rel=1e-3)


def test_a_0_8_log_is_imported_and_its_power_reading_is_not_guessed(tmp_path, capsys):
    folder = tmp_path / "w"
    names = [p.name for p in run_writer("0.8.0", folder, 2, "--id", JOB, "-s",
                                        f"{JOB}-x3001c0s1b0n0")]
    log = folder / f"nvml_01_wattameter_{JOB}-x3001c0s1b0n0.log"
    assert log.name in names
    row, _ = import_cli(tmp_path, capsys, log)
    energy, span = log_integral_j(log, 2)
    assert row["energy_j"] == pytest.approx(energy, rel=1e-3)
    assert row["mean_power_w"] == pytest.approx(energy / span, rel=1e-3)
    assert row["power_field"] is None and "power_field_unknown" in row["quality_flags"]


def test_a_0_9_job_with_the_readme_utilisation_tracker(tmp_path, capsys):
    folder = tmp_path / "job"
    host = "x3001c0s1b0n0"
    names = [p.name for p in run_writer("0.9.3", folder, 4, "--suffix", f"{JOB}-{host}",
                                        "--id", JOB, "--tracker", "0.1,nvml-power",
                                        "--tracker", "1.0,nvml-util", "-f", "5", seconds=2.5)]
    power = f"nvml_01_wattameter_{JOB}-{host}.log"
    assert power in names and f"nvml_10_wattameter_{JOB}-{host}.log" in names
    meta = tmp_path / "meta.json"  # the user knows the version: 0.9.2 on reads field 186
    meta.write_text(json.dumps({"power_field": "instant"}))
    row, run = import_cli(tmp_path, capsys, folder, meta=meta)
    energy, span = log_integral_j(folder / power, 4)
    assert row["energy_j"] == pytest.approx(energy, rel=1e-3)
    assert row["mean_power_w"] == pytest.approx(energy / span, rel=1e-3)
    assert row["power_field"] == "instant" and "power_field_unknown" not in row["quality_flags"]
    util = run.devices[2].signals["gpu_util_pct"]
    assert np.isfinite(util).sum() >= 10  # 1 s readings held onto the 0.1 s power rows
    assert host not in json.dumps(row, default=str)
