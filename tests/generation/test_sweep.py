"""Sweep files: parsing with lines, every problem at once, deterministic expansion and run ids."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from generation.sweep import (
    SweepError,
    canonical_hash,
    load_sweep,
    make_run_id,
    plan,
    task_subset,
)
from generation.workloads import MachineInfo

REPO = Path(__file__).resolve().parents[2]
SWEEPS = REPO / "generation" / "sweeps"
CPU = MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=2, cuda=False, bf16=True)
H100 = MachineInfo(source="nvml", platform="h100_sxm_80gb", num_devices=8, cuda=True, bf16=True,
                   bitsandbytes=True, can_set_power_limit=True)


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


BASIC = """\
name: t
workload: finetune
idle_before_s: 0.5
base:
  model: llama-tiny
  seq_len: 32
  max_steps: 2
grid:
  method: [lora, full]
  batch_size: [1, 2]
"""


def test_demo_sweep_covers_the_acceptance_mix():
    runs = plan(load_sweep(SWEEPS / "demo-finetune.yaml"), CPU)
    s = [r.settings for r in runs]
    assert len(runs) >= 6
    assert len({x["model_family"] for x in s}) >= 2
    assert {x["method"] for x in s} >= {"lora", "full"}
    assert len({x["batch_size"] for x in s}) >= 2
    assert {x["gradient_checkpointing"] for x in s} == {True, False}
    ddp = [x for x in s if x["parallelism"] == "ddp"]
    assert len(ddp) == 1 and ddp[0]["dp_size"] == 2 and ddp[0]["num_gpus"] == 2
    assert all(x["checkpoint_every_steps"] for x in s)


@pytest.mark.parametrize("name", ["finetune-scale", "finetune-knobs"])
def test_gpu_campaigns_plan_on_a_gpu_machine(name):
    runs = plan(load_sweep(SWEEPS / f"{name}.yaml"), H100)
    assert len(runs) > 50
    assert len({r.run_id for r in runs}) == len(runs)


def test_scale_campaign_spans_families_sizes_and_methods():
    runs = plan(load_sweep(SWEEPS / "finetune-scale.yaml"), H100)
    fams = {r.settings["model_family"] for r in runs}
    assert fams >= {"llama", "qwen", "mistral", "gpt2"}
    assert {r.settings["method"] for r in runs} == {"lora", "qlora", "full"}


def test_knobs_campaign_is_rejected_without_cuda_with_every_problem():
    with pytest.raises(SweepError) as err:
        plan(load_sweep(SWEEPS / "finetune-knobs.yaml"), CPU)
    fields = {p.field for p in err.value.problems}
    assert {"precision", "dp_size", "power_limit_setting_w"} <= fields
    assert all(p.line for p in err.value.problems)


def test_expansion_order_and_ids_are_deterministic(tmp_path):
    path = write(tmp_path, BASIC)
    a = plan(load_sweep(path), CPU)
    b = plan(load_sweep(path), CPU)
    assert [r.run_id for r in a] == [r.run_id for r in b]
    assert [(r.settings["method"], r.settings["batch_size"]) for r in a] == [
        ("lora", 1), ("lora", 2), ("full", 1), ("full", 2)]
    assert a[0].run_id.startswith("ft-llama-tiny-lora-r16-b1-s32-fp32-single-rep0-")
    assert [r.index for r in a] == [0, 1, 2, 3]


def test_run_id_hash_covers_settings_platform_and_repeat(tmp_path):
    base = plan(load_sweep(write(tmp_path, BASIC)), CPU)[0]
    other = plan(load_sweep(write(tmp_path, BASIC.replace("max_steps: 2", "max_steps: 3"))),
                 CPU)[0]
    assert base.run_id != other.run_id
    assert base.run_id.rsplit("-", 1)[0] == other.run_id.rsplit("-", 1)[0]  # same slug
    gpu_like = MachineInfo(source="cpu_proxy", platform="other_box", num_devices=2, cuda=False,
                           bf16=True)
    assert plan(load_sweep(write(tmp_path, BASIC)), gpu_like)[0].run_id != base.run_id
    twice = plan(load_sweep(write(tmp_path, BASIC + "repeats: 2\n")), CPU)
    assert len(twice) == 8 and twice[4].repeat == 1 and twice[4].run_id != twice[0].run_id


def test_make_run_id_is_file_name_safe():
    rid = make_run_id("FT Llama/3.2 x", {"a": 1})
    assert rid == f"ft-llama-3.2-x-{canonical_hash({'a': 1})[:10]}"


def test_local_paths_are_not_hashed(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "corpus.txt").write_text("hello world " * 50)
    text = BASIC.replace("max_steps: 2", "max_steps: 2\n  dataset_name: corpus.txt")
    ra = plan(load_sweep(write(tmp_path / "a", text)), CPU)[0]
    rb = plan(load_sweep(write(tmp_path / "b", text)), CPU)[0]
    assert ra.settings["dataset_name"] == "local:corpus.txt"
    assert ra.settings["_dataset_path"] != rb.settings["_dataset_path"]
    assert ra.run_id == rb.run_id


THREE_MISTAKES = """\
name: bad
workload: finetune
base:
  model: llama-tiny
  batch_sise: 4
  max_steps: 2
