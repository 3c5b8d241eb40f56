"""The autouse ``_hermetic_home`` fixture (tests/conftest.py) isolates every cache from home."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import datasets.config
import huggingface_hub.constants as hub_constants
import pytest
from conftest import REPO, hermetic_home, synthetic_run

from llm_powertrace_ds.shards import publish_run


def _publish_only(root: Path, run_id: str, seed: int, *, fingerprint: bool = True) -> None:
    """``root`` holds exactly one run, ``run_id`` (replacing whatever was there).

    ``fingerprint=False`` drops the files fingerprint from the card's configs (the project's
    guard against stale ``datasets`` caches, issue 12): a folder as plain YAML globs leave it,
    which is the hazard the hermetic fixture exists for.
    """
    shutil.rmtree(root, ignore_errors=True)
    publish_run(root, synthetic_run(run_id, seed=seed), refresh_card=True)
    if not fingerprint:
        _drop_fingerprint(root)


def _drop_fingerprint(root: Path) -> None:
    text = (root / "README.md").read_text(encoding="utf-8")
    (root / "README.md").write_text(
        "\n".join(line for line in text.splitlines()
                  if not line.lstrip().startswith("description: files ")) + "\n",
        encoding="utf-8")


def _run_ids(root: Path) -> list[str]:
    ds = datasets.load_dataset(str(root), "finetune_runs", split="l40s")  # no cache_dir
    return list(ds["run_id"])


def test_caches_point_at_a_fresh_folder_of_this_test(tmp_path, tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    cache = Path(datasets.config.HF_DATASETS_CACHE)
    assert cache.is_relative_to(base) and not cache.is_relative_to(tmp_path)
    assert not cache.exists() or not any(cache.iterdir())
    assert Path(hub_constants.HF_HUB_CACHE).is_relative_to(base)
    for name in ("HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_CACHE", "MPLCONFIGDIR"):
        assert Path(os.environ[name]).is_relative_to(base), name
    home = Path.home()
    if not base.is_relative_to(home):  # a basetemp under home would make this vacuous
        assert not cache.is_relative_to(home)
    root = tmp_path / "ds"
    _publish_only(root, "run-a", 0)
    ds = datasets.load_dataset(str(root), "finetune_runs", split="l40s")
    assert ds.cache_files and all(Path(f["filename"]).is_relative_to(cache)
                                  for f in ds.cache_files)


def test_a_fresh_home_never_serves_rows_cached_from_an_earlier_folder_content(tmp_path,
                                                                             monkeypatch):
    root = tmp_path / "same-path"  # a recycled tmp_path: same folder name, new files
    hermetic_home(tmp_path / "home-1", monkeypatch)
    _publish_only(root, "run-a", 0, fingerprint=False)
    assert _run_ids(root) == ["run-a"]
    _publish_only(root, "run-b", 1, fingerprint=False)
    # The hazard the fixture exists for: one shared cache keeps serving the first content.
    assert _run_ids(root) == ["run-a"], "premise: datasets reuses a local folder's cache"
    _publish_only(root, "run-c", 2)  # the project's own card: its fingerprint changes the key
    assert _run_ids(root) == ["run-c"]
    _publish_only(root, "run-b", 1, fingerprint=False)
    hermetic_home(tmp_path / "home-2", monkeypatch)  # what the fixture gives the next test
    assert _run_ids(root) == ["run-b"]


INNER_TEST = '''
import importlib.util
import os
from pathlib import Path

import datasets

from llm_powertrace_ds.shards import publish_run

spec = importlib.util.spec_from_file_location("project_conftest", os.environ["I20_CONFTEST"])
project = importlib.util.module_from_spec(spec)
spec.loader.exec_module(project)


def test_reads_what_it_wrote():
    root = Path(os.environ["I20_DATA"])  # the same folder in both sessions
    run_id = os.environ["I20_RUN_ID"]
    publish_run(root, project.synthetic_run(run_id), refresh_card=True)
    text = (root / "README.md").read_text(encoding="utf-8")  # plain globs: no files fingerprint
    (root / "README.md").write_text("\\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("description: files ")))
    ds = datasets.load_dataset(str(root), "finetune_runs", split="l40s")
    assert list(ds["run_id"]) == [run_id]
'''


def _session(folder: Path, conftest: str, env: dict[str, str], run_id: str, data: Path) -> int:
    shutil.rmtree(data, ignore_errors=True)
    (folder / "conftest.py").write_text(conftest)
    # the project's conftest loads its sibling module by path (the browser fixtures)
    shutil.copyfile(REPO / "tests" / "browser_fixtures.py", folder / "browser_fixtures.py")
    (folder / "test_inner.py").write_text(INNER_TEST)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(folder), str(folder / "test_inner.py")],
                          cwd=folder, capture_output=True, text=True, timeout=600,
                          env={**env, "I20_RUN_ID": run_id, "I20_DATA": str(data),
                               "I20_CONFTEST": str(REPO / "tests" / "conftest.py")})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 0 passed, 1 failed
    return proc.returncode


@pytest.mark.slow
def test_two_sessions_in_a_row_with_a_shared_home_give_the_same_result(tmp_path):
    """Two pytest sessions, one home folder, one data path: the second sees its own rows."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_", "XDG_", "MPLCONFIGDIR", "PYTEST_"))}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO), CI="")
    hermetic = (REPO / "tests" / "conftest.py").read_text()
    bare = '"""No fixtures: the home cache is shared."""\n'
    # Control: without the fixture the home cache is shared and the second pytest run fails.
    bare_dir = tmp_path / "bare"
    bare_dir.mkdir()
    assert _session(bare_dir, bare, env, "run-a", tmp_path / "data") == 0
    assert _session(bare_dir, bare, env, "run-b", tmp_path / "data") == 1
    # With the project's conftest, the same two sessions over the pre-filled home both pass.
    inner = tmp_path / "hermetic"
    inner.mkdir()
    assert _session(inner, hermetic, env, "run-c", tmp_path / "data") == 0
    assert _session(inner, hermetic, env, "run-d", tmp_path / "data") == 0
