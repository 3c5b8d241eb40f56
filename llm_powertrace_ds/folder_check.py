"""Validate a whole dataset folder: the folder audit, then every published run.

The one loop behind ``llm-powertrace validate DIR`` and ``upload.py``'s pre-upload check: the
folder is audited first (stray files, symlinks, a trace without its runs row or the reverse),
then each published run is read back (one trace file in memory at a time) and validated again.
A run whose runs row has no trace file is reported by the audit only. ``pack`` (the command)
copies only a folder this check accepts (:func:`pack_valid`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import schema, validate
from .audit import audit_folder
from .errors import ShardError
from .shards import PackResult, iter_runs, pack
from .staging import unpublished_runs


@dataclass(frozen=True)
class RunCheck:
    """One published run, validated again.

    Attributes:
        run_id: the run.
        platform: its split.
        flags: its stored flags and the ones validation finds now, in vocabulary order.
        errors: the error-level ones among ``flags`` (the run is not publishable).
        messages: what validation says about each problem.
    """

    run_id: str
    platform: str
    flags: list[str]
    errors: list[str]
    messages: list[str]


@dataclass
class FolderReport:
    """What :func:`validate_folder` found.

    Attributes:
        problems: folder-level problems, one line each (from the audit).
        runs: every published run, validated.
        proxy_runs: run ids whose trace rows say ``cpu_proxy``.
        unpublished: run ids with a staging folder that does not say they are done.
    """

    problems: list[str] = field(default_factory=list)
    runs: list[RunCheck] = field(default_factory=list)
    proxy_runs: list[str] = field(default_factory=list)
    unpublished: list[str] = field(default_factory=list)

    @property
    def failed_runs(self) -> list[RunCheck]:
        """The runs with error-level flags."""
        return [r for r in self.runs if r.errors]

    @property
    def ok(self) -> bool:
        """No folder problem and no run with an error."""
        return not self.problems and not self.failed_runs


def validate_folder(root: str | Path) -> FolderReport:
    """Audit a dataset folder and validate every published run in it.

    Args:
        root: the dataset folder.

    Returns:
        A :class:`FolderReport` (nothing is raised for problems found; they are reported).
    """
    root = Path(root)
    folder = audit_folder(root)
    report = FolderReport(problems=folder.messages(), proxy_runs=list(folder.proxy_runs),
                          unpublished=unpublished_runs(root))
    report.problems.extend(_published_value_problems(root))
    orphans = set(folder.orphan_rows)
    # one walk of data/, one trace file in memory at a time; the request logs are checked
    # by _published_value_problems, a batch at a time, never attached to their runs
    for run in iter_runs(root, requests=False):
        if run.run_id in orphans:
            continue
        rep = validate.validate_run(run)
        flags = sorted(set(rep.flags) | set(run.flags), key=schema.QUALITY_FLAGS.index)
        report.runs.append(RunCheck(run.run_id, run.platform, flags,
                                    [f for f in flags if f in schema.ERROR_FLAGS],
                                    list(rep.messages)))
    return report


def _published_value_problems(root: Path) -> list[str]:
    """The number gate and the text gate on what the runs and requests tables already hold.

    A folder written by an older version, by hand or by someone else is checked as the writer
    would have checked it: every scalar finite and in range, every request id publishable,
    request times in order and no request id twice in a run (:mod:`.request_checks`, in memory
    independent of the number of requests).
    """
    from . import numbers
    from .request_checks import request_problems
    from .shards import iter_batches

    out: list[str] = []
    for config in schema.RUNS_CONFIGS:
        problems: list[str] = []
        try:
            for batch in iter_batches(root, config):  # one record batch of rows at a time
                problems.extend(numbers.row_problems(config, batch.to_pylist()))
        except FileNotFoundError:
            continue
        out.extend(problems)
    try:
        out.extend(request_problems(root))
    except FileNotFoundError:
        pass
    return out


def refuse_invalid(root: str | Path, action: str) -> None:
    """Raise ``ShardError`` when :func:`validate_folder` rejects ``root``.

    Args:
        root: the dataset folder.
        action: what is refused, for the message (``"packed"``).

    Raises:
        ShardError: one line naming the first problems (folder problems, then runs with
            error-level flags) and ``validate --repair``.
    """
    report = validate_folder(root)
    if report.ok:
        return
    problems = report.problems + [f"run {r.run_id}: {', '.join(r.errors)}"
                                  for r in report.failed_runs]
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    raise ShardError(f"'{root}' fails validation, so it is not {action}: "
                     f"{'; '.join(problems[:3])}{more}; `llm-powertrace validate {root} --repair` "
                     "repairs what it can and lists the rest")


def pack_valid(src: str | Path, dst: str | Path, *, max_shard_bytes: int) -> PackResult:
    """``pack`` of a folder that passes :func:`validate_folder`.

    What ``validate`` rejects is never copied into a folder made for publishing.

    Raises:
        ShardError: the folder fails validation (nothing is written), or ``pack``'s own errors.
    """
    refuse_invalid(src, "packed")
    return pack(src, dst, max_shard_bytes=max_shard_bytes)
