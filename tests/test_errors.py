"""One error hierarchy: usage errors, missing extras and upload failures are PowerTraceErrors."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from llm_powertrace_ds import errors, plots, query
from llm_powertrace_ds.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_usage_error_is_bad_input():
    assert issubclass(errors.UsageError, errors.InputError)
    assert issubclass(errors.UsageError, ValueError)


def test_missing_extra_is_one_class_and_an_import_error():
    assert plots.MissingExtra is query.MissingExtra is errors.MissingExtra
    assert issubclass(errors.MissingExtra, ModuleNotFoundError)
    assert issubclass(errors.MissingExtra, errors.PowerTraceError)


def test_upload_error_is_in_the_hierarchy():
    spec = importlib.util.spec_from_file_location("upload_under_test", REPO / "upload.py")
    upload = importlib.util.module_from_spec(spec)
    sys.modules["upload_under_test"] = upload
    try:
        spec.loader.exec_module(upload)
        assert issubclass(upload.UploadError, errors.PowerTraceError)
    finally:
        sys.modules.pop("upload_under_test", None)


def test_cli_reports_a_usage_error_with_exit_code_2(tmp_path, capsys):
    assert main(["plot", "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: plot needs DIR_OR_REPO") and err.count("\n") == 1
