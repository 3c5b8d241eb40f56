"""WattAMeter logs with values outside what a tracker can write: one line naming file, line, field."""

from __future__ import annotations

import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.wattameter import import_wattameter, read_node_log

JOB = "4242"


def one_node(tmp_path, header: str, rows: list[str]):
    path = tmp_path / f"nvml_01_wattameter_{JOB}-n0.log"
    path.write_text(f"# 2026-09-01_15:48:33.525981 - WattAMeter run {JOB}\n"
                    f"# timestamp                  reading-time[ns] {header}\n"
                    + "".join(f"  {r}\n" for r in rows))
    return path


def test_a_gpu_column_beyond_the_node_is_refused_not_a_phantom_node(tmp_path):
    path = one_node(tmp_path, "gpu-0[mW] gpu-1000[mW]",
                    [f"2026-09-01_15:48:33.{k}00000 80000 70000 71000" for k in range(1, 6)])
    with pytest.raises(InputError) as err:
        import_wattameter([path], workload="finetune")
    text = str(err.value)
    assert path.name in text and "line 2" in text and "gpu-1000[mW]" in text
    assert "outside 0..999" in text


def test_a_400_digit_gpu_index_is_refused_by_its_column(tmp_path):
    tag = f"gpu-{'9' * 400}[mW]"
    path = one_node(tmp_path, f"gpu-0[mW] {tag}", ["2026-09-01_15:48:33.100000 8 1 2"])
    with pytest.raises(InputError, match=r"line 2.*outside 0\.\.999"):
        read_node_log(path)


@pytest.mark.parametrize("stamp", ["2026-13-01_15:48:33.300000", "2026-02-30_15:48:33.300000",
                                   "2026-09-01_25:48:33.300000"])
def test_an_impossible_date_is_named_by_line(tmp_path, stamp):
    rows = ["2026-09-01_15:48:33.100000 80000 70000", "2026-09-01_15:48:33.200000 80000 70000",
            f"{stamp} 80000 70000", "2026-09-01_15:48:33.400000 80000 70000"]
    path = one_node(tmp_path, "gpu-0[mW]", rows)
    with pytest.raises(InputError) as err:
        read_node_log(path)
    text = str(err.value)
    assert path.name in text and "line 5" in text and "'timestamp'" in text
    assert "not a calendar time" in text


@pytest.mark.parametrize("read_ns", ["9" * 400, "9" * 5000, "-5", "3600000000001", "1e9"])
def test_a_read_time_no_tracker_can_take_is_named_by_line(tmp_path, read_ns):
    rows = ["2026-09-01_15:48:33.100000 80000 70000", f"2026-09-01_15:48:33.200000 {read_ns} 70000"]
    path = one_node(tmp_path, "gpu-0[mW]", rows)
    with pytest.raises(InputError) as err:
        import_wattameter([path], workload="finetune")
    text = str(err.value)
    assert path.name in text and "line 4" in text and "'reading-time[ns]'" in text
