"""Multi-node runs: one launcher and one sampler per node, one published run.

``llm-powertrace generate SWEEP --out DIR --nnodes N --node-rank R --master-addr HOST
--master-port P`` is started once on every node (under Slurm the four values come from its
environment: ``SLURM_NNODES``, ``SLURM_NODEID``, the first host of ``SLURM_JOB_NODELIST`` or
``MASTER_ADDR``, ``MASTER_PORT``). ``DIR`` is one folder every node sees (a shared file system):
the nodes talk through small files in it.

* Node 0 plans the sweep, runs it as usual and, for each run, writes
  ``.staging/locks/multinode-<sweep>.json`` (the run, its staging folder, the ranks per node)
  and the launch spec, starts its ``torchrun`` (``--nnodes N --node_rank 0``), waits until the
  ranks of every node are ready (model built, sharded, collectives warmed), starts its sampler,
  tells the other nodes to start theirs (``launch/sample``) and waits until they have, then
  idles, lets the ranks go, idles, stops its sampler and asks the other nodes to stop
  (``launch/stop-sampling``).
* Node R > 0 follows: for each run node 0 announces, it starts its ``torchrun``
  (``--node_rank R``) on the same staging folder, starts its own sampler on its ranks
  (spool, events and pids in ``node-R/``, its own clock) when told, stops it when told and
  writes ``node-R/clock.json``.
* Each node records its wall-clock minus monotonic offset (``time.time_ns() -
  time.monotonic_ns()``, the smallest of a few reads) when its sampler starts and ends, and the
  kernel's NTP state (``adjtimex``: synchronised or not, estimated error). Node 0 merges: node
  R's samples and rank events move onto node 0's clock by ``shift = (t0_R + offset_R,start) -
  (t0_0 + offset_0,start)``; every device keeps its ``node_index``; ``num_gpus`` counts every
  node's devices. The stated error (``clock_alignment_error_ms``) is, over nodes R > 0,
  max(|Δoffset_R − Δoffset_0| + e_0 + e_R), where Δoffset is a node's offset change from start
  to end (its monotonic clock drifting against its wall clock) and e its NTP estimated error
  (0 when node R is the same host as node 0: one wall clock). An unsynchronised clock on another
  host makes the error unknown (null) and ``clock_alignment`` says so.
* Every wait has a deadline. Node 0 rewrites a heartbeat file
  (``.staging/locks/multinode-<sweep>.alive``) every :data:`HEARTBEAT_S`; a follower that sees
  it unchanged for :data:`NODE_LOST_S` (its own monotonic clock; ``$LLM_POWERTRACE_NODE_LOST_S``
  overrides) while a launch is under way stops its sampler and its ranks, writes its clock
  facts, prints one line and exits 1: a SIGKILLed node 0 never leaves a follower sampling.
  Node 0's run then stays in staging with a dead owner (``salvage`` keeps what node 0 measured).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_powertrace_ds.atomic import write_json_atomic
from llm_powertrace_ds.errors import InputError, PowerTraceError, UsageError

from .launch import Rendezvous, launch_dir, node_dir

if TYPE_CHECKING:
    from llm_powertrace_ds.run import Run

    from .sweep import PlannedRun, Sweep
    from .workloads import MachineInfo

DEFAULT_PORT = 29511
POLL_S = 0.05
FOLLOW_TIMEOUT_S = 3600.0
"""How long a follower node waits for node 0's next announcement before giving up."""
NODE_SYNC_TIMEOUT_S = 900.0
"""How long node 0 waits for the other nodes' samplers to start or stop."""
HEARTBEAT_S = 1.0
"""How often node 0 rewrites its heartbeat file while it leads a sweep."""
NODE_LOST_S = 60.0
"""How long a follower sees node 0's heartbeat unchanged before it ends its part of the run."""
NODE_LOST_ENV = "LLM_POWERTRACE_NODE_LOST_S"
"""Overrides :data:`NODE_LOST_S` (seconds; e.g. a slow shared file system)."""
MAX_RUN_S = 7 * 24 * 3600.0
"""The longest a follower samples one run while node 0's heartbeat goes on (a week)."""


