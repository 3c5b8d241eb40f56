"""``bench/gpu_smoke.py``: fit, load, a report that survives a kill, the CPU self-test.

Its plan fits the first GPU job, its load does not decay, its report survives a kill, and (slow)
its runner steps run on CPU so the GPU check cannot rot.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "bench" / "gpu_smoke.py"


def _module():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import gpu_smoke
    finally:
        sys.path.remove(str(REPO / "bench"))
    return gpu_smoke


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def test_plan_fits_seven_minutes_and_names_the_wheels():
    proc = subprocess.run([sys.executable, str(SMOKE), "--plan", "--format", "json"],
                          capture_output=True, text=True, env=_env(), timeout=120, check=True)
    plan = json.loads(proc.stdout)
    assert set(plan) == {"steps", "total_budget_s", "carry"}
    steps = plan["steps"]
    assert all(set(s) == {"name", "budget_s", "proves", "optional"} for s in steps)
    assert plan["total_budget_s"] == sum(s["budget_s"] for s in steps) <= 420
    optional = {s["name"] for s in steps if s["optional"]}
    assert optional == {"qlora", "kv_int4"}  # bitsandbytes; a compiler for quanto's kernels
    assert {"trl", "datasets", "peft"} <= set(plan["carry"])
    assert any(w.startswith("transformers") for w in plan["carry"])
    assert any(w.startswith("bitsandbytes") and "optional" in w for w in plan["carry"])


def test_the_load_keeps_its_magnitude_where_the_old_one_decays_to_zero():
    smoke = _module()
    before, after = smoke.load_rms_after(200)
    assert 0.5 <= after / before <= 2.0
    _, old = smoke.load_rms_after(40, step="a = (a @ b) * 1e-4")
    assert old == 0.0  # all-zero operands: what the sampler and field checks used to time


def test_a_check_killed_mid_way_leaves_a_valid_partial_report(tmp_path):
    out = tmp_path / "smoke"
    report = out / "gpu_smoke.json"
    proc = subprocess.Popen([sys.executable, str(SMOKE), "--cpu-selftest", "--only",
                             "env,load,finetune", "--out", str(out)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the orchestrator says when each step ends
            if line.startswith("[gpu_smoke] load:"):
                break
        else:
            pytest.fail("the check ended before its load step")
        # the report is rewritten after every step: wait until the load step's is on disk
        import time

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if "load_keeps_magnitude" in json.loads(report.read_text())["checks"]:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # the job's time limit, mid-finetune
    finally:
        proc.wait(timeout=60)
    partial = json.loads(report.read_text())
    assert partial["complete"] is False and partial["passed"] is False
    assert partial["checks"]["versions"]["status"] == "pass"
    assert partial["checks"]["load_keeps_magnitude"]["status"] == "pass"
    assert "finetune_published" not in partial["checks"]


def test_a_timed_out_step_keeps_the_checks_it_recorded(tmp_path, monkeypatch):
    smoke = _module()
    args = smoke.argparse.Namespace(out=str(tmp_path), cpu_selftest=True, allow_settings=False)
    (tmp_path / "step-env.json").write_text("{}")

    def hang(cmd, **kwargs):  # the step recorded one check, then hung past its limit
        (tmp_path / "step-env.json").write_text(json.dumps({"versions": {"status": "pass"}}))
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])

    monkeypatch.setattr(smoke.subprocess, "run", hang)
    checks = smoke.run_step(smoke.STEPS[0], args, 1.0)
    assert checks["versions"] == {"status": "pass"}
    assert checks["env_step"]["status"] == "fail" and "timed out" in checks["env_step"]["why"]


def test_a_failing_step_fails_the_command(tmp_path, monkeypatch):
    smoke = _module()
    monkeypatch.setattr(smoke, "STEPS", (smoke.Step("env", 1.0, "x"),))
    monkeypatch.setattr(smoke, "run_step", lambda step, args, timeout_s: {
        "env_x": smoke.check(False, "broken")})
    assert smoke.main(["--out", str(tmp_path), "--cpu-selftest"]) == 1
    report = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert report["passed"] is False and report["complete"] is True
    # a GPU run with a skipped (non-optional) check is not a pass either
    monkeypatch.setattr(smoke, "run_step", lambda step, args, timeout_s: {
        "env_x": smoke.check(None, "no GPU")})
    assert smoke.main(["--out", str(tmp_path)]) == 1
    # an optional step skipped with its reason does not fail the check
    monkeypatch.setattr(smoke, "STEPS", (smoke.Step("qlora", 1.0, "x", optional=True),))
    monkeypatch.setattr(smoke, "run_step", lambda step, args, timeout_s: {
        "qlora": smoke.check(None, "bitsandbytes has no CUDA")})
    assert smoke.main(["--out", str(tmp_path)]) == 0


@pytest.mark.slow
def test_gpu_smoke_cpu_selftest_runs_its_runner_steps(tmp_path):
    proc = subprocess.run([sys.executable, str(SMOKE), "--cpu-selftest", "--out",
                           str(tmp_path / "smoke")], capture_output=True, text=True, env=_env(),
                          timeout=1800)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, json.dumps(report["checks"], indent=1)
    checks = report["checks"]
    assert report["mode"] == "cpu-selftest" and report["passed"] is True
    for name in ("load_keeps_magnitude", "finetune_published", "finetune_dtype_columns",
                 "finetune_prepare_before_idle", "finetune_flags_and_ticks",
                 "inference_published", "inference_flags_and_ticks", "cb_config_recorded",
                 "static_poisson", "idle_runs_published", "idle_baselines_agree"):
        assert checks[name]["status"] == "pass", (name, checks[name])
    for name in ("nvml_step", "fields_step", "sampler_step", "settings_step", "qlora_step",
                 "kv_int4_step"):
        assert checks[name]["status"] == "skip"  # GPU-only: never faked
    assert report["settings_changed_allowed"] is False
    assert (tmp_path / "smoke" / "gpu_smoke.json").exists()
