"""Launching a run's workload in its own processes through ``torchrun`` (DDP, FSDP, isolation).

The runner and the launched ranks talk through small files in the run's staging folder, so the
sampler can measure exactly the rank processes and the idle padding around their work:

1. the runner writes ``launch/spec.json`` (workload, resolved settings, run id, its own pid)
   and starts ``python -m torch.distributed.run --standalone --nproc_per_node N -m
   generation.launch --staging DIR``;
2. every rank imports the heavy libraries (``WorkloadSpec.prepare``), builds its model, data and
   trainer (``WorkloadSpec.setup``: outside the measured window), announces its pid to the
   ``cpu_proxy`` sampler (``register_pid``), writes ``launch/ready-<rank>`` (with its CUDA
   device's UUID, which the runner compares with the sampler's GPUs) and waits;
3. the runner starts the sampler on those pids (one ``cpu_proxy`` device per rank; ``nvml``
   reads the GPUs), records the idle padding, then writes ``launch/go``;
4. the ranks run the workload (events through their own ``EventRecorder``), rank 0 writes
   ``launch/result.json``; every rank writes ``launch/done-<rank>`` (or ``error-<rank>.json``)
   and waits for ``launch/exit``, so the idle padding after the work is measured on the same
   processes;
5. the runner records the idle padding, stops the sampler and writes ``launch/exit``.

A rank whose runner disappears (killed) exits within about a second, so nothing is left behind.
On ``cpu`` the process group uses gloo; on CUDA, NCCL (the trainer sets it up).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_powertrace_ds.atomic import write_json_atomic
from llm_powertrace_ds.errors import PowerTraceError
from llm_powertrace_ds.procs import pid_alive as _pid_alive

LAUNCH_DIR = "launch"
NODE_RANK_ENV = "LLM_POWERTRACE_NODE_RANK"
"""The node of a launched rank (set by the launcher of a multi-node run; absent = node 0)."""
RUNNER_PID_ENV = "LLM_POWERTRACE_RUNNER_PID"
"""The pid a rank watches (its own node's launcher); absent = the spec's ``runner_pid``."""
POLL_S = 0.02


class LaunchError(PowerTraceError, RuntimeError):
    """The launched ranks failed (their error and the launcher's output are in the message)."""


def launch_dir(staging_dir: Path) -> Path:
    return Path(staging_dir) / LAUNCH_DIR


def _write_json(path: Path, obj: Any) -> None:
    write_json_atomic(path, obj, fsync=False, indent=None, sort_keys=False)


def _touch(path: Path) -> None:
    _write_json(path, {"t_ns": time.monotonic_ns(), "pid": os.getpid()})




@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of a multi-node run meet (``torchrun``'s static rendezvous).

    Attributes:
        nnodes: nodes of the run.
        node_rank: this node (0 = the node that plans, samples and publishes).
        master_addr: host of node 0.
        master_port: its port.
    """

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int


def torchrun_command(nproc: int, staging_dir: Path,
                     rendezvous: Rendezvous | None = None) -> list[str]:
    """The command that starts ``nproc`` ranks of the worker on this node.

    One node: ``--standalone``. Several: ``--nnodes``, ``--node_rank`` and node 0's address;
    global rank = node_rank x nproc + local rank.
    """
    where = ["--standalone"] if rendezvous is None else [
        "--nnodes", str(rendezvous.nnodes), "--node_rank", str(rendezvous.node_rank),
        "--master_addr", rendezvous.master_addr, "--master_port", str(rendezvous.master_port)]
    return [sys.executable, "-m", "torch.distributed.run", *where,
            "--nproc_per_node", str(nproc), "-m", "generation.launch",
            "--staging", str(staging_dir)]


def node_dir(staging_dir: Path, node_rank: int) -> Path:
    """Where node ``node_rank`` keeps its spool, events and pids.

    Node 0: the staging folder itself; another node: ``node-<rank>/`` in it (its own clock
    until node 0 merges it).
    """
    return Path(staging_dir) if node_rank == 0 else Path(staging_dir) / f"node-{node_rank}"


@dataclass
class LaunchSpec:
    """What the ranks need (``launch/spec.json``).

    Attributes:
        workload: the workload name.
        run_id: the run.
        settings: the resolved settings.
        runner_pid: the runner's pid (ranks exit when it is gone).
        checkpoint_dir: where checkpoints go (``None`` = staging).
        progress: show the step progress bar on rank 0.
        device: ``cuda`` or ``cpu``.
    """

    workload: str
    run_id: str
    settings: dict[str, Any]
    runner_pid: int
    checkpoint_dir: str | None = None
    progress: bool = True
    device: str = "cpu"


class Launched:
    """The runner's handle on a launched run (see the module docstring for the protocol).

    Args:
        spec: the launch spec.
        staging_dir: the run's staging folder.
        nproc: number of ranks.
        env: extra environment for the ranks.
    """

    def __init__(self, spec: LaunchSpec, staging_dir: Path, nproc: int,
                 env: dict[str, str] | None = None,
                 rendezvous: Rendezvous | None = None) -> None:
        self.spec = spec
        self.staging_dir = Path(staging_dir)
        self.dir = launch_dir(self.staging_dir)
        self.nproc = int(nproc)
        self.rendezvous = rendezvous
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        node = rendezvous.node_rank if rendezvous is not None else 0
        self.log_path = self.dir / ("torchrun.log" if node == 0 else f"torchrun-node-{node}.log")

    @property
    def world_size(self) -> int:
        """Ranks of the run on every node."""
        return self.nproc * (self.rendezvous.nnodes if self.rendezvous is not None else 1)

    @property
    def local_ranks(self) -> list[int]:
        """The global ranks started on this node."""
        node = self.rendezvous.node_rank if self.rendezvous is not None else 0
        return [node * self.nproc + r for r in range(self.nproc)]

    def start(self) -> None:
        """Write the spec (node 0) and start torchrun (returns at once)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.rendezvous is None or self.rendezvous.node_rank == 0:
            _write_json(self.dir / "spec.json", self.spec.__dict__)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]]
                                                      if env.get("PYTHONPATH") else []))
        env.update(self.env)
        from .gpu_devices import pci_bus_order_env

        pci_bus_order_env(env)  # CUDA numbers devices in PCI bus order, as NVML does
        if self.world_size > 1 and self.spec.device == "cpu":
            env.setdefault("OMP_NUM_THREADS", "1")
        if self.rendezvous is not None:
            env[NODE_RANK_ENV] = str(self.rendezvous.node_rank)
            env[RUNNER_PID_ENV] = str(os.getpid())  # pids mean nothing on another machine
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(torchrun_command(self.nproc, self.staging_dir,
                                                          self.rendezvous),
                                         stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    def _check_alive(self, what: str) -> None:
        assert self.proc is not None
        errors = self.errors()
        if errors:
            raise LaunchError(f"rank {errors[0]['rank']} failed {what}: {errors[0]['error']}")
        if self.proc.poll() is not None:
            raise LaunchError(f"torchrun exited with code {self.proc.returncode} {what}: "
                              f"{self.log_tail()}")

    def _wait_all(self, prefix: str, what: str, timeout_s: float | None,
                  ranks: list[int] | None = None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        ranks = list(range(self.world_size)) if ranks is None else ranks
        while True:
            if all((self.dir / f"{prefix}-{r}").exists() for r in ranks):
                return
            self._check_alive(what)
            if deadline is not None and time.monotonic() > deadline:
                raise LaunchError(f"ranks not {prefix} after {timeout_s:.0f} s ({what}): "
                                  f"{self.log_tail()}")
            time.sleep(POLL_S)

    def wait_ready(self, timeout_s: float = 600.0) -> list[int]:
        """Wait until every rank of this node has built its workload; return their pids.

        Node 0 of a multi-node run waits for every node's ranks (the collectives' set-up
        needs them all), and returns its own ranks' pids.
        """
        node0 = self.rendezvous is None or self.rendezvous.node_rank == 0
        self._wait_all("ready", "while starting", timeout_s,
                       None if node0 else self.local_ranks)
        return [int(json.loads((self.dir / f"ready-{r}").read_text())["pid"])
                for r in self.local_ranks]

    def device_uuids(self) -> list[str | None]:
        """The CUDA device UUID each rank of this node reported when ready (``None``: CPU)."""
        return [json.loads((self.dir / f"ready-{r}").read_text()).get("cuda_uuid")
                for r in self.local_ranks]

    def go(self) -> None:
        """Let the ranks start their work."""
        _touch(self.dir / "go")

    def wait_done(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Wait until every rank has finished its work; return rank 0's result.

        Raises:
            LaunchError: a rank failed or torchrun exited early.
        """
        self._wait_all("done", "during the workload", timeout_s)
        return json.loads((self.dir / "result.json").read_text())

    def release(self, timeout_s: float = 60.0) -> None:
        """Let the ranks exit and wait for torchrun (terminating it after ``timeout_s``)."""
        _touch(self.dir / "exit")
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.terminate()

    def terminate(self) -> None:
        """Stop torchrun and its ranks (its own process group)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)

    def errors(self) -> list[dict[str, Any]]:
        """The ranks' error reports (``error-<rank>.json``)."""
        out = []
        for path in sorted(self.dir.glob("error-*.json")):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no output)"
        return " | ".join(text.strip().splitlines()[-lines:])


# ---------------------------------------------------------------------------------------------
# The rank side
# ---------------------------------------------------------------------------------------------

def _watch_runner(runner_pid: int) -> None:
    """Exit this rank when the runner is gone (killed), checked about once a second."""
    while True:
        time.sleep(1.0)
        if not _pid_alive(runner_pid):
            os._exit(3)


def _wait_for(path: Path, runner_pid: int) -> None:
    while not path.exists():
        if not _pid_alive(runner_pid):
            os._exit(3)
        time.sleep(POLL_S)


def _cuda_uuid(device: str, local_rank: int) -> str | None:
    """This rank's CUDA device UUID (compared with the sampler's GPUs by the runner)."""
    if device != "cuda":
        return None
    from .gpu_devices import torch_device_uuids

    return torch_device_uuids([local_rank])[0]


def worker_main(argv: Sequence[str] | None = None) -> int:
    """One rank (``python -m generation.launch --staging DIR`` under torchrun)."""
    parser = argparse.ArgumentParser(prog="python -m generation.launch")
    parser.add_argument("--staging", required=True, type=Path)
    args = parser.parse_args(argv)
    staging = args.staging
    ldir = launch_dir(staging)
    spec = LaunchSpec(**json.loads((ldir / "spec.json").read_text()))
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    runner_pid = int(os.environ.get(RUNNER_PID_ENV, spec.runner_pid))
    threading.Thread(target=_watch_runner, args=(runner_pid,), daemon=True,
                     name="runner-watch").start()
    try:
        from generation.events import EventRecorder
        from generation.sampler import register_pid
        from generation.workloads import RunContext, get_workload

        workload = get_workload(spec.workload)
        if int(os.environ.get(NODE_RANK_ENV, "0")) > 0:
            from generation.fetch import fetch_inputs

            # node 0's local paths mean nothing here: this node's own copy, before "ready"
            fetch_inputs([spec.settings])
        workload.prepare()
        node = node_dir(staging, int(os.environ.get(NODE_RANK_ENV, "0")))
        node.mkdir(parents=True, exist_ok=True)
        recorder = EventRecorder(node, rank=rank)  # this node's clock; merged by node 0
        ctx = RunContext(run_id=spec.run_id, staging_dir=staging,
                         mark=lambda kind, **kw: recorder.mark(kind, **kw), rank=rank,
                         world_size=world, local_rank=local_rank,
                         checkpoint_dir=Path(spec.checkpoint_dir) if spec.checkpoint_dir else None,
                         progress=spec.progress, device=spec.device)
        # Model, data, trainer, CUDA context: built before "ready", so before the sampler starts.
        ctx.prepared = workload.setup(spec.settings, ctx)
        register_pid(node, local_rank)  # this node's sampler numbers its own ranks
        _write_json(ldir / f"ready-{rank}", {"t_ns": time.monotonic_ns(), "pid": os.getpid(),
                                             "cuda_uuid": _cuda_uuid(spec.device, local_rank)})
        _wait_for(ldir / "go", runner_pid)
        result = workload.run(spec.settings, ctx)
        recorder.close()
        if rank == 0:
            _write_json(ldir / "result.json", result)
        _touch(ldir / f"done-{rank}")
    except BaseException as exc:  # noqa: BLE001 - reported to the runner, then re-raised as exit 1
        _write_json(ldir / f"error-{rank}.json", {
            "rank": rank, "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()})
        return 1
    _wait_for(ldir / "exit", runner_pid)
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