class NodeLost(PowerTraceError, TimeoutError):
    """Node 0 stopped answering: its heartbeat did not change within the deadline."""


def node_lost_s(env: dict[str, str] | None = None) -> float:
    """:data:`NODE_LOST_S`, or ``$LLM_POWERTRACE_NODE_LOST_S`` (a positive number of seconds).

    Raises:
        UsageError: the variable is not a positive finite number.
    """
    raw = (os.environ if env is None else env).get(NODE_LOST_ENV)
    if raw is None or raw == "":
        return NODE_LOST_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value < 1e7):
        raise UsageError(f"${NODE_LOST_ENV} must be a number of seconds in (0, 1e7) "
                         f"(got {raw!r})", field=NODE_LOST_ENV)
    return value


def heartbeat_file(control: Path) -> Path:
    """Node 0's heartbeat, beside its announcements."""
    return control.with_name(control.stem + ".alive")


class _Heartbeat:
    """Node 0's side: a daemon thread rewriting the heartbeat file every ``HEARTBEAT_S``."""

    def __init__(self, path: Path, session: int) -> None:
        self.path = path
        self.session = session
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="multinode-heartbeat",
                                        daemon=True)

    def _beat(self) -> None:
        beat = 0
        while True:
            with contextlib.suppress(OSError):
                _write(self.path, {"session": self.session, "beat": beat})
            beat += 1
            if self._stop.wait(HEARTBEAT_S):
                return

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class NodeWatch:
    """A follower's view of node 0's heartbeat: :meth:`check` raises once it stops changing."""

    def __init__(self, path: Path, lost_s: float) -> None:
        self.path = path
        self.lost_s = lost_s
        self._seen: bytes | None = None
        self._changed = time.monotonic()

    def check(self) -> None:
        """Raise :class:`NodeLost` when the heartbeat has not changed for ``lost_s``."""
        try:
            now_seen: bytes | None = self.path.read_bytes()
        except OSError:
            now_seen = None
        now = time.monotonic()
        if now_seen != self._seen:
            self._seen, self._changed = now_seen, now
        elif now - self._changed > self.lost_s:
            raise NodeLost(f"node 0 stopped answering: its heartbeat '{self.path.name}' did not "
                           f"change for {self.lost_s:g} s")


@dataclass(frozen=True)
class NodeSettings:
    """This node's place in a multi-node launch (see the module docstring)."""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int

    def rendezvous(self, node_rank: int | None = None) -> Rendezvous:
        return Rendezvous(self.nnodes, self.node_rank if node_rank is None else node_rank,
                          self.master_addr, self.master_port)


def _first_slurm_host(nodelist: str) -> str | None:
    """The first host of a Slurm node list (``gpu[03-04,07],login1`` -> ``gpu03``)."""
    first = nodelist.split(",")[0].strip() if "[" not in nodelist.split(",")[0] else nodelist
    if "[" not in first:
        return first or None
    prefix, rest = first.split("[", 1)
    return prefix + rest.split("]")[0].split(",")[0].split("-")[0]


def node_settings(nnodes: int | None, node_rank: int | None, master_addr: str | None,
                  master_port: int | None, env: dict[str, str] | None = None) -> NodeSettings:
    """The node settings from the options, else Slurm's environment, else one node.

    Raises:
        UsageError: a node rank outside ``[0, nnodes)``, or several nodes without an address.
    """
    env = dict(os.environ) if env is None else env
    n = nnodes if nnodes is not None else int(env.get("SLURM_NNODES", "1") or 1)
    rank = node_rank if node_rank is not None else int(env.get("SLURM_NODEID", "0") or 0)
    addr = master_addr or env.get("MASTER_ADDR") or (
        _first_slurm_host(env["SLURM_JOB_NODELIST"]) if env.get("SLURM_JOB_NODELIST") else None)
    port = master_port or int(env.get("MASTER_PORT", DEFAULT_PORT))
    if n < 1 or not 0 <= rank < n:
        raise UsageError(f"--node-rank {rank} must be in [0, --nnodes {n})")
    if n > 1 and not addr:
        raise UsageError("--nnodes > 1 needs --master-addr (or $MASTER_ADDR, or Slurm's "
                         "$SLURM_JOB_NODELIST)")
    return NodeSettings(n, rank, addr or "127.0.0.1", int(port))


