"""Publish a run through the staging lifecycle, the card's front matter, folder repair."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from filelock import FileLock, Timeout

from .. import audit, checks, layout, schema, work_dirs
from ..atomic import write_text_atomic
from ..errors import InputError, LockTimeout, ShardError
from ..run import Run
from ..staging import Staging
from . import segments
from .encode import PACKED_RE, requests_table, runs_table, trace_table
from .write import _lock, _write_tmp, folder_lock, write_table_atomic, write_tables_all_or_nothing

# ---------------------------------------------------------------------------------------------
# Publishing
# ---------------------------------------------------------------------------------------------

@dataclass
class PublishResult:
    """What ``publish_run`` wrote.

    Attributes:
        run_id: the run.
        files: paths written (relative to the dataset root).
        flags: the run's quality flags after validation.
        metrics: the runs-row metrics.
        replaced: stale files of an earlier version of the run that were removed.
    """

    run_id: str
    files: list[str]
    flags: list[str]
    metrics: dict[str, Any]
    replaced: list[str] = field(default_factory=list)


def set_status(root: Path, run_id: str, status: str, **extra: Any) -> None:
    """Write ``.staging/<run_id>/status.json`` atomically (:meth:`staging.Staging.set_status`)."""
    Staging(root, run_id).set_status(status, **extra)


def existing_run_files(root: Path, run_id: str) -> list[Path]:
    """Every per-run file of ``run_id`` under ``data/`` (any config, platform, family)."""
    name = f"{run_id}{layout.SHARD_SUFFIX}"
    data = layout.data_root(root)
    if not data.is_dir():
        return []
    # data/<config>/<platform>/[<family>/]<run_id>.arrow: O(folders), never a walk of every file
    found = [*data.glob(f"*/*/{name}"), *data.glob(f"*/*/*/{name}")]
    return sorted(p for p in found if p.is_file())


@dataclass
class PreparedRun:
    """A validated run's files, ready to be committed into ``data/``.

    Attributes:
        run_id: the run.
        flags: its quality flags after validation.
        metrics: its runs-row metrics.
        files: destination -> the table, or a staged file holding it (:func:`stage_run`), in
            writing order (the trace file last).
    """

    run_id: str
    flags: list[str]
    metrics: dict[str, Any]
    files: dict[Path, pa.Table | Path]


def publish_run(root: str | Path, run: Run, *, refresh_card: bool = True) -> PublishResult:
    """Validate a complete run, compute its metrics and publish its files atomically.

    Writes ``data/<workload>/<platform>/<family>/<run_id>.arrow``,
    ``data/<workload>_runs/<platform>/<run_id>.arrow`` and, for inference runs with a request
    log, ``data/inference_requests/<platform>/<run_id>.arrow``. Publishing the same run again
    replaces it (no duplicate rows, even when its platform or family changed). Finally the YAML
    ``configs:`` block of ``README.md`` is brought up to date (:func:`write_configs_block`), so
    the folder always loads; the full card is the caller's, once per command (``cards``).

    Args:
        root: the dataset folder.
        run: a complete run.
        refresh_card: update the card's YAML ``configs:`` block afterwards (cheap).

    Returns:
        A ``PublishResult``.

    Raises:
        InputError: the run has error-level quality problems or bad metadata.
    """
    return commit_run(root, prepare_run(root, run), refresh_card=refresh_card)


def prepare_run(root: str | Path, run: Run) -> PreparedRun:
    """Validate a run, compute its metrics and build its tables (nothing is written).

    Raises:
        InputError: the run has error-level quality problems or bad metadata.
        ShardError: a destination folder holds packed shards.
    """
    layout.check_readme_is_ours(root)  # before anything is written, not after
    from .. import metrics as metrics_mod
    from ..validate import validate_run

    root = Path(root)
    schema.check_split_name(run.platform)
    checks.check_publishable(run)
    if run.workload not in schema.WORKLOADS:
        raise InputError(f"workload {run.workload!r} is not one of {schema.WORKLOADS}",
                         field="workload")
    report = validate_run(run)
    run.add_flags(*report.flags)
    if report.errors:
        raise InputError(f"run {run.run_id} failed validation: {'; '.join(report.messages)}",
                         field="quality_flags")
    run_metrics = metrics_mod.compute_run_metrics(run)
    if "aggregate_series" in run.flags:  # one total of many devices: no device is known
        for name in metrics_mod.PER_DEVICE_NAMES:
            run_metrics[name] = None
        run_metrics["metric_notes"] = [*(run_metrics.get("metric_notes") or []),
                                       *(f"{name}: aggregate_series (a total of "
                                         f"{run.meta.get('num_gpus')} devices, not a device)"
                                         for name in metrics_mod.PER_DEVICE_NAMES)]
    # Written in this order: the trace file last, so that "its trace file exists" (the
    # definition of a done run, staging.is_done) implies that its runs row and requests exist too.
    tables: dict[Path, pa.Table | Path] = {
        layout.runs_path(root, run.workload, run.platform, run.run_id):
        runs_table(run, run_metrics)}
    if run.workload == "inference" and run.requests:
        tables[layout.requests_path(root, run.platform, run.run_id)] = requests_table(run)
    tables[layout.trace_path(root, run.workload, run.platform, run.model_family, run.run_id)] = \
        trace_table(run)

    for path in tables:
        if path.parent.is_dir() and any(PACKED_RE.search(p.name) for p in path.parent.iterdir()):
            raise ShardError(f"'{path.parent.relative_to(root)}' holds packed shards: a packed "
                             "folder is for reading and publishing; add runs to the unpacked "
                             "folder and pack again")
    return PreparedRun(run_id=run.run_id, flags=run.flags, metrics=run_metrics, files=tables)


def stage_run(root: str | Path, prepared: PreparedRun) -> PreparedRun:
    """Write a prepared run's tables into ``.staging/<run_id>/publish/`` (hidden from globs).

    Returns the same run with files instead of tables, so a batch of runs can be written one at
    a time in bounded memory and committed together later (:func:`commit_run` renames them).
    """
    sdir = layout.staging_dir(root, prepared.run_id) / "publish"
    staged: dict[Path, pa.Table | Path] = {}
    for i, (dest, table) in enumerate(prepared.files.items()):
        if isinstance(table, Path):
            staged[dest] = table
            continue
        path = sdir / f"{i}{layout.SHARD_SUFFIX}"
        write_table_atomic(path, table)
        staged[dest] = path
    return PreparedRun(run_id=prepared.run_id, flags=prepared.flags, metrics=prepared.metrics,
                       files=staged)


def discard_staged(root: str | Path, prepared: PreparedRun) -> None:
    """Remove what :func:`stage_run` wrote for a run that will not be committed."""
    sdir = layout.staging_dir(root, prepared.run_id) / "publish"
    if sdir.exists():
        shutil.rmtree(sdir)
    if sdir.parent.is_dir() and not any(sdir.parent.iterdir()):
        sdir.parent.rmdir()  # the run's staging folder existed only for this


def commit_run(root: str | Path, prepared: PreparedRun, *,
               refresh_card: bool = True) -> PublishResult:
    """Put a prepared (or staged) run's files into ``data/`` under its lock, atomically per file.

    Tables are written to a temporary name and renamed; staged files are renamed. Stale files of
    an earlier version of the run are removed, then the staging folder.
    """
    root = Path(root)
    run_id = prepared.run_id
    tables = prepared.files
    written: list[Path] = []  # temporary files of tables written here (none left behind)
    try:
        with _lock(root, run_id):
            set_status(root, run_id, "complete")
            # every table to a temporary name first, outside the segments lock, which is
            # then held only for the renames and a segment rewrite (segments' module text)
            files: dict[Path, pa.Table | Path] = {}
            for dest, table in tables.items():
                if isinstance(table, Path):
                    files[dest] = table
                else:
                    try:
                        tmp = _write_tmp(dest, table)
                    except OSError as exc:
                        raise ShardError(f"cannot write '{dest}': {exc.strerror or exc}; nothing "
                                         "of the run was published") from None
                    written.append(tmp)
                    files[dest] = tmp
            with segments.segments_lock(root):
                rewrites, emptied = segments.drop_runs(root, {run_id})
                staged_segments = {seg: segments.stage_segment(seg, t)
                                   for seg, t in rewrites.items()}
                written.extend(staged_segments.values())
                # the runs row first, then the segment without the old row: a kill between
                # leaves the run twice, and the loose (newer) row wins (resolve_duplicates)
                runs_first = {d: f for d, f in files.items() if _is_runs_file(root, d)}
                ordered: dict[Path, pa.Table | Path] = {**runs_first, **staged_segments,
                                                        **{d: f for d, f in files.items()
                                                           if d not in runs_first}}
                write_tables_all_or_nothing(ordered)
                stale = [p for p in existing_run_files(root, run_id) if p not in tables]
                for p in [*stale, *emptied]:
                    p.unlink()
            set_status(root, run_id, "published")
            Staging(root, run_id).remove_after_publish()
    except Timeout as exc:
        raise LockTimeout(f"run {run_id} is locked by another process") from exc
    finally:
        for tmp in written:
            tmp.unlink(missing_ok=True)
    if refresh_card:
        # The block carries a fingerprint of the files (datasets' cache key, issue 12), so it
        # changes with every publish; writing it stats the shards (no shard is read). Batch
        # publishers (import) pass refresh_card=False and rebuild once per command.
        write_configs_block(root)
    return PublishResult(
        run_id=run_id,
        files=[p.relative_to(root).as_posix() for p in tables],
        flags=prepared.flags,
        metrics=prepared.metrics,
        replaced=[p.relative_to(root).as_posix() for p in stale],
    )


def _is_runs_file(root: Path, path: Path) -> bool:
    """Whether ``path`` lies in a runs folder (``data/<workload>_runs/<platform>/``)."""
    rel = path.relative_to(layout.data_root(root)).parts
    return bool(rel) and rel[0] in schema.RUNS_CONFIGS


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's safe loader and dumper where PyYAML has them (the same documents, ~10x faster)."""

