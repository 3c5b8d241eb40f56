"""``bench/gpu_smoke.py``: its plan, its carry, its checks' known answers, its report.

The plan fits a 15-minute lease, the carry is pinned and closed against the GPU image, unknown
step names are refused, each redesigned check passes on the Hopper-like NVML double and fails on
one that misbehaves, an optional step's failure leaves ``passed``, and (slow) the whole run is
rehearsed on CPU from the carry folder only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pynvml
import pytest

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "bench" / "gpu_smoke.py"


def _bench(name: str):
    sys.path.insert(0, str(REPO / "bench"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(REPO / "bench"))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SMOKE), *args], capture_output=True, text=True,
                          env=_env(), timeout=timeout)


# ---------------------------------------------------------------------------------------------
# The plan and the command line
# ---------------------------------------------------------------------------------------------

def test_plan_pins_the_carry_and_fits_the_lease():
    plan = json.loads(_run("--plan", "--format", "json").stdout)
    steps = plan["steps"]
    assert all(set(s) == {"name", "budget_s", "proves", "optional"} for s in steps)
    assert plan["total_budget_s"] == sum(s["budget_s"] for s in steps) <= 330
    assert plan["install_budget_s"] <= 60
    assert {s["name"] for s in steps if s["optional"]} == {"qlora", "kv_int4"}
    assert all("==" in pin for pin in plan["carry"])  # exact pins, not names
    names = {pin.split("==")[0] for pin in plan["carry"]}
    assert {"trl", "datasets", "dill", "multiprocess", "transformers"} <= names
    assert not names & {"bitsandbytes", "optimum-quanto"}  # optional: only on request
    assert plan["carry_mib"] <= 48
    full = json.loads(_run("--plan", "--format", "json", "--with-optional").stdout)
    assert {"bitsandbytes", "optimum-quanto"} <= {p.split("==")[0] for p in full["carry"]}
    # with bitsandbytes (41 MiB) the carry still fits the 64 MiB a call carries, with the tree
    assert plan["carry_mib"] < full["carry_mib"] <= 58


@pytest.mark.parametrize("only", ["nvmll", "env,nvmll", "", "env,"])
def test_an_unknown_step_name_is_refused_in_one_line(tmp_path, only):
    proc = _run("--only", only, "--out", str(tmp_path / "out"), timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--only" in lines[0] and repr(only) in lines[0]
    assert not proc.stdout and not (tmp_path / "out").exists()  # nothing ran, no report


def test_the_load_keeps_its_magnitude_where_the_old_one_decays_to_zero():
    smoke = _bench("gpu_smoke")
    before, after = smoke.load_rms_after(200)
    assert 0.5 <= after / before <= 2.0
    _, old = smoke.load_rms_after(40, step="a = (a @ b) * 1e-4")
    assert old == 0.0  # all-zero operands: what the sampler and field checks used to time


# ---------------------------------------------------------------------------------------------
# The carry
# ---------------------------------------------------------------------------------------------

def _wheel(folder: Path, name: str, version: str, requires: list[str],
           tag: str = "py3-none-any") -> Path:
    """A minimal wheel (a METADATA file) with the given requirements."""
    import zipfile

    path = folder / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
        name, version, "".join(f"Requires-Dist: {r}\n" for r in requires))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
    return path


def test_carry_check_names_the_requirement_nobody_meets(tmp_path):
    carry = _bench("gpu_carry")
    image = {"numpy": "2.5.2", "pyarrow": None, "huggingface-hub": "1.33.0"}
    _wheel(tmp_path, "datasets", "5.2.0", ["dill<0.4.2,>=0.3.0", "numpy>=1.17", "pyarrow>=24",
                                           "huggingface-hub<3.0,>=1.31.0",
                                           "tensorflow; extra == 'tf'",
                                           "pywin32; sys_platform == 'win32'"])
    dill = _wheel(tmp_path, "dill", "0.4.1", [])
    ok = carry.carry_check(tmp_path, image, project=[])
    assert ok["closed"] is True, ok["problems"]
    assert ok["requirements_checked"] == 4  # the extra and the Windows marker do not apply
    dill.unlink()
    bad = carry.carry_check(tmp_path, image, project=[])
    assert bad["closed"] is False
    assert bad["problems"] == ["datasets-5.2.0-py3-none-any.whl: requires 'dill<0.4.2,>=0.3.0'; "
                               "neither the carry nor the image has dill"]
    _wheel(tmp_path, "dill", "0.4.2", [])  # outside the range
    assert "the carry has dill 0.4.2" in carry.carry_check(tmp_path, image, project=[])[
        "problems"][0]
    image["huggingface-hub"] = "1.20.0"  # the image's known version is too old
    assert any("the image has huggingface-hub 1.20.0" in p for p in carry.carry_check(
        tmp_path, image, project=[])["problems"])


def test_carry_check_refuses_a_wheel_for_another_python_and_a_name_twice(tmp_path):
    carry = _bench("gpu_carry")
    _wheel(tmp_path, "multiprocess", "0.70.19", [], tag="py313-none-any")
    _wheel(tmp_path, "multiprocess", "0.70.18", [], tag="py312-none-any")
    problems = carry.carry_check(tmp_path, {}, project=[])["problems"]
    assert any("py313-none-any.whl: no tag installs on CPython 3.12.3" in p for p in problems)
    assert any("multiprocess is carried twice" in p for p in problems)


def test_the_pinned_carry_is_closed_and_fails_without_dill(tmp_path):
    """The real pinned wheels (downloaded, size and hash checked) against the image's list."""
    carry = tmp_path / "carry"
    fetched = _run("--fetch-carry", "--carry", str(carry), timeout=600)
    assert fetched.returncode == 0, fetched.stderr
    lock = _bench("gpu_carry").read_lock()
    assert sorted(w.name for w in carry.glob("*.whl")) == sorted(
        p.wheel for p in lock if p.optional_step is None)
    proc = _run("--carry-check", "--carry", str(carry))
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["closed"] is True, result["problems"]
    for wheel in carry.glob("transformers-*.whl"):  # the image's own is too old for the project
        wheel.rename(tmp_path / wheel.name)
    result = json.loads(_run("--carry-check", "--carry", str(carry)).stdout)
    assert any("'transformers>=5.18" in p and "the image has transformers 5.17.0" in p
               for p in result["problems"]), result["problems"]
    for wheel in tmp_path.glob("transformers-*.whl"):
        wheel.rename(carry / wheel.name)
    for wheel in carry.glob("dill-*.whl"):
        wheel.unlink()
    proc = _run("--carry-check", "--carry", str(carry))
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and result["closed"] is False
    assert any("'dill" in p and "datasets-" in p for p in result["problems"])
    assert any("'dill" in p and "multiprocess-" in p for p in result["problems"])


