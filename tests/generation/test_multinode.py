"""Multi-node: two real node launchers on this machine make one published run."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from generation import multinode
from llm_powertrace_ds.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "generation" / "sweeps" / "demo-multinode.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launcher(out: Path, rank: int, port: int, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "llm_powertrace_ds.cli", "generate", str(SWEEP),
           "--out", str(out), "--nnodes", "2", "--node-rank", str(rank),
           "--master-addr", "127.0.0.1", "--master-port", str(port)]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT)


@pytest.mark.slow
def test_two_node_launchers_on_localhost_publish_one_run_with_both_nodes(tmp_path):
    from llm_powertrace_ds.shards import read_run
    from llm_powertrace_ds.staging import published_run_ids

    out = tmp_path / "ds"
    port = _free_port()
    follower = _launcher(out, 1, port, tmp_path / "node1.log")  # before node 0: it waits
    leader = _launcher(out, 0, port, tmp_path / "node0.log")
    try:
        assert leader.wait(timeout=600) == 0, (tmp_path / "node0.log").read_text()[-3000:]
        assert follower.wait(timeout=120) == 0, (tmp_path / "node1.log").read_text()[-3000:]
    finally:
        for p in (leader, follower):
            if p.poll() is None:
                p.kill()
    [run_id] = published_run_ids(out, "finetune")
    run = read_run(out, run_id)
    assert sorted(d.node_index for d in run.devices) == [0, 1]
    assert sorted(d.gpu_index for d in run.devices) == [0, 1]  # cpu_proxy: the global rank
    assert run.meta["num_gpus"] == 2 and run.meta["num_nodes"] == 2
    assert run.meta["clock_alignment_error_ms"] is not None
    assert run.meta["clock_alignment_error_ms"] < 1.0  # one host: one wall clock
    assert "worst error" in run.meta["clock_alignment"]
    assert "gpu_count_mismatch" not in run.meta["quality_flags"]
    node1 = next(d for d in run.devices if d.node_index == 1)
    assert node1.t_ms[0] >= 0 and len(node1.t_ms) > 3  # on node 0's clock
    ranks = {e.rank for e in run.events if e.kind == "step_end"}
    assert ranks == {0, 1}  # both nodes' ranks trained, their events on one time line


def test_node_settings_from_slurm_environment():
    env = {"SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[03-04]"}
    node = multinode.node_settings(None, None, None, None, env=env)
    assert (node.nnodes, node.node_rank, node.master_addr, node.master_port) == (
        2, 1, "gpu03", multinode.DEFAULT_PORT)
    assert multinode.node_settings(None, None, None, None, env={}).nnodes == 1
    with pytest.raises(UsageError, match="--node-rank 2 must be in"):
        multinode.node_settings(2, 2, "h", 1, env={})


def test_clock_facts():
    offset = multinode.clock_offset_ns()
    assert abs(offset - (multinode.time.time_ns() - multinode.time.monotonic_ns())) < 50_000_000
    state = multinode.ntp_state()
    assert state is None or set(state) == {"synchronised", "esterror_us", "maxerror_us"}
