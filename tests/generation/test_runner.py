"""The runner end to end: publish, resume, failures, locks, salvage, task split + merge.

Fast tests use a stand-in for the training step (a CPU busy loop marking the same events) so
the runner's own logic is exercised in seconds under the real ``cpu_proxy`` sampler; one fast
test runs a real, very tiny TRL run. The acceptance runs (the demo sweep with its DDP run, kill
and resume, task split + merge of real runs) are ``slow``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from llm_powertrace_ds import layout, schema
from llm_powertrace_ds.errors import InputError

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "generation" / "sweeps" / "demo-finetune.yaml"

FAKE_SWEEP = """\
name: fake
workload: finetune
sampler: {source: cpu_proxy, period_ms: 50}
idle_before_s: 0.3
idle_after_s: 0.3
base: {model: llama-tiny, seq_len: 16, max_steps: 3, batch_size: 1, checkpoint_every_steps: 2}
grid:
  model: [llama-tiny, gpt2-tiny, qwen-tiny]
"""


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


@pytest.fixture
def fake_workload(monkeypatch):
    """Replace the training step of the finetune workload by a CPU busy loop (same events)."""
    from generation.workloads import finetune

    state = {"fail": set(), "calls": []}

    def run(settings, ctx):
        state["calls"].append(settings["model"])
        ctx.mark("warmup_begin", label="setup")
        ctx.mark("warmup_end", label="setup")
        steps = settings["max_steps"]
        for step in range(1, steps + 1):
            ctx.mark("step_begin", step=step)
            busy(0.12)
            ctx.mark("step_end", step=step)
            if step == 2:
                ctx.mark("checkpoint_begin", step=step)
                ctx.mark("checkpoint_end", step=step)
            if settings["model"] in state["fail"]:
                raise RuntimeError(f"boom in {settings['model']}")
        tokens = steps * settings["batch_size"] * settings["seq_len"]
        return {"steps": steps, "tokens": tokens, "tokens_per_s": tokens / 0.36,
                "final_loss": 7.5, "model_params": 1234, "trl_version": "fake"}

    monkeypatch.setattr(finetune.SPEC, "run", run)
    monkeypatch.setattr(finetune.SPEC, "prepare", lambda: None)
    return state


def write_sweep(tmp_path: Path, text: str = FAKE_SWEEP, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def runs_ids(root: Path) -> list[str]:
    from llm_powertrace_ds.shards import read_table

    ids = []
    for path in layout.shard_files(root, "finetune_runs"):
        ids.extend(read_table(path).column("run_id").to_pylist())
    return sorted(ids)


# ---------------------------------------------------------------------------------------------
# A real, very tiny run (fast)
# ---------------------------------------------------------------------------------------------

TINY_REAL = """\
name: tiny
workload: finetune
sampler: {source: cpu_proxy, period_ms: 50}
idle_before_s: 0.5
idle_after_s: 0.5
grid_region: DE-LU
base:
  model: llama-tiny
  method: lora
  lora_rank: 4
  batch_size: 2
  seq_len: 32
  max_steps: 3
  checkpoint_every_steps: 2
  gradient_checkpointing: true
