"""Hidden work folders of whole-folder writers (``pack``, ``explore``), and their leftovers.

A writer that builds a folder ``T`` writes it into a hidden sibling first and renames it into
place at the end, so a failure leaves nothing visible. The sibling's name carries the writer's
pid — ``.T.<kind>-<pid>-<random>`` — the same mechanism as ``upload.py``'s work folders and the
``.<name>.<pid>.tmp`` files of :mod:`llm_powertrace_ds.audit`: a killed writer (``kill -9``
runs no ``finally``) leaves its sibling behind, and the next writer into the same place, or
``validate --repair`` on a dataset folder that holds it, recognises it by its dead pid and
removes it. A sibling whose pid is alive belongs to a writer running now and is never touched.

Kinds:

* ``packing`` — ``pack``'s copy being written;
* ``tmp`` — ``explore``'s site being written;
* ``old`` — the previous site, moved aside for the instant of the swap. If its writer died
  there, the target is missing and the old site is put back (nothing is lost); if the new site
  did arrive, the old one is removed.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from . import layout
from .procs import pid_alive

KINDS = ("packing", "tmp", "old")
"""Kinds of work folder (see the module docstring)."""
_WORK_RE = re.compile(r"^\.(?P<target>.+)\.(?P<kind>packing|tmp|old)-(?P<pid>\d+)(?:-.*)?$")


def make_work_dir(target: Path, kind: str) -> Path:
    """Create the hidden work folder ``.<target>.<kind>-<pid>-<random>`` next to ``target``.

    Args:
        target: the folder the writer builds (its parent must exist).
        kind: ``packing`` or ``tmp``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown work folder kind {kind!r}; known: {', '.join(KINDS)}")
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.{kind}-{os.getpid()}-",
                                 dir=target.parent))


def aside_name(target: Path) -> Path:
    """Where a writer moves the previous ``target`` for the instant of its swap."""
    return target.parent / f".{target.name}.old-{os.getpid()}"


def _dead_work_dirs(parent: Path, target_name: str | None) -> list[tuple[Path, str, str]]:
    """``(path, target name, kind)`` of the work folders in ``parent`` whose writer is gone."""
    found = []
    try:
        entries = sorted(parent.iterdir())
    except OSError:
        return []
    for entry in entries:
        m = _WORK_RE.match(entry.name)
        if m is None or (target_name is not None and m.group("target") != target_name):
            continue
        if entry.is_symlink() or not entry.is_dir() or pid_alive(int(m.group("pid"))):
            continue
        found.append((entry, m.group("target"), m.group("kind")))
    return found


def remove_stale_work_dirs(parent: Path, target_name: str | None = None) -> list[Path]:
    """Clear the work folders of killed writers in ``parent``; return those handled.

    Args:
        parent: the folder that holds the targets.
        target_name: only the work folders of this target (default: of every target).

    Returns:
        The work folders removed, or put back as their target (a previous site whose swap was
        killed, when nothing replaced it).
    """
    handled = []
    for path, target, kind in _dead_work_dirs(parent, target_name):
        original = parent / target
        if kind == "old" and not os.path.lexists(original):
            try:
                path.rename(original)  # the new one never arrived: the previous one is back
            except OSError:
                continue
        else:
            shutil.rmtree(path, ignore_errors=True)
            if path.exists():
                continue
        handled.append(path)
    return handled


def remove_stale_work_dirs_under(root: Path) -> list[Path]:
    """:func:`remove_stale_work_dirs` in ``root`` and in every folder below it.

    No symlink is followed; ``.staging/`` and work folders themselves are not entered.
    """
    handled = []
    for dirpath, dirnames, _ in os.walk(root, followlinks=False):
        here = Path(dirpath)
        handled += remove_stale_work_dirs(here)
        dirnames[:] = sorted(d for d in dirnames if d != layout.STAGING_DIR and not _WORK_RE.match(d)
                             and not (here / d).is_symlink())
    return handled
