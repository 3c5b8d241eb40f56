"""Merge dataset folders: copy per-run files from other folders into one, refusing conflicts.

Nothing is copied unless every source agrees with the destination and with each other: a run id
whose files differ anywhere is a conflict (every one is listed). A symbolic link under a
source's ``data/`` is refused (``validate`` refuses it too: its target lies outside the folder).

The writer discipline of :func:`llm_powertrace_ds.shards.publish_run`: merge plans and copies
under the destination's folder lock (two merges into one folder run one after the other), and
publishes each run all-or-nothing under that run's lock — every file copied to a hidden
temporary name first, then renamed in publish order (runs row and requests, the trace last), so
a kill in between leaves no trace without its row. The destination's card is rebuilt once at the
end (``hooks.rebuild_card``). Works on unpacked folders (the output of ``generate``/``import``).
"""

from __future__ import annotations

import filecmp
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from filelock import Timeout

from . import layout, schema
from .errors import InputError, LockTimeout, ShardError
from .hooks import rebuild_card
from .shards import batch_run_ids, folder_lock, read_table, write_table_atomic
from .shards.write import _lock, write_tables_all_or_nothing


@dataclass
class MergePlan:
    """What ``merge`` will copy: ``(src file, relative path)`` pairs, and what it skips."""

    copies: list[tuple[Path | _Row, str]]
    identical: set[str]
    runs: dict[str, str]


def _run_files(root: Path) -> dict[str, dict[str, Path | _Row]]:
    """``{run_id: {relative path: file}}`` of a folder's per-run files under ``data/``.

    A run's row in a runs-table segment stands for the one-run file it was merged from.
    """
    data = layout.data_root(root)
    out: dict[str, dict[str, Path | _Row]] = {}
    if not data.is_dir():
        return out
    for path in sorted(data.rglob(f"*{layout.SHARD_SUFFIX}")):
        if path.name.startswith("."):
            continue
        linked = next((p for p in (path, *path.parents) if p.is_symlink()), None)
        if linked is not None and linked.is_relative_to(root):
            raise ShardError(f"'{linked}' is a symbolic link; merge copies regular files only "
                             "(its target lies outside the folder)")
        if not path.is_file():
            continue
        if "-of-" in path.stem:
            raise ShardError(f"'{root}' is packed ({path.name}); merge works on unpacked "
                             "folders (the output of generate/import)")
        if layout.is_segment(path.name):  # many runs' rows: each stands for its one-run file
            for run_id in dict.fromkeys(r for ids in batch_run_ids(path) for r in ids):
                rel = path.with_name(f"{run_id}{layout.SHARD_SUFFIX}").relative_to(root)
                out.setdefault(run_id, {})[rel.as_posix()] = _Row(path, run_id)
            continue
        out.setdefault(path.stem, {})[path.relative_to(root).as_posix()] = path
    return out


@dataclass(frozen=True)
class _Row:
    """A run's row in a runs-table segment (``layout.is_segment``), copied as its own file."""

    segment: Path
    run_id: str

    def table(self) -> pa.Table:
        table = read_table(self.segment)
        return table.filter(pc.equal(table.column("run_id"), self.run_id))


def _table(src: Path | _Row) -> pa.Table:
    return src.table() if isinstance(src, _Row) else read_table(src)


def _same_content(a: Path | _Row, b: Path | _Row) -> bool:
    if isinstance(a, Path) and isinstance(b, Path) and filecmp.cmp(a, b, shallow=False):
        return True
    return _table(a).equals(_table(b))


def plan_merge(sources: list[Path], into: Path) -> MergePlan:
    """Check every source against ``into`` and each other; list the files to copy.

    Raises:
        InputError: a run id whose files differ between folders (every conflict listed), a
            missing source folder.
    """
    problems: list[str] = []
    target = _run_files(into) if into.exists() else {}
    chosen: dict[str, dict[str, Path | _Row]] = {}
    origin: dict[str, str] = {run_id: str(into) for run_id in target}
    identical: set[str] = set()
    for src in sources:
        if not src.is_dir():
            problems.append(f"'{src}' is not a dataset folder")
            continue
        if src.resolve() == into.resolve():
            problems.append(f"'{src}' is the destination itself")
            continue
        for run_id, files in _run_files(src).items():
            have = target.get(run_id) or chosen.get(run_id)
            if have is None:
                chosen[run_id] = files
                origin[run_id] = str(src)
                continue
            if set(have) != set(files) or not all(_same_content(have[k], files[k]) for k in files):
                problems.append(f"run {run_id}: '{src}' and '{origin[run_id]}' hold different "
                                "data for this run id")
            else:
                identical.add(run_id)
    if problems:
        raise InputError("merge found conflicts; nothing was copied:\n  "
                         + "\n  ".join(problems))
    copies = [(path, rel) for files in chosen.values() for rel, path in files.items()]
    return MergePlan(copies=copies, identical=identical, runs=origin)


def _publish_order(rel: str) -> int:
    """Runs rows and requests before traces (the trace file last, as ``publish_run`` does)."""
    config = rel.split("/")[1] if rel.count("/") >= 2 else ""
    return 2 if schema.base_config(config) in schema.TRACE_CONFIGS else 0 \
        if config in schema.RUNS_CONFIGS else 1


def _copy_run(into: Path, run_id: str, files: list[tuple[Path | _Row, str]]) -> None:
    """Publish one run's files all-or-nothing under its lock (temporary copies, then renames).

    A row of a source's segment is written as the run's own runs file (the destination's next
    card refresh merges it into a segment of its own).
    """
    staged: dict[Path, Path] = {}
    try:
        for src, rel in sorted(files, key=lambda f: _publish_order(f[1])):
            final = into / rel
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = final.with_name(f".{final.name}.merge-{os.getpid()}.tmp")
            if isinstance(src, _Row):
                write_table_atomic(tmp, src.table())
            else:
                shutil.copyfile(src, tmp)
            staged[final] = tmp
        with _lock(into, run_id):
            present = [p for p in staged if p.exists()]
            if present and not all(_same_content(p, staged[p]) for p in present):
                raise InputError(f"run {run_id}: another writer published different data for "
                                 "this run id meanwhile; nothing of it was copied")
            write_tables_all_or_nothing(dict(staged))
    except Timeout as exc:
        raise LockTimeout(f"run {run_id} is locked by another process") from exc
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)


def merge(sources: list[Path], into: Path) -> tuple[list[str], set[str]]:
    """Merge dataset folders into ``into`` (created if missing) and refresh its card.

    Returns:
        ``(run ids copied, run ids already present with identical files)``.
    """
    layout.check_readme_is_ours(into)
    into.mkdir(parents=True, exist_ok=True)
    with folder_lock(into):
        plan = plan_merge(sources, into)
        by_run: dict[str, list[tuple[Path | _Row, str]]] = {}
        for src, rel in plan.copies:
            by_run.setdefault(Path(rel).stem, []).append((src, rel))
        for run_id, files in by_run.items():
            _copy_run(into, run_id, files)
    rebuild_card(into)
    return sorted(by_run), plan.identical