def test_fetch_refuses_a_file_that_is_not_the_pinned_one(tmp_path):
    carry = _bench("gpu_carry")
    [pin] = [p for p in carry.read_lock() if p.name == "dill"]
    wrong = carry.Pin(pin.name, pin.version, pin.wheel, pin.size_bytes, "0" * 64)
    with pytest.raises(carry.CarryError, match="size or sha256 differs"):
        carry.fetch([wrong], tmp_path)


# ---------------------------------------------------------------------------------------------
# The checks, against the Hopper-like double (a simulated clock: no waiting)
# ---------------------------------------------------------------------------------------------

def _schedule_edges(schedule, t0=1000.0):
    edges, t = [], t0
    for state, seconds in schedule:
        edges.append((t, state == "on"))
        t += seconds
    edges.append((t, False))
    return edges


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _double(behaviour: str, edges):
    hopper = _bench("hopper_nvml")
    clock = _Clock(edges[0][0])
    return hopper.HopperNvml(pynvml, hopper.PowerModel(edges), behaviour, clock=clock), clock


def _poll_fields(behaviour: str):
    """Poll the double through the project's NVML module every 10 ms over the fields load."""
    from generation.sampler import nvml

    smoke = _bench("gpu_smoke")
    edges = _schedule_edges(smoke.FIELDS_SCHEDULE)
    fake, clock = _double(behaviour, edges)
    saved, nvml.pynvml = nvml.pynvml, fake
    try:
        rows = []
        h = nvml.device_handle(0)
        while clock.t < edges[-1][0]:
            rows.append((clock.t, *nvml.power_readings_mw(h)))
            clock.t += smoke.POLL_S
    finally:
        nvml.pynvml = saved
    t, inst, avg, usage, energy = np.array(rows, dtype=float).T
    return smoke.analyse_fields(t, inst, avg, usage, energy, edges)


def test_field_checks_pass_on_the_hopper_double_with_their_known_answers():
    checks = _poll_fields("hopper")
    assert {k: c["status"] for k, c in checks.items()} == {
        "instant_follows_step": "pass", "average_delay_from_step": "pass",
        "counter_vs_integral": "pass"}
    assert checks["instant_follows_step"]["swing_w"] == pytest.approx(380, abs=1)
    # a 1 s boxcar behind a 100 ms instant field: halfway about 0.45 s later
    assert 0.4 <= checks["average_delay_from_step"]["delay_s"] <= 0.5
    c = checks["counter_vs_integral"]
    assert c["span_s"] >= 20 and abs(c["ratio"] - 1) < 0.002 and c["tolerance"] < 0.04


