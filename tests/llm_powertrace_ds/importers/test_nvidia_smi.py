"""The nvidia-smi importer on generated logs of every shape real logs have."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from datasets import load_dataset

from llm_powertrace_ds import schema
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import FORMATS, import_file
from llm_powertrace_ds.importers.common import family_from_name, scrub_text
from llm_powertrace_ds.privacy import hash_identifier
from llm_powertrace_ds.shards import publish_run

T0 = dt.datetime(2024, 4, 3, 10, 55, 35, 13000)
UUIDS = ["GPU-c5d32af0-0857-3b36-6541-1a688a9ec165", "GPU-e2681f6e-8d94-2d66-484f-43ea602335f9"]


def stamp(ms: int, t0: dt.datetime = T0) -> str:
    """nvidia-smi's ``YYYY/MM/DD HH:MM:SS.mmm`` for ``t0 + ms``."""
    t = t0 + dt.timedelta(milliseconds=ms)
    return t.strftime("%Y/%m/%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def write(path: Path, lines: list[str], *, newline_at_end: bool = True) -> Path:
    """Write lines (joined by newlines) to ``path``."""
    path.write_text("\n".join(lines) + ("\n" if newline_at_end else ""), encoding="utf-8")
    return path


def indexed_log(path: Path, *, gpus: int = 2, ticks: int = 20, period: int = 100,
                name: str | None = "NVIDIA H100 80GB HBM3", skew_ms: int = 3) -> Path:
    """A ``csv,nounits`` log with index, uuid and name columns; GPU g read g*skew ms later."""
    header = "timestamp,index,uuid,name,power.draw [W],utilization.gpu [%],memory.used [MiB]"
    if name is None:
        header = header.replace("name,", "")
    lines = [header]
    for k in range(ticks):
        for g in range(gpus):
            cells = [stamp(k * period + g * skew_ms), str(g), UUIDS[g % 2]]
            cells += [name] if name else []
            cells += [f"{100 + 10 * g + k:.2f}", str(k % 100), "1024"]
            lines.append(",".join(cells))
    return write(path, lines)


def units_log(path: Path, *, gpus: int = 1, ticks: int = 30, period: int = 100,
              skew_ms: int = 0) -> Path:
    """A default ``--format=csv`` log: ``", "`` separators, units in every value, no GPU column."""
    lines = ["timestamp, power.draw [W], utilization.gpu [%], utilization.memory [%]"]
    for k in range(ticks):
        for g in range(gpus):
            lines.append(f"{stamp(k * period + g * skew_ms)}, {30 + g + k * 0.5:.2f} W, "
                         f"{k % 100} %, 0 %")
    return write(path, lines)


def test_formats():
    assert FORMATS == ("nvidia-smi", "powertrace-csv", "dcgm")


def test_index_uuid_name(tmp_path):
    path = indexed_log(tmp_path / "gpu.csv")
    run = import_file("nvidia-smi", path, workload="inference")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert run.run_id == f"import-nvidia-smi-{sha[:12]}"
    assert run.platform == "h100_sxm_80gb"
    assert run.meta["sampler"] == run.meta["sweep"] == "import:nvidia-smi"
    assert run.meta["model_source"] == "import" and run.meta["model_family"] == "unknown"
    assert run.meta["power_field"] == "power_usage"
    assert "power_is_1s_average" in run.flags
    assert run.meta["num_gpus"] == 2 and run.meta["sample_period_ms"] == 100.0
    assert run.meta["schema_version"] == schema.SCHEMA_VERSION
    assert run.meta["start_time"] == T0.replace(tzinfo=dt.timezone.utc)
    assert [d.gpu_index for d in run.devices] == [0, 1]
    d0, d1 = run.devices
    # each GPU keeps its own timestamps: GPU 1 was read 3 ms after GPU 0, nothing resampled
    np.testing.assert_array_equal(d0.t_ms, np.arange(20) * 100)
    np.testing.assert_array_equal(d1.t_ms, np.arange(20) * 100 + 3)
    np.testing.assert_allclose(d1.power_w, 110 + np.arange(20))
    assert d0.gpu_name == "NVIDIA H100 80GB HBM3"
    assert d0.gpu_uuid_hash == hash_identifier(UUIDS[0]) and d0.gpu_uuid_hash != d1.gpu_uuid_hash
    assert UUIDS[0] not in json.dumps(run.meta, default=str)
    assert UUIDS[0] not in {d.gpu_uuid_hash for d in run.devices}
    assert set(d0.signals) == {"power_w", "gpu_util_pct", "mem_used_mib"}


def test_units_in_values_and_comma_space_separators(tmp_path):
    run = import_file("nvidia-smi", units_log(tmp_path / "a.csv"), workload="inference")
    (dev,) = run.devices
    np.testing.assert_allclose(dev.power_w, 30 + np.arange(30) * 0.5)
    np.testing.assert_array_equal(dev.signals["gpu_util_pct"], np.arange(30))
    assert run.platform == "unknown" and "platform_unknown" in run.flags
    assert "power_is_1s_average" not in run.flags


@pytest.mark.parametrize("gpus", [1, 2, 3, 8])
def test_no_gpu_column_infers_gpu_count(tmp_path, caplog, gpus):
    caplog.set_level(logging.INFO, logger="llm_powertrace_ds")
    path = units_log(tmp_path / "a.csv", gpus=gpus, skew_ms=1)
    run = import_file("nvidia-smi", path, workload="inference")
    assert len(run.devices) == gpus and run.meta["num_gpus"] == gpus
    for g, dev in enumerate(run.devices):
        assert dev.gpu_index == g
        np.testing.assert_allclose(dev.power_w, 30 + g + np.arange(30) * 0.5)
        np.testing.assert_array_equal(dev.t_ms, np.arange(30) * 100 + g)
    assert f"{gpus} GPU(s)" in caplog.text and "no GPU column" in caplog.text


def test_no_gpu_column_with_given_count(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="llm_powertrace_ds")
    path = units_log(tmp_path / "a.csv", gpus=2, skew_ms=0)
    run = import_file("nvidia-smi", path, workload="inference", num_gpus=2)
    assert len(run.devices) == 2 and "--num-gpus" in caplog.text


def test_na_and_not_supported_are_null(tmp_path):
    lines = ["timestamp, power.draw [W], power.draw.instant [W], temperature.gpu, clocks.sm [MHz]"]
    for k in range(5):
        power = "[N/A]" if k == 2 else f"{50 + k}.00 W"
        lines.append(f"{stamp(k * 100)}, {power}, [Not Supported], 40, "
                     f"{'[N/A]' if k == 4 else '1410 MHz'}")
    run = import_file("nvidia-smi", write(tmp_path / "a.csv", lines), workload="inference")
    (dev,) = run.devices
    # the instant column is never reported, so power.draw is the usable one
    assert run.meta["power_field"] == "power_usage"
    np.testing.assert_array_equal(np.isnan(dev.power_w), [False, False, True, False, False])
    assert np.isnan(dev.signals["sm_clock_mhz"][4]) and dev.signals["sm_clock_mhz"][0] == 1410


def test_repeated_header_from_appended_log(tmp_path):
    header = "timestamp, power.draw [W]"
    lines = [header] + [f"{stamp(k * 100 + g)}, {10 + g}.0 W" for k in range(5) for g in range(2)]
    lines += [header] + [f"{stamp(2000 + k * 100 + g)}, {10 + g}.0 W"
                         for k in range(5) for g in range(2)]
    run = import_file("nvidia-smi", write(tmp_path / "a.csv", lines), workload="inference")
    assert len(run.devices) == 2 and [len(d) for d in run.devices] == [10, 10]
    # after the repeated header the GPU order restarts at GPU 0
    assert (run.devices[0].power_w == 10).all() and (run.devices[1].power_w == 11).all()


def test_cut_off_last_line_is_dropped(tmp_path, caplog):
    path = indexed_log(tmp_path / "a.csv", ticks=5)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{stamp(500)},0,{UUIDS[0]},NVIDIA H1")
    run = import_file("nvidia-smi", path, workload="inference")
    assert [len(d) for d in run.devices] == [5, 5]
    assert "cut off" in caplog.text


def test_unterminated_last_line_is_dropped(tmp_path):
    path = indexed_log(tmp_path / "a.csv", ticks=5)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{stamp(500)},0,{UUIDS[0]},NVIDIA H100 80GB HBM3,99.9,1,1024")
    run = import_file("nvidia-smi", path, workload="inference")
    assert [len(d) for d in run.devices] == [5, 5]


def test_stalls_are_kept_and_flagged(tmp_path):
    lines = ["timestamp,index,power.draw [W]"]
    times = [0, 100, 200, 300, 3300, 3400, 3500]
    lines += [f"{stamp(t)},0,{100 + i}.0" for i, t in enumerate(times)]
    path = write(tmp_path / "a.csv", lines)
    run = import_file("nvidia-smi", path, workload="inference")
    np.testing.assert_array_equal(run.devices[0].t_ms, times)
    res = publish_run(tmp_path / "ds", run, refresh_card=False)
    assert "stall" in res.flags


def test_time_zone(tmp_path):
    path = indexed_log(tmp_path / "a.csv", ticks=3)
    run = import_file("nvidia-smi", path, workload="inference", tz="America/Phoenix")
    assert run.meta["start_time"] == (T0 + dt.timedelta(hours=7)).replace(tzinfo=dt.timezone.utc)


def test_time_zone_across_daylight_saving_change(tmp_path):
    # Europe/Berlin jumps from 02:00 to 03:00 local on 2024-03-31: one second apart in UTC
    lines = ["timestamp, power.draw [W]", "2024/03/31 01:59:59.000, 10 W",
             "2024/03/31 03:00:00.000, 11 W", "2024/03/31 03:00:01.000, 12 W"]
    run = import_file("nvidia-smi", write(tmp_path / "a.csv", lines), workload="inference",
                      tz="Europe/Berlin")
    np.testing.assert_array_equal(run.devices[0].t_ms, [0, 1000, 2000])
    assert run.meta["start_time"] == dt.datetime(2024, 3, 31, 0, 59, 59, tzinfo=dt.timezone.utc)


def test_unknown_time_zone(tmp_path):
    with pytest.raises(InputError, match="field 'tz'"):
        import_file("nvidia-smi", indexed_log(tmp_path / "a.csv"), workload="inference",
                    tz="Mars/Olympus")


def test_every_documented_field(tmp_path):
    header = ("timestamp, index, name, driver_version, pci.bus_id, power.draw [W], "
              "power.draw.instant [W], power.draw.average [W], enforced.power.limit [W], "
              "power.default_limit [W], clocks.current.sm [MHz], clocks.mem [MHz], "
              "utilization.gpu [%], utilization.memory [%], memory.used [MiB], temperature.gpu, "
              "clocks_event_reasons.active, foo.bar")
    lines = [header]
    for k in range(4):
        lines.append(f"{stamp(k * 50)}, 0, NVIDIA A100-SXM4-80GB, 550.54.15, 00000000:4F:00.0, "
                     f"{200 + k}.00 W, {300 + k}.00 W, {250 + k}.00 W, 400.00 W, 400.00 W, "
                     f"1410 MHz, 1593 MHz, {k} %, {2 * k} %, 1000 MiB, {40 + k}, "
                     f"0x000000000000000{4 if k else 1}, whatever")
    run = import_file("nvidia-smi", write(tmp_path / "a.csv", lines), workload="finetune")
    (dev,) = run.devices
    assert run.meta["power_field"] == "instant"
    assert run.platform == "a100_sxm4_80gb" and run.meta["driver_version"] == "550.54.15"
    assert "power_is_1s_average" not in run.flags
    np.testing.assert_allclose(dev.power_w, [300, 301, 302, 303])
    np.testing.assert_allclose(dev.signals["power_avg_w"], [250, 251, 252, 253])
    assert dev.power_limit_w == 400.0 and dev.default_power_limit_w == 400.0
    expected = {"sm_clock_mhz": 1410, "mem_clock_mhz": 1593, "mem_used_mib": 1000}
    for key, value in expected.items():
        assert (dev.signals[key] == value).all()
    np.testing.assert_array_equal(dev.signals["gpu_util_pct"], [0, 1, 2, 3])
    np.testing.assert_array_equal(dev.signals["mem_util_pct"], [0, 2, 4, 6])
    np.testing.assert_array_equal(dev.signals["temp_c"], [40, 41, 42, 43])
    np.testing.assert_array_equal(dev.signals["clock_event_reasons"], [1, 4, 4, 4])


def test_per_reason_columns_make_a_bitmask(tmp_path):
    lines = ["timestamp,power.draw [W],clocks_throttle_reasons.gpu_idle,"
             "clocks_throttle_reasons.sw_power_cap,clocks_throttle_reasons.hw_slowdown"]
    lines += [f"{stamp(0)},10,Active,Not Active,Not Active",
              f"{stamp(100)},10,Not Active,Active,Active",
              f"{stamp(200)},10,[N/A],[N/A],[N/A]"]
    run = import_file("nvidia-smi", write(tmp_path / "a.csv", lines), workload="inference")
    reasons = run.devices[0].signals["clock_event_reasons"]
    assert reasons[0] == 0x1 and reasons[1] == 0x4 | 0x8 and np.isnan(reasons[2])


def test_average_power_only(tmp_path):
    lines = ["timestamp,power.draw.average [W]"] + [f"{stamp(k * 100)},{k + 1}" for k in range(3)]
    run = import_file("nvidia-smi", write(tmp_path / "a.csv", lines), workload="inference")
    assert run.meta["power_field"] == "average"
    np.testing.assert_allclose(run.devices[0].power_w, [1, 2, 3])
    np.testing.assert_allclose(run.devices[0].signals["power_avg_w"], [1, 2, 3])


def test_sidecar_job_info(tmp_path):
    path = units_log(tmp_path / "run.csv")
    (tmp_path / "run.job_info.yaml").write_text(
        "job:\n  date: 2024-04-03\n  details:\n    model_name: Mistral-7B-v0.1\n"
        "    system_name: palmetto-a100\n    batch_size: 32\n"
        "    hf_name: mistralai/Mistral-7B-v0.1\n    prompt-A: What is the largest city?\n",
        encoding="utf-8")
    run = import_file("nvidia-smi", path, workload="inference")
    assert run.meta["model_name"] == "Mistral-7B-v0.1"
    assert run.meta["model_family"] == "mistral"
    assert run.meta["model_label"] == "mistralai/Mistral-7B-v0.1"
    assert run.meta["concurrency"] == 32 and run.meta["batching"] == "static"
    text = json.dumps(run.meta, default=str)
    assert "palmetto" not in text and "largest city" not in text
    root = tmp_path / "ds"
    publish_run(root, run, refresh_card=False)
    for arrow in root.rglob("*.arrow"):
        assert b"palmetto" not in arrow.read_bytes()
    # an explicit --meta replaces the sidecar
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"model_name": "Qwen3-8B"}), encoding="utf-8")
    run = import_file("nvidia-smi", path, workload="inference", meta_path=meta)
    assert run.meta["model_family"] == "qwen" and "concurrency" not in run.meta


