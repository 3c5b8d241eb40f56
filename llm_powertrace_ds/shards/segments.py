"""Runs-table segments: many runs' rows of one runs folder in one file (issue 40).

A one-row runs file of ~254 columns costs ~29 KB whatever its data (a ~16 KB schema message and
~13 KB of record-batch metadata), so an unpacked folder of one-row files spent ~38 KB per run.
When a writing command finishes (:func:`~llm_powertrace_ds.shards.publish.write_configs_block`,
under the folder lock), each runs folder ``data/<workload>_runs/<platform>/`` holding at least
:data:`MIN_LOOSE` one-run files (``<run_id>.arrow``, "loose") has them merged into one
**segment** ``segment~<16 hex>.arrow`` (:func:`compact`). Bytes per run are then

    bytes_per_run ≈ (schema + batch metadata + n_rows × row_bytes) / n_rows

i.e. the fixed ~29 KB is shared by the segment's rows.

Rules:

* A segment's name holds a ``~``, which no run id may contain
  (``importers.assemble.check_run_id``), so no run's file can take it.
* Segments are bounded: a merge takes the loose files and, smallest first, each segment with no
  more rows than the merge has so far, while the result stays within :data:`MAX_ROWS` (a binary
  counter: a row is rewritten O(log(runs / MIN_LOOSE)) times, and no command rewrites
  O(dataset)).
* Writes: the segment goes to a hidden temporary name, is renamed, then the merged segments and
  loose files are removed. A kill in between leaves a run's row twice (identical rows);
  :func:`resolve_duplicates` (run by the next writer and by ``validate --repair``; ``validate``
  reports it until then) keeps one; a run repeated inside one segment keeps its last row. A loose file is never older than a segment row of the same
  run (segments are made from loose files; a republished run's new row is loose), so when
  rows differ the loose one is kept.
* Every rewrite or removal of a segment, and every rename of a runs file into a runs folder,
  happens under the dataset folder's segments lock (:func:`segments_lock`), so a merge never
  removes a loose file that a publish renamed meanwhile. Lock order: folder, run, segments.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from filelock import FileLock, Timeout

from .. import layout, schema
from ..arrow_numpy import strings
from ..errors import LockTimeout
from .encode import LOCK_TIMEOUT_S, PACKED_RE
from .index import batch_run_ids
from .read import file_schema, read_table
from .write import _write_tmp, write_batches_atomic, write_table_atomic

MIN_LOOSE = 4
"""Loose one-run files a runs folder holds before a writer merges them into a segment.

Small: each loose file left costs ~36 KB (a folder of 4 platforms keeps up to 12, 430 KB), and
the merge is cheap (each row is rewritten O(log(runs / MIN_LOOSE)) times). A folder of fewer
runs keeps one readable file per run."""
MAX_ROWS = 4096
"""The most rows a merge writes into one segment."""
LOCK_NAME = "segments~"
"""The segments lock's name under ``.staging/locks/`` (a ``~``: no run id's lock)."""


@contextmanager
def segments_lock(root: str | Path) -> Iterator[None]:
    """Hold the dataset folder's segments lock.

    Raises:
        LockTimeout: another process held it for ``LOCK_TIMEOUT_S``.
    """
    lock = FileLock(str(layout.lock_path(root, LOCK_NAME)), timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except Timeout as exc:
        raise LockTimeout(f"the runs segments of {root} are locked by another process") from exc
    try:
        yield
    finally:
        lock.release()


@dataclass(frozen=True)
class RunsFolder:
    """What one runs folder holds.

    Attributes:
        loose: ``{run_id: file}`` of the one-run files.
        segments: ``{segment: its run ids, in row order}``.
    """

    loose: dict[str, Path]
    segments: dict[Path, list[str]]

    def holders(self) -> dict[str, list[Path]]:
        """``{run_id: files holding its row}``: segments first, then the loose file."""
        out: dict[str, list[Path]] = {}
        for path, ids in self.segments.items():
            for run_id in dict.fromkeys(ids):
                out.setdefault(run_id, []).append(path)
        for run_id, path in self.loose.items():
            out.setdefault(run_id, []).append(path)
        return out


_IDS: dict[Path, tuple[tuple[int, int, int], list[str]]] = {}
"""A segment -> its (size, mtime_ns, inode) and run ids: a segment is only ever replaced by a
rename (a new inode), so a publish reads each segment's ``run_id`` column once per process, not
once per run (opening a ~254-column stream parses its schema: ≈ 1 ms)."""
_IDS_MAX = 1024


def segment_run_ids(path: Path) -> list[str]:
    """A segment's run ids in row order (cached by its stat: see ``_IDS``)."""
    st = path.stat()
    key = (st.st_size, st.st_mtime_ns, st.st_ino)
    hit = _IDS.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    ids = [r for part in batch_run_ids(path) for r in part]
    if len(_IDS) >= _IDS_MAX:
        _IDS.clear()
    _IDS[path] = (key, ids)
    return ids


