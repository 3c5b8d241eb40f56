"""Front-door behaviour of the command line: global flags after the command, CSV cells."""

from __future__ import annotations

import csv
import io

import pytest

from llm_powertrace_ds.cli import build_parser, main
from llm_powertrace_ds.cli._common import csv_cell, emit


def test_quiet_and_debug_are_accepted_after_the_command():
    parser = build_parser()
    after = parser.parse_args(["list", "somewhere", "--quiet", "--debug"])
    assert after.quiet is True and after.debug is True
    before = parser.parse_args(["--quiet", "list", "somewhere"])
    assert before.quiet is True and before.debug is False  # suppressed defaults keep it
    neither = parser.parse_args(["list", "somewhere"])
    assert neither.quiet is False and neither.debug is False


def test_every_command_takes_quiet_after_its_name():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, command in sub.choices.items():
        assert "--quiet" in command._option_string_actions, name
        assert "--debug" in command._option_string_actions, name


def test_facility_quiet_after_the_command_is_not_a_usage_error(tmp_path, capsys):
    # a missing folder is a one-line input error (exit 1), not `unrecognized arguments` (exit 2)
    code = main(["facility", str(tmp_path / "nowhere"), "--gpus", "8", "--quiet"])
    err = capsys.readouterr().err
    assert "unrecognized arguments" not in err
    assert code == 1


def test_csv_lists_are_values_not_python_reprs(capsys):
    emit([{"run_id": "a", "quality_flags": ["cpu_proxy", "gap"], "notes": {"x": 1}},
          {"run_id": "b", "quality_flags": [], "notes": None}], "csv")
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows[0]["quality_flags"] == "cpu_proxy;gap"
    assert rows[0]["notes"] == '{"x": 1}'
    assert rows[1]["quality_flags"] == "" and rows[1]["notes"] == ""


@pytest.mark.parametrize("value, cell", [(["cpu_proxy"], "cpu_proxy"), ((1, None, 2), "1;;2"),
                                         (3.5, 3.5), ("text", "text")])
def test_csv_cell(value, cell):
    assert csv_cell(value) == cell


def test_fit_prints_each_note_once(tmp_path, capsys, monkeypatch):
    from llm_powertrace_ds.samples import load_sample

    monkeypatch.setenv("LLM_POWERTRACE_CARD_FIGURES", "0")
    root = load_sample("mlenergy-v2-chat", tmp_path / "mlenergy-v2-chat")
    capsys.readouterr()
    assert main(["fit", str(root), "--holdout", "family=mistral"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes and len(notes) == len(set(notes)), notes
