"""``Setting.check``: YAML strictness on top of the library's one coercion rule."""

from __future__ import annotations

import math

import pytest

from generation.workloads import Setting
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.run import coerce_value


@pytest.mark.parametrize("dtype, value, expected", [
    ("int32", 4, 4),
    ("int32", 4.0, 4),
    ("int64", 2**60 + 1, 2**60 + 1),  # exact: no float round trip
    ("float32", 3, 3.0),
    ("string", 7, "7"),
    ("bool", False, False),
])
def test_valid_values_are_coerced(dtype, value, expected):
    out, problem = Setting("x", dtype).check(value)
    assert problem is None and out == expected and type(out) is type(expected)


@pytest.mark.parametrize("dtype, value, message", [
    ("int32", "4", "'4' is not an integer"),  # a sweep gives numbers as YAML numbers
    ("int32", True, "True is not an integer"),
    ("int32", 1.5, "1.5 is not an integer"),
    ("int16", 2**15, "32768 is out of range for int16"),
    ("float32", "1.5", "'1.5' is not a number"),
    ("float32", math.inf, "inf is not a finite number"),
    ("float32", math.nan, "nan is not a finite number"),
    ("bool", "yes", "'yes' is not a boolean (true/false)"),
    ("string", True, "True is not a string"),
    ("string", [1], "[1] is not a string"),
])
def test_bad_values_are_named(dtype, value, message):
    _, problem = Setting("x", dtype).check(value)
    assert problem == message


def test_choices_and_minimum_after_coercion():
    assert Setting("x", "int32", choices=(1, 2)).check(3.0)[1] == "3 is not one of 1, 2"
    assert Setting("x", "float32", minimum=1.0).check(0)[1] == "0.0 is below the minimum 1"


def test_imports_share_the_rule_but_are_lenient_about_text():
    assert coerce_value("x", "4", "int32") == 4  # a CSV cell is text
    assert coerce_value("x", 2**60 + 1, "int64") == 2**60 + 1
    assert coerce_value("x", math.nan, "float32") is None  # missing, not an error
    with pytest.raises(InputError, match="field 'x'.*out of range for int16"):
        coerce_value("x", 2**15, "int16")
