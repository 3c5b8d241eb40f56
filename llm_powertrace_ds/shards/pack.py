"""Pack a folder's per-run files into size-bounded shards in a new folder."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from .. import audit, layout, schema, work_dirs
from ..errors import ShardError
from .encode import DEFAULT_MAX_SHARD_BYTES
from .publish import write_configs_block
from .read import count_rows, file_schema, iter_file_batches
from .write import write_batches_atomic

# ---------------------------------------------------------------------------------------------
# Packing
# ---------------------------------------------------------------------------------------------

PACKED_BATCH_BYTES = 32 * 1024 * 1024
"""In-memory bound of one record batch of a packed runs or requests shard. Their per-run files
hold a row or a few hundred rows each; packed, they are merged into batches up to this size, so
a reader pays one batch's framing (and one decompression per column) for thousands of runs, not
one per run (issue 40). Trace shards keep one batch per run's file: a run's rows are what a
reader selects (``ShardIndex``)."""

@dataclass
class PackResult:
    """What ``pack`` wrote: rows and shards per folder (relative path)."""

    rows: dict[str, int]
    shards: dict[str, int]


def pack(src: str | Path, dst: str | Path, *,
         max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, refresh_card: bool = True) -> PackResult:
    """Merge a folder's per-run files into ``<platform>-NNNNN-of-MMMMM.arrow`` shards in a new folder.

    Rows are never lost or duplicated: the row count of every output folder is checked against
    its input. ``dst`` must not exist (or be empty); ``src`` is never modified.

    Args:
        src: dataset folder to read.
        dst: new folder to write.
        max_shard_bytes: upper bound of a shard's in-memory Arrow size.
        refresh_card: write the new folder's ``README.md`` (the caller may write it itself).

    Raises:
        ShardError: ``dst`` is not empty, ``src`` fails the folder audit (a run's row twice, a
            row without its trace or the reverse, a stray file: :func:`refuse_unsound`), or a
            count does not match.
    """
    src, dst = Path(src), Path(dst)
    # a killed pack's hidden copy (its pid is gone) is removed by the next pack into the place
    work_dirs.remove_stale_work_dirs(dst.parent, dst.name)
    if dst.exists() and any(dst.iterdir()):
        raise ShardError(f"'{dst}' exists and is not empty; pack writes a new folder")
    if dst.resolve() == src.resolve():
        raise ShardError("pack never works in place: choose another --out")
    dst.parent.mkdir(parents=True, exist_ok=True)
    # Everything is written into a hidden sibling folder and renamed into place at the end, so
    # a failed pack leaves nothing behind and can simply be run again.
    work = work_dirs.make_work_dir(dst, "packing")
    try:
        result = _pack_into(src, work, max_shard_bytes=max_shard_bytes, refresh_card=refresh_card)
        if dst.exists():
            dst.rmdir()  # empty (checked above)
        os.replace(work, dst)
    finally:
        if work.exists():
            shutil.rmtree(work)
    return result


def refuse_unsound(src: Path) -> None:
    """Raise ``ShardError`` when the folder audit finds a problem ``pack`` would copy.

    A run's row twice (a killed merge), a runs row without its trace or the reverse, a stray
    file or a symlink: packing would publish it (two rows for one run) or fail inside. The
    error names the first problems and the repair.
    """
    found = audit.audit_folder(src)
    if found.ok:
        return
    problems = found.messages()
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    raise ShardError(f"'{src}' fails validation, so it is not packed: {'; '.join(problems[:3])}"
                     f"{more}; `llm-powertrace validate {src} --repair` repairs what it can and "
                     "lists the rest")


def _pack_into(src: Path, dst: Path, *, max_shard_bytes: int, refresh_card: bool) -> PackResult:
    refuse_unsound(src)  # what validate rejects is named and never copied
    rows: dict[str, int] = {}
    shards: dict[str, int] = {}
    data = layout.data_root(src)
    folders = sorted({p.parent for p in data.rglob(f"*{layout.SHARD_SUFFIX}")
                      if not p.name.startswith(".")}) if data.is_dir() else []
    for folder in folders:
        rel = folder.relative_to(src)
        parts = rel.parts  # data/<config>/<platform>[/<family>]
        platform = parts[2]
        files = sorted(p for p in folder.glob(f"*{layout.SHARD_SUFFIX}")
                       if not p.name.startswith("."))
        groups = _group_by_size(files, max_shard_bytes)
        total = len(groups)
        in_rows = out_rows = 0
        merge = parts[1] not in schema.TRACE_CONFIGS  # runs and requests tables
        for i, group in enumerate(groups):
            out = dst / rel / f"{platform}-{i:05d}-of-{total:05d}{layout.SHARD_SUFFIX}"
            batches = _stream_files(group)
            if merge:
                batches = _merged(batches, PACKED_BATCH_BYTES)
            schema_ = file_schema(group[0])
            # the data's bytes: each per-run file repeats the schema, the shard holds it once
            nbytes: int | None = sum(f.stat().st_size for f in group) \
                - len(group) * schema_.serialize().size
            if any(layout.is_segment(f.name) for f in group):
                nbytes = None  # a segment is compressed on disk (its size is no data size)
            in_rows += write_batches_atomic(out, schema_, batches, nbytes=nbytes)
            out_rows += count_rows(out)
        if out_rows != in_rows:
            raise ShardError(f"pack lost rows in '{rel}': {in_rows} in, {out_rows} out")
        rows[rel.as_posix()] = out_rows
        shards[rel.as_posix()] = total
    if folders and refresh_card:
        write_configs_block(dst)
    return PackResult(rows=rows, shards=shards)


def _group_by_size(files: list[Path], max_shard_bytes: int) -> list[list[Path]]:
    """Consecutive files grouped so that each group's bytes on disk stay under the bound.

    An Arrow IPC stream file's size is its in-memory Arrow size plus a small framing, so file
    sizes bound the shards without reading any file.
    """
    groups: list[list[Path]] = [[]]
    size = 0
    for f in files:
        nbytes = f.stat().st_size
        if groups[-1] and size + nbytes > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(f)
        size += nbytes
    return groups


def _merged(batches: Iterator[pa.RecordBatch], max_bytes: int) -> Iterator[pa.RecordBatch]:
    """Consecutive batches merged into batches of about ``max_bytes`` (order kept)."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        pending.append(batch)
        size += batch.get_total_buffer_size()
        if size >= max_bytes:
            yield _one_batch(pending)
            pending, size = [], 0
    if pending:
        yield _one_batch(pending)


def _one_batch(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _stream_files(files: list[Path]) -> Iterator[pa.RecordBatch]:
    for f in files:
        try:
            yield from iter_file_batches(f)
        except (OSError, pa.ArrowInvalid) as exc:
            raise ShardError(f"Failed to read '{f}': {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
