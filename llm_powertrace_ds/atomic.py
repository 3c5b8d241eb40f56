"""The one atomic file writer: write a hidden temporary name, then ``os.replace`` it into place.

Writers of whole files go through :func:`atomic_path` or one of the helpers built on it (status
and meta files, the sampler's spool headers, request logs, pid files, the GPU-settings journal,
the card, exports, merged files, facility profiles), so a reader sees the old file or the new
one, never half of one, and a failed write leaves no litter. Standard library only: the sampler
process imports it without paying for ``datasets``. (Arrow shards: ``shards/write.py`` writes
one file through :func:`atomic_path`, and a run's files all-or-nothing — every file written
before any is renamed — which one context manager cannot express.)

Temporary names are ``.<name>.t<thread>.<pid>.tmp``: hidden from every dataset glob, unique per
writing thread, and with the pid last where ``audit``'s leftover sweep reads it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, fsync: bool = False,
                suffix: str = "") -> Iterator[Path]:
    """Yield a hidden temporary name beside ``path``; rename it into place when the block ends.

    The caller writes the whole file to the yielded name. On success it is (optionally) fsynced
    and renamed over ``path`` with ``os.replace``, so a reader sees the old file or the new one,
    never half of one; on any exception the temporary file is removed and ``path`` is untouched.

    Args:
        path: the final name (its folder is created).
        fsync: flush the file to disk before the rename (state that must survive a power loss).
        suffix: appended to the temporary name (a writer that infers the format from it).

    Example:
        >>> with atomic_path(folder / "x.parquet") as tmp:  # doctest: +SKIP
        ...     pq.write_table(table, tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # ".<name>.t<thread>.<pid>.tmp": the pid last, where audit's leftover sweep reads it
    tmp = path.with_name(f".{path.name}.t{threading.get_ident()}.{os.getpid()}.tmp{suffix}")
    try:
        yield tmp
        if fsync:
            _fsync_path(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, fsync: bool = True,
                       mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_path` (file permissions ``mode``)."""
    with atomic_path(path, fsync=fsync) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


def write_text_atomic(path: str | os.PathLike[str], text: str, *, fsync: bool = True,
                      mode: int = 0o644) -> None:
    """Write UTF-8 ``text`` to ``path`` through :func:`atomic_path`."""
    write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync, mode=mode)


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, fsync: bool = True,
                      indent: int | None = 1, sort_keys: bool = True, mode: int = 0o644) -> None:
    """Write ``obj`` as JSON (``default=str``) to ``path`` through :func:`atomic_path`."""
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, default=str)
    write_text_atomic(path, text, fsync=fsync, mode=mode)


__all__ = ["atomic_path", "write_bytes_atomic", "write_json_atomic", "write_text_atomic"]