CARD_PENDING = ("This folder's full dataset card (summaries, figures) has not been built yet: "
                "run `llm-powertrace card DIR`. The YAML `configs:` block above is current, so "
                "the folder loads with `datasets.load_dataset`.")


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """A card's YAML front matter (a mapping) and its Markdown body."""
    if text.startswith("---\n"):
        # from 3: an empty block ("---\n---\n") closes on the opening line's own newline
        end = text.find("\n---\n", 3)
        if end != -1:
            meta = yaml.load(text[4:end], Loader=_YAML_LOADER) or {}
            if isinstance(meta, dict):
                return meta, text[end + 5:]
    return {}, text


def write_configs_block(root: str | Path) -> Path:
    """Keep ``README.md``'s YAML ``configs:`` list current; leave the rest of the card as it is.

    This is what publishing a run does to the card: O(folders), no trace is read; a runs folder
    holding ``segments.MIN_LOOSE`` one-run files first has them merged into a segment
    (:func:`~llm_powertrace_ds.shards.segments.compact`). The full card
    (summaries, figures) is rebuilt by the layer above, once per command (``cards``). Written
    under the folder lock, atomically.

    Returns:
        The path of ``README.md``.
    """
    root = Path(root)
    path = root / "README.md"
    with folder_lock(root):
        layout.check_readme_is_ours(root)  # never replace someone else's README
        segments.compact(root)  # loose runs files into segments (bytes per run, issue 40)
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        meta, body = split_front_matter(old)
        meta["configs"] = layout.configs_metadata(root)
        if not body.strip():
            body = "\n" + CARD_PENDING + "\n"
        text = "---\n" + yaml.dump(meta, Dumper=_YAML_DUMPER, sort_keys=False,
                                    allow_unicode=True, width=1000).rstrip() + "\n---\n" + body
        if text != old:
            write_text_atomic(path, text)
    return path


