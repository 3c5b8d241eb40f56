"""Every shipped inference sweep plans; an engine sweep without its engine stops in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llm_powertrace_ds.errors import MissingExtra

ROOT = Path(__file__).resolve().parents[3]
SWEEPS = sorted(p for p in (ROOT / "generation" / "sweeps").glob("*.yaml")
                if yaml.safe_load(p.read_text())["workload"] == "inference")


def path_without_engines() -> str:
    """``PATH`` without the folders that hold a ``vllm`` or ``sglang`` command."""
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any(os.access(os.path.join(d, exe), os.X_OK)
                             for exe in ("vllm", "sglang"))]
    return os.pathsep.join(keep)


def engines_of(path: Path) -> set[str]:
    from generation.planning import planning_machine
    from generation.sweep import load_sweep, plan

    sweep = load_sweep(path)
    return {r.settings["serving_engine"] for r in plan(sweep, planning_machine(sweep.sampler))}


def test_vllm_versions_of_the_inference_sweeps_are_shipped():
    names = {p.stem for p in SWEEPS}
    for kind in ("concurrency", "frequency", "quant", "lengths", "arrivals", "tp"):
        assert f"inference-vllm-{kind}" in names


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_dry_run_of_every_shipped_inference_sweep(tmp_path, monkeypatch, path):
    from generation.runner import generate

    monkeypatch.setenv("PATH", path_without_engines())
    launched = engines_of(path) & {"vllm", "sglang"}
    if launched:
        with pytest.raises(MissingExtra) as info:
            generate(path, tmp_path / "ds", dry_run=True)
        (engine,) = launched
        assert str(info.value).endswith(f"pip install 'llm-powertrace[{engine}]'")
    else:
        report = generate(path, tmp_path / "ds", dry_run=True)
        assert report.outcomes and {o.status for o in report.outcomes} == {"todo"}


def test_the_command_line_prints_one_line_naming_the_extra(tmp_path):
    env = {**os.environ, "PATH": path_without_engines(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "llm_powertrace_ds.cli", "generate",
                           str(ROOT / "generation/sweeps/inference-vllm-tp.yaml"),
                           "--out", str(tmp_path / "ds"), "--dry-run"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "llm-powertrace[vllm]" in lines[0]
