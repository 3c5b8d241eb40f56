"""Timestamp parsing (``importers.timestamps``): every accepted form, its zone and its errors.

Slash-separated stamps with an explicit offset, ``Z`` stamps that ignore the local zone (and are
truncated, not rounded, to ms), zones whose offset is zero but are not ``UTC`` itself, the first
occurrence of an ambiguous wall time, empty columns, the one-line errors (reason, file, line and
field of each ``InputError``) and the ``...Z`` text of ``format_utc_ms`` whatever the process's
local time zone.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pytest

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers.timestamps import (
    format_utc_ms,
    local_to_utc_ms,
    timestamp_converter,
)

FILE = Path("/data/gpu.csv")
UTC = dt.timezone.utc
PHOENIX = ZoneInfo("America/Phoenix")   # UTC-7, no daylight saving
BERLIN = ZoneInfo("Europe/Berlin")
LONDON = ZoneInfo("Europe/London")      # UTC+0 in winter, but not the ``UTC`` object
T_MS = 1_712_141_735_013                 # 2024-04-03T10:55:35.013Z
HOUR = 3_600_000


def utc_ms(*args: int) -> int:
    return int(dt.datetime(*args, tzinfo=UTC).timestamp() * 1000)


def convert(values, zone: dt.tzinfo = UTC, first: int = 2) -> np.ndarray:
    conv = timestamp_converter(file=FILE, field="timestamp", zone=zone)
    return conv(values, np.arange(first, first + len(values), dtype=np.int64))


def error(values, zone: dt.tzinfo = UTC, first: int = 2) -> InputError:
    with pytest.raises(InputError) as exc:
        convert(values, zone, first)
    return exc.value


SHAPES = pytest.mark.parametrize("shape", [list, lambda v: pa.array(v, pa.string())],
                                 ids=["list", "arrow"])


# ---------------------------------------------------------------------------------------------
# timestamp_converter: values
# ---------------------------------------------------------------------------------------------


@SHAPES
@pytest.mark.parametrize(("text", "expected"), [
    ("2024/04/03 10:55:35.013", T_MS),
    ("2024-04-03 10:55:35.013", T_MS),
    ("2024-04-03T10:55:35.013", T_MS),
    ("2024-04-03T10:55:35.013999", T_MS),          # extra fraction digits are truncated
    ("2024-04-03T10:55:35.0139Z", T_MS),           # also when the stamp ends in Z
    ("2024-04-03T10:55:35", T_MS - 13),
    ("2024-04-03 10:55", T_MS - 35_013),
    ("  2024/04/03 10:55:35.013 ", T_MS),
    ("2024-04-03T10:55:35.013Z", T_MS),
])
def test_single_utc_values(shape, text, expected):
    out = convert(shape([text]))
    assert out.dtype == np.int64
    assert out.tolist() == [expected]


@pytest.mark.parametrize("text", ["2024/04/03 12:55:35.013+02:00",   # slashes and an offset
                                  "2024-04-03T12:55:35.013+02:00",
                                  "2024-04-03T12:55:35.013+0200",
                                  "2024-04-03T05:25:35.013-05:30",
                                  "2024-04-03T10:55:35.013+00:00"])
@SHAPES
def test_explicit_offsets(shape, text):
    # with a zone-less stamp beside it, so the column takes the exact (per-value) path
    out = convert(shape([text, "2024/04/03 10:55:35.013"]), zone=PHOENIX)
    assert out.tolist() == [T_MS, T_MS + 7 * HOUR]


@SHAPES
def test_z_stamps_ignore_the_local_zone(shape):
    out = convert(shape(["2024-04-03T10:55:35.013Z", "2024-04-03T10:55:35.013",
                         "2024-04-03T12:55:35.013+02:00", "2024-04-03T10:55:35.0137Z"]),
                  zone=PHOENIX)
    assert out.tolist() == [T_MS, T_MS + 7 * HOUR, T_MS, T_MS]


@SHAPES
def test_only_z_stamps_in_a_local_zone(shape):
    out = convert(shape(["2024-04-03T10:55:35.013Z", "2024-04-03T10:55:36.013Z"]), zone=PHOENIX)
    assert out.tolist() == [T_MS, T_MS + 1000]


@SHAPES
@pytest.mark.parametrize("zone", [PHOENIX, ZoneInfo("Asia/Kolkata")], ids=["phoenix", "kolkata"])
def test_local_zone_offsets(shape, zone):
    out = convert(shape(["2024/04/03 10:55:35.013", "2024/04/03 10:55:36.013"]), zone=zone)
    offset = {"America/Phoenix": -7 * HOUR, "Asia/Kolkata": 5 * HOUR + 30 * 60_000}[str(zone)]
    assert out.tolist() == [T_MS - offset, T_MS - offset + 1000]


@SHAPES
@pytest.mark.parametrize("zone", [LONDON, ZoneInfo("UTC"), ZoneInfo("Africa/Abidjan")],
                         ids=["london-winter", "zoneinfo-utc", "abidjan"])
def test_zero_offset_zones_that_are_not_the_utc_object(shape, zone):
    out = convert(shape(["2024/01/15 12:00:00.000", "2024/01/15 12:00:01.250"]), zone=zone)
    assert out.tolist() == [utc_ms(2024, 1, 15, 12), utc_ms(2024, 1, 15, 12) + 1250]


@SHAPES
def test_daylight_saving_gap_and_ambiguous_hour(shape):
    # Berlin: clocks go back on 2024-10-27 at 03:00 CEST -> 02:00 CET; the repeated 02:30 takes
    # its first occurrence (CEST, UTC+2)
    out = convert(shape(["2024-10-27 01:59:00", "2024-10-27 02:30:00", "2024-10-27 03:00:00"]),
                  zone=BERLIN)
    assert out.tolist() == [utc_ms(2024, 10, 26, 23, 59), utc_ms(2024, 10, 27, 0, 30),
                            utc_ms(2024, 10, 27, 2)]


@SHAPES
def test_variable_width_local_stamps(shape):
    out = convert(shape(["2024-04-03 10:55", "2024-04-03T10:55:35.013", "2024/04/03 10:55:36.5"]),
                  zone=PHOENIX)
    assert out.tolist() == [T_MS - 35_013 + 7 * HOUR, T_MS + 7 * HOUR, T_MS + 1487 + 7 * HOUR]


@SHAPES
def test_ambiguous_hour_before_1970_takes_the_first_occurrence(shape):
    # New York fell back on 1969-10-26 at 02:00 EDT -> 01:00 EST; springs forward on 1969-04-27
    ny = ZoneInfo("America/New_York")
    texts = ["1969-04-27 01:50:00", "1969-04-27 03:05:00", "1969-10-26 00:50:00",
             "1969-10-26 01:50:00"]
    expected = [int(dt.datetime.fromisoformat(t).replace(tzinfo=ny).timestamp() * 1000)
                for t in texts]
    assert expected == [-21_489_000_000, -21_488_100_000, -5_771_400_000, -5_767_800_000]
    assert convert(shape(texts), zone=ny).tolist() == expected


def test_offset_stamps_take_any_number_of_fraction_digits():
    out = convert([f"2024-04-03T11:55:35.013{'9' * 20}+01:00", "2024/04/03 10:55:35.013"],
                  zone=PHOENIX)
    assert out.tolist()[1] == T_MS + 7 * HOUR
    assert out.tolist()[0] in (T_MS, T_MS + 1)  # truncated or rounded, not refused


@SHAPES
def test_summer_and_winter_in_one_column(shape):
    out = convert(shape(["2024-01-15 12:00:00", "2024-07-15 12:00:00"]), zone=LONDON)
    assert out.tolist() == [utc_ms(2024, 1, 15, 12), utc_ms(2024, 7, 15, 11)]


@pytest.mark.parametrize("empty", [[], pa.array([], pa.string())], ids=["list", "arrow"])
def test_empty_column(empty):
    for zone in (UTC, PHOENIX):
        out = convert(empty, zone=zone)
        assert out.dtype == np.int64 and out.shape == (0,)


# ---------------------------------------------------------------------------------------------
# timestamp_converter: errors
# ---------------------------------------------------------------------------------------------

NOT_A_STAMP = "is not a timestamp (YYYY/MM/DD HH:MM:SS.mmm or ISO-8601)"
INVALID = "is not a valid date and time"


@SHAPES
@pytest.mark.parametrize(("cells", "row", "reason"), [
    (["2024/04/03 10:55:35.013", "garbage"], 1, f"value 'garbage' {NOT_A_STAMP}"),
    (["", "2024/04/03 10:55:35.013"], 0, f"value '' {NOT_A_STAMP}"),
    (["1712141735013"], 0, f"value '1712141735013' {NOT_A_STAMP}"),
    (["2024/04/03 10:55:35.013 UTC"], 0, f"value '2024/04/03 10:55:35.013 UTC' {NOT_A_STAMP}"),
    (["2024-04-03T10:55:35.013+2"], 0, f"value '2024-04-03T10:55:35.013+2' {NOT_A_STAMP}"),
    (["2024-13-10T10:00:00Z", "x"], 1, f"value 'x' {NOT_A_STAMP}"),
    (["2024/02/10 10:00:00", "2024/02/30 10:00:00"], 1, f"value '2024/02/30 10:00:00' {INVALID}"),
    (["2024/02/10 10:00:00", "2024-13-10T10:00:00Z"], 1, f"value '2024-13-10T10:00:00Z' {INVALID}"),
    (["2024/02/10 10:00:00", "2024-02-10T24:00:00"], 1, f"value '2024-02-10T24:00:00' {INVALID}"),
    (["2024/02/10 10:00:00", "2024-02-30T10:00:00+02:00"], 1,
     f"value '2024-02-30T10:00:00+02:00' {INVALID}"),
    (["2024-02-10T10:00:00+01:00", "2024-02-10T10:00:00+25:00"], 1,
     f"value '2024-02-10T10:00:00+25:00' {INVALID}"),
    (["2024-02-10T10:00:00.5+01:00", "2024-02-10T10:00:00+24:00"], 1,
     f"value '2024-02-10T10:00:00+24:00' {INVALID}"),
    (["no time " * 6], 0, f"value 'no time no time no time no time no ...' {NOT_A_STAMP}"),
])
def test_errors(shape, cells, row, reason):
    err = error(shape(cells), zone=PHOENIX, first=5)
    assert err.reason == reason
    assert (err.file, err.line, err.field) == (str(FILE), 5 + row, "timestamp")


def test_errors_name_the_converters_field():
    conv = timestamp_converter(file=Path("other.csv"), field="ts_local", zone=UTC)
    with pytest.raises(InputError) as exc:
        conv(["2024/02/30 10:00:00"], np.array([9]))
    assert (exc.value.file, exc.value.line, exc.value.field) == ("other.csv", 9, "ts_local")


# ---------------------------------------------------------------------------------------------
# local_to_utc_ms
# ---------------------------------------------------------------------------------------------


def test_local_to_utc_ms_utc_and_empty_are_returned_as_is():
    local = np.array([0, 1, 2], np.int64)
    assert local_to_utc_ms(local, UTC) is local
    empty = np.zeros(0, np.int64)
    assert local_to_utc_ms(empty, PHOENIX) is empty


def test_local_to_utc_ms_values():
    local = np.array([0, 1000, 15 * 60_000 - 1, 15 * 60_000], np.int64)
    np.testing.assert_array_equal(local_to_utc_ms(local, PHOENIX), local + 7 * HOUR)
    np.testing.assert_array_equal(local_to_utc_ms(local, LONDON), local - HOUR)  # 1970: BST
    np.testing.assert_array_equal(local_to_utc_ms(local, ZoneInfo("UTC")), local)
    naive = int(dt.datetime(2024, 1, 15, 12).replace(tzinfo=UTC).timestamp() * 1000)
    np.testing.assert_array_equal(local_to_utc_ms(np.array([naive, naive + 5]), LONDON),
                                  [naive, naive + 5])


# ---------------------------------------------------------------------------------------------
# format_utc_ms
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ms", "text"), [
    (T_MS, "2024-04-03T10:55:35.013Z"),
    (0, "1970-01-01T00:00:00.000Z"),
    (1_705_320_000_999, "2024-01-15T12:00:00.999Z"),
    (1_000_000_000_007, "2001-09-09T01:46:40.007Z"),
])
def test_format_utc_ms(ms, text):
    assert format_utc_ms(ms) == text


def test_format_utc_ms_ignores_the_local_time_zone():
    if not hasattr(time, "tzset"):
        pytest.skip("time.tzset is POSIX only")
    old = os.environ.get("TZ")
    try:
        os.environ["TZ"] = "America/Phoenix"
        time.tzset()
        assert format_utc_ms(T_MS) == "2024-04-03T10:55:35.013Z"
        os.environ["TZ"] = "Asia/Tokyo"
        time.tzset()
        assert format_utc_ms(T_MS) == "2024-04-03T10:55:35.013Z"
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()
