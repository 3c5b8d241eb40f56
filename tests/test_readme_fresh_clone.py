"""The README as a newcomer follows it: a fresh clone, ``make demo``, then every block, one shell.

``tests/test_readme.py`` runs each tested block alone in a scratch folder; this test runs them
the way the README is read: in order, in one ``bash`` process started in a fresh clone, with
nothing on ``PATH`` or ``PYTHONPATH`` that the README does not put there, and ends by checking
that the clone's ``git status`` is clean (everything the README writes is in ignored folders);
the demo folder's ``croissant.json`` is then validated by ``mlcroissant``.
It installs the package into the clone's own ``.venv`` and runs the full demo, so it takes many
minutes: marked ``slow`` (CI runs it with ``CI=true``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FENCE_RE = re.compile(r"^```(bash|python)( test)?\n(.*?)^```", re.M | re.S)
SETUP_MARK = ". .venv/bin/activate"


def readme_script(text: str) -> str:
    """The shell script a newcomer runs: ``make demo``, the setup block, then every tested block.

    Untagged blocks are run only when they are the setup (the activation step); the others are
    for a GPU machine or a real upload. Python blocks run through ``python -`` (the activated
    environment's interpreter).
    """
    lines = ["set -e -o pipefail", "make demo"]
    for lang, tested, code in FENCE_RE.findall(text):
        if not tested and not code.startswith(SETUP_MARK + "\n"):
            continue
        lines.append(f"echo '--- README {lang} block'")
        if lang == "python":
            lines += ["python - <<'README_PY'", code.rstrip("\n"), "README_PY"]
        else:
            lines.append(code.rstrip("\n"))
    lines.append("echo '--- git status'")
    lines.append("git status --porcelain --untracked-files=all")
    return "\n".join(lines) + "\n"


def test_readme_script_has_the_setup_and_every_tested_block():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    script = readme_script(text)
    assert script.index("make demo") < script.index(SETUP_MARK)
    tested = sum(1 for _, t, _ in FENCE_RE.findall(text) if t)
    assert script.count("--- README") == tested + 1


@pytest.mark.slow
def test_fresh_clone_make_demo_then_every_readme_block_in_one_shell(tmp_path):
    if shutil.which("git") is None or shutil.which("make") is None:
        pytest.skip("needs git and make")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    script = readme_script((clone / "README.md").read_text(encoding="utf-8"))
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p).resolve() != Path(venv_bin).resolve())
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update({"PATH": path, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg",
                "HF_HOME": str(tmp_path / "hf-home"),
                "HF_DATASETS_CACHE": str(tmp_path / "hf-cache")})
    proc = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=3600)
    out = proc.stdout
    assert proc.returncode == 0, f"{out[-6000:]}\n{proc.stderr[-6000:]}"
    assert "No module named" not in proc.stderr
    assert "Column([" not in out  # a value is printed, not a datasets Column object
    status = out.split("--- git status\n", 1)[1]
    assert status.strip() == "", f"the README left files in the clone:\n{status}"
    # the demo's own folder carries Croissant metadata that MLCommons' package accepts
    mlc = pytest.importorskip("mlcroissant")
    dataset = mlc.Dataset(clone / "llm-powertrace" / "croissant.json")
    assert {rs.name for rs in dataset.metadata.record_sets} >= {"finetune", "finetune_runs"}
