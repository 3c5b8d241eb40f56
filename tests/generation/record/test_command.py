"""``record -- CMD`` on the CPU proxy: real child processes, real sampler, real load_dataset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from generation.record import RecordConfig, exit_status, record_command
from generation.sampler import read_spool
from llm_powertrace_ds import layout
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.shards import read_run

REPO = Path(__file__).resolve().parents[3]

BUSY = """\
import json, sys, time
t0 = time.monotonic_ns()
while time.monotonic_ns() - t0 < 2_000_000_000:
    pass
json.dump({"start_ns": t0, "end_ns": time.monotonic_ns()}, open(sys.argv[1], "w"))
"""


def _cfg(out: Path, **kw) -> RecordConfig:
    kw.setdefault("sampler", "cpu_proxy")
    return RecordConfig(out=out, workload=kw.pop("workload", "finetune"), **kw)


def _data_files(out: Path) -> list[Path]:
    return sorted(layout.data_root(out).rglob("*.arrow")) if layout.data_root(out).exists() else []


def test_a_busy_child_is_one_run_whose_work_window_covers_it(tmp_path):
    out = tmp_path / "ds"
    times = tmp_path / "child.json"
    outcome = record_command([sys.executable, "-c", BUSY, str(times)],
                             _cfg(out, axes={"model_name": "my-model"}, idle_before_s=1.0,
                                  idle_after_s=1.0))
    assert outcome.status == "published" and outcome.exit_code == 0
    run = read_run(out, outcome.run_id)
    assert run.meta["program"] == Path(sys.executable).name and run.meta["exit_code"] == 0
    assert run.meta["sweep"] == "record" and run.meta["sampler"] == "cpu_proxy"
    assert "cpu_proxy" in run.flags and run.platform == "cpu_proxy"
    # the work window (first idle_end .. last idle_begin) covers the child within 0.2 s
    t0_ns = read_spool_t0(run)
    child = json.loads(times.read_text())
    idle_end = min(e.t_ms for e in run.events if e.kind == "idle_end")
    idle_begin = max(e.t_ms for e in run.events if e.kind == "idle_begin")
    child_start_ms = (child["start_ns"] - t0_ns) / 1e6
    child_end_ms = (child["end_ns"] - t0_ns) / 1e6
    assert idle_end <= child_start_ms <= idle_end + 200
    assert child_end_ms <= idle_begin <= child_end_ms + 200
    # idle padding on both sides, measured by the sampler through to its end
    last_idle_end = max(e.t_ms for e in run.events if e.kind == "idle_end")
    assert idle_end >= 950 and last_idle_end - idle_begin >= 1000
    assert run.devices[0].t_ms[-1] >= last_idle_end - 300
    # cpu_proxy measured the child: busier in the window than in the idle padding
    dev = run.devices[0]
    busy = dev.signals["power_w"][(dev.t_ms > idle_end + 300) & (dev.t_ms < idle_begin - 100)]
    idle = dev.signals["power_w"][dev.t_ms < idle_end - 100]
    assert busy.mean() > idle.mean() + 20

    import datasets

    ds = datasets.load_dataset(str(out), "finetune", split="cpu_proxy",
                               cache_dir=str(tmp_path / "hf-cache"))
    assert list(ds["run_id"]) == [outcome.run_id] and ds[0]["program"] == run.meta["program"]


def read_spool_t0(run) -> int:
    # published runs keep start_time (UTC of t0); the test measured monotonic times, so it asks
    # the child's clock relation through the run's own t0: the first tick, t_ms = 0
    return _T0[run.run_id]


_T0: dict[str, int] = {}
_RAW: dict[str, list] = {}


@pytest.fixture(autouse=True)
def _remember_t0(monkeypatch):
    """Keep each run's t0 (the spool is removed on publishing) for the window checks."""
    from generation.record import session

    original = session.Recording._publish

    def publish(self):
        from generation.events import read_raw_events

        _T0[self.run_id] = read_spool(self.staging_dir).t0_ns
        _RAW[self.run_id] = read_raw_events(self.staging_dir)
        return original(self)

    monkeypatch.setattr(session.Recording, "_publish", publish)


