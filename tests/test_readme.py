"""The blocks tagged ``bash test`` and ``python test`` in the README and the docs pages are run here.

So a documented command cannot rot. The README is the front door and must stay short.
"""

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
README_MAX_LINES = 350
PAGES = [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md"))


def _blocks(pattern: re.Pattern[str]) -> list[tuple[str, int, str]]:
    """``(page, index on the page, code)`` of every tagged block of the README and docs pages."""
    found = []
    for page in PAGES:
        name = page.relative_to(REPO).as_posix()
        for i, code in enumerate(pattern.findall(page.read_text(encoding="utf-8"))):
            found.append((name, i, code))
    return found


def readme_blocks() -> list[str]:
    return BLOCK_RE.findall((REPO / "README.md").read_text(encoding="utf-8"))


def readme_python_blocks() -> list[str]:
    return PY_BLOCK_RE.findall((REPO / "README.md").read_text(encoding="utf-8"))


BASH_BLOCKS = _blocks(BLOCK_RE)
PY_BLOCKS = _blocks(PY_BLOCK_RE)


def _id(block: tuple[str, int, str]) -> str:
    return f"{block[0]}-{block[1]}"


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
    (tmp_path / "scratch").mkdir()  # the README's setup block makes it
    (tmp_path / "generation").symlink_to(REPO / "generation")
    (tmp_path / "upload.py").symlink_to(REPO / "upload.py")
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf-cache"),
            "MPLBACKEND": "Agg", "PYTHONPATH": str(REPO)}


def test_readme_is_a_short_front_door():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_readme_has_tagged_blocks():
    assert len(readme_blocks()) >= 4
    assert len(readme_python_blocks()) >= 2


def test_docs_pages_have_tagged_blocks():
    pages = {name for name, _, _ in BASH_BLOCKS + PY_BLOCKS}
    for page in ("docs/analyst-guide.md", "docs/generating.md", "docs/recording.md",
                 "docs/importing.md", "docs/facility.md", "docs/explorer.md"):
        assert page in pages, f"{page} has no tested block"


def test_only_blocks_tagged_test_are_run(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n```bash test\necho one\n```\n```bash\nnot run\n```\n"
                    "```python test\nprint(2)\n```\n", encoding="utf-8")
    text = page.read_text(encoding="utf-8")
    assert BLOCK_RE.findall(text) == ["echo one\n"]
    assert PY_BLOCK_RE.findall(text) == ["print(2)\n"]


@pytest.mark.parametrize("block", BASH_BLOCKS, ids=_id)
def test_documented_bash_block_runs(block, tmp_path, demo_folder):
    page, index, code = block
    env = _scratch(tmp_path, demo_folder)
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{page} block {index} failed:\n{code}\n{proc.stdout}\n{proc.stderr}"
    assert "Column([" not in proc.stdout, f"{page} block {index} prints a datasets Column object"


@pytest.mark.parametrize("block", PY_BLOCKS, ids=_id)
def test_documented_python_block_runs(block, tmp_path, demo_folder):
    page, index, code = block
    env = _scratch(tmp_path, demo_folder)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{page} block {index} failed:\n{code}\n{proc.stdout}\n{proc.stderr}"
