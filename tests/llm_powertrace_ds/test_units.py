"""The shared unit parser: every power, ramp, energy and time option reads one vocabulary."""

from __future__ import annotations

import argparse

import pytest

from llm_powertrace_ds.errors import UsageError
from llm_powertrace_ds.units import (
    format_mw,
    format_mw_per_min,
    format_mwh,
    option_type,
    parse_quantity,
    to_unit,
)


@pytest.mark.parametrize(("text", "kind", "si"), [
    ("20MW", "power", 20e6), ("1.5 kW", "power", 1500.0), ("3GW", "power", 3e9), ("7W", "power", 7.0),
    ("1MW/min", "ramp", 1e6 / 60), ("16.7kW/s", "ramp", 16_700.0), ("2 MW/s", "ramp", 2e6),
    ("60 MW / h", "ramp", 60e6 / 3600), ("5W/s", "ramp", 5.0),
    ("26.5kWh", "energy", 26.5 * 3.6e6), ("1MWh", "energy", 3.6e9), ("95.3MJ", "energy", 95.3e6),
    ("2Wh", "energy", 7200.0), ("4kJ", "energy", 4000.0), ("9J", "energy", 9.0),
    ("90min", "time", 5400.0), ("2h", "time", 7200.0), ("250ms", "time", 0.25), ("1e1s", "time", 10.0),
])
def test_units_convert_to_si(text, kind, si):
    assert parse_quantity(text, kind, option="--x") == pytest.approx(si, rel=1e-12)


@pytest.mark.parametrize(("kind", "si"), [("power", 16667.0), ("ramp", 16667.0),
                                          ("energy", 16667.0), ("time", 16667.0)])
def test_a_bare_number_keeps_the_si_meaning(kind, si):
    assert parse_quantity("16667", kind, option="--x") == si


def test_a_bare_number_takes_the_unit_the_option_names():
    assert parse_quantity("2.5", "power", option="--site", bare_unit="MW") == 2.5e6
    assert parse_quantity("2.5kW", "power", option="--site", bare_unit="MW") == 2500.0


@pytest.mark.parametrize(("text", "kind", "words"), [
    ("20MW", "ramp", "'MW' is a unit of power, not of ramp"),
    ("1MW/min", "power", "a unit of ramp, not of power"),
    ("3mW", "power", "unknown unit 'mW'"),
    ("5 furlongs", "time", "unknown unit 'furlongs'"),
    ("fast", "ramp", "'fast' is not a ramp"),
    ("1e999MW", "power", "is not finite"),
    ("", "power", "'' is not a power"),
    ("1 2 MW", "power", "is not a power"),
    ("1" * 500, "power", "..."),
])
def test_a_bad_value_is_one_line_naming_option_and_value(text, kind, words):
    with pytest.raises(UsageError) as err:
        parse_quantity(text, kind, option="--ramp-limit")
    msg = str(err.value)
    assert words in msg and "--ramp-limit" in msg and "\n" not in msg
    assert len(msg) < 200


def test_option_type_reports_through_argparse(capsys):
    p = argparse.ArgumentParser(prog="x")
    p.add_argument("--ramp-limit", type=option_type("ramp", "--ramp-limit"))
    assert p.parse_args(["--ramp-limit", "1MW/min"]).ramp_limit == pytest.approx(1e6 / 60)
    with pytest.raises(SystemExit) as stop:
        p.parse_args(["--ramp-limit", "20MW"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("x: error: argument --ramp-limit: '20MW'") and "unit of power" in err


def test_formatting_in_site_units():
    assert format_mw(1.93e6) == "1.93 MW"
    assert format_mwh(26.5 * 3.6e6) == "0.0265 MWh"
    assert format_mw_per_min(1e6 / 60) == "1 MW/min"
    assert format_mw(None) == "null"
    assert to_unit(3.6e9, "kWh") == 1000.0
    with pytest.raises(ValueError, match="unknown unit"):
        to_unit(1.0, "furlong")