# ---------------------------------------------------------------------------------------------
# Clocks
# ---------------------------------------------------------------------------------------------

class _Timex(ctypes.Structure):
    """The head of Linux's ``struct timex`` (``adjtimex(2)``), enough for the NTP state."""

    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long),
                ("status", ctypes.c_int), ("_rest", ctypes.c_byte * 512)]


STA_UNSYNC = 0x0040


def ntp_state() -> dict[str, Any] | None:
    """The kernel's NTP discipline state (read-only ``adjtimex``), or ``None`` if unreadable.

    Returns:
        ``synchronised`` (bool), ``esterror_us`` and ``maxerror_us`` (the kernel's estimated and
        maximum error of the wall clock, microseconds).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        tx = _Timex()
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    return {"synchronised": not (tx.status & STA_UNSYNC) and state != 5,
            "esterror_us": int(tx.esterror), "maxerror_us": int(tx.maxerror)}


def clock_offset_ns(reads: int = 5) -> int:
    """Wall clock minus monotonic clock, ns: the read with the smallest bracket of ``reads``."""
    best: tuple[int, int] | None = None
    for _ in range(reads):
        a = time.monotonic_ns()
        wall = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) // 2)
    assert best is not None
    return best[1]


def clock_sample() -> dict[str, Any]:
    """This node's clock facts now: the offset, the NTP state and the (salted) host."""
    from .runner import host_hash

    return {"offset_ns": clock_offset_ns(), "ntp": ntp_state(), "host_hash": host_hash()}


# ---------------------------------------------------------------------------------------------
# Node 0
# ---------------------------------------------------------------------------------------------

_ACTIVE: dict[str, Any] = {}


def active_node() -> NodeSettings | None:
    """The node settings of the multi-node ``generate`` in progress in this process, if any."""
    node = _ACTIVE.get("node")
    return node if isinstance(node, NodeSettings) else None


@contextlib.contextmanager
def _activated(node: NodeSettings, control: Path) -> Iterator[None]:
    from .node_context import MultiNode, leading

    _ACTIVE.update(node=node, control=control, seq=0)
    try:
        with leading(MultiNode(node.nnodes, measure_multinode, merge_nodes)):
            yield
    finally:
        _ACTIVE.clear()


def control_file(out: Path, sweep_name: str) -> Path:
    """Where node 0 announces each run to the other nodes."""
    from llm_powertrace_ds import layout

    return layout.staging_root(Path(out)) / layout.LOCKS_DIR / f"multinode-{sweep_name}.json"


def _write(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, obj, fsync=False, indent=None, sort_keys=False)


def run_multinode(args: argparse.Namespace, node: NodeSettings) -> int:
    """``generate`` on one node of a multi-node launch (node 0 leads, the others follow)."""
    from .sweep import load_sweep

    sweep = load_sweep(args.sweep, strict=False)
    control = control_file(args.out, sweep.name)
    if node.node_rank != 0:
        return follow(args.sweep, Path(args.out), node, control)
    from .runner import generate

    seq = 0
    if control.exists():  # a resumed sweep: keep counting so followers see new runs
        with contextlib.suppress(OSError, ValueError):
            seq = int(json.loads(control.read_text()).get("seq", 0))
    session = time.time_ns()
    with _activated(node, control), _Heartbeat(heartbeat_file(control), session):
        _ACTIVE.update(seq=seq, session=session)
        _write(control, {"seq": seq, "session": session, "finished": False})
        try:
            report = generate(args.sweep, args.out, fail_fast=args.fail_fast, progress=False)
        finally:
            _write(control, {"seq": _ACTIVE["seq"], "session": session, "finished": True})
    from llm_powertrace_ds.cli import emit
    from llm_powertrace_ds.hooks import rebuild_card

    if Path(args.out).is_dir():
        rebuild_card(args.out)
    emit([o.row() for o in report.outcomes], args.format,
         ["index", "run_id", "status", "seconds", "model", "parallelism", "dp_size", "error"])
    return 1 if report.failed else 0