def runs_folders(root: str | Path) -> list[Path]:
    """Every unpacked runs folder (``data/<workload>_runs/<platform>/``) of a dataset folder."""
    data = layout.data_root(root)
    out = []
    for config in schema.RUNS_CONFIGS:
        base = data / config
        if base.is_dir():
            out.extend(sorted(p for p in base.iterdir()
                              if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")))
    return out


def scan(folder: Path) -> RunsFolder:
    """The loose files and segments of one runs folder (segments' ``run_id`` column read).

    Packed shards and Parquet files are neither: they are left out.
    """
    loose: dict[str, Path] = {}
    segments: dict[Path, list[str]] = {}
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    for name in names:
        if name.startswith(".") or not name.endswith(layout.SHARD_SUFFIX):
            continue
        path = folder / name
        if layout.is_segment(name):
            segments[path] = segment_run_ids(path)
        elif not PACKED_RE.search(name):
            loose[name[: -len(layout.SHARD_SUFFIX)]] = path
    return RunsFolder(loose=loose, segments=segments)


def without_runs(path: Path, run_ids: set[str]) -> pa.Table:
    """A segment's rows except those of ``run_ids``."""
    table = read_table(path)
    return _without(table, run_ids)


def _without(table: pa.Table, run_ids: set[str]) -> pa.Table:
    # arrow_numpy.strings, not pa.array: a pa.array call on Python values loads pandas
    return table.filter(pc.invert(pc.is_in(table.column("run_id"),
                                           value_set=strings(sorted(run_ids)))))


def drop_runs(root: str | Path, run_ids: set[str]) -> tuple[dict[Path, pa.Table], list[Path]]:
    """How to take ``run_ids``'s rows out of every segment (nothing is written).

    Args:
        root: the dataset folder.
        run_ids: the runs.

    Returns:
        ``(rewrites, removals)``: each segment that keeps other rows with its new table, and
        each segment left empty.
    """
    rewrites: dict[Path, pa.Table] = {}
    removals: list[Path] = []
    for folder in runs_folders(root):
        for path in sorted(folder.iterdir()):
            if not (layout.is_segment(path.name) and path.suffix == layout.SHARD_SUFFIX):
                continue
            if not run_ids.isdisjoint(segment_run_ids(path)):
                table = without_runs(path, run_ids)
                if table.num_rows:
                    rewrites[path] = table
                else:
                    removals.append(path)
    return rewrites, removals


def write_runs_rows(root: str | Path, tables: dict[Path, pa.Table]) -> None:
    """Write one-run runs files and take each run's older row out of any segment.

    Each file goes to a temporary name and is renamed, under the segments lock; for writers of
    runs rows without a trace (published summaries).

    Args:
        root: the dataset folder.
        tables: ``{runs file (layout.runs_path): its one-run table}``.
    """
    with segments_lock(root):
        for path, table in tables.items():
            rewrites, emptied = drop_runs(root, {path.name[: -len(layout.SHARD_SUFFIX)]})
            write_table_atomic(path, table)  # the new row first: a kill here leaves it newest
            for seg, rest in rewrites.items():
                write_segment(seg, rest)
            for seg in emptied:
                seg.unlink()


def _rows_equal(a: pa.Table, b: pa.Table) -> bool:
    return a.num_rows == b.num_rows and a.equals(b)


def _run_rows(table: pa.Table, run_id: str) -> pa.Table:
    return table.filter(pc.equal(table.column("run_id"), run_id))


def _dedupe_segment(path: Path, ids: list[str]) -> str | None:
    """Keep the last row of each run a segment holds more than once; say what was dropped.

    A segment is written as its merged segments' rows followed by the loose files' rows, and a
    loose row is never older than a segment's, so the last row of a run is its newest.
    """
    last = {run_id: i for i, run_id in enumerate(ids)}
    if len(last) == len(ids):
        return None
    repeated = sorted({r for i, r in enumerate(ids) if last[r] != i})
    table = read_table(path)
    keep = [i for i, run_id in enumerate(ids) if last[run_id] == i]
    write_segment(path, table.take(keep))
    return f"the earlier rows of {', '.join(repeated)}, held more than once in it"


def resolve_duplicates(folder: Path) -> list[tuple[Path, str | None]]:
    """Keep one row of each run held twice in a runs folder; return what changed.

    A run repeated inside one segment keeps its last row (:func:`_dedupe_segment`). A run held
    by a loose file and a segment: the loose file is removed when its row equals the
    segment's (a merge stopped before its removals), else the segment's row is dropped (a
    republish stopped before rewriting the segment: the loose row is newer). A run held by two
    segments (a merge stopped before removing the segments it merged): the segment with fewer
    rows loses it. Call under :func:`segments_lock`.

    Returns:
        ``(file, None)`` for each file removed, ``(segment, what was dropped)`` for each
        segment rewritten.
    """
    found = scan(folder)
    inner: list[tuple[Path, str | None]] = []
    for seg, seg_ids in sorted(found.segments.items()):
        what = _dedupe_segment(seg, seg_ids)
        if what is not None:
            inner.append((seg, what))
    if inner:
        found = scan(folder)
    return inner + _resolve_across(found)


def _resolve_across(found: RunsFolder) -> list[tuple[Path, str | None]]:
    """:func:`resolve_duplicates` for runs held by two files (no segment repeats a run)."""
    holders = found.holders()
    dupes = {r: paths for r, paths in holders.items() if len(paths) > 1}
    if not dupes:
        return []
    tables: dict[Path, pa.Table] = {}

    def table_of(path: Path) -> pa.Table:
        if path not in tables:
            tables[path] = read_table(path)
        return tables[path]

    drop: dict[Path, set[str]] = {}
    unlink_loose: list[Path] = []
    for run_id, paths in sorted(dupes.items()):
        segs = sorted((p for p in paths if layout.is_segment(p.name)),
                      key=lambda p: (-len(found.segments[p]), p.name))
        loose = found.loose.get(run_id)
        keeper = segs[0]
        if loose is not None:
            if _rows_equal(table_of(loose), _run_rows(table_of(keeper), run_id)):
                unlink_loose.append(loose)
            else:
                keeper = loose
        for seg in segs:
            if seg != keeper:
                drop.setdefault(seg, set()).add(run_id)
    notes: list[tuple[Path, str | None]] = []
    for seg, ids in sorted(drop.items()):
        rest = _without(table_of(seg), ids)
        if rest.num_rows:
            write_segment(seg, rest)
            notes.append((seg, f"the rows of {', '.join(sorted(ids))}, held by another file"))
        else:
            seg.unlink()
            notes.append((seg, None))
    for path in unlink_loose:
        path.unlink()
        notes.append((path, None))
    return notes


def write_segment(path: Path, table: pa.Table) -> None:
    """Write a segment (temporary name, then rename), always compressed.

    A one-run file stays uncompressed (``encode.COMPRESS_MIN_BYTES``); a segment's rows are read
    together, and zstd makes its columns about a quarter of their size (32 runs: 206 KB plain,
    49 KB compressed).
    """
    write_batches_atomic(path, table.schema, table.to_batches(max_chunksize=1024), nbytes=None)


def stage_segment(path: Path, table: pa.Table) -> Path:
    """Write a segment's new content to its hidden temporary name (compressed, fsynced).

    For :func:`~llm_powertrace_ds.shards.write.write_tables_all_or_nothing`, which renames it
    with a run's files.
    """
    return _write_tmp(path, table, compress=True)


def segment_name(folder: Path, run_ids: list[str]) -> Path:
    """A free ``segment~<16 hex>.arrow`` name: SHA-256 of the sorted run ids (and a counter)."""
    text = "\n".join(sorted(run_ids))
    for n in range(1000):
        salt = f"\n{n}" if n else ""
        path = folder / f"{layout.SEGMENT_PREFIX}" \
            f"{hashlib.sha256((text + salt).encode()).hexdigest()[:16]}{layout.SHARD_SUFFIX}"
        if not path.exists():
            return path
    raise FileExistsError(f"no free segment name in '{folder}'")


def compact_folder(folder: Path, *, min_loose: int = MIN_LOOSE,
                   max_rows: int = MAX_ROWS) -> list[str]:
    """Merge a runs folder's loose files into segments when it holds ``min_loose`` or more.

    Duplicates left by an interrupted merge are resolved first (:func:`resolve_duplicates`).
    Call under :func:`segments_lock`.

    Returns:
        ``'<file name>: <what happened>'`` lines.
    """
    notes = [f"{p.name}: {what or 'removed (a second row of its runs)'}"
             for p, what in resolve_duplicates(folder)]
    found = scan(folder)
    if len(found.loose) < min_loose:
        return notes
    expected = schema.arrow_schema(folder.parent.name)
    # a file of another schema (written by an older version) stays a file of its own
    loose = [(r, p) for r, p in sorted(found.loose.items()) if file_schema(p).equals(expected)]
    while loose:
        group, loose = loose[:max_rows], loose[max_rows:]
        if len(group) < min_loose:
            break
        rows = len(group)
        merged: list[Path] = []
        for seg, ids in sorted(found.segments.items(), key=lambda kv: (len(kv[1]), kv[0].name)):
            if len(ids) <= rows and rows + len(ids) <= max_rows:
                merged.append(seg)
                rows += len(ids)
        parts = [read_table(p) for p in merged] + [read_table(p) for _, p in group]
        table = pa.concat_tables(parts).combine_chunks()
        ids = table.column("run_id").to_pylist()
        path = segment_name(folder, ids)
        write_segment(path, table)
        for seg in merged:
            seg.unlink()
            del found.segments[seg]
        for _, p in group:
            p.unlink()
        found.segments[path] = ids
        notes.append(f"{path.name}: {len(group)} runs files and {len(merged)} segment(s) merged "
                     f"({table.num_rows} rows)")
    return notes


def compact(root: str | Path, *, min_loose: int = MIN_LOOSE, max_rows: int = MAX_ROWS
            ) -> list[str]:
    """:func:`compact_folder` on every runs folder of ``root``, under the segments lock."""
    folders = runs_folders(root)
    if not folders:
        return []
    notes: list[str] = []
    with segments_lock(root):
        for folder in folders:
            notes.extend(compact_folder(folder, min_loose=min_loose, max_rows=max_rows))
    return notes
