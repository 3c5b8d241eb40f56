"""``dcgmi dmon`` logs (written here in dmon's documented text layout) and the assembly helpers.

Which last line may be cut off, a long bad header, an all-N/A column between two others, a
period that is not a whole number of milliseconds, a bad ``start_time``, an ASCII locale, and the
run-id and helper rules of ``importers.assemble``.
"""

from __future__ import annotations

import json
import locale
import sys

import numpy as np
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import assemble, import_file
from llm_powertrace_ds.importers.dcgm import _parse
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


def _import(tmp_path, text: str, meta: dict | None = None):
    path = tmp_path / "dmon.txt"
    path.write_text(text, encoding="utf-8")
    meta_path = tmp_path / "meta.json"
    meta_path.write_text(json.dumps({"sample_period_ms": 100} if meta is None else meta))
    return import_file("dcgm", path, workload="inference", meta_path=meta_path)


def test_only_the_last_line_may_be_cut_off(tmp_path):
    run = _import(tmp_path, "#Entity POWER\nGPU 0 1\nGPU 0 2\nGP")  # a cut-off last line
    assert run.devices[0].signals["power_w"].tolist() == [1.0, 2.0]
    with pytest.raises(InputError) as exc:  # a short line before the end, no final newline
        _import(tmp_path, "#Entity POWER TOTEC\nGPU 0 1\nGPU 0 1 2")
    assert (exc.value.reason, exc.value.line) == ("1 values where the header has 2", 2)


def test_a_long_bad_header_is_quoted_to_40_characters(tmp_path):
    line = "#Time " + "x" * 60
    with pytest.raises(InputError) as exc:
        _import(tmp_path, line + "\nGPU 0 1\n")
    assert exc.value.reason == f"expected a '#Entity ...' header, got {line[:40]!r}"


def test_an_all_null_column_between_two_others(tmp_path):
    run = _import(tmp_path, "#Entity POWER TOTEC TMPTR\nGPU 0 100 N/A 40\nGPU 0 101 N/A 41\n")
    signals = run.devices[0].signals
    assert "energy_mj" not in signals and signals["temp_c"].tolist() == [40.0, 41.0]


def test_the_period_is_the_given_one_not_the_rounded_ticks(tmp_path):
    run = _import(tmp_path, "#Entity POWER\nGPU 0 1\nGPU 0 2\nGPU 0 3\n",
                  {"sample_period_ms": 0.4})
    assert run.devices[0].t_ms.tolist() == [0, 0, 1]  # 0, 0.4, 0.8 ms on whole milliseconds
    assert run.meta["sample_period_ms"] == 0.4  # not the median of the rounded ticks (0.5)


def test_a_bad_start_time_names_the_metadata_file(tmp_path):
    with pytest.raises(InputError) as exc:
        _import(tmp_path, "#Entity POWER\nGPU 0 1\n",
                {"sample_period_ms": 100, "start_time": "yesterday"})
    assert (exc.value.file, exc.value.field) == (str(tmp_path / "meta.json"), "start_time")


def test_the_log_is_read_as_utf8_whatever_the_locale(tmp_path):
    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode reads every file as UTF-8")
    saved = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")  # an ASCII locale
        run = _import(tmp_path, "#Entity POWER\nID W — units ü\nGPU 0 7\n")
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)
    assert run.devices[0].signals["power_w"].tolist() == [7.0]


@pytest.mark.parametrize("run_id", ["a..b", "-a", "a b", "", "x" * 201, "a/b"])
def test_unusable_run_ids_are_named(tmp_path, run_id):
    with pytest.raises(InputError) as exc:
        assemble.check_run_id(run_id, file=tmp_path / "f.csv", line=3)
    assert exc.value.reason.endswith(" is not a usable run id (letters, digits and ._=+- only)")
    assert repr(run_id)[:20] in exc.value.reason or len(run_id) > 40
    assert (exc.value.file, exc.value.line, exc.value.field) == \
        (str(tmp_path / "f.csv"), 3, "run_id")


@pytest.mark.parametrize("run_id", ["a.b", "A9._=+-x", "x" * 200])
def test_usable_run_ids_pass(tmp_path, run_id):
    assert assemble.check_run_id(run_id, file=tmp_path / "f.csv") == run_id