"""


@pytest.fixture(scope="module")
def tiny_real(tmp_path_factory):
    from generation.runner import generate

    tmp = tmp_path_factory.mktemp("tiny")
    sweep = write_sweep(tmp, TINY_REAL)
    out = tmp / "ds"
    start = time.monotonic()
    report = generate(sweep, out, progress=False)
    return sweep, out, report, time.monotonic() - start


def test_tiny_real_run_publishes_every_column(tiny_real):
    from llm_powertrace_ds.shards import list_runs, read_run

    _, out, report, _ = tiny_real
    assert [o.status for o in report.outcomes] == ["published"], report.outcomes[0].error
    run = read_run(out, report.outcomes[0].run_id)
    m = run.meta
    # null by design: synthetic data has no revision; no checkpoint written, none sized
    nullable = {"power_limit_setting_w", "target_duration_s", "dataset_revision",
                "checkpoint_bytes", "checkpoint_write_s"}
    for col in schema.FINETUNE_AXES + schema.FINETUNE_RESULTS:
        assert (m[col.name] is not None) or col.name in nullable, col.name
    for col in ("model_family", "model_name", "model_label", "model_source", "model_params",
                "sampler", "power_field", "sample_period_ms", "package_version",
                "torch_version", "transformers_version", "peft_version", "trl_version",
                "host_hash", "seed", "start_time", "schema_version", "sweep", "repeat"):
        assert m[col] is not None, col
    assert m["host_hash"] != socket.gethostname() and len(m["host_hash"]) == 16
    assert m["grid_region"] == "DE-LU" and m["sweep"] == "tiny"
    assert m["model_source"] == "zoo" and m["model_params"] > 0
    assert m["tokens"] == 3 * 2 * 32 and m["steps"] == 3 and m["tokens_per_s"] > 0
    assert m["gradient_checkpointing"] is True and m["lora_rank"] == 4
    kinds = [e.kind for e in run.events]
    for kind in ("prepare_end", "idle_begin", "idle_end", "step_begin", "step_end",
                 "checkpoint_begin", "checkpoint_end"):
        assert kind in kinds, kind
    # Issue 11: model build, data and trainer set-up happen before the first idle tick: the
    # measured window holds nothing but idle padding and the workload.
    first = {k: next(e.t_ms for e in run.events if e.kind == k)
             for k in ("prepare_end", "idle_begin", "step_begin")}
    assert 0 <= first["prepare_end"] <= first["idle_begin"] < first["step_begin"]
    # no model set-up inside the window; the trainer's own preparation before its first step
    # (optimizer, DDP wrapping) is labelled, never silent
    assert {e.label for e in run.events if e.kind == "warmup_begin"} == {"trainer_prepare"}
    # What actually ran (schema 1.2.0): observed on the instantiated model, fp32 on CPU.
    assert m["weights_dtype"] == "float32" and m["compute_dtype"] == "float32"
    assert m["attn_implementation"] and m["tf32"] is None  # TF32 is a CUDA matter
    assert [e.step for e in run.events if e.kind == "step_end"] == [1, 2, 3]
    assert "cpu_proxy" in run.flags
    assert len(list_runs(out)) == 1
    assert (out / "README.md").exists()
    assert not layout.staging_dir(out, run.run_id).exists()


def test_second_generate_skips_without_importing_torch(tiny_real):
    sweep, out, _, first_s = tiny_real
    code = (
        "import sys, time; from llm_powertrace_ds.cli import main; t = time.monotonic(); "
        f"rc = main(['-q', 'generate', {str(sweep)!r}, '--out', {str(out)!r}, '--format', "
        "'json']); print('RC', rc, time.monotonic() - t); print('HEAVY', sorted(m for m in "
        "('torch', 'transformers', 'trl', 'peft', 'accelerate') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         check=True)
    assert "HEAVY []" in res.stdout, res.stdout + res.stderr
    assert "RC 0" in res.stdout
    rows = json.loads(res.stdout[:res.stdout.index("RC ")])
    assert [r["status"] for r in rows] == ["skipped"]
    seconds = float(res.stdout.split("RC 0 ")[1].split()[0])
    assert seconds < 5.0  # imports of the dataset library dominate; the demo test checks < 10 %


# ---------------------------------------------------------------------------------------------
# Runner logic with the stand-in workload
# ---------------------------------------------------------------------------------------------

def test_failed_run_is_recorded_and_the_sweep_goes_on(tmp_path, fake_workload):
    from generation.runner import RunFailed, generate
    from llm_powertrace_ds.staging import Staging

    fake_workload["fail"] = {"gpt2-tiny"}
    out = tmp_path / "ds"
    report = generate(write_sweep(tmp_path), out, progress=False)
    status = {o.run_id.split("-")[1]: o.status for o in report.outcomes}
    assert status == {"llama": "published", "gpt2": "failed", "qwen": "published"}
    failed = report.failed[0]
    assert "boom in gpt2-tiny" in failed.error
    st = Staging(out, failed.run_id).status_record()
    assert st["status"] == "failed" and "boom" in st["error"]
    assert len(runs_ids(out)) == 2

    # resume: the failed run is measured again (its spool kept as attempt-1 meanwhile)
    fake_workload["fail"] = set()
    fake_workload["calls"].clear()
    report = generate(write_sweep(tmp_path), out, progress=False)
    assert [o.status for o in report.outcomes] == ["skipped", "published", "skipped"]
    assert fake_workload["calls"] == ["gpt2-tiny"]
    assert len(runs_ids(out)) == 3

    fake_workload["fail"] = {"llama-tiny"}
    with pytest.raises(RunFailed):
        generate(write_sweep(tmp_path), tmp_path / "other", fail_fast=True, progress=False)
    assert runs_ids(tmp_path / "other") == []


def test_dry_run_busy_lock_and_task_split_merge(tmp_path, fake_workload):
    from filelock import FileLock

    from generation.runner import generate
    from llm_powertrace_ds.merge import merge

    sweep = write_sweep(tmp_path)
    whole = generate(sweep, tmp_path / "x", dry_run=True, progress=False)
    assert [o.status for o in whole.outcomes] == ["todo"] * 3
    assert fake_workload["calls"] == [] and not (tmp_path / "x").exists()
    all_ids = sorted(o.run_id for o in whole.outcomes)

    a = generate(sweep, tmp_path / "a", task_index=0, num_tasks=2, progress=False)
    # task 1 while another process "measures" one of its runs
    held = [o.run_id for o in whole.outcomes if o.index % 2 == 1][0]
    lock = FileLock(str(layout.lock_path(tmp_path / "b", f"measure-{held}")))
    with lock:
        b = generate(sweep, tmp_path / "b", task_index=1, num_tasks=2, progress=False)
    assert [o.status for o in b.outcomes] == ["busy"]
    b = generate(sweep, tmp_path / "b", task_index=1, num_tasks=2, progress=False)
    assert [o.index for o in a.outcomes] == [0, 2] and [o.index for o in b.outcomes] == [1]
    assert {o.status for o in a.outcomes + b.outcomes} == {"published"}

    copied, same = merge([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    assert copied == all_ids and not same
    assert runs_ids(tmp_path / "m") == all_ids
    again, same = merge([tmp_path / "a"], tmp_path / "m")
    assert again == [] and sorted(same) == sorted(o.run_id for o in a.outcomes)
    assert generate(sweep, tmp_path / "m", dry_run=True, progress=False).outcomes[0].status == "done"
    from datasets import load_dataset

    ds = load_dataset(str(tmp_path / "m"), "finetune_runs", split="cpu_proxy")
    assert sorted(ds["run_id"]) == all_ids

    # a conflict: the same run id measured twice with different data
    redo = generate(sweep, tmp_path / "c", task_index=0, num_tasks=2, progress=False)
    assert {o.status for o in redo.outcomes} == {"published"}
    before = sorted(p.relative_to(tmp_path / "m") for p in (tmp_path / "m").rglob("*.arrow"))
    with pytest.raises(InputError, match="different data"):
        merge([tmp_path / "c"], tmp_path / "m")
    after = sorted(p.relative_to(tmp_path / "m") for p in (tmp_path / "m").rglob("*.arrow"))
    assert before == after


def _killed_attempt(out: Path, run_id: str, meta_columns: dict, settings: dict) -> None:
    """Leave what a killed generate leaves: status running, a spool, events, meta.json."""
    from generation.events import EventRecorder
    from generation.sampler import Sampler, SamplerConfig
    from llm_powertrace_ds.staging import Staging

    sdir = layout.staging_dir(out, run_id)
    sdir.mkdir(parents=True)
    (sdir / "meta.json").write_text(json.dumps({"columns": meta_columns, "settings": settings},
                                               default=str))
    Staging(out, run_id).set_status("running")
    rec = EventRecorder(sdir, rank=0)
    with Sampler(SamplerConfig(source="cpu_proxy", period_ms=50), sdir):
        for step in (1, 2):
            rec.mark("step_begin", step=step)
            busy(0.15)
            rec.mark("step_end", step=step)
        rec.mark("step_begin", step=3)
        rec.close()


def test_killed_attempt_is_archived_on_resume_and_can_be_salvaged(tmp_path, fake_workload):
    from generation.attempts import salvage
    from generation.runner import _planned_meta, generate
    from generation.sweep import detect_machine, load_sweep, plan
    from llm_powertrace_ds.shards import read_run

    sweep_path = write_sweep(tmp_path, FAKE_SWEEP.replace("[llama-tiny, gpt2-tiny, qwen-tiny]",
                                                          "[llama-tiny]"))
    sweep = load_sweep(sweep_path)
    run = plan(sweep, detect_machine(sweep.sampler))[0]
    out = tmp_path / "ds"
    _killed_attempt(out, run.run_id, _planned_meta(sweep, run), run.settings)

    # the user salvages the killed attempt: published, flagged incomplete, steps from events
    fake_workload["fail"] = {"llama-tiny"}
    report = generate(sweep_path, out, progress=False)  # archives the spool, then fails again
    assert report.outcomes[0].status == "failed"
    sdir = layout.staging_dir(out, run.run_id)
    assert sorted(p.name for p in sdir.glob("attempt-*")) == ["attempt-1"]
    assert json.loads((sdir / "attempt-1" / "status.json").read_text())["status"] == "incomplete"
    res = salvage(out, run.run_id)
    assert "incomplete" in res.flags
    rec = read_run(out, run.run_id)
    assert rec.meta["steps"] == 2 and rec.meta["tokens"] == 2 * 1 * 16
    assert rec.meta["sweep"] == "fake"

    # a salvaged run counts as done; re-measuring it means deleting it first
    fake_workload["fail"] = set()
    assert generate(sweep_path, out, progress=False).outcomes[0].status == "skipped"


def test_resume_after_a_kill_re_measures(tmp_path, fake_workload):
    from generation.runner import _planned_meta, generate
    from generation.sweep import detect_machine, load_sweep, plan

    sweep_path = write_sweep(tmp_path)
    sweep = load_sweep(sweep_path)
    runs = plan(sweep, detect_machine(sweep.sampler))
    out = tmp_path / "ds"
    report = generate(write_sweep(tmp_path, FAKE_SWEEP.replace(
        "[llama-tiny, gpt2-tiny, qwen-tiny]", "[llama-tiny]"), name="first.yaml"), out,
        progress=False)
    assert report.outcomes[0].run_id == runs[0].run_id
    _killed_attempt(out, runs[1].run_id, _planned_meta(sweep, runs[1]), runs[1].settings)
    fake_workload["calls"].clear()
    report = generate(sweep_path, out, progress=False)
    assert [o.status for o in report.outcomes] == ["skipped", "published", "published"]
    assert fake_workload["calls"] == ["gpt2-tiny", "qwen-tiny"]
    assert runs_ids(out) == sorted(r.run_id for r in runs)
    # the killed attempt is kept until the user prunes it (issue 12, item 14)
    sdir = layout.staging_dir(out, runs[1].run_id)
    assert sorted(p.name for p in sdir.iterdir()) == ["attempt-1", "status.json"]
    assert json.loads((sdir / "status.json").read_text())["status"] == "published"


def test_cli_generate_merge_and_missing_extra(tmp_path, fake_workload, monkeypatch, capsys):
    from llm_powertrace_ds.cli import main

    sweep = write_sweep(tmp_path, FAKE_SWEEP.replace("[llama-tiny, gpt2-tiny, qwen-tiny]",
                                                     "[qwen-tiny]"))
    assert main(["generate", str(sweep), "--out", str(tmp_path / "a"), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["status"] == "published" and rows[0]["mean_power_w"] > 0
    assert main(["merge", str(tmp_path / "a"), "--into", str(tmp_path / "m"), "--format",
                 "csv"]) == 0
    assert "copied" in capsys.readouterr().out
    assert main(["generate", str(sweep), "--out", str(tmp_path / "a"), "--task-index", "2",
                 "--num-tasks", "2"]) == 2
    assert main(["salvage", str(tmp_path / "a"), "no-such-run"]) == 1
    assert "no-such-run" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "generation.runner", None)
    assert main(["generate", str(sweep), "--out", str(tmp_path / "a")]) == 1
    err = capsys.readouterr().err
    assert "llm-powertrace[generate]" in err and len(err.strip().splitlines()) <= 2


# ---------------------------------------------------------------------------------------------
# Power caps (NVML test double; never on real hardware here)
# ---------------------------------------------------------------------------------------------

class FakeNvml:
    """The few binding functions a power cap uses, with the real error class."""

    def __init__(self, fail_set_on: int | None = None) -> None:
        import pynvml

        self.NVMLError = pynvml.NVMLError
        self.limits = {0: 700_000, 1: 700_000}
        self.calls: list[tuple] = []
        self.fail_set_on = fail_set_on

    def nvmlInit(self):
        self.calls.append(("init",))

    def nvmlShutdown(self):
        self.calls.append(("shutdown",))

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return self.limits[handle]

    def nvmlDeviceGetUUID(self, handle):  # the settings journal keys GPUs by UUID
        return f"GPU-{handle}"

    def nvmlDeviceSetPowerManagementLimit(self, handle, mw):
        self.calls.append(("set", handle, mw))
        if handle == self.fail_set_on and mw != 700_000:
            raise self.NVMLError(4)  # NVML_ERROR_NO_PERMISSION
        self.limits[handle] = mw


def test_power_cap_sets_then_restores(monkeypatch):
    """The fine-tuning workload's power cap goes through the one GPU-settings path."""
    from generation.sampler import NoPermission
    from generation.sampler import nvml as dev
    from generation.workloads import get_workload

    spec = get_workload("finetune")
    monkeypatch.delenv("LLM_POWERTRACE_NO_DEVICE_SETTINGS", raising=False)  # the double only
    fake = FakeNvml()
    monkeypatch.setattr(dev, "pynvml", fake)
    with spec.device_settings({"power_limit_setting_w": 400.0}, [0, 1]) as gs:
        assert fake.limits == {0: 400_000, 1: 400_000}
        assert [a.original_power_limit_mw for a in gs.applied] == [700_000, 700_000]
        assert gs.clock_mhz is None  # fine-tuning declares no clock axis
    assert fake.limits == {0: 700_000, 1: 700_000}
    assert fake.calls[0] == ("init",) and fake.calls[-1] == ("shutdown",)

    fake = FakeNvml(fail_set_on=1)
    monkeypatch.setattr(dev, "pynvml", fake)
    with pytest.raises(NoPermission), spec.device_settings({"power_limit_setting_w": 400.0},
                                                           [0, 1]):
        pass  # pragma: no cover
    assert fake.limits == {0: 700_000, 1: 700_000}  # GPU 0 restored after GPU 1 refused

    fake = FakeNvml()
    monkeypatch.setattr(dev, "pynvml", fake)
    with spec.device_settings({"power_limit_setting_w": None}, [0, 1]) as gs:
        assert gs.applied == [] and fake.calls == []  # nothing asked: NVML not even opened


