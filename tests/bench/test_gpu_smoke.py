"""``bench/gpu_smoke.py --cpu-selftest``: its runner steps run on CPU so the GPU check cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_smoke_cpu_selftest_runs_its_runner_steps(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_smoke.py"),
                           "--cpu-selftest", "--out", str(tmp_path / "smoke")],
                          capture_output=True, text=True, env=env, timeout=1500)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, json.dumps(report["checks"], indent=1)
    checks = report["checks"]
    assert report["mode"] == "cpu-selftest" and report["passed"] is True
    for name in ("finetune_published", "finetune_dtype_columns", "finetune_prepare_before_idle",
                 "inference_published", "cb_config_recorded", "static_poisson_kv",
                 "idle_runs_published", "idle_baselines_agree"):
        assert checks[name]["status"] == "pass", (name, checks[name])
    for name in ("nvml_step", "fields_step", "sampler_step", "settings_step", "qlora_step"):
        assert checks[name]["status"] == "skip"  # GPU-only: never faked
    assert report["settings_changed_allowed"] is False
    assert (tmp_path / "smoke" / "gpu_smoke.json").exists()


def test_a_failing_step_fails_the_command(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import gpu_smoke
    finally:
        sys.path.remove(str(REPO / "bench"))
    monkeypatch.setattr(gpu_smoke, "STEPS", {"env": 1.0})
    monkeypatch.setattr(gpu_smoke, "run_step", lambda name, args, timeout_s: {
        "env_x": gpu_smoke.check(False, "broken")})
    rc = gpu_smoke.main(["--out", str(tmp_path), "--cpu-selftest"])
    assert rc == 1
    assert json.loads((tmp_path / "gpu_smoke.json").read_text())["passed"] is False
    # a GPU run with a skipped check is not a pass either
    monkeypatch.setattr(gpu_smoke, "run_step", lambda name, args, timeout_s: {
        "env_x": gpu_smoke.check(None, "no GPU")})
    assert gpu_smoke.main(["--out", str(tmp_path)]) == 1
