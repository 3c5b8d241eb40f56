"""Merge dataset folders: copy per-run files from other folders into one, refusing conflicts.

Nothing is copied unless every source agrees with the destination and with each other: a run id
whose files differ anywhere is a conflict (every one is listed). Files are copied through
:func:`llm_powertrace_ds.atomic.atomic_path`, and the destination's card is rebuilt once at the
end (``hooks.rebuild_card``). Works on unpacked folders (the output of ``generate``/``import``).
"""

from __future__ import annotations

import filecmp
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import layout
from .atomic import atomic_path
from .errors import InputError, ShardError
from .hooks import rebuild_card
from .shards import read_table


@dataclass
class MergePlan:
    """What ``merge`` will copy: ``(src file, relative path)`` pairs, and what it skips."""

    copies: list[tuple[Path, str]]
    identical: set[str]
    runs: dict[str, str]


def _run_files(root: Path) -> dict[str, dict[str, Path]]:
    """``{run_id: {relative path: file}}`` of a folder's per-run files under ``data/``."""
    data = layout.data_root(root)
    out: dict[str, dict[str, Path]] = {}
    if not data.is_dir():
        return out
    for path in sorted(data.rglob(f"*{layout.SHARD_SUFFIX}")):
        if path.name.startswith(".") or not path.is_file():
            continue
        if "-of-" in path.stem:
            raise ShardError(f"'{root}' is packed ({path.name}); merge works on unpacked "
                             "folders (the output of generate/import)")
        out.setdefault(path.stem, {})[path.relative_to(root).as_posix()] = path
    return out


def _same_content(a: Path, b: Path) -> bool:
    if filecmp.cmp(a, b, shallow=False):
        return True
    return read_table(a).equals(read_table(b))


def plan_merge(sources: list[Path], into: Path) -> MergePlan:
    """Check every source against ``into`` and each other; list the files to copy.

    Raises:
        InputError: a run id whose files differ between folders (every conflict listed), a
            missing source folder.
    """
    problems: list[str] = []
    target = _run_files(into) if into.exists() else {}
    chosen: dict[str, dict[str, Path]] = {}
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


def merge(sources: list[Path], into: Path) -> tuple[list[str], set[str]]:
    """Merge dataset folders into ``into`` (created if missing) and refresh its card.

    Returns:
        ``(run ids copied, run ids already present with identical files)``.
    """
    plan = plan_merge(sources, into)
    copied: set[str] = set()
    for src, rel in plan.copies:
        with atomic_path(into / rel) as tmp:
            shutil.copyfile(src, tmp)
        copied.add(Path(rel).stem)
    into.mkdir(parents=True, exist_ok=True)
    rebuild_card(into)
    return sorted(copied), plan.identical
