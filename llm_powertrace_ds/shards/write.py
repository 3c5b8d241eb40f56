"""Atomic shard writes (single file, all-or-nothing, streamed batches) and the folder lock."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
from filelock import FileLock, Timeout

from .. import layout
from ..atomic import atomic_path
from ..errors import LockTimeout, ShardError
from .encode import LOCK_TIMEOUT_S, ipc_options

# ---------------------------------------------------------------------------------------------
# Atomic file writes
# ---------------------------------------------------------------------------------------------

def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _write_stream(dest: Path, table: pa.Table, *, compress: bool = False) -> None:
    """Write ``table`` as one Arrow IPC stream file at ``dest`` (no rename, no fsync).

    The stream is built in memory and written with one call: an ``OSFile`` sink is unbuffered,
    and the IPC writer's many small pieces (a 158-column schema message, padding) cost a system
    call each (≈ 0.6 ms a file). The compression decision reads the table's buffer sizes
    (``get_total_buffer_size``; ``Table.nbytes`` walks every buffer's used range, ≈ 0.3 ms on a
    runs row). A file is at most one run's table, so the extra copy is bounded by a run.
    With ``compress`` the table is compressed whatever its size (a runs-table segment).
    """
    sink = pa.BufferOutputStream()
    options = ipc_options(None if compress else table.get_total_buffer_size())
    # one run's buffers are compressed in this thread: handing them to Arrow's pool costs
    # ≈ 1 ms of CPU a 2-hour 4-GPU trace file (≈ 5 % of its write) and saves no CPU time
    options.use_threads = False
    with ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=max(1, min(table.num_rows, 1024)))
    data = sink.getvalue()
    with pa.OSFile(str(dest), "wb") as out:
        out.write(data)


def _write_tmp(path: Path, table: pa.Table, *, compress: bool = False) -> Path:
    """Write ``table`` to ``path``'s hidden temporary name (fsynced); return that name.

    The first half of :func:`write_tables_all_or_nothing`'s two phases (every file written
    before any is renamed), which :func:`~llm_powertrace_ds.atomic.atomic_path` (one file,
    renamed as its block ends) does not cover.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(path)
    try:
        _write_stream(tmp, table, compress=compress)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_table_atomic(path: Path, table: pa.Table) -> None:
    """Write ``table`` as an Arrow IPC stream to a hidden temporary name, then rename it."""
    with atomic_path(path, fsync=True) as tmp:
        _write_stream(tmp, table)


def write_tables_all_or_nothing(tables: dict[Path, pa.Table | Path]) -> None:
    """Write every table under its hidden temporary name first, then rename them all.

    A value that is a ``Path`` is a file already written (staged by :func:`stage_run`); it is
    only renamed. A failure while writing (a full disk, a file-size limit, a killed writer)
    leaves none of the files visible: the temporary names are removed and no final name is
    touched. Renames take no space, so once every file is written the run appears whole (issue
    12, item 11); they happen in the dict's order (the trace file last).

    Raises:
        ShardError: a file could not be written (naming it and the reason).
    """
    written: list[tuple[Path, Path, bool]] = []  # (temporary or staged file, final name, ours)
    try:
        for path, table in tables.items():
            if isinstance(table, Path):
                path.parent.mkdir(parents=True, exist_ok=True)
                written.append((table, path, False))
            else:
                written.append((_write_tmp(path, table), path, True))
    except OSError as exc:
        for tmp, _, ours in written:
            if ours:
                tmp.unlink(missing_ok=True)
        raise ShardError(f"cannot write '{path}': {exc.strerror or exc}; nothing of the run was "
                         "published") from None
    except BaseException:
        for tmp, _, ours in written:
            if ours:
                tmp.unlink(missing_ok=True)
        raise
    for i, (tmp, path, _) in enumerate(written):
        try:
            os.replace(tmp, path)
        except BaseException:
            # a rename failed (the trace comes last, so the run is not done): no litter left;
            # `validate --repair` removes a runs row whose trace never arrived
            for rest, _, ours in written[i:]:
                if ours:
                    rest.unlink(missing_ok=True)
            raise


def _lock(root: Path, name: str) -> FileLock:
    return FileLock(str(layout.lock_path(root, name)), timeout=LOCK_TIMEOUT_S)


@contextmanager
def folder_lock(root: str | Path) -> Iterator[None]:
    """Hold the folder-level lock (the card's) of a dataset folder.

    Raises:
        LockTimeout: another process held it for ``LOCK_TIMEOUT_S``.
    """
    lock = _lock(Path(root), "folder")
    try:
        lock.acquire()
    except Timeout as exc:
        raise LockTimeout(f"the card of {root} is locked by another process") from exc
    try:
        yield
    finally:
        lock.release()


def write_batches_atomic(path: Path, schema_: pa.Schema, batches: Iterable[pa.RecordBatch], *,
                         nbytes: int | None = None) -> int:
    """Stream record batches into one Arrow IPC stream file (temporary name, then rename).

    Memory is bounded by one batch (the inputs are memory-mapped), not by the shard.

    Args:
        path: the shard to write.
        schema_: its schema (a config's ``Features.arrow_schema``); every batch must have it.
        batches: the record batches.
        nbytes: about how many bytes the file will hold, for the compression rule of
            ``ipc_options`` (small files uncompressed); ``None``: compressed.

    Returns:
        The rows written.

    Raises:
        ShardError: a batch's schema differs.
    """
    n = 0
    with atomic_path(path, fsync=True) as tmp, pa.OSFile(str(tmp), "wb") as sink, \
            ipc.new_stream(sink, schema_, options=ipc_options(nbytes)) as writer:
        for batch in batches:
            if not batch.schema.equals(schema_):
                raise ShardError(f"cannot pack into '{path.name}': a batch's schema differs "
                                 "from the first file's")
            writer.write_batch(batch)
            n += batch.num_rows
    return n