def test_meta_file_gpu_name_sets_platform(tmp_path):
    path = units_log(tmp_path / "a.csv")
    meta = tmp_path / "meta.yaml"
    meta.write_text("gpu_name: NVIDIA L40S\nmodel_name: Llama-3.2-1B\nserving_engine: vllm\n"
                    "power_limit_w: 350\n", encoding="utf-8")
    run = import_file("nvidia-smi", path, workload="inference", meta_path=meta)
    assert run.platform == "l40s" and "power_is_1s_average" in run.flags
    assert run.devices[0].gpu_name == "NVIDIA L40S" and run.devices[0].power_limit_w == 350.0
    assert run.meta["model_family"] == "llama" and run.meta["serving_engine"] == "vllm"
    run = import_file("nvidia-smi", path, workload="inference", meta_path=meta,
                      platform="my_l40s_box")
    assert run.platform == "my_l40s_box" and "platform_unknown" not in run.flags


def test_bad_platform_argument(tmp_path):
    with pytest.raises(InputError, match="field 'platform'"):
        import_file("nvidia-smi", units_log(tmp_path / "a.csv"), workload="inference",
                    platform="h100-sxm")


def test_family_guess_and_scrubbing():
    assert family_from_name("gpt-j-6b") == "gptj" and family_from_name("gpt2-medium") == "gpt2"
    assert family_from_name("Phi-3-mini") == "phi" and family_from_name("dolphin-7b") == "other"
    assert family_from_name("DeepSeek-R1-Distill-Llama-8B") == "deepseek"
    assert family_from_name(None) == "unknown"
    assert scrub_text("/home/ann/models/Llama-3.2-1B") == "Llama-3.2-1B"
    assert scrub_text("10.0.0.12") is None and scrub_text("Qwen3-8B") == "Qwen3-8B"


