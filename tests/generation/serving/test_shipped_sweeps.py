"""Every shipped inference sweep plans on a machine without its engine (warning once).

And every cell fits the card it is planned for.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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
def test_dry_run_of_every_shipped_inference_sweep_needs_no_engine(tmp_path, monkeypatch, caplog,
                                                                  path):
    from generation.runner import generate

    monkeypatch.setenv("PATH", path_without_engines())
    launched = engines_of(path) & {"vllm", "sglang"}
    report = generate(path, tmp_path / "ds", dry_run=True, assume_platform="h100_sxm_80gb")
    assert report.outcomes and {o.status for o in report.outcomes} == {"todo"}, [
        o.error for o in report.outcomes if o.status != "todo"][:1]
    warned = [r.getMessage() for r in caplog.records if "planned anyway" in r.getMessage()]
    if launched and not any(importlib.util.find_spec(e) for e in launched):
        (engine,) = launched
        assert len(warned) == 1 and f"llm-powertrace[{engine}]" in warned[0]
    elif not launched:
        assert warned == []


def test_the_command_line_plans_and_warns_once_that_the_engine_is_missing(tmp_path):
    env = {**os.environ, "PATH": path_without_engines(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "llm_powertrace_ds.cli", "generate",
                           str(ROOT / "generation/sweeps/inference-vllm-tp.yaml"),
                           "--out", str(tmp_path / "ds"), "--dry-run",
                           "--assume-platform", "h100_sxm_80gb"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "planned anyway" in line]
    if importlib.util.find_spec("vllm") is None:
        assert len(warnings) == 1 and "llm-powertrace[vllm]" in warnings[0]
    assert "too_big" not in proc.stdout and " todo " in proc.stdout
