"""upload.py's outputs: a Space README no folder name can inject into, one JSON document."""

from __future__ import annotations

import json

import pytest
import yaml

import upload


@pytest.mark.parametrize("name", ["x: v2", "evil\nhf_oauth: true", "<img src=x onerror=alert(1)>",
                                  "a\u202eb", "title # comment"])
def test_space_readme_cannot_be_injected_by_the_folder_name(name):
    text = upload.space_readme("org/explorer", name, None)
    head, body = text.split("\n---\n", 1)
    meta = yaml.safe_load(head.lstrip("-"))
    assert set(meta) == {"title", "emoji", "colorFrom", "colorTo", "sdk", "app_file", "pinned",
                         "short_description"}  # no key added, none broken
    assert meta["sdk"] == "static" and "hf_oauth" not in meta
    assert "<img" not in body and "\u202e" not in text
    assert body.count("\n# ") + body.startswith("\n# ") >= 1


def test_dry_run_with_repo_and_space_prints_one_json_document(tmp_path, make_run, monkeypatch,
                                                              capsys):
    pytest.importorskip("bokeh")
    from test_upload import make_folder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LLM_POWERTRACE_CARD_FIGURES", "0")
    root = make_folder(tmp_path / "ds", make_run)
    capsys.readouterr()
    assert upload.main([str(root), "--repo-id", "org/ds", "--space", "org/explorer",
                        "--dry-run", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)  # one document, or this raises
    assert set(data) == {"dataset", "space"}
    assert data["space"]["repo_type"] == "space"


def test_the_work_folder_of_a_killed_upload_is_removed_by_the_next(tmp_path, monkeypatch):
    import subprocess
    import sys
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    stale = tmp_path / f"{upload.WORK_PREFIX}space-{dead.pid}-abc"
    (stale / "space").mkdir(parents=True)
    (stale / "space" / "index.html").write_text("x", encoding="utf-8")
    live = tmp_path / f"{upload.WORK_PREFIX}upload-{__import__('os').getpid()}-def"
    live.mkdir()
    other = tmp_path / "someone-elses-folder"
    other.mkdir()
    assert upload._remove_stale_work_dirs() == [stale]
    assert not stale.exists() and live.exists() and other.exists()


KILLED_UPLOAD = ("import os, signal, sys\nimport upload\n"
                 "def killed(*args, **kw):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
                 "upload.space_readme = killed  # SIGKILL once the site is built in the work folder\n"
                 "sys.exit(upload.main(sys.argv[1:]))\n")


def test_a_killed_upload_leaves_no_work_folder_once_upload_runs_again(tmp_path, make_run):
    """A real ``upload.py --space`` killed mid-way, then run again: no work folder is left."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("bokeh")
    from test_upload import make_folder

    repo = Path(__file__).resolve().parents[2]
    root = make_folder(tmp_path / "ds", make_run)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(repo), "TMPDIR": str(tmp), "HF_HUB_OFFLINE": "1",
           "LLM_POWERTRACE_CARD_FIGURES": "0"}
    args = [str(root), "--space", "org/explorer", "--dry-run"]
    first = subprocess.run([sys.executable, "-c", KILLED_UPLOAD, *args], env=env,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == -signal.SIGKILL, first.stderr
    left = [p.name for p in tmp.iterdir() if p.name.startswith("llm-powertrace-")]
    assert left, "the killed upload left no work folder: the case is not exercised"
    again = subprocess.run([sys.executable, str(repo / "upload.py"), *args], env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert [p.name for p in tmp.iterdir() if p.name.startswith("llm-powertrace-")] == []
