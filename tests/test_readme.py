"""The README's blocks tagged ``bash test`` and ``python test`` are run here, so they cannot rot."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cards.builder import refresh_card
from llm_powertrace_ds import shards

REPO = Path(__file__).resolve().parents[1]
BLOCK_RE = re.compile(r"^```bash test\n(.*?)^```", re.M | re.S)
PY_BLOCK_RE = re.compile(r"^```python test\n(.*?)^```", re.M | re.S)


def readme_blocks() -> list[str]:
    return BLOCK_RE.findall((REPO / "README.md").read_text(encoding="utf-8"))


def readme_python_blocks() -> list[str]:
    return PY_BLOCK_RE.findall((REPO / "README.md").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory):
    """A small dataset named as in the README, built once, copied into each scratch folder.

    cpu_proxy fine-tuning runs over a few sizes and batches: enough for ``fit``.
    """
    from conftest import synthetic_run

    root = tmp_path_factory.mktemp("readme") / "llm-powertrace"
    shards.publish_run(root, synthetic_run("demo-a", platform="cpu_proxy", sampler="cpu_proxy",
                                           model_params=1_000_000), refresh_card=False)
    i = 0
    for params in (2_000_000, 4_000_000, 8_000_000, 16_000_000):
        for batch in (2, 4):
            i += 1
            shards.publish_run(root, synthetic_run(
                f"demo-{i:02d}", platform="cpu_proxy", sampler="cpu_proxy", seed=i,
                model_params=params, batch_size=batch, tokens=batch * 128 * 20),
                refresh_card=False)
    refresh_card(root)
    return root


def _scratch(tmp_path, demo_folder) -> dict[str, str]:
    shutil.copytree(demo_folder, tmp_path / "llm-powertrace")
    (tmp_path / "generation").symlink_to(REPO / "generation")
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf-cache"),
            "MPLBACKEND": "Agg", "PYTHONPATH": str(REPO)}


def test_readme_has_tagged_blocks():
    assert len(readme_blocks()) >= 4


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_block_runs(index, tmp_path, demo_folder):
    env = _scratch(tmp_path, demo_folder)
    block = readme_blocks()[index]
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"README block {index} failed:\n{block}\n{proc.stdout}\n{proc.stderr}"


def test_readme_has_python_blocks():
    assert len(readme_python_blocks()) >= 4


@pytest.mark.parametrize("index", range(len(readme_python_blocks())))
def test_readme_python_block_runs(index, tmp_path, demo_folder):
    env = _scratch(tmp_path, demo_folder)
    block = readme_python_blocks()[index]
    proc = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"README block {index} failed:\n{block}\n{proc.stdout}\n{proc.stderr}"
