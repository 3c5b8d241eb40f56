"""Inference: set up before the window, explicit batching, real dtypes in the columns.

The engine is set up before the measured window, continuous batching is explicit and
recorded, and the dtype columns are the real dtypes.
"""

from __future__ import annotations

import pytest

from generation.workloads import MachineInfo, RunContext
from generation.workloads import inference as inf
from generation.workloads.inference import engines as inf_engines
from generation.workloads.inference import serve as inf_serve

CPU = MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=2, cuda=False, bf16=True)


def _resolved(**values):
    base = {"model": "llama-tiny", "prompt_len": 16, "output_len": 4, "num_requests": 6,
            "concurrency": 3}
    base.update(values)
    return inf.SPEC.resolve(base, CPU)


def _ctx(tmp_path, marks):
    return RunContext(run_id="r", staging_dir=tmp_path,
                      mark=lambda kind, **kw: marks.append(kind), progress=False)


def test_continuous_batching_is_configured_explicitly():
    cfg = inf_engines.continuous_batching_config(concurrency=2, max_prompt=8, max_output=4,
                                         device="cpu", use_cuda_graph=True,
                                         use_async_batching=False)
    assert cfg.auto_switch_to_flash is False  # never switched (nor a kernel fetched) mid-run
    assert cfg.use_cuda_graph is False  # CUDA graphs exist on CUDA only
    assert cfg.use_async_batching is False
    gpu = inf_engines.continuous_batching_config(concurrency=2, max_prompt=8, max_output=4,
                                         device="cuda", use_cuda_graph=True,
                                         use_async_batching=True)
    assert gpu.use_cuda_graph is True and gpu.use_async_batching is True


def test_static_runs_carry_no_continuous_batching_settings():
    static = _resolved(batching="static")
    assert not any(k.startswith("cb_") for k in static)  # run ids of static runs unchanged
    cont = _resolved(batching="continuous")
    assert (cont["cb_attn_implementation"], cont["cb_use_cuda_graph"],
            cont["cb_use_async_batching"]) == ("sdpa", False, False)


@pytest.mark.parametrize(("batching", "precision", "dtype"), [
    ("continuous", "fp32", "float32"),
    ("static", "bf16", "bfloat16"),
])
def test_setup_before_the_window_and_what_ran_is_recorded(tmp_path, batching, precision,
                                                          dtype):
    import torch

    r = _resolved(batching=batching, precision=precision)
    marks: list[str] = []
    ctx = _ctx(tmp_path, marks)
    ctx.prepared = inf_serve.setup(r, ctx)
    assert marks == []  # set-up marks nothing: it happens before the sampler's first tick
    model = ctx.prepared.model
    assert {p.dtype for p in model.parameters()} == {getattr(torch, dtype)}
    result = inf_serve.serve(r, ctx)
    assert "warmup_begin" not in marks  # the engine was warmed up in setup()
    assert result["requests_completed"] == 6
    assert result["weights_dtype"] == dtype and result["compute_dtype"] == dtype
    assert result["tf32"] is None
    if batching == "continuous":
        # read back from the manager: what transformers actually resolved
        assert result["cb_attn_implementation"] == result["attn_implementation"] == "sdpa"
        assert result["cb_use_cuda_graph"] is False and result["cb_use_async_batching"] is False
    else:
        assert "cb_use_cuda_graph" not in result