grid:
  seq_len: [64, 4096]
  method: [lora, qlora]
"""


def test_three_mistakes_are_reported_at_once_with_lines(tmp_path):
    path = write(tmp_path, THREE_MISTAKES)
    with pytest.raises(SweepError) as err:
        plan(load_sweep(path, strict=False), CPU)
    assert [(p.line, p.field) for p in err.value.problems] == [
        (5, "batch_sise"), (8, "seq_len"), (9, "method")]
    assert "did you mean 'batch_size'" in str(err.value)


def test_strict_load_stops_at_key_and_type_problems(tmp_path):
    with pytest.raises(SweepError) as err:
        load_sweep(write(tmp_path, THREE_MISTAKES))
    assert [(p.line, p.field) for p in err.value.problems] == [(5, "batch_sise")]


def test_all_problems_of_a_file_in_one_error(tmp_path):
    from generation.runner import generate

    path = write(tmp_path, THREE_MISTAKES)
    with pytest.raises(SweepError) as err:
        generate(path, tmp_path / "out", progress=False)
    lines = {p.line for p in err.value.problems}
    assert lines == {5, 8, 9}, err.value
    text = str(err.value)
    assert "3 problems" in text and "nothing was run" in text
    assert "line 8" in text and "4096" in text and "line 9" in text and "qlora" in text
    assert not (tmp_path / "out").exists()


def test_type_errors_name_line_field_and_value(tmp_path):
    path = write(tmp_path, """\
name: t
workload: finetune
idle_before_s: soon
sampler: {source: gpu, period_ms: 100}
bogus: 1
base:
  model: llama-tiny
  batch_size: two
  gradient_checkpointing: maybe
  precision: fp8
grid:
  lora_rank: 8
""")
    with pytest.raises(SweepError) as err:
        load_sweep(path)
    got = {(p.line, p.field) for p in err.value.problems}
    assert got == {(3, "idle_before_s"), (4, "sampler.source"), (5, "bogus"), (8, "batch_size"),
                   (9, "gradient_checkpointing"), (10, "precision"), (12, "lora_rank")}
    assert "'two' is not an integer" in str(err.value)


def test_yaml_syntax_error_has_a_line(tmp_path):
    path = write(tmp_path, "name: t\nworkload: finetune\nbase: {model: [\n")
    with pytest.raises(SweepError) as err:
        load_sweep(path)
    (problem,) = err.value.problems
    assert problem.line == 4 and problem.field == "<yaml>"  # the end of the unclosed list
    assert problem.message.startswith("not valid YAML: ")
    assert str(path) in str(err.value) and "line 4, field '<yaml>'" in str(err.value)


def test_duplicate_keys_and_zip_lengths(tmp_path):
    path = write(tmp_path, """\
name: t
workload: finetune
base:
  model: llama-tiny
  model: gpt2-tiny
zip:
  - {batch_size: [1, 2], seq_len: [16]}