def test_the_idle_after_window_reads_the_idle_model_once_the_command_exits(tmp_path):
    out = tmp_path / "ds"
    outcome = record_command([sys.executable, "-c", "pass"],
                             _cfg(out, idle_before_s=0.5, idle_after_s=1.5))
    assert outcome.status == "published"
    run = read_run(out, outcome.run_id)
    idle_begin = max(e.t_ms for e in run.events if e.kind == "idle_begin")
    dev = run.devices[0]
    after = dev.t_ms >= idle_begin + 100  # the command and its process tree have ended
    power = dev.signals["power_w"][after]
    assert after.sum() >= 10 and not np.isnan(power).any()
    assert np.allclose(power, 60.0)  # no process left: u = 0, power_w = idle_w
    assert dev.t_ms[-1] - dev.t_ms[0] >= 1500


def test_false_exits_1_and_publishes_nothing(tmp_path):
    out = tmp_path / "ds"
    outcome = record_command(["false"], _cfg(out))
    assert outcome.exit_code == 1 and outcome.status == "failed"
    assert _data_files(out) == []
    status = json.loads((layout.staging_dir(out, outcome.run_id) / "status.json").read_text())
    assert status["status"] == "failed" and status["exit_code"] == 1


def test_keep_failed_publishes_the_exit_code(tmp_path):
    out = tmp_path / "ds"
    outcome = record_command([sys.executable, "-c", "import sys; sys.exit(3)"],
                             _cfg(out, keep_failed=True))
    assert outcome.exit_code == 3 and outcome.status == "published"
    assert read_run(out, outcome.run_id).meta["exit_code"] == 3


def test_a_missing_program_exits_127(tmp_path):
    outcome = record_command(["no-such-program-xyz"], _cfg(tmp_path / "ds"))
    assert outcome.exit_code == 127 and outcome.status == "failed"


def test_exit_status_follows_the_shell():
    assert exit_status(0) == 0 and exit_status(3) == 3 and exit_status(-signal.SIGINT) == 130


def test_axes_are_checked_against_the_schema(tmp_path):
    with pytest.raises(InputError, match="batch_sise"):
        _cfg(tmp_path, axes={"batch_sise": "8"})
    with pytest.raises(InputError, match="batch_size"):
        _cfg(tmp_path, axes={"batch_size": "eight"})
    with pytest.raises(InputError, match="sampler"):
        _cfg(tmp_path, axes={"sampler": "nvml"})
    assert _cfg(tmp_path, axes={"batch_size": "8"}).axes["batch_size"] == 8


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "llm_powertrace_ds.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_cli_propagates_the_exit_code_and_checks_set(tmp_path):
    proc = _cli("record", "--out", str(tmp_path / "ds"), "--workload", "finetune",
                "--sampler", "cpu_proxy", "--idle-before-s", "0", "--idle-after-s", "0",
                "--", sys.executable, "-c", "import sys; sys.exit(4)")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err
    failed = [line for line in err.splitlines() if "failed" in line]
    assert len(failed) == 1, err  # one line: where, why, and how to publish it anyway
    assert "kept as failed" in failed[0] and "exited with status 4" in failed[0]
    assert "--keep-failed" in failed[0]
    proc = _cli("record", "--out", str(tmp_path / "ds"), "--workload", "finetune",
                "--set", "batch_sise=3", "--", "true")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    line, = err.strip().splitlines()
    assert "unknown column 'batch_sise' of a finetune run; did you mean 'batch_size'?" in line
    accepted = line.split("accepted: ")[1].split(", ")
    assert "batch_size" in accepted and not {"run_id", "sampler", "program"} & set(accepted)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_child_and_leaves_no_visible_run(tmp_path, sig):
    out = tmp_path / "ds"
    started = tmp_path / "started"
    child = ("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n"
             "time.sleep(60)\n")
    proc = _cli("record", "--out", str(out), "--workload", "inference", "--sampler",
                "cpu_proxy", "--idle-before-s", "0.2", "--idle-after-s", "0.2", "--",
                sys.executable, "-c", child, str(started))
    deadline = time.monotonic() + 90
    while not started.exists() or not started.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    child_pid = int(started.read_text())
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    with pytest.raises(ProcessLookupError):
        os.kill(child_pid, 0)
    assert _data_files(out) == []
    statuses = [json.loads(p.read_text()) for p in layout.staging_root(out).glob("*/status.json")]
    assert [s["status"] for s in statuses] == ["failed"]
    assert signal.Signals(sig).name in statuses[0]["error"]


