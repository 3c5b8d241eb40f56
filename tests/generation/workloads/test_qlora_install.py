"""Issue 11, item 8: QLoRA installs — a clear error at sweep validation without bitsandbytes/CUDA."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from generation.sweep import SweepError, load_sweep, plan
from generation.workloads import MachineInfo, quant

GPU = MachineInfo(source="nvml", platform="h100_sxm_80gb", num_devices=1, cuda=True, bf16=True,
                  bitsandbytes=False)

QLORA = """\
name: q
workload: finetune
base:
  model: llama-tiny
  method: qlora
  max_steps: 2
"""


def test_a_qlora_sweep_without_bitsandbytes_errors_at_validation(tmp_path, monkeypatch):
    monkeypatch.setattr(quant, "installed", lambda module: False)
    machine = MachineInfo(**{**GPU.__dict__,
                             "extra": {"bitsandbytes_problem": quant.bitsandbytes_problem()}})
    path = Path(tmp_path, "q.yaml")
    path.write_text(QLORA)
    with pytest.raises(SweepError) as err:
        plan(load_sweep(path, strict=False), machine)
    [problem] = err.value.problems
    assert (problem.line, problem.field) == (5, "method")
    assert "pip install 'llm-powertrace[qlora]'" in str(err.value)


def test_bitsandbytes_without_cuda_support_is_named(monkeypatch):
    fake = types.ModuleType("bitsandbytes")
    cext = types.ModuleType("bitsandbytes.cextension")
    cext.lib = types.SimpleNamespace(compiled_with_cuda=False)
    fake.cextension = cext
    monkeypatch.setitem(sys.modules, "bitsandbytes", fake)
    monkeypatch.setitem(sys.modules, "bitsandbytes.cextension", cext)
    monkeypatch.setattr(quant, "installed", lambda module: True)
    assert "no CUDA support" in quant.bitsandbytes_problem()
    cext.lib = types.SimpleNamespace(compiled_with_cuda=True)
    assert quant.bitsandbytes_problem() is None


def test_the_qlora_extra_is_declared():
    tomllib = pytest.importorskip("tomllib")

    root = Path(__file__).resolve().parents[3]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(dep.startswith("bitsandbytes") for dep in extras["qlora"])


# Issue 11, item 2: optimum-quanto's CUDA extension is built before the window, never inside.

def test_quanto_extension_prebuilt_or_buildable(tmp_path, monkeypatch):
    cuda_dir = tmp_path / "cuda"
    (cuda_dir / "build").mkdir(parents=True)
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    problem = quant.quanto_cuda_problem(cuda_dir)
    assert "nvcc and ninja not found" in problem
    (cuda_dir / "build" / "pytorch_version.txt").write_text("2.13.0")
    (cuda_dir / "build" / "quanto_cuda.so").write_bytes(b"")
    assert quant.quanto_cuda_problem(cuda_dir) is None  # prebuilt


def test_quanto_problem_is_reported_at_validation_on_cuda(monkeypatch):
    from generation.workloads import inference as inf

    monkeypatch.setattr(quant, "quanto_cuda_problem", lambda: "cannot be built here: nvcc")
    monkeypatch.setattr(quant, "installed", lambda module: True)
    r = inf.SPEC.resolve({"model": "llama-tiny", "weight_quant": "int8",
                          "weight_quant_backend": "quanto"}, GPU)
    assert ("weight_quant_backend", "cannot be built here: nvcc") in quant.quant_problems(r, GPU)


def test_a_stale_build_lock_is_cleared_and_a_fresh_one_is_named(tmp_path, caplog):
    import os
    import time

    lock = tmp_path / "cuda" / "build" / "lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    with pytest.raises(RuntimeError, match="being built by another process"):
        quant.clear_stale_quanto_lock(tmp_path / "cuda")
    old = time.time() - 3600
    os.utime(lock, (old, old))
    assert quant.clear_stale_quanto_lock(tmp_path / "cuda") == lock
    assert not lock.exists() and "stale build lock" in caplog.text
