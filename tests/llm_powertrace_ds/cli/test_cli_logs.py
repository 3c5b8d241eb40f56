"""What the command line prints when things go wrong.

Closed pipes exit quietly; expected errors are one line; only unexpected ones get the
``--debug`` hint.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_powertrace_ds import cli, shards

REPO = Path(__file__).resolve().parents[3]


def test_closed_pipe_exits_quietly(tmp_path, make_run):
    root = tmp_path / "ds"
    for i in range(40):  # enough output to outgrow the pipe's buffer
        shards.publish_run(root, make_run(f"run-{i:03d}-" + "x" * 60, n=20), refresh_card=False)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = (f"{sys.executable} -m llm_powertrace_ds.cli metrics {root} --format json "
           "| head -c 10 > /dev/null; echo rc=${PIPESTATUS[0]}")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env,
                          timeout=300)
    assert "Broken pipe" not in proc.stderr and "--debug" not in proc.stderr, proc.stderr
    assert proc.stderr == "" and proc.stdout.strip() == "rc=0"


@pytest.mark.parametrize("argv,message", [
    (["validate", "{tmp}/nope"], "neither a dataset folder"),
    (["import", "nvidia-smi", "{tmp}/nope.csv", "--out", "{tmp}/o", "--workload", "inference"],
     "nope.csv"),
    (["predict", "{tmp}/nope.json", "--set", "platform=l40s"], "nope.json"),
])
def test_expected_errors_have_no_debug_hint(argv, message, tmp_path, capsys):
    code = cli.main([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and message in err[0], err


def test_unexpected_errors_get_the_hint(monkeypatch, tmp_path, capsys, make_run):
    shards.publish_run(tmp_path / "ds", make_run("a"), refresh_card=False)

    def broken(*args, **kwargs):
        raise KeyError("surprise")

    monkeypatch.setattr(shards, "list_runs", broken)
    code = cli.main(["list", str(tmp_path / "ds")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err == ["error: unexpected KeyError: 'surprise'",
                   "hint: run with --debug for the traceback"]


def test_one_current_login_command_everywhere():
    """``hf auth login`` (huggingface_hub's current CLI), never the deprecated spelling."""
    texts = [REPO / "README.md", REPO / "upload.py", *sorted((REPO / "docs").rglob("*.md")),
             *sorted((REPO / "cards").glob("*.py")), *sorted((REPO / "llm_powertrace_ds").rglob("*.py"))]
    old = "huggingface" + "-cli"
    assert not [p.name for p in texts if old in p.read_text(encoding="utf-8")]
    assert "hf auth login" in (REPO / "docs" / "publishing.md").read_text(encoding="utf-8")
    assert "hf auth login" in (REPO / "upload.py").read_text(encoding="utf-8")
