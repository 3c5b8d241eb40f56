"""Pins of the importers that a random sample of mutants found unpinned.

Mutation testing of a random sample of the ``importers/`` mutants that no earlier run reached
left these behaviours without a failing test: the negative cell after an empty one that the
vectorised reader hands to the text path (so the error quotes the cell as written); a quote in a
dropped cut-off last line (the vectorised reader keeps the file, one warning) and the reason
logged when quoted cells send a file to the row reader; a missing or vanished file; repeated
headers in a log whose first column is one value, and the segment count of a log appended
several times; the row reader's header before ``read_header`` and its empty, typed columns; the
encoding names ``sniff_encoding`` returns; the column helpers of ``arrow_values`` on all-null
columns, cells of different widths, float32 input, empty arrays, null cells and unit columns; the
device defaults, model family, 1 s-average flag and declared sample period of run assembly; the
rank and end of stage events of a run without samples; and the time zone of a
``powertrace-csv`` import.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import arrow_values as av
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.arrow_csv import ArrowCsvReader
from llm_powertrace_ds.importers.assemble import (
    DeviceData,
    apply_device_defaults,
    fill_model,
    finish_meta,
)
from llm_powertrace_ds.importers.common import CsvReader, family_from_name, sniff_encoding
from llm_powertrace_ds.importers.enrich import stage_kind_events
from llm_powertrace_ds.importers.values import numeric_converter
from llm_powertrace_ds.run import DeviceSeries, Event, Run

LOGGER = "llm_powertrace_ds.importers"
READERS = [ArrowCsvReader, CsvReader]


def _text(values, lines: np.ndarray) -> np.ndarray:  # noqa: ANN001 - a Converter
    """The cells as Python strings (an Arrow column or the row reader's tuple)."""
    cells = values.to_pylist() if isinstance(values, (pa.Array, pa.ChunkedArray)) else values
    return np.array([str(c) for c in cells], dtype=object)


TEXT = {"a": (0, _text), "b": (1, _text)}


def _read(path: Path, reader_cls: type, converters=TEXT):  # noqa: ANN001, ANN202
    with reader_cls(path) as reader:
        reader.read_header()
        return reader.read(converters)


def _shape(table) -> tuple:  # noqa: ANN001
    return (table.lines.tolist(), table.segments.tolist(), table.columns["a"].tolist(),
            table.columns["b"].tolist(), table.last_line)


# --- the vectorised reader and the row reader --------------------------------------------------


@pytest.mark.parametrize("reader_cls", READERS)
def test_negative_after_an_empty_cell_is_quoted_as_written(tmp_path, reader_cls):
    # an empty cell, then a negative one: the float64 parse is not "plain", so the text path
    # decides the column and the error quotes the cell's own text (not the float -1.5)
    path = tmp_path / "log.csv"
    path.write_text("a,p\nx,\ny,-1.50\nz,2\n")
    conv = {"p": (1, numeric_converter(file=path, field="p", nonnegative=True))}
    with pytest.raises(InputError) as err:
        _read(path, reader_cls, conv)
    e = err.value
    assert (e.reason, e.file, e.line, e.field) == ("value '-1.50' is negative", str(path), 3, "p")


@pytest.mark.parametrize("reader_cls", READERS)
def test_empty_then_plain_numbers_read_as_nan_then_values(tmp_path, reader_cls):
    path = tmp_path / "log.csv"
    path.write_text("a,p\nx,\ny,1.50\nz,0\n")
    conv = {"p": (1, numeric_converter(file=path, field="p", nonnegative=True))}
    table = _read(path, reader_cls, conv)
    got = table.columns["p"].tolist()
    assert math.isnan(got[0]) and got[1:] == [1.5, 0.0]
    assert table.lines.tolist() == [2, 3, 4]


def test_quote_in_a_dropped_cut_off_line_keeps_the_vectorised_path(tmp_path, caplog):
    path = tmp_path / "log.csv"
    path.write_bytes(b'h1,h2\n1,a\n2,b\n3,"c')  # the cut-off last line has the only quote
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    table = _read(path, ArrowCsvReader)
    assert _shape(table) == ([2, 3], [0, 0], ["1", "2"], ["a", "b"], 4)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert not [m for m in messages if "row reader" in m]
    assert [m for m in messages if "cut off" in m] == \
        [f"{path}: line 4 is cut off (a killed logger?); dropped it"]
    caplog.clear()
    assert _shape(_read(path, CsvReader)) == ([2, 3], [0, 0], ["1", "2"], ["a", "b"], 4)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == \
        [f"{path}: line 4 is cut off (a killed logger?); dropped it"]


def test_quoted_cells_go_to_the_row_reader_with_the_reason(tmp_path, caplog):
    path = tmp_path / "log.csv"
    path.write_bytes(b'h1,h2\n1,"a"\n2,b\n')
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    assert _shape(_read(path, ArrowCsvReader)) == ([2, 3], [0, 0], ["1", "2"], ["a", "b"], 3)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == \
        [f"{path}: row reader (quoted cells)"]


@pytest.mark.parametrize("reader_cls", READERS)
def test_a_missing_file_is_an_input_error(tmp_path, reader_cls):
    path = tmp_path / "missing.csv"
    with pytest.raises(InputError) as err:
        reader_cls(path)
    e = err.value
    assert (e.reason, e.file, e.line, e.field) == \
        ("cannot read the file (No such file or directory)", str(path), None, None)


def test_a_file_gone_before_the_vectorised_read_is_an_input_error(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\n")
    with ArrowCsvReader(path) as reader:
        reader.read_header()
        path.unlink()
        with pytest.raises(InputError) as err:
            reader.read(TEXT)
    e = err.value
    assert (e.reason, e.file, e.line) == \
        ("cannot read the file (No such file or directory)", str(path), None)


@pytest.mark.parametrize("reader_cls", READERS)
def test_repeated_header_in_a_one_value_first_column(tmp_path, reader_cls):
    # a run-id column whose every cell equals the header's first cell: the repeated header
    # line (line 3) is still a segment start, not data
    path = tmp_path / "log.csv"
    path.write_text("run,p\nrun,1\nrun,p\nrun,2\n")
    assert _shape(_read(path, reader_cls)) == ([2, 4], [0, 1], ["run", "run"], ["1", "2"], 4)


@pytest.mark.parametrize("reader_cls", READERS)
def test_each_repeated_header_starts_the_next_segment(tmp_path, reader_cls):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\nh1,h2\n2,b\nh1,h2\n3,c\nh1,h2\n4,d\n")
    assert _shape(_read(path, reader_cls)) == \
        ([2, 4, 6, 8], [0, 1, 2, 3], ["1", "2", "3", "4"], ["a", "b", "c", "d"], 8)


def test_row_reader_header_is_empty_before_read_header(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1,a\n")
    with CsvReader(path) as reader:
        assert reader.header == [] and reader.header_line == 0
        assert reader.read_header() == ["h1", "h2"]


@pytest.mark.parametrize("reader_cls", READERS)
def test_header_only_file_gives_empty_columns(tmp_path, reader_cls):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n")
    table = _read(path, reader_cls)
    for name in ("a", "b"):
        assert table.columns[name].shape == (0,)
    assert (table.lines.tolist(), table.segments.tolist(), table.last_line) == ([], [], 1)
    assert (table.lines.dtype, table.segments.dtype) == (np.int64, np.int32)


# --- arrow_values -------------------------------------------------------------------------------


def test_constant_and_distinct_of_an_all_null_column():
    col = pa.array([None, None], pa.string())
    assert av.constant(col) is None  # nulls are not a string
    uniq, inverse = av.distinct(col)
    assert uniq == [None] and inverse.tolist() == [0, 0]


def test_constant_of_a_repeated_string():
    assert av.constant(pa.array(["r1", "r1", "r1"])) == "r1"
    assert av.constant(pa.array(["r1", None, "r1"])) is None


def test_fixed_width_ms_refuses_cells_of_different_widths():
    # lengths 19, 18, 20 (sum 3 x 19): read as a 3 x 19 matrix they would look like stamps
    cells = ["2024-01-01 00:00:00", "2024-01-01 00:00:0", "52024-01-01 00:00:03"]
    assert av.fixed_width_ms(pa.array(cells)) is None
    same = ["2024-01-01 00:00:00", "2024-01-01 00:00:05"]
    ms, zulu = av.fixed_width_ms(pa.array(same))
    t0 = int(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert ms.tolist() == [t0, t0 + 5000] and zulu is False


def test_numbers_of_a_float32_column():
    got = av.numbers(pa.array([1.5, 2.0], pa.float32()), None)
    assert got.dtype == np.float64 and got.tolist() == [1.5, 2.0]
    got = av.numbers(pa.array([1.5, None], pa.float32()), None)
    assert got[0] == 1.5 and math.isnan(got[1])
    got[0] = 3.0  # writable


def test_numbers_with_units_and_null_tokens():
    got = av.numbers(pa.array(["1", "[N/A]", " 2.5 "]), None)
    assert got is not None
    assert got[0] == 1.0 and math.isnan(got[1]) and got[2] == 2.5
    got = av.numbers(pa.array(["1 W", " 2.5W "]), frozenset({"W"}))
    assert got is not None and got.tolist() == [1.0, 2.5]
    got = av.numbers(pa.array(["1 W", "2 W"]), frozenset({"W", "mW"}))
    assert got.tolist() == [1.0, 2.0]
    assert av.numbers(pa.array(["1 W", "2 kW"]), frozenset({"W"})) is None


# --- run assembly -------------------------------------------------------------------------------


def _device(**over) -> DeviceData:  # noqa: ANN003
    return DeviceData(gpu_index=0, ts_ms=np.array([0, 100], np.int64),
                      lines=np.array([2, 3], np.int64), **over)


def test_device_defaults_fill_only_what_the_log_lacks():
    logged = _device(gpu_name="NVIDIA A100-SXM4-80GB", power_limit_w=300.0)
    bare = _device()
    apply_device_defaults([logged, bare], {"gpu_name": "NVIDIA H100 80GB HBM3",
                                           "power_limit_w": 700.0, "default_power_limit_w": None})
    assert (logged.gpu_name, logged.power_limit_w, logged.default_power_limit_w) == \
        ("NVIDIA A100-SXM4-80GB", 300.0, None)
    assert (bare.gpu_name, bare.power_limit_w, bare.default_power_limit_w) == \
        ("NVIDIA H100 80GB HBM3", 700.0, None)


def test_model_family_from_the_label_when_no_name():
    label = "Llama-3.1-8B-Instruct"
    assert family_from_name(label) != family_from_name(None)
    meta = {"model_label": label}
    fill_model(meta)
    assert meta["model_family"] == family_from_name(label)
    meta = {"model_family": "mixtral", "model_name": label}  # a given family is kept
    fill_model(meta)
    assert meta["model_family"] == "mixtral"


def test_one_second_average_follows_the_logged_gpu_name_not_the_platform():
    # an A100's power.draw is instantaneous although the platform given is an H100's
    meta = {"power_field": "power_usage"}
    flags = finish_meta([_device(gpu_name="NVIDIA A100-SXM4-80GB")], meta,
                        platform="h100_sxm_80gb", num_gpus=None, file=Path("log.csv"))
    assert "power_is_1s_average" not in flags and meta["platform"] == "h100_sxm_80gb"
    meta = {"power_field": "power_usage"}
    flags = finish_meta([_device(gpu_name="NVIDIA H100 80GB HBM3")], meta,
                        platform="a100_sxm4_80gb", num_gpus=None, file=Path("log.csv"))
    assert "power_is_1s_average" in flags


def test_stage_events_of_a_run_without_samples():
    dev = DeviceSeries(gpu_index=0, t_ms=np.zeros(0, np.int64), signals={})
    run = Run(meta={"run_id": "r", "workload": "finetune", "platform": "unknown"},
              devices=[dev], events=[Event(t_ms=500, kind="stage", label="CKPT", rank=2)])
    got = [(e.t_ms, e.kind, e.label, e.rank) for e in stage_kind_events(run)]
    assert got == [(500, "checkpoint_begin", "CKPT", 2), (500, "checkpoint_end", "CKPT", 2)]


# --- powertrace-csv imports ---------------------------------------------------------------------

PT_HEADER = ("run_id,timestamp,time_relative_s,gpu_id,power_w,sm_clock_mhz,gpu_util_pct,"
             "memory_util_pct,memory_used_mb,memory_total_mb,temperature_c,stage")
RUN_ID = "powertraces-ptX_r1_1-abc123"


def _pt_csv(path: Path, *, zulu: bool, ticks: int = 10) -> Path:
    t0 = dt.datetime(2026, 5, 1, 12, 0, 0)
    lines = [PT_HEADER]
    for k in range(ticks):
        for g in range(2):
            ms = k * 100 + 2 * g
            t = t0 + dt.timedelta(milliseconds=ms)
            stamp = t.strftime("%Y-%m-%dT%H:%M:%S") + f".{t.microsecond // 1000:03d}"
            lines.append(f"{RUN_ID},{stamp}{'Z' if zulu else ''},{ms / 1000},{g},{40 + g},1980,"
                         f"{k},0,,,,")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _pt_json(path: Path, **over) -> Path:  # noqa: ANN003
    meta = {"run_id": RUN_ID, "gpu_type": "L40s", "gpu_count": 2, "precision": "bf16",
            "sampling_interval_declared_s": 0.1}
    meta.update(over)
    path.write_text(json.dumps(meta), encoding="utf-8")
    return path


def test_powertrace_csv_zone_less_stamps_use_tz(tmp_path):
    csv_path = _pt_csv(tmp_path / "t.csv", zulu=False)
    meta = _pt_json(tmp_path / "m.json")
    paris = import_file("powertrace-csv", csv_path, workload="finetune", meta_path=meta,
                        tz="Europe/Paris")
    utc = import_file("powertrace-csv", csv_path, workload="finetune", meta_path=meta)
    assert utc.meta["start_time"] == dt.datetime(2026, 5, 1, 12, tzinfo=dt.timezone.utc)
    assert paris.meta["start_time"] == dt.datetime(2026, 5, 1, 10, tzinfo=dt.timezone.utc)


def test_declared_sample_period_wins_over_the_median(tmp_path):
    csv_path = _pt_csv(tmp_path / "t.csv", zulu=True)
    run = import_file("powertrace-csv", csv_path, workload="finetune",
                      meta_path=_pt_json(tmp_path / "m.json", sampling_interval_declared_s=0.25))
    assert run.meta["sample_period_ms"] == 250.0
    assert len(run.devices) == 2 and run.devices[0].t_ms.tolist()[:2] == [0, 100]


def test_float_view_of_an_empty_array():
    got = av.float_view(pa.array([], pa.float64()))
    assert got.shape == (0,) and got.dtype == np.float64
    assert av.float_view(pa.array([0.5, 2.0])).tolist() == [0.5, 2.0]


def test_null_mask_is_a_bool_array_with_nulls_false():
    got = av.null_mask(pa.array(["N/A", None, "[Not Supported]", "1", ""]))
    assert got.dtype == np.bool_
    assert got.tolist() == [True, False, True, False, True]


def test_sniff_encoding_names(tmp_path):
    plain = tmp_path / "plain.csv"
    plain.write_bytes(b"h1,h2\n1,a\n")
    wide = tmp_path / "wide.csv"
    wide.write_bytes("h1,h2\n1,a\n".encode("utf-16"))  # with its byte-order mark
    assert sniff_encoding(plain) == "utf-8-sig"
    assert sniff_encoding(tmp_path / "missing.csv") == "utf-8-sig"
    assert sniff_encoding(wide) == "utf-16"


def test_invalid_utf8_in_an_unread_column_keeps_the_vectorised_path(tmp_path, caplog):
    path = tmp_path / "log.csv"
    path.write_bytes(b"h1,h2,h3\n1,a,\xff\n2,b,c\n")  # only h1 and h2 are converted
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    assert _shape(_read(path, ArrowCsvReader)) == ([2, 3], [0, 0], ["1", "2"], ["a", "b"], 3)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == []


def test_a_short_line_falls_back_with_the_parser_reason_then_names_the_field(tmp_path, caplog):
    path = tmp_path / "log.csv"
    path.write_bytes(b"h1,h2\n1,a\n2\n3,c\n")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with pytest.raises(InputError) as err:
        _read(path, ArrowCsvReader)
    e = err.value
    assert (e.reason, e.file, e.line, e.field) == \
        ("the line has 1 fields, the header has 2", str(path), 3, "h2")
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 1
    assert messages[0].startswith(f"{path}: row reader (CSV parse error: ")
    assert "Expected 2 columns, got 1" in messages[0]


def test_constant_of_a_sliced_column():
    assert av.constant(pa.array(["x", "r1", "r1", "y"]).slice(1, 2)) == "r1"


def test_an_oversized_field_names_the_file_and_line(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("h1,h2\n1," + "a" * 140_000 + "\n")
    with pytest.raises(InputError) as err:
        _read(path, CsvReader)
    e = err.value
    assert (e.file, e.line) == (str(path), 2)
    assert e.reason.startswith("not a readable CSV line (field larger than field limit")


# -- the second random sample's survivors (drawn after the pins above) ------------------------------

def test_time_going_back_names_both_instants():
    from llm_powertrace_ds.importers.assemble import DeviceData, check_increasing

    dev = DeviceData(3, np.array([1_000, 2_000, 1_500], dtype=np.int64), np.array([2, 3, 4]))
    with pytest.raises(InputError) as exc:
        check_increasing(dev, file=Path("log.csv"))
    assert exc.value.reason == (
        "time of GPU 3 goes back from 1970-01-01T00:00:02.000Z (line 3) to "
        "1970-01-01T00:00:01.500Z; each GPU's timestamps must increase")
    assert (exc.value.line, exc.value.field) == (4, "timestamp")


def test_the_metadata_platform_wins_over_the_gpu_name_and_start_time_is_utc(monkeypatch):
    import time

    from llm_powertrace_ds.importers.assemble import DeviceData, assemble_run, finish_meta

    monkeypatch.setenv("TZ", "America/New_York")  # a local zone that is not UTC
    time.tzset()

    dev = DeviceData(0, np.array([1_700_000_000_000, 1_700_000_000_100], dtype=np.int64),
                     np.array([2, 3]), {"power_w": np.array([100.0, 110.0])},
                     gpu_name="NVIDIA H100 80GB HBM3")
    meta = {"platform": "l40s", "workload": "inference", "power_field": "power_draw"}
    finish_meta([dev], meta, platform=None, num_gpus=None, file=Path("log.csv"))
    assert meta["platform"] == "l40s"
    run = assemble_run([dev], meta, file=Path("log.csv"))
    assert run.meta["start_time"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    assert run.meta["start_time"].utcoffset() == dt.timedelta(0)


@pytest.fixture(autouse=True)
def _local_zone_restored():
    """Re-read the process's zone after a test that changed TZ (monkeypatch restores the env)."""
    import time

    yield
    time.tzset()


def test_a_declared_gpu_count_below_the_log_names_its_source():
    from llm_powertrace_ds.importers.assemble import resolve_num_gpus

    for given, declared, source in ((2, None, "--num-gpus"), (None, 2, "the metadata's num_gpus")):
        with pytest.raises(InputError) as exc:
            resolve_num_gpus(given, declared, 4, file=Path("log.csv"))
        assert (exc.value.reason, exc.value.field) == (
            f"{source} is 2 but the log holds 4 GPUs", "num_gpus")
    assert resolve_num_gpus(None, None, 4, file=Path("log.csv")) == 4
    assert resolve_num_gpus(None, 6, 4, file=Path("log.csv")) == 6
