"""A new user's mistakes get one-line answers and exit code 2 (usage) or 1 (failure)."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_powertrace_ds.cli import main

REPO = Path(__file__).resolve().parents[3]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[0].startswith("error: "), err
    assert all(line.startswith("hint:") for line in err[1:]), err
    return err[0]


def test_unknown_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        main(["lsit"])
    assert e.value.code == 2


def test_missing_sweep_file(tmp_path, capsys):
    assert main(["generate", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "o")]) == 1
    assert "does not exist" in _one_line_error(capsys)


@pytest.mark.parametrize("argv", [
    ["generate", "{repo}/generation/sweeps/demo-finetune.yaml", "--out", "{file}", "--dry-run"],
    ["import", "nvidia-smi", "{file}", "--out", "{file}", "--workload", "inference"],
    ["demo", "--out", "{file}"],
    ["merge", "{tmp}", "--into", "{file}"],
])
def test_out_pointing_at_a_file(argv, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    argv = [a.format(repo=REPO, file=afile, tmp=tmp_path) for a in argv]
    assert main(argv) == 1
    assert "is a file" in _one_line_error(capsys)


@pytest.mark.parametrize("cmd", ["list", "validate", "metrics", "card"])
def test_folder_that_is_not_a_dataset(cmd, tmp_path, capsys):
    assert main([cmd, str(tmp_path)]) == 1
    assert "not a dataset folder" in _one_line_error(capsys)


def test_upload_without_token(tmp_path, make_run):
    from llm_powertrace_ds import shards

    shards.publish_run(tmp_path / "ds", make_run("a"))
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_IMPLICIT_TOKEN="1")
    proc = subprocess.run([sys.executable, str(REPO / "upload.py"), str(tmp_path / "ds"),
                           "--repo-id", "org/name"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "login" in lines[0], proc.stderr


_SMI = ("timestamp, index, name, power.draw [W]\n"
        "2026/01/05 10:00:00.000, 0, NVIDIA L40S, 100.0 W\n"
        "2026/01/05 10:00:00.100, 0, NVIDIA L40S, 200.0 W\n"
        "2026/01/05 10:00:00.200, 0, NVIDIA L40S, 150.0 W\n")


def test_import_refuses_an_unknown_platform_slug_unless_new(tmp_path, capsys):
    out = tmp_path / "ds"

    def argv_for(power_w):  # one log per import: a log imported again replaces its run
        log = tmp_path / f"gpu{power_w}.csv"
        log.write_text(_SMI.replace("150.0 W", f"{power_w}.0 W"))
        return ["import", "nvidia-smi", str(log), "--out", str(out), "--workload",
                "inference", "--platform"]

    argv = argv_for(150)
    assert main([*argv, "h100"]) == 1
    line = _one_line_error(capsys)
    assert ("unknown platform 'h100'; did you mean one of h100_nvl_94gb, h100_pcie_80gb, "
            "h100_sxm_80gb?") in line
    assert "l40s" in line and "--new-platform" in line
    assert not out.exists() or not any(out.rglob("*.arrow"))
    assert main([*argv, "h100-x", "--new-platform"]) == 1
    assert "no valid split name" in _one_line_error(capsys)
    assert main([*argv, "lab_box", "--new-platform", "--format", "json"]) == 0
    assert main([*argv_for(151), "lab_box", "--format", "json"]) == 0  # now a split of --out
    assert main([*argv_for(152), "h100_sxm_80gb", "--format", "json"]) == 0
    capsys.readouterr()
    assert main(["list", str(out), "--format", "csv"]) == 0
    listed = capsys.readouterr().out
    assert listed.count(",lab_box,") == 2 and listed.count(",h100_sxm_80gb,") == 1
    assert ",h100," not in listed


def test_no_help_text_prints_a_doubled_percent_sign():
    from llm_powertrace_ds.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    doubled = [name for name, p in sub.choices.items() if "%%" in p.format_help()]
    assert "%%" not in parser.format_help() and doubled == []
    assert "conformal 90 % intervals" in " ".join(sub.choices["fit"].format_help().split())