def test_mode_and_median_period():
    assert assemble.mode_of(np.array([np.nan, 5.0])) == 5.0  # one finite value
    assert assemble.mode_of(np.array([1.0, 2.0, 2.0, 3.0])) == 2.0
    assert assemble.mode_of(np.array([np.nan])) is None

    class Dev:
        def __init__(self, ts):
            self.ts_ms = np.array(ts, dtype=np.int64)

    assert assemble.median_period_ms([Dev([0, 100]), Dev([5])]) == 100.0  # two ticks suffice
    assert assemble.median_period_ms([Dev([7])]) is None
    assert assemble.median_period_ms([Dev([0, 10, 20]), Dev([0, 30])]) == 10.0


def _where(exc: pytest.ExceptionInfo) -> tuple:
    return exc.value.reason, exc.value.file, exc.value.line, exc.value.field


@pytest.mark.parametrize("header", ["#XEntity", "#X Entity", "#Device", "#"])
def test_dmon_header_must_name_entity_right_after_the_hash(tmp_path, header):
    path, meta = write_log(tmp_path, n=3)
    path.write_text(path.read_text().replace("#Entity", header))
    line = HEADER.split("\n")[0].replace("#Entity", header)
    with pytest.raises(InputError) as exc:
        import_file("dcgm", path, workload="inference", meta_path=meta)
    assert _where(exc) == (f"expected a '#Entity ...' header, got {line[:40]!r}", str(path), 1,
                           None)


def test_dmon_header_with_hashes_and_space_is_read(tmp_path):
    path, meta = write_log(tmp_path, n=3, gpus=1)
    path.write_text(path.read_text().replace("#Entity", "## Entity"))
    run = import_file("dcgm", path, workload="inference", meta_path=meta)
    assert run.devices[0].t_ms.tolist() == [0, 100, 200]


def test_dmon_without_metadata_names_the_missing_period(tmp_path):
    path, _ = write_log(tmp_path, n=3)
    with pytest.raises(InputError) as exc:
        import_file("dcgm", path, workload="inference")
    assert _where(exc) == ("dcgmi dmon prints no timestamps: give its -d delay as "
                           "sample_period_ms in --meta (got None)", str(path), None,
                           "sample_period_ms")


def test_dmon_metadata_naming_a_path_is_refused_naming_the_metadata_file(tmp_path):
    path, meta = write_log(tmp_path, n=3)
    meta.write_text(json.dumps({"sample_period_ms": 100, "model_name": "/home/alice/llama"}))
    with pytest.raises(InputError) as exc:
        import_file("dcgm", path, workload="inference", meta_path=meta)
    assert exc.value.file == str(meta)
    assert exc.value.field == "model_name"
    assert exc.value.line is None


def test_dmon_num_gpus_below_the_log_names_the_log(tmp_path):
    path, meta = write_log(tmp_path, n=3, gpus=2)
    with pytest.raises(InputError) as exc:
        import_file("dcgm", path, workload="inference", meta_path=meta, num_gpus=1)
    assert _where(exc) == ("--num-gpus is 1 but the log holds 2 GPUs", str(path), None,
                           "num_gpus")


def test_dcgm_cut_off_line_after_a_units_line_ending_in_xx(tmp_path):
    path = tmp_path / "dmon.txt"
    path.write_text("#Entity POWER\nID W\nGPU 0 100\nGPU 0 101\nID XX\nXX", encoding="utf-8")
    assert _parse(path) == (["POWER"], {0: [(3, [100.0]), (4, [101.0])]})


def test_missing_dcgm_file_names_the_file(tmp_path):
    path = tmp_path / "dmon.txt"
    with pytest.raises(InputError) as exc:
        import_file("dcgm", path, workload="finetune")
    assert (exc.value.reason, exc.value.file, exc.value.line, exc.value.field) == (
        "no such file", str(path), None, None)


def test_dcgm_run_meta_has_start_time_and_no_other_start_key(tmp_path):
    path, meta = write_log(tmp_path, n=3, gpus=1)
    run = import_file("dcgm", path, workload="inference", meta_path=meta)
    assert sorted(k for k in run.meta if "start" in k.lower()) == ["start_time"]
    assert run.meta["start_time"].isoformat() == "2026-11-30T12:00:00+00:00"


def test_dcgm_meta_json_fixture_declares_the_start_time(tmp_path):
    _, meta = write_log(tmp_path, n=3, gpus=1)
    assert json.loads(meta.read_text())["start_time"] == "2026-11-30T12:00:00Z"