RANKS = """\
import os, subprocess, sys
procs = [subprocess.Popen([sys.executable, "-c", sys.argv[1]], env={**os.environ, "RANK": str(r)})
         for r in range(2)]
sys.exit(max(p.wait() for p in procs))
"""
RANK = """\
from generation.record import attach
rec = attach()
for step in (1, 2):
    rec.mark("step_begin", step=step)
    sum(range(200_000))
    rec.mark("step_end", step=step)
if rec.rank == 0:
    rec.set_results(steps=2)
rec.close()
"""


def test_every_rank_of_a_launched_program_marks_into_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    out = tmp_path / "ds"
    outcome = record_command([sys.executable, "-c", RANKS, RANK], _cfg(out))
    assert outcome.status == "published", outcome
    # every rank's events reach the run's staging folder, on the sampler's clock ...
    ends = [(rank, step) for _, kind, step, rank, _, _ in _RAW[outcome.run_id]
            if kind == "step_end"]
    assert sorted(ends) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    # ... and each device row carries its own rank's: under cpu_proxy the recorded command is
    # one virtual device (rank 0, its whole process tree); on GPUs rank r's are on GPU r's row
    run = read_run(out, outcome.run_id)
    assert sorted((e.rank, e.step) for e in run.events if e.kind == "step_end") == [(0, 1), (0, 2)]
    assert run.meta["steps"] == 2


def test_an_unusable_sampler_never_starts_the_command(tmp_path):
    from generation.sampler import SamplerError, probe_gpus

    try:
        if probe_gpus():
            pytest.skip("this machine has a usable GPU")
    except SamplerError:
        pass
    marker = tmp_path / "ran"
    with pytest.raises(SamplerError):
        record_command([sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                       _cfg(tmp_path / "ds", sampler="nvml"))
    assert not marker.exists() and _data_files(tmp_path / "ds") == []


def test_a_recording_factory_runs_the_command_through_the_same_path(tmp_path):
    """``recording=`` (the overhead bench's sampler-free arm): same gate, same environment."""
    made: list = []

    class NoSampler:
        def __init__(self, config, pids):
            self.config, self.pids = config, pids
            self.exit_code = None
            self.requests_from = None
            self.calls: list[str] = []
            made.append(self)

        def start(self):
            self.calls.append("start")

        def stop(self, error=None):
            self.calls.append(f"stop:{error}")

    out = tmp_path / "env.json"
    code = "import json, os, sys; json.dump({'pid': os.getpid(), 'pgid': os.getpgid(0), " \
           "'dir': os.environ.get('LLM_POWERTRACE_RECORD_DIR')}, open(sys.argv[1], 'w')); " \
           "sys.exit(3)"
    outcome = record_command([sys.executable, "-c", code, str(out)], _cfg(tmp_path / "ds"),
                             recording=NoSampler)
    seen = json.loads(out.read_text())
    rec = made[0]
    assert rec.pids == [seen["pid"]] and seen["pgid"] == seen["pid"]  # the gate became the command
    assert seen["dir"].endswith(outcome.run_id)
    assert rec.calls == ["start", f"stop:{Path(sys.executable).name} exited with status 3"]
    assert rec.exit_code == 3
    assert outcome.exit_code == 3 and outcome.status == "failed" and _data_files(tmp_path) == []