@pytest.mark.parametrize(("behaviour", "broken"), [
    # a frozen instant field neither follows the steps nor integrates to the counter
    ("frozen_instant", {"instant_follows_step", "average_delay_from_step",
                        "counter_vs_integral"}),
    ("counter_drift", {"counter_vs_integral"}),
])
def test_field_checks_fail_on_a_misbehaving_double(behaviour, broken):
    checks = _poll_fields(behaviour)
    assert {k for k, c in checks.items() if c["status"] == "fail"} == broken
    if behaviour == "counter_drift":
        assert checks["counter_vs_integral"]["ratio"] == pytest.approx(1.05, abs=0.003)


def _utilisation(behaviour: str):
    smoke = _bench("gpu_smoke")
    edges = _schedule_edges(smoke.SAMPLER_SCHEDULE)
    fake, clock = _double(behaviour, edges)
    t = np.arange(edges[0][0], edges[-1][0], 0.1)
    util = []
    for x in t:
        clock.t = float(x)
        util.append(fake.nvmlDeviceGetUtilizationRates(None).gpu)
    return smoke.utilisation_follows_load(t, util, edges)


def test_utilisation_check_passes_on_hopper_and_fails_when_stuck_at_zero():
    good = _utilisation("hopper")
    assert good["status"] == "pass"
    assert good["util_on_mean"] == 100 and good["util_off_mean"] == 0
    stuck = _utilisation("util_zero")
    assert stuck["status"] == "fail" and stuck["util_on_mean"] == 0


def test_latency_is_judged_per_call():
    smoke = _bench("gpu_smoke")
    fast = {"field_values": [0.1] * 200, "driver_samples": [0.2] * 200,
            "utilization": [0.05] * 200}
    assert smoke.call_latency(fast)["status"] == "pass"
    hiccup = {**fast, "driver_samples": [0.2] * 190 + [3.0] * 10}  # a tail, under 5 ms
    assert smoke.call_latency(hiccup)["status"] == "pass"
    slow = {**fast, "driver_samples": [2.0] * 200}  # typically over 1.25 ms: 8 GPUs miss 10 ms
    result = smoke.call_latency(slow)
    assert result["status"] == "fail" and result["p50_ms"]["driver_samples"] == 2.0
    tail = {**fast, "utilization": [0.05] * 190 + [8.0] * 10}  # a tail over 5 ms
    assert smoke.call_latency(tail)["status"] == "fail"
    refused = {**fast, "driver_samples": "NVML error 3: Not Supported"}
    assert smoke.call_latency(refused)["refused"] == {
        "driver_samples": "NVML error 3: Not Supported"}


def test_nvml_steps_against_the_double_pass_and_degrade_under_gvisor(tmp_path):
    """The real steps, in their processes (the sampler's too), against the double."""
    good = _run("--nvml-double", "hopper", "--only", "nvml", "--out", str(tmp_path / "good"),
                timeout=120)
    report = json.loads(good.stdout)
    assert good.returncode == 0, json.dumps(report["checks"], indent=1)
    assert report["counts"]["fail"] == report["counts"]["degraded"] == 0
    assert report["checks"]["nvml_probe"]["power_field"] == "instant"
    gvisor = _run("--nvml-double", "unsupported", "--only", "nvml,fields,sampler", "--out",
                  str(tmp_path / "gvisor"), timeout=120)
    report = json.loads(gvisor.stdout)
    assert gvisor.returncode == 0 and report["passed"] is True, report["checks"]
    checks = report["checks"]
    assert checks["nvml_probe"]["status"] == "degraded"
    assert "power_is_1s_average" in checks["nvml_probe"]["why"]
    assert checks["sampler_power"]["status"] == "degraded"
    assert checks["sampler_power"]["power_field"] == "power_usage"
    assert "power_is_1s_average" in checks["sampler_power"]["quality_flags"]
    assert checks["driver_series"]["status"] == "degraded"
    assert {checks[k]["status"] for k in ("instant_follows_step", "average_delay_from_step",
                                          "counter_vs_integral")} == {"degraded"}
    assert set(report["degraded"]) >= {"nvml_probe", "sampler_power", "driver_series"}


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------