# ---------------------------------------------------------------------------------------------
# Acceptance (slow): the demo sweep, kill + resume, task split + merge of real runs
# ---------------------------------------------------------------------------------------------

def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llm_powertrace_ds.cli", *args], cwd=REPO,
                          capture_output=True, text=True, **kw)


def _mean_power(row: dict, begin: str, end: str, own_rank: bool, *, overlap: bool) -> float:
    """Mean of the samples that measured the ``begin``..``end`` windows.

    A cpu_proxy (or 1 s-average) reading at ``t`` averages ``(t - period, t]``. With
    ``overlap`` a window ``[b, e]`` takes every sample whose interval overlaps it
    (``b < t < e + period``): a step shorter than one period that falls between two ticks is
    measured by the tick after it, so eight ~10 ms steps are never "no samples". Without it
    only samples whose whole interval lies inside the window count (``b + period <= t <= e``),
    so an idle mean does not take in the work next to it.
    """
    t = np.asarray(row["t_ms"], dtype=float)
    p = np.asarray(row["power_w"], dtype=float)
    period_ms = float(row["sample_period_ms"])
    ev = [e for e in row["events"] if not own_rank or e["rank"] == row["gpu_index"]]
    mask = np.zeros(len(t), bool)
    for b, e in zip([e for e in ev if e["kind"] == begin], [e for e in ev if e["kind"] == end],
                    strict=False):
        if overlap:
            mask |= (t > b["t_ms"]) & (t < e["t_ms"] + period_ms)
        else:
            mask |= (t >= b["t_ms"] + period_ms) & (t <= e["t_ms"])
    assert mask.any(), (row["run_id"], begin, end)
    return float(p[mask].mean())


