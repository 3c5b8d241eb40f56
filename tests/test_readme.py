"""The README's shell blocks tagged ``bash test`` are run here, so they cannot rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llm_powertrace_ds import shards

REPO = Path(__file__).resolve().parents[1]
BLOCK_RE = re.compile(r"^```bash test\n(.*?)^```", re.M | re.S)


def readme_blocks() -> list[str]:
    return BLOCK_RE.findall((REPO / "README.md").read_text(encoding="utf-8"))


def test_readme_has_tagged_blocks():
    assert len(readme_blocks()) >= 4


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_block_runs(index, tmp_path, make_run):
    # a small dataset named as in the README, and the repo's sweeps where the README expects them
    shards.publish_run(tmp_path / "llm-powertrace",
                       make_run("demo-a", platform="cpu_proxy", sampler="cpu_proxy"))
    (tmp_path / "generation").symlink_to(REPO / "generation")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf-cache")}
    block = readme_blocks()[index]
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"README block {index} failed:\n{block}\n{proc.stdout}\n{proc.stderr}"
