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
POLL_S = 0.02


class LaunchError(PowerTraceError, RuntimeError):
    """The launched ranks failed (their error and the launcher's output are in the message)."""


def launch_dir(staging_dir: Path) -> Path:
    return Path(staging_dir) / LAUNCH_DIR


def _write_json(path: Path, obj: Any) -> None:
    write_json_atomic(path, obj, fsync=False, indent=None, sort_keys=False)


def _touch(path: Path) -> None:
    _write_json(path, {"t_ns": time.monotonic_ns(), "pid": os.getpid()})




def torchrun_command(nproc: int, staging_dir: Path) -> list[str]:
    """The command that starts ``nproc`` ranks of the worker on this node."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", str(nproc), "-m", "generation.launch",
            "--staging", str(staging_dir)]


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
                 env: dict[str, str] | None = None) -> None:
        self.spec = spec
        self.staging_dir = Path(staging_dir)
        self.dir = launch_dir(self.staging_dir)
        self.nproc = int(nproc)
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "torchrun.log"

    def start(self) -> None:
        """Write the spec and start torchrun (returns at once)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_json(self.dir / "spec.json", self.spec.__dict__)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]]
                                                      if env.get("PYTHONPATH") else []))
        env.update(self.env)
        from .gpu_devices import pci_bus_order_env

        pci_bus_order_env(env)  # CUDA numbers devices as NVML does (issue 11, item 5)
        if self.nproc > 1 and self.spec.device == "cpu":
            env.setdefault("OMP_NUM_THREADS", "1")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(torchrun_command(self.nproc, self.staging_dir),
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

    def _wait_all(self, prefix: str, what: str, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if all((self.dir / f"{prefix}-{r}").exists() for r in range(self.nproc)):
                return
            self._check_alive(what)
            if deadline is not None and time.monotonic() > deadline:
                raise LaunchError(f"ranks not {prefix} after {timeout_s:.0f} s ({what}): "
                                  f"{self.log_tail()}")
            time.sleep(POLL_S)

    def wait_ready(self, timeout_s: float = 600.0) -> list[int]:
        """Wait until every rank has imported its libraries; return their pids by rank."""
        self._wait_all("ready", "while starting", timeout_s)
        return [int(json.loads((self.dir / f"ready-{r}").read_text())["pid"])
                for r in range(self.nproc)]

    def device_uuids(self) -> list[str | None]:
        """The CUDA device UUID each rank reported when ready (``None``: no CUDA device)."""
        return [json.loads((self.dir / f"ready-{r}").read_text()).get("cuda_uuid")
                for r in range(self.nproc)]

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
    threading.Thread(target=_watch_runner, args=(spec.runner_pid,), daemon=True,
                     name="runner-watch").start()
    try:
        from generation.events import EventRecorder
        from generation.sampler import register_pid
        from generation.workloads import RunContext, get_workload

        workload = get_workload(spec.workload)
        workload.prepare()
        recorder = EventRecorder(staging, rank=rank)
        ctx = RunContext(run_id=spec.run_id, staging_dir=staging,
                         mark=lambda kind, **kw: recorder.mark(kind, **kw), rank=rank,
                         world_size=world, local_rank=local_rank,
                         checkpoint_dir=Path(spec.checkpoint_dir) if spec.checkpoint_dir else None,
                         progress=spec.progress, device=spec.device)
        # Model, data, trainer, CUDA context: built before "ready", so before the sampler starts.
        ctx.prepared = workload.setup(spec.settings, ctx)
        register_pid(staging, rank)
        _write_json(ldir / f"ready-{rank}", {"t_ns": time.monotonic_ns(), "pid": os.getpid(),
                                             "cuda_uuid": _cuda_uuid(spec.device, local_rank)})
        _wait_for(ldir / "go", spec.runner_pid)
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
    _wait_for(ldir / "exit", spec.runner_pid)
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