def test_a_check_killed_mid_way_leaves_a_valid_partial_report(tmp_path):
    out = tmp_path / "smoke"
    report = out / "gpu_smoke.json"
    proc = subprocess.Popen([sys.executable, str(SMOKE), "--nvml-double", "hopper", "--only",
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
        deadline = time.monotonic() + 60  # the report is rewritten after every step
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
    assert partial["steps"]["load"]["seconds"] <= partial["steps"]["load"]["budget_s"]


def test_a_timed_out_step_keeps_the_checks_it_recorded(tmp_path, monkeypatch):
    smoke = _bench("gpu_smoke")
    args = smoke.argparse.Namespace(out=str(tmp_path), nvml_double="hopper", site=None,
                                    allow_settings=False)
    (tmp_path / "step-env.json").write_text("{}")

    def hang(cmd, **kwargs):  # the step recorded one check, then hung past its limit
        (tmp_path / "step-env.json").write_text(json.dumps({"versions": {"status": "pass"}}))
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])

    monkeypatch.setattr(smoke.subprocess, "run", hang)
    checks = smoke.run_step(smoke.STEPS[0], args, 1.0)
    assert checks["versions"] == {"status": "pass"}
    assert checks["env_step"]["status"] == "fail" and "timed out" in checks["env_step"]["why"]


def _steps_returning(smoke, monkeypatch, results):
    monkeypatch.setattr(smoke, "run_step", lambda step, args, timeout_s: {
        k: dict(v) for k, v in results[step.name].items()})


def test_a_failing_required_step_fails_the_command(tmp_path, monkeypatch):
    smoke = _bench("gpu_smoke")
    monkeypatch.setattr(smoke, "STEPS", (smoke.Step("env", 1.0, "x"),))
    _steps_returning(smoke, monkeypatch, {"env": {"env_x": smoke.check(False, "broken")}})
    assert smoke.main(["--out", str(tmp_path), "--nvml-double", "hopper"]) == 1
    report = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert report["passed"] is False and report["complete"] is True
    assert report["steps"]["env"]["status"] == "fail"
    # a GPU run with a skipped (non-optional) check is not a pass either
    _steps_returning(smoke, monkeypatch, {"env": {"env_x": smoke.check(None, "no GPU")}})
    assert smoke.main(["--out", str(tmp_path)]) == 1


def test_an_optional_steps_failure_leaves_passed_true(tmp_path, monkeypatch):
    smoke = _bench("gpu_smoke")
    monkeypatch.setattr(smoke, "STEPS", (smoke.Step("env", 1.0, "x"),
                                         smoke.Step("qlora", 1.0, "x", optional=True)))
    _steps_returning(smoke, monkeypatch, {
        "env": {"versions": smoke.check(True)},
        "qlora": {"qlora_published": smoke.check(False, "bitsandbytes: no CUDA kernel")}})
    assert smoke.main(["--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert report["passed"] is True
    assert report["checks"]["qlora_published"]["status"] == "optional_failed"
    assert report["optional_failed"] == ["qlora_published"]
    assert report["steps"]["qlora"] == {"seconds": report["steps"]["qlora"]["seconds"],
                                        "budget_s": 1.0, "optional": True,
                                        "status": "optional_failed"}
    assert report["counts"]["fail"] == 0 and report["counts"]["optional_failed"] == 1


def test_a_degraded_check_is_reported_with_its_reason_and_does_not_fail(tmp_path, monkeypatch):
    smoke = _bench("gpu_smoke")
    monkeypatch.setattr(smoke, "STEPS", (smoke.Step("nvml", 1.0, "x"),))
    _steps_returning(smoke, monkeypatch, {"nvml": {
        "nvml_probe": smoke.degraded("field 186 unavailable: NOT_SUPPORTED")}})
    assert smoke.main(["--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert report["degraded"] == {"nvml_probe": "field 186 unavailable: NOT_SUPPORTED"}
    assert report["steps"]["nvml"]["status"] == "degraded"


# ---------------------------------------------------------------------------------------------
# The rehearsal
# ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_cpu_selftest_installs_the_carry_from_its_folder_and_runs_every_step(tmp_path):
    if shutil.which("python3") is None:
        pytest.skip("no python3 to make the rehearsal's image")
    proc = _run("--cpu-selftest", "--out", str(tmp_path / "smoke"), timeout=1800)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, json.dumps(report["checks"], indent=1)
    assert report["mode"] == "cpu-selftest" and report["passed"] is True
    assert report["install"]["status"] == "pass" and "--no-index" in report["install"]["command"]
    assert report["install"]["seconds"] <= 60
    assert set(report["steps"]) == {s.name for s in _bench("gpu_smoke").STEPS}
    assert all(s["seconds"] <= s["budget_s"] for s in report["steps"].values())
    checks = report["checks"]
    assert checks["versions"]["datasets"] and checks["versions"]["trl"]  # from the carry
    for name in ("load_keeps_magnitude", "nvml_probe", "instant_follows_step",
                 "average_delay_from_step", "counter_vs_integral", "utilisation_follows_load",
                 "finetune_published", "inference_published", "idle_baselines_agree"):
        assert checks[name]["status"] == "pass", (name, checks[name])
    for name in ("qlora_step", "kv_int4_step"):
        assert checks[name]["status"] == "skip"  # CUDA kernels: never faked
