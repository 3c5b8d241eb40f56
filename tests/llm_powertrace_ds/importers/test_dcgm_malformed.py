"""Every malformed ``dcgmi dmon`` log gets its exact one-line error: reason, file, line, field.

Each error is compared whole, so one that lost its file, its line or its reason fails.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file

KNOWN = "POWER, TOTEC, TMPTR, GPUTL, SMCLK, MMCLK (-e 155,156,150,203,100,101)"
LONG = "x" * 60


def _import(tmp_path, text: str | bytes, meta: dict | None = None, **kw):
    path = tmp_path / "dmon.txt"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    meta_path = tmp_path / "meta.json"
    meta_path.write_text(json.dumps({"sample_period_ms": 100} if meta is None else meta))
    return path, meta_path, import_file("dcgm", path, workload="inference", meta_path=meta_path,
                                        **kw)


@pytest.mark.parametrize(("text", "reason", "line", "field"), [
    ("#Time POWER\nGPU 0 1\n", "expected a '#Entity ...' header, got '#Time POWER'", 1, None),
    ("#\nGPU 0 1\n", "expected a '#Entity ...' header, got '#'", 1, None),
    ("#Entity POWER FOO BAR\n", f"unknown dmon field 'FOO'; known: {KNOWN}", 1, "FOO"),
    ("#Entity TOTEC\nGPU 0 1\n", "no POWER column: record field 155 (dcgmi dmon -e 155,...)", 1,
     "POWER"),
    ("#Entity POWER TOTEC\nGPU 0 1 2\n#Entity POWER\nGPU 0 1\n",
     "the header changed in the middle of the log", 3, None),
    ("#Entity POWER\n" + LONG + "\nGPU 0 1\n", f"expected 'GPU <index> <values>', got "
     f"{LONG[:40]!r}", 2, None),
    ("GPU 0 100\n#Entity POWER\n", "a sample before the '#Entity' header", 1, None),
    ("#Entity POWER TOTEC\nGPU 0 1\nGPU 0 1 2\n", "1 values where the header has 2", 2, None),
    ("#Entity POWER TOTEC\nGPU 0 1 2\nGPU 0 fast 2\n", "value 'fast' is not a number", 3,
     "POWER"),
    ("#Entity POWER\nID W\n", "no samples: is this `dcgmi dmon` output?", None, None),
    ("#Entity POWER\nhello\nGPU 0 1", "expected 'GPU <index> <values>', got 'hello'", 2, None),
])
def test_malformed_logs_name_reason_file_line_and_field(tmp_path, text, reason, line, field):
    with pytest.raises(InputError) as exc:
        _import(tmp_path, text)
    assert (exc.value.reason, exc.value.file, exc.value.line, exc.value.field) == \
        (reason, str(tmp_path / "dmon.txt"), line, field)


def test_a_log_that_is_not_text_is_named(tmp_path):
    with pytest.raises(InputError) as exc:
        _import(tmp_path, b"#Entity POWER\nGPU 0 \xff\xfe\n")
    assert exc.value.file == str(tmp_path / "dmon.txt")
    assert exc.value.reason.startswith(f"Failed to read '{tmp_path / 'dmon.txt'}': "
                                       "UnicodeDecodeError: ")


@pytest.mark.parametrize("period", [None, 0, -100, "fast", "inf"])
def test_the_period_must_be_a_positive_number(tmp_path, period):
    meta = {} if period is None else {"sample_period_ms": period}
    with pytest.raises(InputError) as exc:
        _import(tmp_path, "#Entity POWER\nGPU 0 1\n", meta)
    assert exc.value.reason == ("dcgmi dmon prints no timestamps: give its -d delay as "
                                f"sample_period_ms in --meta (got {period!r})")
    assert (exc.value.file, exc.value.field) == (str(tmp_path / "meta.json"), "sample_period_ms")


def test_blank_lines_null_cells_and_cut_off_lines(tmp_path):
    text = ("#Entity POWER TOTEC\nID W mJ\nGPU 0 N/A 1000\n\nGPU 0 100 1500\nGPU 0 101 2000\n"
            "GPU 0 10")
    path, _, run = _import(tmp_path, text, {"sample_period_ms": 0.5})
    dev = run.devices[0]
    assert dev.t_ms.tolist() == [0, 0, 1]  # 0.5 ms apart, on whole milliseconds
    assert dev.signals["power_w"][1:].tolist() == [100.0, 101.0]
    assert dev.signals["energy_mj"].tolist() == [0.0, 500.0, 1000.0]
    assert run.meta["sample_period_ms"] == 0.5
    assert run.meta["start_time"] is None  # dmon prints no time and the metadata gave none
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert run.run_id == f"import-dcgm-{digest[:12]}"


def test_start_time_platform_and_gpu_count_come_from_the_caller(tmp_path):
    _, _, run = _import(tmp_path, "#Entity POWER\nGPU 0 100\nGPU 0 101\n",
                        {"sample_period_ms": 100, "start_time": "2026-11-30T12:00:00Z"},
                        platform="l40s", num_gpus=2)
    assert run.meta["start_time"] == dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc)
    assert run.meta["start_time"].utcoffset() == dt.timedelta(0)
    assert run.platform == "l40s" and run.meta["num_gpus"] == 2