@pytest.mark.slow
def test_demo_sweep_acceptance(tmp_path):
    from datasets import load_dataset

    out = tmp_path / "ft"
    start = time.monotonic()
    res = _cli("generate", str(DEMO), "--out", str(out), "--format", "json")
    first_s = time.monotonic() - start
    assert res.returncode == 0, res.stderr[-3000:]
    assert first_s < 240, first_s
    ds = load_dataset(str(out), "finetune", split="cpu_proxy")
    runs = load_dataset(str(out), "finetune_runs", split="cpu_proxy")
    assert runs.num_rows >= 6 and ds.num_rows == runs.num_rows + 1  # one DDP run, 2 devices
    feats = ds.features
    for col in schema.FINETUNE_AXES + schema.FINETUNE_RESULTS:
        assert str(feats[col.name]) == str(col.feature), col.name
    for row in ds:
        kinds = {e["kind"] for e in row["events"]}
        assert {"idle_begin", "step_begin", "step_end", "checkpoint_begin"} <= kinds
        assert row["tokens"] > 0
        assert (_mean_power(row, "step_begin", "step_end", True, overlap=True)
                > _mean_power(row, "idle_begin", "idle_end", False, overlap=False)), row["run_id"]
    ddp = [r for r in ds if r["parallelism"] == "ddp"]
    assert sorted(r["gpu_index"] for r in ddp) == [0, 1]
    for r in ddp:
        own = [e for e in r["events"] if e["kind"] == "step_end" and e["rank"] == r["gpu_index"]]
        assert len(own) == r["steps"]
        assert max(r["gpu_util_pct"]) > 20
    for fam in {r["model_family"] for r in runs}:
        assert load_dataset(str(out), f"finetune-{fam}", split="cpu_proxy").num_rows > 0

    start = time.monotonic()
    res = _cli("generate", str(DEMO), "--out", str(out), "--format", "json")
    second_s = time.monotonic() - start
    assert res.returncode == 0
    assert {r["status"] for r in json.loads(res.stdout)} == {"skipped"}
    assert second_s < 0.1 * first_s, (second_s, first_s)