# ---------------------------------------------------------------------------------------------
# Repair
# ---------------------------------------------------------------------------------------------

def repair_folder(root: str | Path) -> list[str]:
    """Remove what an interrupted publish left behind; return what was removed (relative paths).

    Removed: hidden temporary files of writers that are gone, the hidden work folders of a
    killed ``pack`` or ``explore`` inside the folder (:mod:`llm_powertrace_ds.work_dirs`), a
    run's second runs row (a merge into a segment or a republish stopped before its removals;
    ``segments.resolve_duplicates`` keeps one), and the runs row and requests of a run whose
    trace file is missing (a publish from before all-or-nothing writes, or one stopped between
    two renames) unless that run is being published now (its lock is held).
    A trace without a runs row (a publish never leaves one: the trace is renamed last) keeps
    its measurement: the run is read back from its trace file and published again, which
    rebuilds its runs row (metrics computed from the stored trace); a run that no longer
    passes publication is named with the reason and left as it is. Packed shards are never
    rewritten (``validate`` says to repair the folder they were packed from and pack again).

    Returns:
        One line per change: a removed file's relative path, or ``'<path>: <what>'``.
    """
    root = Path(root)
    removed = audit.remove_leftovers(root)
    removed += [p.relative_to(root).as_posix()
                for p in work_dirs.remove_stale_work_dirs_under(root)]
    with segments.segments_lock(root):
        for folder in segments.runs_folders(root):
            removed.extend(p.relative_to(root).as_posix() + (f": {what}" if what else "")
                           for p, what in segments.resolve_duplicates(folder))
    found = audit.audit_folder(root)
    for run_id in found.orphan_rows:
        try:
            with FileLock(str(layout.lock_path(root, run_id)), timeout=0):
                data = layout.data_root(root)
                if any(p.relative_to(data).parts[0] in schema.TRACE_CONFIGS
                       for p in existing_run_files(root, run_id)):
                    continue
                with segments.segments_lock(root):
                    rewrites, emptied = segments.drop_runs(root, {run_id})
                    for seg, table in rewrites.items():
                        segments.write_segment(seg, table)
                    for p in [*existing_run_files(root, run_id), *emptied]:
                        p.unlink()
                        removed.append(p.relative_to(root).as_posix())
                    removed.extend(f"{p.relative_to(root).as_posix()}: the row of run {run_id}"
                                   for p in rewrites)
        except Timeout:
            continue
    removed.extend(_rebuild_runs_rows(root, [r for r in found.orphan_traces
                                             if r not in found.packed_runs]))
    if removed and layout.readme_is_ours(root) and (root / "README.md").exists():
        write_configs_block(root)  # the files changed: datasets' cache key with them
    return removed


def _rebuild_runs_rows(root: Path, run_ids: list[str]) -> list[str]:
    """Publish again each run whose trace file has no runs row (see :func:`repair_folder`)."""
    from .read import read_run

    notes: list[str] = []
    for run_id in run_ids:
        try:
            with FileLock(str(layout.lock_path(root, run_id)), timeout=0):
                pass  # a publish in progress holds it: leave that run to its writer
        except Timeout:
            continue
        try:
            run = read_run(root, run_id)
            result = publish_run(root, run, refresh_card=False)
        except (InputError, ShardError, LockTimeout) as exc:
            notes.append(f"run {run_id}: its runs row cannot be rebuilt from its trace file "
                         f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
            continue
        rows = [f for f in result.files if _is_runs_file(root, root / f)]
        notes.append(f"{rows[0] if rows else 'run ' + run_id}: the runs row of run {run_id} "
                     "rebuilt from its trace file")
    return notes