""")
    with pytest.raises(SweepError) as err:
        load_sweep(path)
    assert {p.line for p in err.value.problems} == {5}  # duplicate key stops the parse
    path = write(tmp_path, """\
name: t
workload: finetune
base: {model: llama-tiny}
zip:
  - {batch_size: [1, 2], seq_len: [16]}
""")
    with pytest.raises(SweepError) as err:
        load_sweep(path)
    assert "equal lengths" in str(err.value) and err.value.problems[0].line == 5


def test_unknown_workload(tmp_path):
    with pytest.raises(SweepError) as err:
        load_sweep(write(tmp_path, "name: t\nworkload: painting\n"))
    assert err.value.problems[0].field == "workload"


def test_zip_include_exclude_and_grid_lists(tmp_path):
    path = write(tmp_path, """\
name: t
workload: finetune
base: {model: llama-tiny, seq_len: 32, max_steps: 1}
grid:
  - {batch_size: [1, 2]}
  - {batch_size: [2], seq_len: [64]}
  - {batch_size: [1]}
zip:
  - {method: [lora, full], learning_rate: [1.0e-4, 1e-5]}
exclude:
  - {batch_size: 2, method: full}
include:
  - {model: gpt2-tiny, batch_size: 3}
""")
    runs = plan(load_sweep(path), CPU)
    got = [(r.settings["batch_size"], r.settings["seq_len"], r.settings["method"],
            r.settings["model"]) for r in runs]
    assert got == [(1, 32, "lora", "llama-tiny"), (1, 32, "full", "llama-tiny"),
                   (2, 32, "lora", "llama-tiny"), (2, 64, "lora", "llama-tiny"),
                   (3, 32, "lora", "gpt2-tiny")]  # (1, 32, *) of the 3rd grid measured once
    assert runs[1].settings["learning_rate"] == pytest.approx(1e-5)  # "1e-5" (YAML text)


def test_problem_from_a_grid_value_points_at_its_line_once(tmp_path):
    path = write(tmp_path, """\
name: t
workload: finetune
repeats: 3
base: {model: gpt2-tiny, max_steps: 1}
grid:
  batch_size: [1, 2, 4]
  seq_len:
    - 64
    - 2048
""")
    with pytest.raises(SweepError) as err:
        plan(load_sweep(path), CPU)
    assert [(p.line, p.field) for p in err.value.problems] == [(9, "seq_len")]


def test_impossible_combinations(tmp_path):
    path = write(tmp_path, """\
name: t
workload: finetune
base: {model: llama-tiny, max_steps: 1}
include:
  - {parallelism: fsdp, dp_size: 1}
  - {parallelism: ddp, dp_size: 3}
  - {parallelism: tp}
  - {precision: fp16}
  - {power_limit_setting_w: 200}
  - {lora_targets: "q_proj,c_attn"}
  - {optimizer: adamw_8bit}
  - {model_source: hub}
