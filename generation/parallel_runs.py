"""A whole node busy: independent runs side by side, each on its own GPUs, with its own trace.

``generate SWEEP --out DIR --parallel-runs N|auto`` splits this node's devices into N slots of
k devices (k = the most GPUs one run of the sweep needs; ``auto``: as many slots as fit) and
starts one ``generate`` process per slot, pinned to its slot: ``CUDA_VISIBLE_DEVICES`` lists the
slot's GPUs by UUID (so CUDA and the slot's sampler see exactly those), and on ``cpu_proxy`` the
process is pinned to the slot's CPU cores. Slot i measures the runs of task i of N
(``--task-index i --num-tasks N``: every N-th run), a fixed split that says in advance which
run shares the node with which. Each run keeps its own trace of its own devices, and its rows say it shared the node
(``parallel_runs``, ``parallel_slot``).

Alongside, one more sampler records every device of the node for the whole time (the
node-level trace): ``DIR/.node-traces/<UTC stamp>/`` holds its spool (read it with
``generation.sampler.spool_to_run``) and ``manifest.json`` (slots, their devices by NVML index or
CPU core, each slot's exit code and log).

Sharing a node changes what a run measures (docs/generating.md says more): the runs share the CPU,
host memory bandwidth, PCIe/NVLink switches and the power supply, so a run's power and speed
are those of a busy node, not of a GPU alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_powertrace_ds.atomic import write_json_atomic
from llm_powertrace_ds.errors import UsageError

from .node_context import RUNS_ENV, SLOT_ENV

NODE_TRACES_DIR = ".node-traces"


@dataclass(frozen=True)
class Slot:
    """One slot: its index, its devices (NVML indices, or CPU cores) and GPU UUIDs."""

    index: int
    devices: tuple[int, ...]
    uuids: tuple[str, ...] = ()


def plan_slots(requested: str, num_devices: int, per_run: int) -> int:
    """How many slots: ``auto`` = ⌊devices / per_run⌋, or the number asked for.

    Raises:
        UsageError: not a number or ``auto``, or more slots than the devices allow.
    """
    fit = num_devices // max(1, per_run)
    if requested == "auto":
        n = fit
    else:
        try:
            n = int(requested)
        except ValueError:
            raise UsageError(f"--parallel-runs {requested!r} is not a number or auto") from None
    if n < 1 or n > fit:
        raise UsageError(f"--parallel-runs {requested}: {num_devices} device(s) of this node "
                         f"hold at most {fit} slot(s) of {per_run} device(s) (the largest run)")
    return n


def _slots(machine: Any, n: int, per_run: int) -> list[Slot]:
    if machine.source == "nvml":
        from .gpu_devices import resolve_workload_gpus

        gpus = resolve_workload_gpus(n * per_run)
        return [Slot(i, tuple(g.nvml_index for g in gpus[i * per_run:(i + 1) * per_run]),
                     tuple(g.uuid for g in gpus[i * per_run:(i + 1) * per_run]))
                for i in range(n)]
    cores = sorted(os.sched_getaffinity(0))
    return [Slot(i, tuple(cores[i * per_run:(i + 1) * per_run])) for i in range(n)]


def _slot_process(args: argparse.Namespace, slot: Slot, n: int, log: Path,
                  source: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env[SLOT_ENV], env[RUNS_ENV] = str(slot.index), str(n)
    if slot.uuids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(slot.uuids)
    cmd = [sys.executable, "-m", "llm_powertrace_ds.cli", "--quiet", "generate",
           str(args.sweep), "--out", str(args.out), "--task-index", str(slot.index),
           "--num-tasks", str(n)]
    if args.fail_fast:
        cmd.append("--fail-fast")
    cores = set(slot.devices)

    def pin() -> None:  # runs in the child before exec
        if source == "cpu_proxy":
            os.sched_setaffinity(0, cores)

    with log.open("ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=pin)  # noqa: PLW1509 - affinity only, no locks


def run_parallel(args: argparse.Namespace) -> int:
    """``generate --parallel-runs``: the slots, the node-level trace, a row per slot.

    Returns:
        0 when every slot exited 0, else 1.
    """
    from llm_powertrace_ds.cli import emit
    from llm_powertrace_ds.staging import utc_now

    from .runner import _sampler_config
    from .sampler import Sampler
    from .sweep import detect_machine, load_sweep, plan

    sweep = load_sweep(args.sweep)
    machine = detect_machine(sweep.sampler)
    runs = plan(sweep, machine)
    per_run = max(int(r.settings.get("num_gpus") or r.num_processes) if not
                  sweep.spec.in_process(r.settings) else r.num_processes for r in runs)
    n = plan_slots(str(args.parallel_runs), machine.num_devices, per_run)
    slots = _slots(machine, n, per_run)
    stamp = utc_now().replace(":", "").replace("-", "")
    folder = Path(args.out) / NODE_TRACES_DIR / f"{sweep.name}-{stamp}"
    folder.mkdir(parents=True, exist_ok=True)
    procs = [_slot_process(args, s, n, folder / f"slot-{s.index}.log", machine.source)
             for s in slots]
    started = [time.time() for _ in procs]
    node_sampler = None
    try:
        if machine.source == "nvml":
            config = _sampler_config(sweep, machine, machine.num_devices)
            node_sampler = Sampler(config, folder)
        else:
            node_sampler = Sampler(_sampler_config(sweep, machine, 1), folder,
                                   pids=[p.pid for p in procs])
        node_sampler.start()
    except Exception as exc:  # noqa: BLE001 - the runs go on; the node trace is extra
        print(f"node-level trace not recorded: {type(exc).__name__}: {exc}", file=sys.stderr)
        node_sampler = None
    exited: list[float] = [0.0] * len(procs)

    def wait(i: int) -> None:
        procs[i].wait()
        exited[i] = time.time()

    import threading

    waiters = [threading.Thread(target=wait, args=(i,), daemon=True) for i in range(len(procs))]
    for w in waiters:
        w.start()
    for w in waiters:
        w.join()
    codes = [int(p.returncode) for p in procs]
    ended = time.time()
    if node_sampler is not None:
        node_sampler.stop()
    manifest = {"sweep": sweep.name, "source": machine.source, "parallel_runs": n,
                "devices_per_slot": per_run, "node_trace": node_sampler is not None,
                "slots": [{"slot": s.index, "devices": list(s.devices), "exit_code": c,
                           "started_unix_s": t0, "exited_unix_s": t1,
                           "log": f"slot-{s.index}.log"}
                          for s, c, t0, t1 in zip(slots, codes, started, exited, strict=True)],
                "ended_unix_s": ended}
    write_json_atomic(folder / "manifest.json", manifest)
    emit([{"slot": s.index, "devices": list(s.devices), "exit_code": c} for s, c in
          zip(slots, codes, strict=True)], args.format, ["slot", "devices", "exit_code"])
    return 0 if all(c == 0 for c in codes) else 1
