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