SMALL_REAL = """\
name: small
workload: finetune
sampler: {source: cpu_proxy, period_ms: 100}
idle_before_s: 0.5
idle_after_s: 0.5
base: {method: lora, batch_size: 2, seq_len: 64, max_steps: 6, checkpoint_every_steps: 3}
grid:
  model: [llama-tiny, gpt2-tiny, qwen-tiny, mistral-tiny]
"""


@pytest.mark.slow
def test_kill_and_rerun_completes_without_duplicates(tmp_path):
    sweep = write_sweep(tmp_path, SMALL_REAL)
    out = tmp_path / "ds"
    proc = subprocess.Popen([sys.executable, "-m", "llm_powertrace_ds.cli", "-q", "generate",
                             str(sweep), "--out", str(out)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    killed_while = None
    while time.monotonic() < deadline and proc.poll() is None:
        done = runs_ids(out) if (out / "data").exists() else []
        running = [p.parent.name for p in (out / ".staging").glob("*/status.json")
                   if json.loads(p.read_text()).get("status") == "running"] \
            if (out / ".staging").exists() else []
        if done and running:
            os.kill(proc.pid, signal.SIGKILL)
            killed_while = running[0]
            break
        time.sleep(0.2)
    proc.wait()
    assert killed_while is not None, "the sweep finished before it could be killed"
    time.sleep(1.5)  # the orphaned sampler notices its parent is gone
    res = _cli("generate", str(sweep), "--out", str(out), "--format", "json")
    assert res.returncode == 0, res.stderr[-2000:]
    statuses = {r["run_id"]: r["status"] for r in json.loads(res.stdout)}
    assert statuses[killed_while] == "published"
    ids = runs_ids(out)
    assert len(ids) == 4 and len(set(ids)) == 4
    from llm_powertrace_ds.shards import list_runs

    assert len(list_runs(out)) == 4


@pytest.mark.slow
def test_task_split_and_merge_of_real_runs(tmp_path):
    sweep = write_sweep(tmp_path, SMALL_REAL)
    for i in (0, 1):
        res = _cli("-q", "generate", str(sweep), "--out", str(tmp_path / f"t{i}"),
                   "--task-index", str(i), "--num-tasks", "2")
        assert res.returncode == 0, res.stderr[-2000:]
    res = _cli("merge", str(tmp_path / "t0"), str(tmp_path / "t1"), "--into",
               str(tmp_path / "all"))
    assert res.returncode == 0, res.stderr
    dry = _cli("generate", str(sweep), "--out", str(tmp_path / "all"), "--dry-run", "--format",
               "json")
    rows = json.loads(dry.stdout)
    assert len(rows) == 4 and {r["status"] for r in rows} == {"done"}
    assert runs_ids(tmp_path / "all") == sorted(r["run_id"] for r in rows)


@pytest.mark.slow
def test_two_generate_processes_share_one_folder(tmp_path):
    from datasets import load_dataset

    sweep = write_sweep(tmp_path, SMALL_REAL)
    out = tmp_path / "ds"
    cmd = [sys.executable, "-m", "llm_powertrace_ds.cli", "-q", "generate", str(sweep), "--out",
           str(out), "--format", "json"]
    procs = [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [r[1][-2000:] for r in results]
    statuses = [r["status"] for out_, _ in results for r in json.loads(out_)]
    assert statuses.count("published") == 4  # each run measured by exactly one process
    ids = runs_ids(out)
    assert len(ids) == 4 and len(set(ids)) == 4
    ds = load_dataset(str(out), "finetune", split="cpu_proxy")
    assert sorted(ds["run_id"]) == ids
