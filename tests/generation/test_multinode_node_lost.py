"""Multi-node: a follower whose node 0 is SIGKILLed ends its part of the run within a deadline.

Two real node launchers on this machine (the demo's two CPU ranks over gloo, idling long before
the work); node 0 is killed with SIGKILL once node 1 samples. Node 1 sees node 0's heartbeat
stop, stops its sampler and its ranks, writes its clock facts, prints one line and exits 1,
instead of sampling on with no deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from generation import multinode

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "generation" / "sweeps" / "demo-multinode.yaml"
LOST_S = 3.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launcher(sweep: Path, out: Path, rank: int, port: int, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "llm_powertrace_ds.cli", "generate", str(sweep),
           "--out", str(out), "--nnodes", "2", "--node-rank", str(rank),
           "--master-addr", "127.0.0.1", "--master-port", str(port)]
    env = {**os.environ, "LLM_POWERTRACE_NODE_LOST_S": str(LOST_S)}
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT,
                            env=env)


def _wait_for(pattern: str, root: Path, procs: list[subprocess.Popen[bytes]],
              timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
        assert all(p.poll() is None for p in procs), "a launcher ended early"
        time.sleep(0.1)
    raise AssertionError(f"no {pattern} under {root} within {timeout_s} s")


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_follower_whose_node_0_is_killed_stops_sampling_and_fails_in_one_line(tmp_path):
    sweep = tmp_path / "demo-multinode.yaml"
    spec = yaml.safe_load(DEMO.read_text())
    spec["idle_before_s"] = 120.0  # node 1 samples while node 0 idles: the kill lands here
    sweep.write_text(yaml.safe_dump(spec))
    out, port = tmp_path / "ds", _free_port()
    follower = _launcher(sweep, out, 1, port, tmp_path / "node1.log")
    leader = _launcher(sweep, out, 0, port, tmp_path / "node0.log")
    try:
        sampling = _wait_for(".staging/*/launch/sampling-node-1", out, [leader, follower], 300)
        leader.send_signal(signal.SIGKILL)
        leader.wait(timeout=30)
        killed = time.monotonic()
        try:
            rc = follower.wait(timeout=LOST_S + 60)
        except subprocess.TimeoutExpired:
            pytest.fail("node 1 still runs a minute after node 0 was killed: "
                        + (tmp_path / "node1.log").read_text()[-2000:])
        assert time.monotonic() - killed < LOST_S + 60
        log = (tmp_path / "node1.log").read_text()
        assert rc == 1, log[-3000:]
        lines = [ln for ln in log.splitlines() if "ended as failed here" in ln]
        assert len(lines) == 1 and "node 0 stopped answering" in lines[0], log[-3000:]
        assert "Traceback" not in log
        ndir = multinode.node_dir(sampling.parent.parent, 1)
        assert (ndir / "clock.json").is_file()  # written after its sampler stopped
        before = _size(ndir)
        time.sleep(1.5)
        assert _size(ndir) == before  # nothing samples on
    finally:
        for p in (leader, follower):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)


def test_the_watch_raises_only_once_the_heartbeat_stops_changing(tmp_path):
    beat = tmp_path / "multinode-x.alive"
    watch = multinode.NodeWatch(beat, lost_s=0.3)
    for n in range(5):  # a beating node 0: never lost, however long it runs
        beat.write_text(str(n))
        watch.check()
        time.sleep(0.1)
    deadline = time.monotonic() + 5
    with pytest.raises(multinode.NodeLost, match="did not change for 0.3 s"):
        while time.monotonic() < deadline:
            watch.check()
            time.sleep(0.05)


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "soon"])
def test_a_bad_node_lost_setting_is_refused_by_name(raw):
    from llm_powertrace_ds.errors import UsageError

    with pytest.raises(UsageError, match="LLM_POWERTRACE_NODE_LOST_S"):
        multinode.node_lost_s({"LLM_POWERTRACE_NODE_LOST_S": raw})
    assert multinode.node_lost_s({}) == multinode.NODE_LOST_S
    assert multinode.node_lost_s({"LLM_POWERTRACE_NODE_LOST_S": "2.5"}) == 2.5