def _wait_files(paths: list[Path], launched: Any, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(p.exists() for p in paths):
        launched._check_alive(what)
        if time.monotonic() > deadline:
            missing = ", ".join(p.name for p in paths if not p.exists())
            raise InputError(f"the other nodes did not answer {what} within {timeout_s:.0f} s "
                             f"(missing {missing})")
        time.sleep(POLL_S)


def measure_multinode(sweep: Sweep, machine: MachineInfo, run: PlannedRun, sdir: Path, *,
                      progress: bool) -> dict[str, Any]:
    """Node 0's side of one multi-node run (see the module docstring); returns the result."""
    from .events import EventRecorder
    from .launch import Launched, LaunchSpec
    from .runner import _check_sampler, _idle, _sampler_config, stop_on_sampler_death
    from .sampler import Sampler

    node = active_node()
    assert node is not None
    if run.settings.get("power_limit_setting_w") is not None or run.settings.get("gpu_clock_mhz"):
        raise InputError("GPU settings (power caps, clock locks) are not applied across nodes",
                         field="power_limit_setting_w")
    world = run.num_processes
    if world % node.nnodes:
        raise InputError(f"{world} ranks do not divide over {node.nnodes} nodes",
                         field="dp_size")
    nproc = world // node.nnodes
    config = _sampler_config(sweep, machine, nproc)
    spec = LaunchSpec(workload=sweep.workload, run_id=run.run_id, settings=run.settings,
                      runner_pid=os.getpid(), checkpoint_dir=None, progress=progress,
                      device="cuda" if machine.cuda else "cpu")
    launched = Launched(spec, sdir, nproc, rendezvous=node.rendezvous(0))
    _ACTIVE["seq"] += 1
    ldir = launch_dir(sdir)
    launched.start()  # writes launch/spec.json before the announcement
    _write(_ACTIVE["control"], {"seq": _ACTIVE["seq"], "session": _ACTIVE["session"],
                                "run_id": run.run_id, "staging": str(sdir), "nproc": nproc,
                                "finished": False})
    followers = range(1, node.nnodes)
    sampler = None
    try:
        pids = launched.wait_ready(3600.0)
        sampler = Sampler(config, sdir, pids=pids)
        run_events = EventRecorder(sdir, rank=None)
        start = clock_sample()
        sampler.start()
        try:
            (ldir / "sample").touch()
            _wait_files([ldir / f"sampling-node-{r}" for r in followers], launched,
                        "with their samplers", NODE_SYNC_TIMEOUT_S)
            with stop_on_sampler_death(sampler):
                run_events.mark("prepare_end")
                _idle(run_events, sweep.idle_before_s)
                launched.go()
                result = launched.wait_done()
                _idle(run_events, sweep.idle_after_s)
        finally:
            run_events.close()
            summary = sampler.stop()
            end = clock_sample()
            _write(sdir / "clock-node-0.json", {"start": start, "end": end})
            (ldir / "stop-sampling").touch()
        _wait_files([ldir / f"stopped-node-{r}" for r in followers], launched,
                    "stopping their samplers", NODE_SYNC_TIMEOUT_S)
        launched.release()
    except BaseException:
        (ldir / "abort").touch()
        launched.terminate()
        raise
    _check_sampler(summary)
    return result


# ---------------------------------------------------------------------------------------------
# Node R > 0
# ---------------------------------------------------------------------------------------------

def _read_control(control: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(control.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def follow(sweep_path: Path, out: Path, node: NodeSettings, control: Path, *,
           timeout_s: float = FOLLOW_TIMEOUT_S) -> int:
    """A follower node: serve every run node 0 announces until it says the sweep is finished.

    Returns:
        0, or 1 when one of this node's runs failed here.
    """
    from .sweep import detect_machine, load_sweep

    sweep = load_sweep(sweep_path, strict=False)
    machine = detect_machine(sweep.sampler)
    initial = _read_control(control)
    # a finished announcement left by an earlier launch is not this launch's end
    stale = initial.get("session") if initial and initial.get("finished") else None
    seen = -1
    failed = 0
    deadline = time.monotonic() + timeout_s
    watch = NodeWatch(heartbeat_file(control), node_lost_s())
    while True:
        data = _read_control(control)
        if data is not None and data.get("session") != stale:
            if data.get("finished"):
                return 1 if failed else 0
            try:
                watch.check()  # a launch under way: node 0 must keep beating
                if data.get("run_id") and int(data.get("seq", 0)) > seen:
                    seen = int(data["seq"])
                    follow_run(sweep, machine, node, Path(data["staging"]), int(data["nproc"]),
                               watch=watch)
                    deadline = time.monotonic() + timeout_s
            except NodeLost as exc:
                print(f"node {node.node_rank}: run {data.get('run_id')} ended as failed here: "
                      f"{exc}")
                return 1
            except Exception as exc:  # noqa: BLE001 - node 0 records the run's failure
                failed += 1
                print(f"node {node.node_rank}: run {data.get('run_id')} failed here: "
                      f"{type(exc).__name__}: {exc}")
                deadline = time.monotonic() + timeout_s
        if time.monotonic() > deadline:
            raise InputError(f"node 0 announced nothing for {timeout_s:.0f} s in '{control}'")
        time.sleep(POLL_S)


def _wait_any(paths: list[Path], proc: Any, timeout_s: float,
              watch: NodeWatch | None = None) -> Path:
    deadline = time.monotonic() + timeout_s
    while True:
        for p in paths:
            if p.exists():
                return p
        if proc is not None and proc.poll() is not None:
            raise InputError(f"this node's torchrun exited with code {proc.returncode}")
        if watch is not None:
            watch.check()
        if time.monotonic() > deadline:
            raise InputError(f"nothing from node 0 within {timeout_s:.0f} s")
        time.sleep(POLL_S)


def follow_run(sweep: Sweep, machine: MachineInfo, node: NodeSettings, sdir: Path,
               nproc: int, *, watch: NodeWatch | None = None) -> None:
    """This node's side of one run: its ranks, its sampler, its clock facts.

    Every wait for node 0 has a deadline and, given ``watch``, ends with :class:`NodeLost` as
    soon as node 0's heartbeat stops; the sampler is stopped and the ranks terminated on every
    way out.
    """
    from .launch import Launched, LaunchSpec
    from .runner import _sampler_config
    from .sampler import Sampler

    ldir = launch_dir(sdir)
    _wait_any([ldir / "spec.json"], None, NODE_SYNC_TIMEOUT_S, watch)
    spec = LaunchSpec(**json.loads((ldir / "spec.json").read_text()))
    launched = Launched(spec, sdir, nproc, rendezvous=node.rendezvous())
    launched.start()
    ndir = node_dir(sdir, node.node_rank)
    ndir.mkdir(parents=True, exist_ok=True)
    try:
        pids = launched.wait_ready(3600.0)
        if _wait_any([ldir / "sample", ldir / "abort"], launched.proc,
                     NODE_SYNC_TIMEOUT_S, watch).name == "abort":
            raise InputError("node 0 aborted the run")
        sampler = Sampler(_sampler_config(sweep, machine, nproc), ndir, pids=pids)
        start = clock_sample()
        sampler.start()
        try:
            (ldir / f"sampling-node-{node.node_rank}").touch()
            _wait_any([ldir / "stop-sampling", ldir / "abort"], None, MAX_RUN_S, watch)
        finally:
            summary = sampler.stop()
            end = clock_sample()
            _write(ndir / "clock.json", {"start": start, "end": end,
                                         "ranks": launched.local_ranks,
                                         "sampler_complete": summary.complete,
                                         "sampler_message": summary.message})
            (ldir / f"stopped-node-{node.node_rank}").touch()
        _wait_any([ldir / "exit", ldir / "abort"], None, NODE_SYNC_TIMEOUT_S, watch)
        assert launched.proc is not None
        launched.proc.wait(timeout=120)
    except (BaseException, subprocess.TimeoutExpired):
        launched.terminate()
        raise


# ---------------------------------------------------------------------------------------------
# Merging (node 0, after the run)
# ---------------------------------------------------------------------------------------------

def _error_ms(c0: dict[str, Any], cr: dict[str, Any]) -> tuple[float | None, str]:
    """This node's alignment error against node 0 (ms; ``None`` = unknown) and its wording."""
    drift_ns = abs((cr["end"]["offset_ns"] - cr["start"]["offset_ns"])
                   - (c0["end"]["offset_ns"] - c0["start"]["offset_ns"]))
    if cr["start"].get("host_hash") == c0["start"].get("host_hash"):
        return drift_ns / 1e6, "same host as node 0 (one wall clock)"
    n0, nr = c0["start"].get("ntp"), cr["start"].get("ntp")
    if not n0 or not nr or not n0.get("synchronised") or not nr.get("synchronised"):
        return None, "NTP state unknown or unsynchronised: error unknown"
    return (drift_ns / 1e6 + (n0["esterror_us"] + nr["esterror_us"]) / 1e3,
            f"NTP synchronised (estimated errors {n0['esterror_us']} and "
            f"{nr['esterror_us']} us)")


def merge_nodes(record: Run, sdir: Path, meta: dict[str, Any]) -> None:
    """Add every other node's devices and rank events to node 0's run, on node 0's clock."""
    import numpy as np

    from .sampler import spool_to_run
    from .sampler.spool import read_spool

    node = active_node()
    assert node is not None
    c0 = json.loads((sdir / "clock-node-0.json").read_text())
    t0_0 = read_spool(sdir).t0_ns
    assert t0_0 is not None
    errors: list[float | None] = []
    words = []
    for r in range(1, node.nnodes):
        ndir = node_dir(sdir, r)
        cr = json.loads((ndir / "clock.json").read_text())
        sub = spool_to_run(ndir, dict(meta), node_index=r)
        t0_r = read_spool(ndir).t0_ns
        assert t0_r is not None
        shift_ms = int(round(((t0_r + cr["start"]["offset_ns"])
                              - (t0_0 + c0["start"]["offset_ns"])) / 1e6))
        ranks = list(cr.get("ranks") or [])
        for i, dev in enumerate(sorted(sub.devices, key=lambda d: d.gpu_index)):
            t = dev.t_ms + shift_ms
            keep = t >= 0  # a sample before node 0's first tick precedes the run's t0
            dev.t_ms = t[keep]
            dev.signals = {k: np.asarray(v)[keep] for k, v in dev.signals.items()}
            if ranks and i < len(ranks):
                dev.rank = ranks[i]
                if record.meta.get("sampler") == "cpu_proxy":
                    dev.gpu_index = ranks[i]  # cpu_proxy: the device index is the rank
            record.devices.append(dev)
        for ev in sub.events:
            if ev.rank is not None:
                ev.t_ms = ev.t_ms + shift_ms
                record.events.append(ev)
        err, how = _error_ms(c0, cr)
        errors.append(err)
        words.append(f"node {r}: shifted {shift_ms} ms, {how}")
    record.events.sort(key=lambda e: e.t_ms)
    worst = None if any(e is None for e in errors) else max(e for e in errors if e is not None)
    record.meta["num_nodes"] = node.nnodes
    record.meta["clock_alignment_error_ms"] = worst
    record.meta["clock_alignment"] = (
        "each node's wall-clock minus monotonic offset at its sampler's start and end; "
        + "; ".join(words) + (f"; worst error {worst:.3g} ms" if worst is not None
                              else "; worst error unknown"))


def node_facts(node: NodeSettings) -> dict[str, Any]:
    """The node settings as a plain mapping (for logs)."""
    return asdict(node)
