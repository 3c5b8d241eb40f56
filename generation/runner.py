"""The runner: a sweep file in, published runs out — with resume, task splitting and locks.

Per run (the run lifecycle of docs/design.md and :mod:`llm_powertrace_ds.staging`)::

    lock .staging/locks/measure-<run_id>.lock (another generate process has it -> "busy")
    archive a killed or failed attempt's spool as .staging/<run_id>/attempt-N/
    meta.json + status "running"
    [torchrun ranks start, import, register their pids]            (launched runs only)
    sampler start -> idle_begin .. idle_before_s .. idle_end
                  -> workload (events from every rank)
                  -> idle_begin .. idle_after_s .. idle_end -> sampler stop
    spool + events -> Run (generation.sampler.spool_to_run) with every axis, result and
    provenance column -> llm_powertrace_ds.shards.publish_run (validate, metrics, atomic files,
    card) -> status "published", staging removed

A run is *done* when its trace file is in ``data/`` and no staging folder says otherwise; done
runs are skipped without importing torch, transformers or TRL (a fully resumed sweep costs
seconds). A failing run is recorded ``failed`` with its error and the sweep goes on
(``fail_fast`` stops). Single-device runs execute in the runner's own process (``launcher:
auto``/``inline``); multi-process runs (DDP, FSDP) and ``launcher: torchrun`` go through
:mod:`generation.launch`.

Result keys a workload returns that start with ``_`` are not columns: ``_requests`` (a list of
request rows) becomes ``Run.requests`` for the inference workload; ``_flags`` (quality flags
the workload found of its own measurement) are added to the run's flags.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import shutil
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_powertrace_ds import layout, schema
from llm_powertrace_ds.errors import LockTimeout, PowerTraceError
from llm_powertrace_ds.staging import RunStatus, Staging, is_done, published_run_ids, utc_now

from .attempts import RunFailed, archive_attempt, request_redo
from .sweep import (
    PlannedRun,
    Sweep,
    detect_machine,
    load_sweep,
    plan,
    sampler_config,
    task_subset,
)
from .workloads import MachineInfo

if TYPE_CHECKING:
    from llm_powertrace_ds.run import Run

    from .events import EventRecorder
    from .planning import Estimate
    from .sampler import Sampler, SamplerConfig, SamplerSummary

log = logging.getLogger(__name__)

LAUNCH_READY_TIMEOUT_S = 900.0


@dataclass
class Outcome:
    """What happened to one run of the sweep.

    Attributes:
        index: position in the sweep's expansion.
        run_id: the run.
        status: ``published``, ``skipped`` (already done), ``failed``, ``busy`` (another process
            is measuring it), ``todo``/``done`` (dry run).
        seconds: wall time spent on the run here.
        error: the error of a failed run.
        info: a few columns for the printed table (model, method, batch, ...).
    """

    index: int
    run_id: str
    status: str
    seconds: float = 0.0
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {"index": self.index, "run_id": self.run_id, "status": self.status,
                "seconds": round(self.seconds, 2), **self.info, "error": self.error}


@dataclass
class Report:
    """The outcome of ``generate``: the runs of this task and the machine they were planned for."""

    sweep: str
    machine: MachineInfo
    total_runs: int
    outcomes: list[Outcome]
    estimate: Estimate | None = None  # of the runs still to do (dry runs)
    sampler: dict[str, Any] | None = None  # the sampler a real run would use (dry runs)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    def status_summary(self) -> str:
        """``"<n> <status>"`` per status, e.g. ``"1 failed, 8 published"``."""
        counts: dict[str, int] = {}
        for o in self.outcomes:
            counts[o.status] = counts.get(o.status, 0) + 1
        return ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))


# ---------------------------------------------------------------------------------------------
# Provenance helpers
# ---------------------------------------------------------------------------------------------

def host_hash() -> str:
    """Salted SHA-256 of the host name (16 hex digits); the name itself is never stored.

    The project's one salted hash (``llm_powertrace_ds.privacy``; salt ``$LLM_POWERTRACE_SALT``
    or its default), as for GPU UUIDs.
    """
    from llm_powertrace_ds.privacy import hash_identifier

    return hash_identifier(f"host:{socket.gethostname()}")


def package_version() -> str | None:
    try:
        return importlib.metadata.version("llm-powertrace")
    except importlib.metadata.PackageNotFoundError:
        return None


def _installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------------------------

def generate(sweep_path: str | Path, out: str | Path, *, task_index: int = 0, num_tasks: int = 1,
             dry_run: bool = False, fail_fast: bool = False, progress: bool = True,
             on_outcome: Callable[[Outcome], None] | None = None,
             progress_lines: bool = False, redo_salvaged: bool = False,
             assume_platform: str | None = None) -> Report:
    """Run a sweep file into a dataset folder (resume, task split, dry run).

    Args:
        sweep_path: the YAML sweep file.
        out: the dataset folder.
        task_index: this task's index (``--task-index``).
        num_tasks: number of tasks the sweep is split into (``--num-tasks``).
        dry_run: expand, validate and report done/todo without running anything.
        fail_fast: stop at the first failed run (raise :class:`RunFailed`).
        progress: show progress bars (runs, and steps within a run).
        on_outcome: called with each run's outcome as it is known.
        progress_lines: log one line per finished run with the sweep's ETA (for output that
            is not a terminal: CI, nohup, Slurm, where bars print nothing useful).
        redo_salvaged: re-measure runs that were salvaged (their attempts are kept).
        assume_platform: the platform a dry run plans for when no GPU is here (a campaign's).

    Returns:
        A :class:`Report`.

    Raises:
        SweepError: the sweep file has problems (every one listed, with its line).
        RunFailed: a run failed and ``fail_fast`` is set.
    """
    out = Path(out)
    layout.check_readme_is_ours(out)  # refused before any run, not after
    from .gpu_devices import pci_bus_order_env

    pci_bus_order_env()  # before torch sees CUDA: CUDA's device order = NVML's (issue 11)
    sweep = load_sweep(sweep_path, strict=False)  # plan() reports every problem at once
    if dry_run:  # plans on any machine: an assumed GPU machine when NVML is not usable here
        from .planning import planning_machine

        machine = planning_machine(sweep.sampler, platform=assume_platform)
    else:
        machine = detect_machine(sweep.sampler)
        from .node_context import multi_node

        node = multi_node()
        if node is not None:  # a multi-node launch: every node's devices serve each run
            import dataclasses

            machine = dataclasses.replace(machine, num_devices=machine.num_devices * node.nnodes)
    runs = plan(sweep, machine)
    warned: set[str] = set()
    for run in runs:  # an engine that is an optional extra: one line, before anything runs
        missing = sweep.spec.missing_extra(run.settings)
        if missing is not None and not dry_run:
            raise missing
        if missing is not None and str(missing) not in warned:  # a plan needs no engine
            warned.add(str(missing))
            log.warning("%s; planned anyway (only a real run needs it)", missing)
    mine = task_subset(runs, task_index, num_tasks)
    published = published_run_ids(out, sweep.workload)
    outcomes: list[Outcome] = []

    def emit(outcome: Outcome) -> None:
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)

    todo = []
    from .memory_estimate import memory_columns, too_big

    for run in mine:
        reason = too_big(run.settings, machine.platform) if machine.source == "nvml" else None
        if reason is not None:  # refused before the GPU is spent (issue 37)
            emit(Outcome(run.index, run.run_id, "too_big", error=reason,
                         info={**_info(run), **memory_columns(run.settings, machine.platform)}))
            continue
        if redo_salvaged and not dry_run:
            request_redo(out, run.run_id)
        if is_done(out, run.run_id, published) and not (
                dry_run and redo_salvaged
                and Staging(out, run.run_id).status() == RunStatus.SALVAGED):
            emit(Outcome(run.index, run.run_id, "done" if dry_run else "skipped",
                         info=_info(run)))
        elif dry_run:
            emit(Outcome(run.index, run.run_id, "todo",
                         info={**_info(run), **memory_columns(run.settings, machine.platform)}))
        else:
            todo.append(run)
    if todo:
        from .fetch import fetch_inputs
        from .signals import terminate_on_signals

        fetch_inputs([r.settings for r in todo])  # weights and text on this node, before any run
        _restore_leftover_gpu_settings(machine)
        with terminate_on_signals():  # SIGTERM/SIGHUP -> Terminated: every finally runs
            _run_all(sweep, machine, todo, out, fail_fast=fail_fast, progress=progress,
                     emit=emit, progress_lines=progress_lines)
    outcomes.sort(key=lambda o: o.index)
    report = Report(sweep=sweep.name, machine=machine, total_runs=len(runs), outcomes=outcomes)
    if dry_run:
        from .planning import estimate

        todo_ids = {o.run_id for o in outcomes if o.status == "todo"}
        report.estimate = estimate(sweep, [r for r in mine if r.run_id in todo_ids])
        report.sampler = {"source": machine.source,
                          "period_ms": sweep.sampler.get("period_ms", 100.0)}
    return report


def _restore_leftover_gpu_settings(machine: MachineInfo) -> None:
    """Restore GPU settings journalled by a process that died before restoring them."""
    if machine.source != "nvml":
        return
    from .sampler.errors import SamplerError
    from .sampler.journal import restore_orphans

    try:
        restore_orphans()
    except SamplerError as exc:
        log.error("could not restore GPU settings left by a dead process: %s", exc)


def _info(run: PlannedRun) -> dict[str, Any]:
    s = run.settings
    keys = ("model", "method", "batch_size", "seq_len", "precision", "gradient_checkpointing",
            "parallelism", "dp_size", "batching", "concurrency", "arrival_pattern", "output_len")
    return {k: s.get(k) for k in keys if k in s}


def _run_all(sweep: Sweep, machine: MachineInfo, todo: list[PlannedRun], out: Path, *,
             fail_fast: bool, progress: bool, emit: Callable[[Outcome], None],
             progress_lines: bool = False) -> None:
    from tqdm.auto import tqdm

    if any(sweep.launcher != "torchrun" and r.num_processes == 1
           and sweep.spec.in_process(r.settings) for r in todo):
        # A missing library (the `generate` extra) stops the sweep here with one clear error
        # instead of failing every run; launched runs import in their own processes.
        sweep.spec.prepare()
    bar = tqdm(total=len(todo), desc=f"{sweep.name}", unit="run", disable=not progress,
               dynamic_ncols=True)
    sweep_started = time.monotonic()
    try:
        for done, run in enumerate(todo, start=1):
            bar.set_postfix_str(run.run_id[-30:])
            started = time.monotonic()
            try:
                status, info = execute_run(sweep, machine, run, out, progress=progress)
                outcome = Outcome(run.index, run.run_id, status, time.monotonic() - started,
                                  info={**_info(run), **info})
            except RunError as exc:
                outcome = Outcome(run.index, run.run_id, "failed", time.monotonic() - started,
                                  error=str(exc), info=_info(run))
                log.warning("run %s failed: %s", run.run_id, exc)
            emit(outcome)
            bar.update(1)
            if progress_lines:
                log.info("%s", progress_line(sweep.name, done, len(todo), outcome,
                                             time.monotonic() - sweep_started))
            if outcome.status == "failed" and fail_fast:
                raise RunFailed(f"run {run.run_id} failed: {outcome.error}")
    finally:
        bar.close()


def _span(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600} h {s % 3600 // 60:02d} min" if s >= 3600 else (
        f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s")


def progress_line(sweep: str, done: int, total: int, outcome: Outcome, elapsed_s: float) -> str:
    """One line per finished run for logs that are not a terminal.

    ETA = (elapsed / done) × (total − done): the mean time of the runs so far times the runs
    left.

    Example:
        >>> progress_line("demo", 2, 5, Outcome(1, "ft-a", "published", 12.4), 30.0)
        'demo: run 2/5 ft-a published in 12 s; elapsed 30 s, ETA 45 s'
    """
    eta = elapsed_s / done * (total - done)
    return (f"{sweep}: run {done}/{total} {outcome.run_id} {outcome.status} in "
            f"{_span(outcome.seconds)}; elapsed {_span(elapsed_s)}, ETA {_span(eta)}")


class RunError(PowerTraceError, RuntimeError):
    """One run failed; recorded ``failed`` in its staging status."""


def execute_run(sweep: Sweep, machine: MachineInfo, run: PlannedRun, out: Path, *,
                progress: bool = True) -> tuple[str, dict[str, Any]]:
    """Measure and publish one run under its lock.

    Returns:
        ``(status, info)``: ``published`` with a few metrics, or ``busy`` (another process holds
        the run), or ``skipped`` (it was finished meanwhile).

    Raises:
        RunError: the run failed; its staging status says ``failed`` with the error.
    """
    from llm_powertrace_ds.shards import publish_run

    staging = Staging(out, run.run_id)
    try:
        with staging.measure_lock():
            if is_done(out, run.run_id, published_run_ids(out, sweep.workload)):
                return "skipped", {}
            return _execute_locked(sweep, machine, run, staging, publish_run, progress=progress)
    except LockTimeout:
        log.info("run %s is being measured by another process; skipped", run.run_id)
        return "busy", {}


def _execute_locked(sweep: Sweep, machine: MachineInfo, run: PlannedRun, staging: Staging,
                    publish: Callable[..., Any], *, progress: bool) -> tuple[str, dict[str, Any]]:
    """:func:`execute_run` once the run's measure lock is held."""
    _prepare_staging(staging)
    meta = _planned_meta(sweep, run)
    staging.write_meta({"columns": meta, "settings": run.settings, "sampler": sweep.sampler,
                        "sweep": str(sweep.path)})
    staging.set_status(RunStatus.RUNNING, started_utc=utc_now(), pid=os.getpid())
    try:
        # a workload that returns nothing reports no result columns
        result = _measure(sweep, machine, run, staging.dir, progress=progress) or {}
        record = _build_run(staging.dir, meta, result)
        _gpu_state_facts(record, run, machine)
        published = publish(staging.root, record)
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM/SIGHUP (signals.Terminated)
        mark_interrupted(staging.root, run.run_id)
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of a run is recorded, not fatal
        message = f"{type(exc).__name__}: {exc}"
        staging.set_status(RunStatus.FAILED, error=message,
                           traceback=traceback.format_exc(limit=20))
        raise RunError(message) from exc
    finally:
        _remove_checkpoints(sweep, run)
    m = published.metrics
    return "published", {"steps": result.get("steps"), "tokens_per_s": result.get("tokens_per_s"),
                         "energy_j": m.get("energy_j"), "mean_power_w": m.get("mean_power_w"),
                         "flags": published.flags}


def _prepare_staging(staging: Staging) -> None:
    """Keep what an earlier attempt left as ``attempt-N/``; start from a clean folder."""
    if staging.attempt_leftovers():
        reason = "failed" if staging.status() == RunStatus.FAILED else "killed"
        archive_attempt(staging.dir, reason=reason)


def mark_interrupted(root: str | Path, run_id: str) -> None:
    """Record a run stopped by Ctrl-C as ``interrupted`` (its spool stays for resume/salvage)."""
    with contextlib.suppress(OSError):
        Staging(root, run_id).set_status(RunStatus.INTERRUPTED, stopped_utc=utc_now())


def _planned_meta(sweep: Sweep, run: PlannedRun) -> dict[str, Any]:
    """Every column known before measuring: identity, model, axes, provenance of this host."""
    names = schema.RUN_LEVEL_FIELDS[sweep.workload]
    meta = {k: v for k, v in run.columns.items() if k in names}
    meta.update(package_version=package_version(), host_hash=host_hash(),
                schema_version=schema.SCHEMA_VERSION)
    for col in ("model_revision", "weights_dtype_on_disk"):  # pinned by fetch.fetch_inputs
        if col in names and run.settings.get(f"_{col}") is not None:
            meta[col] = run.settings[f"_{col}"]
    from .node_context import parallel_columns

    meta.update(parallel_columns())  # a slot of `generate --parallel-runs`
    if sweep.spec.in_process(run.settings):  # a served run's libraries are the server's
        for col, dist in (("torch_version", "torch"), ("transformers_version", "transformers"),
                          ("peft_version", "peft"), ("trl_version", "trl")):
            if col in names:
                meta[col] = _installed_version(dist)
    return meta


def _sampler_config(sweep: Sweep, machine: MachineInfo, nproc: int) -> SamplerConfig:
    """The run's sampler: the sweep's block with the machine's source and the run's GPUs."""
    if machine.source == "nvml":
        return sampler_config(sweep.sampler, source="nvml",
                              gpu_indices=_first_visible_gpus(nproc))
    return sampler_config(sweep.sampler, source=machine.source)


def _first_visible_gpus(n: int) -> tuple[int, ...]:
    """NVML indices of the first ``n`` GPUs the workload sees, resolved by UUID.

    ``generation.gpu_devices``: integer, ``GPU-``/``MIG-`` entries; never a fallback to 0..n-1.
    """
    from .gpu_devices import resolve_workload_gpus

    return tuple(g.nvml_index for g in resolve_workload_gpus(n))


def _idle(recorder: EventRecorder, seconds: float) -> None:
    if seconds <= 0:
        return
    recorder.mark("idle_begin")
    time.sleep(seconds)
    recorder.mark("idle_end")


def _checkpoint_dir(sweep: Sweep, run: PlannedRun) -> Path | None:
    return Path(sweep.checkpoint_dir) / run.run_id if sweep.checkpoint_dir else None


def _remove_checkpoints(sweep: Sweep, run: PlannedRun) -> None:
    path = _checkpoint_dir(sweep, run)
    if path is not None and path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _cap_indices(config: SamplerConfig, nproc: int) -> list[int]:
    if config.gpu_indices is None:  # never guess: caps on NVML 0..n-1 may hit another tenant
        raise RunError("the run's GPUs are unresolved; refusing to change GPU settings")
    return list(config.gpu_indices)


def _measure(sweep: Sweep, machine: MachineInfo, run: PlannedRun, sdir: Path, *,
             progress: bool) -> dict[str, Any]:
    """Sampler, idle padding, workload, idle padding; returns the workload's result."""
    from .node_context import multi_node

    node = multi_node()
    if node is not None:  # one launcher and one sampler per node (generation/multinode)
        return node.measure(sweep, machine, run, sdir, progress=progress)
    nproc = run.num_processes
    # a served run's GPUs are the engine's (num_gpus), not the runner's processes
    ngpu = nproc if sweep.spec.in_process(run.settings) else int(
        run.settings.get("num_gpus") or 1)
    config = _sampler_config(sweep, machine, ngpu)
    indices = _cap_indices(config, nproc) if machine.source == "nvml" else []
    with sweep.spec.device_settings(run.settings, indices):
        if sweep.launcher == "torchrun" or nproc > 1:
            return _measure_launched(sweep, config, machine, run, sdir, nproc,
                                     progress=progress)
        return _measure_inline(sweep, config, machine, run, sdir, progress=progress)


def _measure_inline(sweep: Sweep, config: SamplerConfig, machine: MachineInfo, run: PlannedRun,
                    sdir: Path, *, progress: bool) -> dict[str, Any]:
    from .events import EventRecorder
    from .sampler import Sampler
    from .workloads import RunContext

    spec = sweep.spec
    in_process = spec.in_process(run.settings)
    if in_process:
        spec.prepare()  # heavy imports happen before the sampler's t0
    rank_events = EventRecorder(sdir, rank=0)
    ctx = RunContext(run_id=run.run_id, staging_dir=sdir, mark=rank_events.mark,
                     checkpoint_dir=_checkpoint_dir(sweep, run), progress=progress,
                     device="cuda" if machine.cuda else "cpu")
    # Model build/placement, data, CUDA context, warm-up: before the first tick (issue 11).
    _release_device_memory(machine)  # what a previous (failed, e.g. OOM) run still held
    run_events: EventRecorder | None = None
    try:
        ctx.prepared = spec.setup(run.settings, ctx)
        if in_process:
            _verify_inline_gpus(config, machine)
        sampler = Sampler(config, sdir, pids=[os.getpid(), *getattr(ctx.prepared, "pids", [])])
        run_events = EventRecorder(sdir, rank=None)
        sampler.start()
    except BaseException:
        rank_events.close()
        if run_events is not None:
            run_events.close()
        _close_prepared(ctx)
        raise
    try:
        with stop_on_sampler_death(sampler):
            run_events.mark("prepare_end")
            _idle(run_events, sweep.idle_before_s)
            result = spec.run(run.settings, ctx)
            rank_events.flush()
            _idle(run_events, sweep.idle_after_s)
    finally:
        run_events.close()
        rank_events.close()
        summary = sampler.stop()
        _close_prepared(ctx)  # a failed run must not keep its model, engine or server alive
    _check_sampler(summary)
    return result


def _close_prepared(ctx: Any) -> None:
    """Release what the workload's ``setup`` built and ``run`` did not take over.

    Calls its ``close()`` when it has one (an engine's generation thread, a launched server),
    then drops it.
    """
    prepared, ctx.prepared = ctx.prepared, None
    close = getattr(prepared, "close", None)
    if close is not None:
        close()


def _measure_launched(sweep: Sweep, config: SamplerConfig, machine: MachineInfo, run: PlannedRun,
                      sdir: Path, nproc: int, *, progress: bool) -> dict[str, Any]:
    from .events import EventRecorder
    from .launch import Launched, LaunchSpec
    from .sampler import Sampler

    spec = LaunchSpec(workload=sweep.workload, run_id=run.run_id, settings=run.settings,
                      runner_pid=os.getpid(),
                      checkpoint_dir=str(_checkpoint_dir(sweep, run) or "") or None,
                      progress=progress, device="cuda" if machine.cuda else "cpu")
    launched = Launched(spec, sdir, nproc)
    launched.start()
    sampler = None
    try:
        pids = launched.wait_ready(LAUNCH_READY_TIMEOUT_S)
        _verify_launched_gpus(config, machine, launched)
        sampler = Sampler(config, sdir, pids=pids)
        run_events = EventRecorder(sdir, rank=None)
        sampler.start()
        try:
            with stop_on_sampler_death(sampler):  # a dead sampler stops the ranks (terminate)
                run_events.mark("prepare_end")  # the ranks built everything before "ready"
                _idle(run_events, sweep.idle_before_s)
                launched.go()
                result = launched.wait_done()
                _idle(run_events, sweep.idle_after_s)
        finally:
            run_events.close()
            summary = sampler.stop()
        launched.release()
    except BaseException:
        launched.terminate()
        raise
    _check_sampler(summary)
    return result


def _gpu_state_facts(record: Run, run: PlannedRun, machine: MachineInfo) -> None:
    """Persistence mode of the run's GPUs, and the ``power_limit_not_default`` flag.

    The flag is set when a GPU's limit at the start differed from its default although the run
    asked for no cap.
    """
    if machine.source != "nvml":
        return
    from .gpu_devices import persistence_modes

    modes = persistence_modes([d.gpu_index for d in record.devices])
    record.meta["gpu_persistence_mode"] = all(modes) if modes and None not in modes else None
    if run.settings.get("power_limit_setting_w") is None and any(
            d.power_limit_w is not None and d.default_power_limit_w is not None
            and abs(d.power_limit_w - d.default_power_limit_w) > 0.5 for d in record.devices):
        log.warning("run %s: a GPU's power limit differs from its default at the start",
                    run.run_id)
        record.add_flags("power_limit_not_default")


def _release_device_memory(machine: MachineInfo) -> None:
    """``gc.collect()`` then ``torch.cuda.empty_cache()`` before an inline run's setup.

    Every inline run then starts its idle padding from the same state: the previous run's model
    (or the frames of a run that failed, e.g. out of memory) no longer holds device memory.
    """
    import gc
    import sys

    gc.collect()
    torch = sys.modules.get("torch")
    if machine.cuda and torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _verify_inline_gpus(config: SamplerConfig, machine: MachineInfo) -> None:
    """Refuse an inline run whose CUDA device is not the GPU the sampler reads (by UUID)."""
    if machine.source != "nvml" or not machine.cuda:
        return
    from .gpu_devices import check_same_gpus, resolve_workload_gpus, torch_device_uuids

    gpus = resolve_workload_gpus(_nvml_gpu_count(config))
    check_same_gpus(torch_device_uuids(range(len(gpus))), gpus)


def _verify_launched_gpus(config: SamplerConfig, machine: MachineInfo, launched: Any) -> None:
    """Refuse a launched run whose ranks' CUDA devices are not the GPUs the sampler reads."""
    if machine.source != "nvml" or not machine.cuda:
        return
    from .gpu_devices import check_same_gpus, resolve_workload_gpus

    gpus = resolve_workload_gpus(_nvml_gpu_count(config))
    check_same_gpus(launched.device_uuids(), gpus)


def _nvml_gpu_count(config: SamplerConfig) -> int:
    """GPUs of an ``nvml`` run (:func:`_sampler_config` always lists them)."""
    if config.gpu_indices is None:
        raise RunError("the nvml sampler configuration lists no GPU indices")
    return len(config.gpu_indices)


SAMPLER_WATCH_S = 0.5
"""How often the runner checks that the sampler process is alive during an inline run."""


@contextlib.contextmanager
def stop_on_sampler_death(sampler: Sampler, poll_s: float = SAMPLER_WATCH_S) -> Iterator[None]:
    """Stop the (inline) workload within ``poll_s`` + one Python bytecode when the sampler dies.

    A watchdog thread polls ``sampler.alive()``; on death it interrupts the main thread
    (``_thread.interrupt_main``), and the interrupt is turned into a ``RunError`` here, so the
    run fails at once instead of running on unmeasured (issue 12, item 16). A real Ctrl-C
    still propagates as ``KeyboardInterrupt``. The interrupt reaches the main thread whatever
    SIGINT's disposition (:func:`_interruptible_main`).

    Raises:
        RunError: the sampler died while the block ran.
    """
    import _thread

    died = threading.Event()
    done = threading.Event()
    restore = _interruptible_main(died)

    def watch() -> None:
        while not done.wait(poll_s):
            if not sampler.alive() and not done.is_set():
                died.set()
                _thread.interrupt_main()
                return

    watcher = threading.Thread(target=watch, name="sampler-watchdog", daemon=True)
    watcher.start()
    try:
        yield
    except KeyboardInterrupt:
        if died.is_set():
            raise RunError("the sampler process died; the workload was stopped at once "
                           "(nothing after its last sample was measured)") from None
        raise
    finally:
        done.set()
        watcher.join()
        restore()


def _interruptible_main(died: threading.Event) -> Callable[[], None]:
    """Let ``_thread.interrupt_main`` reach the main thread; return what undoes it.

    ``interrupt_main`` only runs a Python-level SIGINT handler: in a process started with
    SIGINT ignored (``nohup``, ``cmd &`` in a script, a background CI job) it does nothing, and
    the workload would run on unmeasured. Then, for the block, a handler is installed that
    raises ``KeyboardInterrupt`` once ``died`` is set and otherwise keeps the disposition: a
    real SIGINT stays ignored (at ``SIG_DFL`` it interrupts, as Python's own handler does).
    Nothing changes when a Python handler is already there, or off the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGINT)
    if callable(previous) or previous is None:  # None: a handler not set from Python
        return lambda: None
    ignored = previous == signal.SIG_IGN

    def handler(signum: int, frame: Any) -> None:
        if died.is_set() or not ignored:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)

    return restore


def _check_sampler(summary: SamplerSummary) -> None:
    if not summary.complete:
        raise RunError(f"the sampler ended {summary.state}: {summary.message}")


def _build_run(sdir: Path, meta: dict[str, Any], result: dict[str, Any]) -> Run:
    """The ``Run`` of a measured attempt: spool + events + planned meta + workload results."""
    from .sampler import spool_to_run

    workload = meta["workload"]
    names = schema.RUN_LEVEL_FIELDS[workload]
    full = dict(meta)
    full.update({k: v for k, v in result.items() if k in names and v is not None})
    record = spool_to_run(sdir, full)
    from .node_context import multi_node

    node = multi_node()
    if node is not None:
        node.merge(record, sdir, full)
    if "_requests" in result:
        record.requests = result["_requests"]
    if result.get("_flags"):  # what the workload found of its own measurement
        record.add_flags(*result["_flags"])
    return record