""")
    with pytest.raises(SweepError) as err:
        plan(load_sweep(path), CPU)
    got = {(p.line, p.field) for p in err.value.problems}
    assert got >= {(5, "parallelism"), (6, "dp_size"), (7, "parallelism"), (8, "precision"),
                   (9, "power_limit_setting_w"), (10, "lora_targets"), (11, "optimizer"),
                   (12, "model_source")}


def test_power_cap_allowed_only_with_permission(tmp_path):
    path = write(tmp_path, "name: t\nworkload: finetune\nbase: {model: llama-tiny, "
                 "power_limit_setting_w: 300}\n")
    runs = plan(load_sweep(path), H100)
    assert runs[0].columns["power_limit_setting_w"] == 300.0
    no_root = MachineInfo(**{**H100.__dict__, "can_set_power_limit": False})
    with pytest.raises(SweepError):
        plan(load_sweep(path), no_root)


@pytest.mark.parametrize(("gpu", "bf16"), [
    ({}, True),
    ({"name": "Tesla V100-SXM2-32GB", "compute_capability": (7, 0)}, False),
    ({"name": "NVIDIA A100-SXM4-80GB", "compute_capability": (8, 0)}, True),
    ({"name": "Tesla T4", "compute_capability": (7, 5)}, False),
])
def test_detect_machine_probes_nvml(monkeypatch, gpu, bf16):
    """bf16 from the compute capability; names, count and permission from the probes.

    The probes are the NVML test double: ``tests/generation`` is on ``sys.path``, so its
    ``sampler`` package is.
    """
    from sampler.fake_nvml import FakeGpu, FakeNvml

    from generation.sampler import NO_DEVICE_SETTINGS_ENV
    from generation.sampler import nvml as nvml_mod
    from generation.sweep import detect_machine
    from llm_powertrace_ds.schema import platform_from_name

    fake = FakeNvml([FakeGpu(**gpu), FakeGpu(**gpu, uuid="GPU-2")])
    monkeypatch.setattr(nvml_mod, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(NO_DEVICE_SETTINGS_ENV, raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0, raising=False)
    machine = detect_machine({"source": "nvml"})
    name = fake.gpus[0].name
    assert (machine.source, machine.num_devices, machine.cuda) == ("nvml", 2, True)
    assert machine.bf16 is bf16 and machine.extra["gpu_names"] == [name, name]
    assert machine.platform == platform_from_name(name).slug and machine.can_set_power_limit
    monkeypatch.setenv(NO_DEVICE_SETTINGS_ENV, "1")
    assert not detect_machine({"source": "auto"}).can_set_power_limit
    monkeypatch.delenv(NO_DEVICE_SETTINGS_ENV)
    monkeypatch.setattr(os, "geteuid", lambda: 1000, raising=False)
    assert not detect_machine({"source": "nvml"}).can_set_power_limit
    assert fake.calls["nvmlDeviceSetPowerManagementLimit"] == 0 and fake.initialised == 0


def test_detect_machine_falls_back_to_the_name_without_a_compute_capability(monkeypatch):
    from sampler.fake_nvml import NOT_SUPPORTED, FakeGpu, FakeNvml, always

    from generation.sampler import nvml as nvml_mod
    from generation.sweep import detect_machine

    no_cc = {"nvmlDeviceGetCudaComputeCapability": always(NOT_SUPPORTED)}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, bf16 in (("Tesla V100-SXM2-32GB", False), ("NVIDIA H100 80GB HBM3", True)):
        monkeypatch.setattr(nvml_mod, "pynvml", FakeNvml([FakeGpu(name=name, faults=no_cc)]))
        assert detect_machine({"source": "nvml"}).bf16 is bf16


def test_task_subsets_are_disjoint_and_cover_the_sweep(tmp_path):
    runs = plan(load_sweep(write(tmp_path, BASIC + "repeats: 2\n")), CPU)
    parts = [task_subset(runs, i, 3) for i in range(3)]
    ids = [r.run_id for p in parts for r in p]
    assert sorted(ids) == sorted(r.run_id for r in runs) and len(set(ids)) == len(ids)
    assert task_subset(runs, 1, 3) == parts[1]
    with pytest.raises(ValueError):
        task_subset(runs, 3, 3)


def test_columns_carry_identity_and_axes(tmp_path):
    run = plan(load_sweep(write(tmp_path, BASIC + "grid_region: DE\n")), CPU)[0]
    c = run.columns
    assert c["sweep"] == "t" and c["workload"] == "finetune" and c["platform"] == "cpu_proxy"
    assert c["grid_region"] == "DE" and c["repeat"] == 0 and c["run_id"] == run.run_id
    assert c["global_batch_size"] == 1 and c["model_family"] == "llama"
    assert "model" not in c and "_num_processes" not in c


def test_loading_and_planning_import_no_torch(tmp_path):
    import subprocess

    code = ("import sys; from generation.sweep import load_sweep, plan; "
            "from generation.workloads import MachineInfo; "
            f"plan(load_sweep({str(SWEEPS / 'demo-finetune.yaml')!r}), "
            "MachineInfo('cpu_proxy', 'cpu_proxy', 2, False, True)); "
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         check=True)
    assert out.stdout.strip() == "[]"
