"""``bench/record_overhead.py`` runs its three arms end to end, so the overhead bench cannot rot.

Numbers are not asserted (tests assert behaviour; the bench measures): only that every arm ran
its child and that the output explains itself.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))


@pytest.mark.slow
@pytest.mark.parametrize(("child", "iterations", "warmup"),
                         [("sha256", "20", "2"), ("loop", "200000", "10000")])
def test_the_bench_runs_every_arm_and_explains_itself(child, iterations, warmup):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "record_overhead.py"),
                           "--child", child, "--repeats", "2", "--iterations", iterations,
                           "--warmup", warmup, "--settle-s", "0.05", "--sampler", "cpu_proxy"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result["child_cpu_s_mean"]) == {"sampler", "null", "plain"}
    assert all(v > 0 for v in result["child_cpu_s_mean"].values())
    assert len(result["pairs_slowdown_pct"]) == 2
    assert 0 < result["start_latency_s_mean"] <= result["start_latency_s_max"]
    assert result["verdict"].startswith(("machine busy", "idle machine"))
    assert result["child"] == child and result["iterations"] == int(iterations)
    low, high = result["slowdown_pct"]["ci95"]
    assert math.isfinite(low) and low <= result["slowdown_pct"]["mean"] <= high


def test_the_median_interval_is_the_order_statistic_one():
    import record_overhead

    out = record_overhead._interval([float(v) for v in range(20)])
    # binomial(20, 1/2): P(B <= 5) = 0.0207 <= 2.5 % < P(B <= 6), so the 6th and 15th values
    assert out["median_ci95"] == [5.0, 14.0] and out["median"] == 9.5
    assert out["ci95"][0] < 9.5 < out["ci95"][1]


def test_the_verdict_calls_a_busy_machine_busy():
    import record_overhead

    assert record_overhead._verdict({"ci95": [-0.5, 0.8]}, 2.0).endswith("meets <= 1 %")
    assert "does not meet" in record_overhead._verdict({"ci95": [0.5, 1.8]}, 2.0)
    assert record_overhead._verdict({"ci95": [-0.5, 0.8]}, 40.0).startswith("machine busy")
