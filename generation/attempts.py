"""A run's killed attempts: archive one, salvage the best, ask for a redo.

The lifecycle and its statuses are :mod:`llm_powertrace_ds.staging`'s (see ``docs/design.md``,
"Run lifecycle"). This module adds what needs the sampler: waiting for the sampler of a killed
attempt to exit before its spool is moved, and turning an archived spool back into a ``Run``
(``salvage``, published with the ``incomplete`` flag).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_powertrace_ds.errors import LockTimeout, PowerTraceError, RunNotFound
from llm_powertrace_ds.staging import RunStatus, Staging, attempt_number

if TYPE_CHECKING:
    from llm_powertrace_ds.run import Run
    from llm_powertrace_ds.shards import PublishResult


class RunFailed(PowerTraceError, RuntimeError):
    """A run failed (``fail_fast``), or cannot be salvaged now; the message names the run."""


def archive_attempt(staging_dir: str | Path, *, reason: str = "killed",
                    wait_s: float = 10.0) -> Path:
    """Keep a killed attempt's measurements as ``attempt-N/`` (status ``incomplete``).

    Waits for the attempt's sampler to exit (it notices a dead workload within a tick), then
    :meth:`Staging.archive_attempt` moves the spool, events, requests and pid files, recording
    ``reason`` and the sampler's final state.

    Args:
        staging_dir: ``.staging/<run_id>/``.
        reason: why the attempt ended (``killed``, ``failed``, ...).
        wait_s: how long to wait for a still-running sampler.

    Returns:
        The ``attempt-N`` folder.

    Raises:
        SamplerError: the sampler is still running after ``wait_s``.
    """
    from .sampler.spool import wait_sampler_exit

    state = wait_sampler_exit(staging_dir, wait_s=wait_s)
    return Staging.at(staging_dir).archive_attempt(reason, sampler_state=state)


def salvage(root: str | Path, run_id: str) -> PublishResult:
    """Publish the best killed attempt of a run, flagged ``incomplete``.

    The attempt's results are reconstructed from its events where possible (``steps`` = rank
    0's completed steps; ``tokens`` from the planned batch and sequence length).

    Returns:
        The ``PublishResult``.

    Raises:
        RunNotFound: the run has no staging folder or no archived attempt.
        RunFailed: a generate process is measuring the run right now.
    """
    staging = Staging(root, run_id)
    if not staging.exists():
        raise RunNotFound(f"run {run_id!r} has no staging folder in {root}")
    # Never while a generate process measures this run: publishing removes its staging folder.
    try:
        with staging.measure_lock():
            return _salvage_locked(staging)
    except LockTimeout:
        raise RunFailed(f"run {run_id!r} is being measured by another process; salvage it "
                        "after that process ends") from None


def request_redo(root: str | Path, run_id: str) -> bool:
    """Mark a ``salvaged`` run ``redo`` so that the next measurement replaces it.

    Returns:
        Whether the run was salvaged (and is now marked).
    """
    staging = Staging(root, run_id)
    status = staging.status_record() or {}
    if status.get("status") != RunStatus.SALVAGED:
        return False
    staging.set_status(RunStatus.REDO, salvaged=status.get("attempt"))
    return True


def _attempt_samples(attempt: Path, meta: dict[str, Any]) -> int:
    from .sampler import spool_to_run

    try:
        record = spool_to_run(attempt, dict(meta), incomplete=True)
    except (PowerTraceError, OSError, ValueError):
        return -1
    return sum(len(d.t_ms) for d in record.devices)


def _salvage_locked(staging: Staging) -> PublishResult:
    from llm_powertrace_ds.shards import publish_run

    from .sampler import spool_to_run

    run_id, sdir = staging.run_id, staging.dir
    if staging.status() == RunStatus.RUNNING and (sdir / "spool").is_dir():
        # We hold the run's measure lock, so the process that wrote "running" is gone
        # (SIGKILL, power loss): its spool is a killed attempt.
        archive_attempt(sdir, reason="killed", wait_s=2.0)
        staging.set_status(RunStatus.KILLED)
    attempts = staging.attempts()
    if not attempts and (sdir / "spool").is_dir():
        attempts = [archive_attempt(sdir, reason=staging.status() or "killed", wait_s=2.0)]
    if not attempts:
        raise RunNotFound(f"run {run_id!r} has no killed attempt to salvage in {sdir}")
    saved = staging.meta()
    if saved is None:
        raise RunNotFound(f"run {run_id!r} has no meta.json in {sdir}")
    columns = dict(saved["columns"])
    # The attempt with the most samples wins (ties: the newest); no attempt is ever deleted.
    best = max(attempts, key=lambda a: (_attempt_samples(a, columns), attempt_number(a) or 0))
    record = spool_to_run(best, dict(columns), incomplete=True)
    record.meta.update(results_in_window(record, saved.get("settings", {})))
    result = publish_run(staging.root, record)
    staging.set_status(RunStatus.SALVAGED, attempt=best.name)
    return result


def results_in_window(record: Run, settings: dict[str, Any]) -> dict[str, Any]:
    """``steps`` and ``tokens`` of a salvaged attempt, counted inside its sampled window only.

    A step counts when its rank-0 (or run-level) ``step_end`` falls no later than one sample
    period after the last sample of every device: work the sampler did not see has no measured
    energy, so counting it would make ``energy_per_token_j`` too low.
    ``tokens`` = ``steps x batch_size x grad_accum x dp_size x seq_len``.
    """
    ends = [len(d.t_ms) and int(d.t_ms[-1]) for d in record.devices]
    period_ms = float(record.meta.get("sample_period_ms") or 0.0)
    last_ms = (min(ends) if ends else 0) + period_ms  # the next tick would have covered it
    steps = sum(1 for e in record.events if e.kind == "step_end" and e.rank in (0, None)
                and e.t_ms <= last_ms)
    if steps == 0:
        return {}
    out: dict[str, Any] = {"steps": steps}
    try:
        out["tokens"] = (steps * int(settings["batch_size"]) * int(settings["grad_accum"])
                         * int(settings.get("dp_size") or 1) * int(settings["seq_len"]))
    except (KeyError, TypeError, ValueError):
        pass
    return out