def test_cli_import_twice_is_idempotent(tmp_path):
    path = indexed_log(tmp_path / "gpu.csv")
    root = tmp_path / "ds"
    # (no --format here: cli_core's positional FORMAT and --format share one dest)
    args = ["import", "nvidia-smi", str(path), "--out", str(root), "--workload", "inference"]
    assert main(args) == 0
    first = sorted(p.relative_to(root) for p in root.rglob("*.arrow"))
    assert main(args) == 0
    assert sorted(p.relative_to(root) for p in root.rglob("*.arrow")) == first
    ds = load_dataset(str(root), "inference", split="h100_sxm_80gb", cache_dir=str(tmp_path / "c"))
    assert ds.num_rows == 2 and set(ds["run_id"]) == {import_file(
        "nvidia-smi", path, workload="inference").run_id}
    assert sorted(ds["gpu_index"]) == [0, 1]


@pytest.mark.slow
def test_million_line_log_imports_fast(tmp_path):
    import time

    path = tmp_path / "big.csv"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("timestamp, index, power.draw [W], utilization.gpu [%], memory.used [MiB], "
                 "temperature.gpu, clocks.sm [MHz]\n")
        for k in range(250_000):
            for g in range(4):
                fh.write(f"{stamp(k * 100 + g)}, {g}, {100 + (k % 300) * 0.37:.2f} W, {k % 100} %, "
                         f"{1000 + g} MiB, {40 + g}, 1410 MHz\n")
    start = time.perf_counter()
    run = import_file("nvidia-smi", path, workload="inference")
    elapsed = time.perf_counter() - start
    assert [len(d) for d in run.devices] == [250_000] * 4
    assert elapsed < 60, f"took {elapsed:.1f} s"


def test_num_gpus_below_the_log_is_an_error_above_is_kept(tmp_path):
    path = indexed_log(tmp_path / "a.csv")
    with pytest.raises(InputError, match="field 'num_gpus'"):
        import_file("nvidia-smi", path, workload="inference", num_gpus=1)
    run = import_file("nvidia-smi", path, workload="inference", num_gpus=4)
    assert run.meta["num_gpus"] == 4
    assert "missing_gpu" in publish_run(tmp_path / "ds", run, refresh_card=False).flags


def test_utf16_log_from_powershell(tmp_path):
    text = units_log(tmp_path / "a.csv", ticks=3).read_text(encoding="utf-8")
    path = tmp_path / "ps.csv"
    path.write_text(text.replace("\n", "\r\n"), encoding="utf-16")
    run = import_file("nvidia-smi", path, workload="inference")
    np.testing.assert_allclose(run.devices[0].power_w, [30, 30.5, 31])
