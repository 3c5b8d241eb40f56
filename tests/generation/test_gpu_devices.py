"""Issue 11, item 5: the GPUs sampled (and capped) are the GPUs used, resolved by UUID."""

from __future__ import annotations

import pytest
from sampler.fake_nvml import FakeGpu, FakeNvml  # rootdir-relative, as in test_sweep.py

from generation import gpu_devices, runner
from generation.gpu_devices import (
    GpuMismatch,
    WorkloadGpu,
    check_same_gpus,
    pci_bus_order_env,
    resolve_workload_gpus,
)
from generation.sampler import nvml as nvml_mod
from generation.sampler.errors import SamplerConfigError

UUIDS = [f"GPU-{i}{i}{i}{i}aaaa-bbbb-cccc-dddd-eeeeeeeeeeee" for i in range(4)]


@pytest.fixture
def four_gpus(monkeypatch):
    fake = FakeNvml([FakeGpu(uuid=u, mig_uuids=(f"MIG-{i}-instance",))
                     for i, u in enumerate(UUIDS)])
    monkeypatch.setattr(nvml_mod, "pynvml", fake)
    return fake


def test_uuid_entries_resolve_to_their_nvml_indices(four_gpus, monkeypatch):
    # Kubernetes / Slurm GRES: before the fix the runner got None here and capped and sampled
    # NVML 0..n-1 — another tenant's GPUs.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{UUIDS[2]},{UUIDS[3][:12]}")
    assert runner._first_visible_gpus(2) == (2, 3)
    gpus = resolve_workload_gpus(2)
    assert gpus == [WorkloadGpu(0, 2, UUIDS[2]), WorkloadGpu(1, 3, UUIDS[3])]


def test_the_cap_indices_never_fall_back_to_the_first_gpus():
    class Config:
        gpu_indices = None

    with pytest.raises(runner.RunError, match="refusing"):
        runner._cap_indices(Config(), 2)


def test_integer_and_unset_entries(four_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert runner._first_visible_gpus(2) == (3, 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert runner._first_visible_gpus(2) == (0, 1)


def test_a_mig_instance_resolves_to_its_gpu(four_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2-instance")
    assert [g.nvml_index for g in resolve_workload_gpus(1)] == [2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-unknown")
    with pytest.raises(SamplerConfigError, match="MIG instance"):
        resolve_workload_gpus(1)


def test_container_showing_one_gpu_with_the_host_index(monkeypatch):
    fake = FakeNvml([FakeGpu(uuid=UUIDS[0])])  # NVML in the container sees one GPU
    monkeypatch.setattr(nvml_mod, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")  # the host's index
    assert resolve_workload_gpus(1) == [WorkloadGpu(0, 0, UUIDS[0])]


def test_too_few_visible_gpus(four_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(GpuMismatch, match="needs 2 GPU"):
        resolve_workload_gpus(2)


def test_torch_uuid_mismatch_refuses_the_run():
    sampled = [WorkloadGpu(0, 2, UUIDS[2])]
    check_same_gpus([UUIDS[2].removeprefix("GPU-")], sampled)  # torch prints no prefix
    with pytest.raises(GpuMismatch, match="cuda:0 is not the GPU the sampler reads"):
        check_same_gpus([UUIDS[0].removeprefix("GPU-")], sampled)
    with pytest.raises(GpuMismatch, match="2 CUDA device"):
        check_same_gpus(["a", "b"], sampled)


def test_cuda_device_order_is_forced_to_pci_bus_id(caplog):
    env = {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    pci_bus_order_env(env)
    assert env["CUDA_DEVICE_ORDER"] == gpu_devices.DEVICE_ORDER == "PCI_BUS_ID"
    assert "FASTEST_FIRST" in caplog.text
    env = {}
    assert pci_bus_order_env(env)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_launched_ranks_run_with_pci_bus_order(tmp_path, monkeypatch):
    from generation import launch

    seen = {}

    class Popen:
        def __init__(self, cmd, **kwargs):
            seen.update(kwargs["env"])

    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    monkeypatch.setattr(launch.subprocess, "Popen", Popen)
    spec = launch.LaunchSpec(workload="finetune", run_id="r", settings={}, runner_pid=1)
    launch.Launched(spec, tmp_path, 2).start()
    assert seen["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_launched_ranks_report_their_cuda_uuid_and_a_mismatch_is_refused(four_gpus, tmp_path,
                                                                         monkeypatch):
    import json

    from generation import launch
    from generation.workloads import MachineInfo

    spec = launch.LaunchSpec(workload="finetune", run_id="r", settings={}, runner_pid=1)
    launched = launch.Launched(spec, tmp_path, 2)
    launched.dir.mkdir(parents=True)
    for rank, uuid in enumerate((UUIDS[1], UUIDS[0])):  # rank 1 got the wrong GPU
        (launched.dir / f"ready-{rank}").write_text(json.dumps(
            {"pid": 1, "cuda_uuid": uuid.removeprefix("GPU-")}))
    assert launched.device_uuids()[0] == UUIDS[1].removeprefix("GPU-")

    class Config:
        gpu_indices = (1, 2)

    machine = MachineInfo(source="nvml", platform="h100_sxm_80gb", num_devices=4, cuda=True,
                          bf16=True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    with pytest.raises(GpuMismatch, match="cuda:1 is not the GPU the sampler reads"):
        runner._verify_launched_gpus(Config(), machine, launched)
    (launched.dir / "ready-1").write_text(json.dumps({"pid": 1, "cuda_uuid": UUIDS[2]}))
    runner._verify_launched_gpus(Config(), machine, launched)  # the right GPUs: accepted
