"""The nvidia-smi importer on generated logs of every shape real logs have.

Beyond the shapes, every value and error is exact: the header map, the one-line errors on bad
headers, units, GPU columns and power values (reason, file, line and field of each
``InputError``), the preference order of the power columns and of the aliased query fields, the
clock-event bitmask built from per-reason columns, the mode of the name, uuid, limits and driver,
GPU-count inference (its boundaries, its sentences and its row positions after a repeated
header), the ``.job_info.yaml``/``.yml`` sidecar (nested, flat or malformed; inference versus
fine-tuning) and the ``--meta`` file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import warnings
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from datasets import load_dataset

from llm_powertrace_ds import schema
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import FORMATS, import_file
from llm_powertrace_ds.importers.common import family_from_name, scrub_text
from llm_powertrace_ds.importers.nvidia_smi import (
    MAX_INFERRED_GPUS,
    _positions,
    build_devices,
    choose_power,
    gpu_keys,
    import_nvidia_smi,
    infer_gpu_count,
    parse_header,
    read_log,
    read_sidecar,
    read_user_meta,
    sidecar_path,
)
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


T0_MS = 1_712_141_735_013


THREE_UUIDS = ["GPU-c5d32af0-0857-3b36-6541-1a688a9ec165", "GPU-e2681f6e-8d94-2d66-484f-43ea602335f9",
         "GPU-0a1b2c3d-0857-3b36-6541-1a688a9ec165"]


LOGGER = "llm_powertrace_ds.importers.nvidia_smi"


REFUSED = "refused (nothing is published that could name a person, a machine or a path)"


def run_of(tmp_path: Path, lines: list[str], **kw):
    kw.setdefault("workload", "inference")
    return import_nvidia_smi(write(tmp_path / "gpu.csv", lines), **kw)


def error_of(tmp_path: Path, lines: list[str], **kw) -> InputError:
    with pytest.raises(InputError) as exc:
        run_of(tmp_path, lines, **kw)
    return exc.value


def where(err: InputError) -> tuple:
    return Path(err.file).name if err.file else None, err.line, err.field


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_parse_header():
    cells = ["timestamp", " power.draw [W]", "utilization.gpu [%]", "Name", "power.draw [mW]",
             "temperature.gpu", "x []", "memory.used [ MiB ]", " Index ", "clocks.sm [MHz] "]
    assert parse_header(cells) == {
        "timestamp": (0, None), "power.draw": (1, "W"), "utilization.gpu": (2, "%"),
        "name": (3, None), "temperature.gpu": (5, None), "x": (6, None),
        "memory.used": (7, "MiB"), "index": (8, None), "clocks.sm": (9, "MHz")}
    assert parse_header([]) == {}


@pytest.mark.parametrize(("column", "unit", "expected"), [
    ("power.draw", "kW", "W"),
    ("power.draw.instant", "mW", "W"),
    ("power.draw.average", "kW", "W"),
    ("enforced.power.limit", "kW", "W"),
    ("power.limit", "mW", "W"),
    ("power.default_limit", "kW", "W"),
    ("clocks.sm", "GHz", "MHz"),
    ("clocks.current.sm", "GHz", "MHz"),
    ("clocks.mem", "GHz", "MHz"),
    ("clocks.current.memory", "kHz", "MHz"),
    ("utilization.gpu", "pct", "%"),
    ("utilization.memory", "pct", "%"),
    ("memory.used", "MB", "MiB"),
    ("temperature.gpu", "F", "C or °C"),
])
def test_unsupported_header_unit(tmp_path, column, unit, expected):
    header = "timestamp, power.draw [W]" + ("" if column == "power.draw" else f", {column} [{unit}]")
    if column == "power.draw":
        header = f"timestamp, power.draw [{unit}]"
    err = error_of(tmp_path, ["", header, f"{stamp(0)}, 1, 1"])
    assert err.reason == f"unit '{unit}' is not supported; expected {expected}"
    assert where(err) == ("gpu.csv", 2, column)


def test_header_unit_is_squeezed_onto_one_line(tmp_path):
    err = error_of(tmp_path, ["timestamp,power.draw [k  W]", f"{stamp(0)},1"])
    assert err.reason == "unit 'k W' is not supported; expected W"


def test_accepted_header_units_and_unchecked_columns(tmp_path):
    lines = ["timestamp, index [id], power.draw [W], temperature.gpu [°C], foo.bar [kW], "
             "clocks.mem [MHz]",
             f"{stamp(0)}, 0, 10, 40, 1, 1593", f"{stamp(100)}, 0, 11, 41 °C, 2, 1593 MHz"]
    (dev,) = run_of(tmp_path, lines).devices
    np.testing.assert_array_equal(dev.signals["temp_c"], [40, 41])
    np.testing.assert_array_equal(dev.signals["mem_clock_mhz"], [1593, 1593])
    lines[0] = lines[0].replace("[°C]", "[C]")
    (dev,) = run_of(tmp_path, lines).devices
    np.testing.assert_array_equal(dev.signals["temp_c"], [40, 41])


@pytest.mark.parametrize(("header", "reason", "field"), [
    ("time, power.draw [W]", "no timestamp column; the header has 'time', 'power.draw'",
     "timestamp"),
    ("timestamp, utilization.gpu [%], foo",
     "no power column (power.draw, power.draw.instant or power.draw.average); the header has "
     "'timestamp', 'utilization.gpu', 'foo'", "power.draw"),
    ("timestamp, power.limit [W]",
     "no power column (power.draw, power.draw.instant or power.draw.average); the header has "
     "'timestamp', 'power.limit'", "power.draw"),
])
def test_missing_must_have_columns(tmp_path, header, reason, field):
    err = error_of(tmp_path, [header, f"{stamp(0)}, 1"])
    assert err.reason == reason
    assert where(err) == ("gpu.csv", 1, field)


@pytest.mark.parametrize(("header", "field"), [
    ("timestamp, power.draw [W]", "power.draw"),
    ("timestamp, power.draw [W], power.draw.instant [W]", "power.draw.instant"),
    ("timestamp, power.draw.average [W], power.draw [W]", "power.draw"),
    ("timestamp, power.draw.average [W]", "power.draw.average"),
])
def test_no_data_rows(tmp_path, header, field):
    err = error_of(tmp_path, [header])
    assert err.reason == "no data rows after the header"
    assert where(err) == ("gpu.csv", 2, field)


@pytest.mark.parametrize(("header", "field"), [
    ("timestamp, power.draw [W]", "power.draw"),
    ("timestamp, power.draw.average [W], power.draw [W]", "power.draw"),
    ("timestamp, power.draw.average [W], power.draw.instant [W]", "power.draw.instant"),
    ("timestamp, power.draw.average [W]", "power.draw.average"),
])
def test_every_power_value_null(tmp_path, header, field):
    cells = ", ".join(["[N/A]"] * header.count("power"))
    err = error_of(tmp_path, ["", header, f"{stamp(0)}, {cells}", f"{stamp(100)}, {cells}"])
    assert err.reason == "no usable power value: every value is null ([N/A] or empty)"
    assert where(err) == ("gpu.csv", 3, field)


@pytest.mark.parametrize(("header", "row", "power_field", "power", "avg"), [
    ("power.draw.instant, power.draw, power.draw.average", "1, 2, 3", "instant", 1, 3),
    ("power.draw.instant, power.draw, power.draw.average", "[N/A], 2, 3", "power_usage", 2, 3),
    ("power.draw.instant, power.draw.average", "[N/A], 3", "average", 3, 3),
    ("power.draw, power.draw.average", "[Not Supported], 3", "average", 3, 3),
    ("power.draw.average, power.draw", "3, 2", "power_usage", 2, 3),
    ("power.draw, power.draw.instant", "2, 1", "instant", 1, None),
    ("power.draw", "2", "power_usage", 2, None),
])
def test_power_column_preference(tmp_path, header, row, power_field, power, avg):
    lines = [f"timestamp, index, {header}", f"{stamp(0)}, 0, {row}", f"{stamp(100)}, 0, {row}"]
    run = run_of(tmp_path, lines)
    (dev,) = run.devices
    assert run.meta["power_field"] == power_field
    np.testing.assert_array_equal(dev.power_w, [power, power])
    if avg is None:
        assert "power_avg_w" not in dev.signals
    else:
        np.testing.assert_array_equal(dev.signals["power_avg_w"], [avg, avg])


@pytest.mark.parametrize(("header", "row", "reason", "field"), [
    ("index, power.draw", "0, -1", "value '-1' is negative", "power.draw"),
    ("index, power.draw.instant", "0, -0.5 W", "value '-0.5 W' is negative", "power.draw.instant"),
    ("index, power.draw.average", "0, 1 mW", "value '1 mW' has unit 'mW', expected W",
     "power.draw.average"),
    ("index, power.draw", "0 W, 1", "value '0 W' has unit 'W', expected no unit", "index"),
    ("index, power.draw, clocks.sm", "0, 1, 1.4 GHz", "value '1.4 GHz' has unit 'GHz', expected MHz",
     "clocks.sm"),
    ("index, power.draw, enforced.power.limit", "0, 1, 0.4 kW",
     "value '0.4 kW' has unit 'kW', expected W", "enforced.power.limit"),
    ("index, power.draw, power.default_limit", "0, 1, 400 mW",
     "value '400 mW' has unit 'mW', expected W", "power.default_limit"),
    ("index, power.draw, temperature.gpu", "0, 1, 40 F", "value '40 F' has unit 'F', expected C "
     "or °C", "temperature.gpu"),
    ("index, power.draw, clocks_event_reasons.active", "0, 1, 0xZZ",
     "value '0xZZ' is not a clock-event-reasons bitmask (e.g. 0x0000000000000004)",
     "clocks_event_reasons.active"),
    ("index, power.draw, clocks_event_reasons.sw_power_cap", "0, 1, Yes",
     "value 'Yes' is neither 'Active' nor 'Not Active'", "clocks_event_reasons.sw_power_cap"),
    ("index, power.draw", "1.5, 1", "a GPU index must be a whole number >= 0", "index"),
    ("index, power.draw", "-1, 1", "a GPU index must be a whole number >= 0", "index"),
    ("index, power.draw", "[N/A], 1", "a GPU index must be a whole number >= 0", "index"),
    ("uuid, power.draw", "[N/A], 1", "a GPU uuid is missing", "uuid"),
    ("gpu_uuid, power.draw", ", 1", "a GPU uuid is missing", "uuid"),
])
def test_bad_values_on_the_third_data_row(tmp_path, header, row, reason, field):
    first = {"index": "0", "uuid": THREE_UUIDS[0], "gpu_uuid": THREE_UUIDS[0]}[header.split(",")[0]]
    # plain "," separators: the cells carry no leading space
    header, row = header.replace(", ", ","), row.replace(", ", ",")
    good = ",".join([first] + ["1"] * header.count(","))
    if "reasons.active" in header:
        good = f"{first},1,0x4"
    elif "sw_power_cap" in header:
        good = f"{first},1,Active"
    lines = [f"timestamp,{header}", f"{stamp(0)},{good}", f"{stamp(100)},{good}",
             f"{stamp(200)},{row}", f"{stamp(300)},{good}"]
    err = error_of(tmp_path, lines)
    assert err.reason == reason
    assert where(err) == ("gpu.csv", 4, field)


def test_negative_signals_are_read(tmp_path):
    lines = ["timestamp, index, power.draw [W], temperature.gpu", f"{stamp(0)}, 0, 5, -3",
             f"{stamp(100)}, 0, 0, 20"]
    (dev,) = run_of(tmp_path, lines).devices
    np.testing.assert_array_equal(dev.signals["temp_c"], [-3, 20])
    np.testing.assert_array_equal(dev.power_w, [5, 0])


def test_every_signal_and_limit(tmp_path):
    header = ("timestamp, index, power.draw [W], power.draw.average [W], clocks.sm [MHz], "
              "clocks.mem [MHz], utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
              "temperature.gpu, power.limit [W], power.default_limit [W], foo")
    lines = [header]
    for k in range(3):
        limit = [300, 350, 350][k]
        lines.append(f"{stamp(k * 100)}, 0, {100 + k}, {90 + k}, {1400 + k}, {1500 + k}, {k}, "
                     f"{10 + k}, {2000 + k}, {50 + k}, {limit}, 400, x")
    (dev,) = run_of(tmp_path, lines).devices
    assert sorted(dev.signals) == ["gpu_util_pct", "mem_clock_mhz", "mem_used_mib",
                                   "mem_util_pct", "power_avg_w", "power_w", "sm_clock_mhz",
                                   "temp_c"]
    expected = {"power_w": 100, "power_avg_w": 90, "sm_clock_mhz": 1400, "mem_clock_mhz": 1500,
                "gpu_util_pct": 0, "mem_util_pct": 10, "mem_used_mib": 2000, "temp_c": 50}
    for key, base in expected.items():
        np.testing.assert_array_equal(dev.signals[key], [base, base + 1, base + 2])
    assert dev.power_limit_w == 350.0 and dev.default_power_limit_w == 400.0
    assert dev.gpu_name is None and dev.gpu_uuid_hash is None


def test_no_signals_no_limits(tmp_path):
    (dev,) = run_of(tmp_path, ["timestamp, power.draw [W]", f"{stamp(0)}, 5"]).devices
    assert list(dev.signals) == ["power_w"]
    assert dev.power_limit_w is None and dev.default_power_limit_w is None
    assert dev.gpu_name is None and dev.gpu_uuid_hash is None


def test_aliased_query_fields_first_in_preference_wins(tmp_path):
    header = ("timestamp, index, power.draw [W], clocks.current.sm [MHz], clocks.sm [MHz], "
              "clocks.current.memory [MHz], clocks.mem [MHz], power.limit [W], "
              "enforced.power.limit [W]")
    lines = [header, f"{stamp(0)}, 0, 1, 1, 2, 3, 4, 250, 300",
             f"{stamp(100)}, 0, 1, 1, 2, 3, 4, 250, 300"]
    (dev,) = run_of(tmp_path, lines).devices
    assert (dev.signals["sm_clock_mhz"] == 2).all() and (dev.signals["mem_clock_mhz"] == 4).all()
    assert dev.power_limit_w == 300.0


def test_limits_all_null_are_none(tmp_path):
    lines = ["timestamp, power.draw [W], enforced.power.limit [W], power.default_limit [W]",
             f"{stamp(0)}, 1, [N/A], [N/A]", f"{stamp(100)}, 1, [N/A], [N/A]"]
    (dev,) = run_of(tmp_path, lines).devices
    assert dev.power_limit_w is None and dev.default_power_limit_w is None


@pytest.mark.parametrize("prefix", ["clocks_event_reasons.", "clocks_throttle_reasons.",
                                    "clock_throttle_reasons.", "clocks_event_reason."])
def test_per_reason_columns_every_bit(tmp_path, prefix):
    names = ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
             "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
             "hw_power_brake_slowdown", "display_clock_setting", "supported"]
    header = "timestamp, index, power.draw [W], " + ", ".join(prefix + n for n in names)
    lines = [header]
    for k, name in enumerate(names[:-1]):
        cells = ["Active" if n == name else "Not Active" for n in names[:-1]]
        lines.append(f"{stamp(k * 100)}, 0, 1, " + ", ".join(cells) + ", whatever")
    lines.append(f"{stamp(5000)}, 0, 1, " + ", ".join(["Active"] * 9) + ", 1")
    lines.append(f"{stamp(5100)}, 0, 1, " + ", ".join(["Not Active"] * 9) + ", 1")
    reasons = run_of(tmp_path, lines).devices[0].signals["clock_event_reasons"]
    np.testing.assert_array_equal(reasons, [0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100,
                                            0x1FF, 0])


def test_per_reason_nulls_and_display_alias(tmp_path):
    header = ("timestamp, power.draw [W], clocks_event_reasons.display_clocks_setting, "
              "clocks_event_reasons.gpu_idle, clocks_event_reasons.sw_power_cap")
    lines = [header, f"{stamp(0)}, 1, Active, [N/A], Not Active",
             f"{stamp(100)}, 1, [N/A], [N/A], [N/A]",
             f"{stamp(200)}, 1, [N/A], Not Active, [Not Supported]",
             f"{stamp(300)}, 1, [N/A], [N/A], Active"]
    reasons = run_of(tmp_path, lines).devices[0].signals["clock_event_reasons"]
    np.testing.assert_array_equal(reasons, [0x100, np.nan, 0, 0x4])


def test_bitmask_column_wins_over_per_reason_columns(tmp_path):
    header = ("timestamp, power.draw [W], clocks_event_reasons.gpu_idle, "
              "clocks_throttle_reasons.active, clocks_event_reasons.active")
    lines = [header, f"{stamp(0)}, 1, Active, 0x4, 0x8", f"{stamp(100)}, 1, Active, [N/A], 0x8",
             f"{stamp(200)}, 1, Not Active, 40, 0x8"]
    reasons = run_of(tmp_path, lines).devices[0].signals["clock_event_reasons"]
    np.testing.assert_array_equal(reasons, [4, np.nan, 40])


def test_unknown_reason_columns_only_make_no_reason_signal(tmp_path):
    lines = ["timestamp, power.draw [W], clocks_event_reasons.supported, clocks_event.active",
             f"{stamp(0)}, 1, 0xff, 0x1"]
    assert "clock_event_reasons" not in run_of(tmp_path, lines).devices[0].signals


def test_uuid_order_gives_the_gpu_index(tmp_path):
    lines = ["timestamp, gpu_uuid, gpu_name, power.draw [W]"]
    for k in range(3):
        lines += [f"{stamp(k * 100)}, {THREE_UUIDS[1]}, NVIDIA L40S, 20",
                  f"{stamp(k * 100 + 1)}, {THREE_UUIDS[0]}, NVIDIA L40S, 10"]
    run = run_of(tmp_path, lines)
    assert [d.gpu_index for d in run.devices] == [0, 1]
    assert run.devices[0].gpu_uuid_hash == hash_identifier(THREE_UUIDS[1])
    assert run.devices[1].gpu_uuid_hash == hash_identifier(THREE_UUIDS[0])
    assert (run.devices[0].power_w == 20).all() and (run.devices[1].power_w == 10).all()
    assert run.devices[0].gpu_name == "NVIDIA L40S" and run.platform == "l40s"


def test_index_wins_over_uuid_and_uuid_may_be_missing(tmp_path):
    lines = ["timestamp, uuid, index, power.draw [W]",
             f"{stamp(0)}, {THREE_UUIDS[1]}, 1, 11", f"{stamp(1)}, [N/A], 0, 10",
             f"{stamp(100)}, [N/A], 1, 11", f"{stamp(101)}, [N/A], 0, 10"]
    run = run_of(tmp_path, lines)
    assert [d.gpu_index for d in run.devices] == [0, 1]
    assert run.devices[0].gpu_uuid_hash is None
    assert run.devices[1].gpu_uuid_hash == hash_identifier(THREE_UUIDS[1])
    assert (run.devices[1].power_w == 11).all()


def test_sparse_gpu_indices_are_kept(tmp_path):
    lines = ["timestamp, index, power.draw [W]", f"{stamp(0)}, 3, 1", f"{stamp(1)}, 5, 2",
             f"{stamp(100)}, 3, 1", f"{stamp(101)}, 5, 2"]
    run = run_of(tmp_path, lines)
    assert [d.gpu_index for d in run.devices] == [3, 5]


def test_name_uuid_and_driver_are_the_most_frequent_value(tmp_path):
    header = "timestamp, index, uuid, gpu_uuid, name, gpu_name, driver_version, power.draw [W]"
    rows = [("A100", THREE_UUIDS[2], "535.1"), ("NVIDIA H100 80GB HBM3", THREE_UUIDS[0], "550.54.15"),
            ("NVIDIA H100 80GB HBM3", THREE_UUIDS[0], "550.54.15"), ("[N/A]", "[N/A]", "[N/A]")]
    lines = [header] + [f"{stamp(k * 100)}, 0, {u}, {THREE_UUIDS[1]}, {n}, NVIDIA L4, {d}, 5"
                        for k, (n, u, d) in enumerate(rows)]
    run = run_of(tmp_path, lines)
    (dev,) = run.devices
    assert dev.gpu_name == "NVIDIA H100 80GB HBM3" and run.platform == "h100_sxm_80gb"
    assert "power_is_1s_average" in run.flags and "platform_unknown" not in run.flags
    assert dev.gpu_uuid_hash == hash_identifier(THREE_UUIDS[0])
    assert run.meta["driver_version"] == "550.54.15"


def test_a_single_reported_name_uuid_and_driver_are_used(tmp_path):
    lines = ["timestamp, index, uuid, name, driver_version, power.draw [W]",
             f"{stamp(0)}, 0, [N/A], [N/A], [N/A], 5",
             f"{stamp(100)}, 0, {THREE_UUIDS[1]}, NVIDIA L40S, 550.54.15, 5",
             f"{stamp(200)}, 0, [N/A], [N/A], , 5"]
    run = run_of(tmp_path, lines)
    (dev,) = run.devices
    assert dev.gpu_name == "NVIDIA L40S" and dev.gpu_uuid_hash == hash_identifier(THREE_UUIDS[1])
    assert run.meta["driver_version"] == "550.54.15"


def test_one_row_log_with_names(tmp_path):
    lines = ["timestamp, index, uuid, name, driver_version, power.draw [W]",
             f"{stamp(0)}, 0, {THREE_UUIDS[0]}, NVIDIA L40S, 550.54.15, 5"]
    run = run_of(tmp_path, lines)
    (dev,) = run.devices
    assert dev.gpu_name == "NVIDIA L40S" and dev.gpu_uuid_hash == hash_identifier(THREE_UUIDS[0])
    assert run.meta["driver_version"] == "550.54.15"
    np.testing.assert_array_equal(dev.t_ms, [0])


def test_all_null_names_and_driver(tmp_path):
    lines = ["timestamp, index, name, driver_version, power.draw [W]",
             f"{stamp(0)}, 0, [N/A], [N/A], 5", f"{stamp(100)}, 0, [N/A], [N/A], 5"]
    run = run_of(tmp_path, lines)
    assert run.devices[0].gpu_name is None and "driver_version" not in run.meta
    assert run.platform == "unknown"
    # a --meta file's driver stands in for a log that never reports one
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps({"driver_version": "535.1"}), encoding="utf-8")
    run = run_of(tmp_path, lines, meta_path=meta)
    assert run.meta["driver_version"] == "535.1"
    # and the log's own driver wins over the --meta file's
    lines[1] = lines[1].replace("[N/A], 5", "550.2, 5")
    run = run_of(tmp_path, lines, meta_path=meta)
    assert run.meta["driver_version"] == "550.2"


def test_pipeline_pieces_give_int64_keys_and_float64_signals(tmp_path):
    header = ("timestamp, index, power.draw [W], clocks_event_reasons.gpu_idle, "
              "clocks_event_reasons.sw_power_cap")
    lines = [header, f"{stamp(0)}, 1, 5, Active, [N/A]", f"{stamp(1)}, 0, 6, [N/A], [N/A]",
             f"{stamp(100)}, 1, 7, Not Active, Active", f"{stamp(101)}, 0, 8, [N/A], Not Active"]
    path = write(tmp_path / "gpu.csv", lines)
    table, factors = read_log(path, dt.timezone.utc)
    keys = gpu_keys(table, factors, path, None)
    assert keys.dtype == np.int64 and keys.tolist() == [1, 0, 1, 0]
    power_key, power_field = choose_power(table, path)
    assert (power_key, power_field) == ("power:power.draw", "power_usage")
    devices = build_devices(table, keys, power_key, factors, path)
    assert [d.gpu_index for d in devices] == [0, 1]
    assert [d.lines.tolist() for d in devices] == [[3, 5], [2, 4]]
    assert [d.ts_ms.tolist() for d in devices] == [[T0_MS + 1, T0_MS + 101], [T0_MS, T0_MS + 100]]
    for dev in devices:
        assert sorted(dev.signals) == ["clock_event_reasons", "power_w"]
        assert all(v.dtype == np.float64 for v in dev.signals.values())
    np.testing.assert_array_equal(devices[0].signals["clock_event_reasons"], [np.nan, 0])
    np.testing.assert_array_equal(devices[1].signals["clock_event_reasons"], [1, 4])
    np.testing.assert_array_equal(devices[1].signals["power_w"], [5, 7])


def test_time_going_back_names_the_log(tmp_path):
    lines = ["timestamp, index, power.draw [W]", f"{stamp(0)}, 0, 1", f"{stamp(100)}, 0, 1",
             f"{stamp(100)}, 0, 1"]
    err = error_of(tmp_path, lines)
    assert err.reason == ("time of GPU 0 repeats 2024-04-03T10:55:35.113Z (line 3); each GPU's "
                          "timestamps must increase")
    assert where(err) == ("gpu.csv", 4, "timestamp")


@pytest.mark.parametrize(("column", "bad", "reason", "field"), [
    ("temperature.gpu", "900", "value 900 of GPU 0 is outside the physical range -40..150 of temp_c",
     "temperature.gpu"),
    ("memory.used [MiB]", "1e12", "value 1e+12 of GPU 0 is outside the physical range "
     "0..4.1943e+06 of mem_used_mib", "memory.used"),
    # the clocks have two spellings: the error names the signal
    ("clocks.sm [MHz]", "1e7", "value 1e+07 of GPU 0 is outside the physical range 0..10000 of "
     "sm_clock_mhz", "sm_clock_mhz"),
])
def test_run_checks_name_the_log(tmp_path, column, bad, reason, field):
    lines = [f"timestamp,index,power.draw.instant [W],{column}", f"{stamp(0)},0,1,1",
             f"{stamp(100)},0,1,{bad}"]
    err = error_of(tmp_path, lines)
    assert err.reason == reason
    assert where(err)[:2] == ("gpu.csv", 3)
    assert err.field == field


def test_power_range_error_names_the_chosen_power_column(tmp_path):
    lines = ["timestamp,index,power.draw [W],power.draw.instant [W]", f"{stamp(0)},0,1,1",
             f"{stamp(100)},0,1e7,2e7"]
    err = error_of(tmp_path, lines)
    assert err.reason == "value 2e+07 of GPU 0 is outside the physical range 0..5000 of power_w"
    assert where(err)[:2] == ("gpu.csv", 3)
    assert err.field == "power.draw.instant"


def test_positions():
    empty = _positions(np.zeros(0, np.int64))
    assert empty.dtype == np.int64 and empty.shape == (0,)
    np.testing.assert_array_equal(_positions(np.array([5])), [0])
    np.testing.assert_array_equal(_positions(np.array([0, 0, 0, 1, 1])), [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(_positions(np.array([2, 2, 7, 7, 7, 3])), [0, 1, 0, 1, 2, 0])


def tick_ts(gpus: int, ticks: int, period: int = 1000, skew: int = 1) -> np.ndarray:
    return np.array([k * period + g * skew for k in range(ticks) for g in range(gpus)], np.int64)


def one_segment(ts) -> np.ndarray:
    return np.zeros(len(ts), np.int64)


@pytest.mark.parametrize(("ts", "expected"), [
    ([], (1, "too few rows to see ticks; assumed 1 GPU")),
    ([0], (1, "too few rows to see ticks; assumed 1 GPU")),
    ([0, 100], (1, "too few rows to see ticks; assumed 1 GPU")),
    ([0, 1, 100], (2, "rows cluster in groups of 2 (within a tick <= 1 ms apart, ticks 99 ms "
                      "apart)")),
    ([0, 100, 200], (1, "every row is its own tick (median interval 100 ms)")),
    ([0, 100, 200, 300], (1, "every row is its own tick (median interval 100 ms)")),
    ([0, 50, 150, 200, 300, 350], (2, "rows cluster in groups of 2 (within a tick <= 50 ms "
                                      "apart, ticks 100 ms apart)")),
    ([0, 51, 150, 200, 300, 350], (1, "every row is its own tick (median interval 51 ms)")),
    ([0, 0, 1, 1, 2, 2, 3, 3], (2, "rows cluster in groups of 2 (within a tick <= 0 ms apart, "
                                   "ticks 1 ms apart)")),
    ([0, 0, 0, 0, 0, 0], (1, "every row is its own tick (median interval 0 ms)")),
    (list(tick_ts(3, 4)), (3, "rows cluster in groups of 3 (within a tick <= 1 ms apart, ticks "
                              "998 ms apart)")),
    (list(tick_ts(MAX_INFERRED_GPUS, 2)), (64, "rows cluster in groups of 64 (within a tick <= "
                                             "1 ms apart, ticks 937 ms apart)")),
    (list(tick_ts(MAX_INFERRED_GPUS + 1, 3)), (1, "every row is its own tick (median interval "
                                                 "1 ms)")),
])
def test_infer_gpu_count(ts, expected):
    ts = np.array(ts, np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no numpy warnings (empty medians, modulo by 0)
        assert infer_gpu_count(ts, one_segment(ts)) == expected


@pytest.mark.parametrize(("ts", "segments", "expected"), [
    # a short first log, then an appended one of 2 GPUs per tick
    ([0, 1, 1000, 1001, 1100, 1101, 1200, 1201, 1300, 1301], [0, 0] + [1] * 8,
     (2, "rows cluster in groups of 2 (within a tick <= 1 ms apart, ticks 99 ms apart)")),
    ([0, 1, 2, 1000, 1001, 1002, 1003, 1100, 1101, 1102, 1103], [0] * 3 + [1] * 8,
     (4, "rows cluster in groups of 4 (within a tick <= 1 ms apart, ticks 97 ms apart)")),
    # segments too short to hold a group boundary inside them
    ([0, 1000, 1001, 2000, 2001, 3000], [0, 1, 1, 2, 2, 3],
     (1, "every row is its own tick (median interval 1 ms)")),
    ([0, 1, 1000, 1001, 1002, 2000, 2001, 2002], [0, 0, 1, 1, 1, 2, 2, 2],
     (1, "every row is its own tick (median interval 1 ms)")),
])
def test_infer_gpu_count_over_segments(ts, segments, expected):
    ts, seg = np.array(ts, np.int64), np.array(segments, np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert infer_gpu_count(ts, seg) == expected


def test_infer_gpu_count_reads_only_the_first_rows():
    # 20 000 rows of one GPU, then rows of two GPUs per tick: only the first 20 000 count
    one = np.arange(20_000, dtype=np.int64) * 100
    two = tick_ts(2, 5_000, period=100) + int(one[-1]) + 100
    ts = np.concatenate([one, two])
    assert infer_gpu_count(ts, one_segment(ts)) == (
        1, "every row is its own tick (median interval 100 ms)")
    assert infer_gpu_count(two, one_segment(two))[0] == 2


def test_no_gpu_column_log_messages(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    lines = ["timestamp, power.draw [W]"] + [f"{stamp(k * 100 + g)}, {10 + g}" for k in range(4)
                                             for g in range(2)]
    path = write(tmp_path / "gpu.csv", lines)
    run = import_nvidia_smi(path, workload="inference", zone=ZoneInfo("America/Phoenix"))
    assert len(run.devices) == 2
    assert messages(caplog) == [
        f"{path}: no GPU column; 2 GPU(s): rows cluster in groups of 2 (within a tick <= 1 ms "
        "apart, ticks 99 ms apart); rows assigned to GPUs in order within each tick",
        f"{path}: zone-less timestamps read as America/Phoenix"]
    caplog.clear()
    import_nvidia_smi(path, workload="inference", num_gpus=2)
    assert messages(caplog)[0] == (f"{path}: no GPU column; 2 GPU(s): given (--num-gpus); rows "
                                   "assigned to GPUs in order within each tick")


def test_one_row_without_gpu_column(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    run = run_of(tmp_path, ["timestamp, power.draw [W]", f"{stamp(0)}, 7 W"])
    (dev,) = run.devices
    assert dev.gpu_index == 0 and dev.power_w.tolist() == [7.0] and dev.t_ms.tolist() == [0]
    assert "1 GPU(s): too few rows to see ticks; assumed 1 GPU;" in messages(caplog)[0]


def test_positions_restart_after_a_repeated_header(tmp_path):
    # first log: one full tick of 3 GPUs and a lone GPU-0 row; the appended log restarts at GPU 0
    header = "timestamp, power.draw [W]"
    lines = [header, f"{stamp(0)}, 10", f"{stamp(1)}, 11", f"{stamp(2)}, 12", f"{stamp(100)}, 10",
             header, f"{stamp(1000)}, 10", f"{stamp(1001)}, 11", f"{stamp(1002)}, 12"]
    run = run_of(tmp_path, lines, num_gpus=3)
    assert [d.power_w.tolist() for d in run.devices] == [[10, 10, 10], [11, 11], [12, 12]]
    assert [d.t_ms.tolist() for d in run.devices] == [[0, 100, 1000], [1, 1001], [2, 1002]]


def test_run_id_zone_and_start(tmp_path):
    lines = ["timestamp, index, power.draw [W]", f"{stamp(0)}, 0, 1", f"{stamp(100)}, 0, 2"]
    path = write(tmp_path / "gpu.csv", lines)
    run = import_nvidia_smi(path, workload="finetune", zone=ZoneInfo("America/Phoenix"))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert run.run_id == f"import-nvidia-smi-{sha[:12]}"
    assert run.meta["start_time"] == dt.datetime.fromtimestamp((T0_MS + 7 * 3_600_000) / 1000,
                                                               tz=dt.timezone.utc)
    assert run.meta["workload"] == "finetune" and run.meta["sample_period_ms"] == 100.0
    assert run.meta["sweep"] == run.meta["sampler"] == "import:nvidia-smi"
    assert run.meta["power_field"] == "power_usage" and run.platform == "unknown"
    assert "platform_unknown" in run.flags and "power_is_1s_average" not in run.flags


def two_gpu_log() -> list[str]:
    return ["timestamp, index, power.draw [W]", f"{stamp(0)}, 0, 1", f"{stamp(1)}, 1, 1",
            f"{stamp(100)}, 0, 1", f"{stamp(101)}, 1, 1"]


def test_platform_and_num_gpus_arguments(tmp_path):
    run = run_of(tmp_path, two_gpu_log(), platform="my_box", num_gpus=3)
    assert run.platform == "my_box" and "platform_unknown" not in run.flags
    assert run.meta["num_gpus"] == 3 and len(run.devices) == 2
    err = error_of(tmp_path, two_gpu_log(), num_gpus=1)
    assert err.reason == "--num-gpus is 1 but the log holds 2 GPUs"
    assert where(err) == ("gpu.csv", None, "num_gpus")


def test_bad_timestamp_names_the_timestamp_column(tmp_path):
    lines = two_gpu_log()
    lines[2] = "yesterday, 1, 1"
    err = error_of(tmp_path, lines)
    assert err.reason == ("value 'yesterday' is not a timestamp (YYYY/MM/DD HH:MM:SS.mmm or "
                          "ISO-8601)")
    assert where(err) == ("gpu.csv", 3, "timestamp")


def test_cut_off_last_line_of_a_two_gpu_log_is_dropped(tmp_path):
    path = write(tmp_path / "gpu.csv", two_gpu_log())
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{stamp(200)}, 0")
    run = import_nvidia_smi(path, workload="inference")
    assert [d.t_ms.tolist() for d in run.devices] == [[0, 100], [1, 101]]


def test_meta_file_replaces_the_sidecar(tmp_path):
    lines = ["timestamp, index, power.draw [W]", f"{stamp(0)}, 0, 1", f"{stamp(100)}, 0, 2"]
    path = write(tmp_path / "gpu.csv", lines)
    (tmp_path / "gpu.job_info.yml").write_text(
        "job:\n  details:\n    model_name: Mistral-7B-v0.1\n    batch_size: 8\n", encoding="utf-8")
    run = import_nvidia_smi(path, workload="inference")
    assert run.meta["model_name"] == "Mistral-7B-v0.1" and run.meta["concurrency"] == 8
    meta = tmp_path / "meta.yaml"
    meta.write_text("model_name: Qwen3-8B\n", encoding="utf-8")
    run = import_nvidia_smi(path, workload="inference", meta_path=meta)
    assert run.meta["model_name"] == "Qwen3-8B" and "concurrency" not in run.meta
    assert run.meta["model_family"] == "qwen"


def test_sidecar_path(tmp_path):
    log = tmp_path / "run.1.csv"
    assert sidecar_path(log) is None
    yml = tmp_path / "run.1.job_info.yml"
    yml.write_text("a: 1\n", encoding="utf-8")
    assert sidecar_path(log) == yml
    yaml_ = tmp_path / "run.1.job_info.yaml"
    yaml_.write_text("a: 1\n", encoding="utf-8")
    assert sidecar_path(log) == yaml_
    assert sidecar_path(tmp_path / "run.1.log") == yaml_
    assert sidecar_path(tmp_path / "other.csv") is None
    (tmp_path / "dir.job_info.yaml").mkdir()
    assert sidecar_path(tmp_path / "dir.csv") is None


def sidecar(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.job_info.yaml"
    path.write_text(text, encoding="utf-8")
    return path


NESTED = ("job:\n  date: 2024-04-03\n  details:\n    model_name: Mistral-7B-v0.1\n"
          "    system_name: palmetto-a100\n    batch_size: 32\n"
          "    hf_name: mistralai/Mistral-7B-v0.1\n")


@pytest.mark.parametrize(("text", "workload", "expected"), [
    (NESTED, "inference", {"model_name": "Mistral-7B-v0.1", "model_label":
                           "mistralai/Mistral-7B-v0.1", "concurrency": 32, "batching": "static",
                           "model_family": "mistral"}),
    (NESTED, "finetune", {"model_name": "Mistral-7B-v0.1", "model_label":
                          "mistralai/Mistral-7B-v0.1", "batch_size": 32,
                          "model_family": "mistral"}),
    ("job:\n  model_name: Qwen3-8B\n  batch_size: 4\n", "finetune",
     {"model_name": "Qwen3-8B", "batch_size": 4, "model_family": "qwen"}),
    ("model_name: Llama-3.2-1B\nbatch_size: 2\n", "inference",
     {"model_name": "Llama-3.2-1B", "concurrency": 2, "batching": "static",
      "model_family": "llama"}),
    ("hf_name: meta-llama/Llama-3.2-1B\n", "inference", {"model_label": "meta-llama/Llama-3.2-1B"}),
    ("model_name: 7\n", "inference", {"model_name": "7", "model_family": "other"}),
    ("model_name: [a, b]\nhf_name: {x: 1}\n", "inference", {}),
    ("batch_size: null\nmodel_name: null\n", "inference", {}),
    ("- model_name\n- batch_size\n", "inference", {}),
    ("just text\n", "inference", {}),
    ("job: text\nmodel_name: Qwen3-8B\n", "inference", {}),
    ("job: [1, 2]\nmodel_name: Qwen3-8B\n", "inference", {}),
    ("job:\n  details: text\n  model_name: Qwen3-8B\n", "inference", {}),
    ("job:\n  details: [1]\n  model_name: Qwen3-8B\n", "inference", {}),
    ("job: null\nmodel_name: Qwen3-8B\n", "inference", {}),
    ("details:\n  model_name: Qwen3-8B\n", "inference",
     {"model_name": "Qwen3-8B", "model_family": "qwen"}),
    ("{}\n", "inference", {}),
])
def test_read_sidecar(tmp_path, text, workload, expected):
    assert read_sidecar(sidecar(tmp_path, text), workload) == expected


def test_read_sidecar_log_messages(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    path = sidecar(tmp_path, NESTED)
    read_sidecar(path, "inference")
    assert messages(caplog) == [f"{path}: read batching, concurrency, model_family, model_label, "
                                "model_name from the sidecar"]
    caplog.clear()
    read_sidecar(sidecar(tmp_path, "system_name: n1\n"), "inference")
    assert messages(caplog) == [f"{path}: read nothing from the sidecar"]


@pytest.mark.parametrize(("text", "workload", "reason", "field"), [
    ("model_name: /home/ann/models/x\n", "inference",
     f"value '/home/ann/models/x' looks like a file path; {REFUSED}", "model_name"),
    ("job:\n  details:\n    hf_name: /home/ann/models/x\n", "inference",
     f"value '/home/ann/models/x' looks like a file path; {REFUSED}", "model_label"),
    ("batch_size: many\n", "inference",
     "value 'many' is not a valid int32 (could not convert string to float: 'many')",
     "concurrency"),
    ("batch_size: many\n", "finetune",
     "value 'many' is not a valid int32 (could not convert string to float: 'many')",
     "batch_size"),
])
def test_read_sidecar_errors_name_the_sidecar(tmp_path, text, workload, reason, field):
    path = sidecar(tmp_path, text)
    with pytest.raises(InputError) as exc:
        read_sidecar(path, workload)
    assert exc.value.reason == reason
    assert (exc.value.file, exc.value.line, exc.value.field) == (str(path), None, field)


def test_read_user_meta(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"model_name": " Qwen3-8B ", "driver_version": "550.1",
                                "concurrency": "4"}), encoding="utf-8")
    assert read_user_meta(path, "inference") == {"model_name": "Qwen3-8B",
                                                 "driver_version": "550.1", "concurrency": 4}


@pytest.mark.parametrize(("raw", "reason_start", "field"), [
    ({"model_name": "/home/ann/x"}, f"value '/home/ann/x' looks like a file path; {REFUSED}",
     "model_name"),
    ({"workload": "finetune"}, "workload is provenance the importer sets itself and cannot be "
     "given; a meta file may set: arrival_cv, ", "workload"),
    ({"workload": "inference"}, "workload is provenance the importer sets itself", "workload"),
    ({"concurrency": "many"}, "value 'many' is not a valid int32", "concurrency"),
])
def test_read_user_meta_errors_name_the_file(tmp_path, raw, reason_start, field):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(InputError) as exc:
        read_user_meta(path, "inference")
    assert exc.value.reason.startswith(reason_start)
    assert (exc.value.file, exc.value.line, exc.value.field) == (str(path), None, field)


@pytest.mark.parametrize("key", ["WORKLOAD", "Workload", "XXworkloadXX"])
def test_keys_that_are_not_exactly_workload_are_unknown(tmp_path, key):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({key: "finetune"}), encoding="utf-8")
    with pytest.raises(InputError) as exc:
        read_user_meta(path, "inference")
    assert exc.value.reason.startswith(f"unknown keys {key!r}; accepted: arrival_cv, ")
    assert (exc.value.file, exc.value.line, exc.value.field) == (str(path), None, key)


def test_meta_file_given_no_sidecar_is_probed(tmp_path):
    # a log name one byte short of the limit, whose sidecar name would be too long: with --meta
    # the import reads the given file (and a sidecar lookup would find none: test_long_names)
    path = tmp_path / ("g" * 242 + ".csv")
    path.write_text("timestamp,index,power.draw [W]\n"
                    "2024/04/03 10:55:35.000,0,100.00\n"
                    "2024/04/03 10:55:35.100,0,101.00\n"
                    "2024/04/03 10:55:35.200,0,102.00\n", encoding="utf-8")
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"concurrency": 8}), encoding="utf-8")
    run = import_nvidia_smi(path, workload="inference", meta_path=meta)
    assert run.meta["concurrency"] == 8
    assert run.devices[0].signals["power_w"].tolist() == [100.0, 101.0, 102.0]
