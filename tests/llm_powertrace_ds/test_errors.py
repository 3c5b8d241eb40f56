"""One error hierarchy: usage errors, missing extras and upload failures are PowerTraceErrors."""

from __future__ import annotations

from llm_powertrace_ds import errors, plots, query
from llm_powertrace_ds.cli import main


def test_usage_error_is_bad_input():
    assert issubclass(errors.UsageError, errors.InputError)
    assert issubclass(errors.UsageError, ValueError)


def test_missing_extra_is_one_class_and_an_import_error():
    assert plots.MissingExtra is query.MissingExtra is errors.MissingExtra
    assert issubclass(errors.MissingExtra, ModuleNotFoundError)
    assert issubclass(errors.MissingExtra, errors.PowerTraceError)


def test_upload_error_is_in_the_hierarchy():
    import upload  # the script at the repository root (pytest's pythonpath)

    assert issubclass(upload.UploadError, errors.PowerTraceError)


def test_cli_reports_a_usage_error_with_exit_code_2(tmp_path, capsys):
    assert main(["plot", "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: plot needs DIR_OR_REPO") and err.count("\n") == 1
