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
