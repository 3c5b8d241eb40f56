"""One cache file per runs folder: the card reads the runs rows of unchanged runs from it.

Rebuilding the card after one more run must not read every runs-config file again (about
0.5 ms each to open, hash and parse: 0.5 s on 1,000 runs). Each runs folder
(``data/<workload>_runs/<platform>/``) gets a hidden ``.card-runs-cache.ipc``: the rows of its
runs files, each row with its file's name, ``(size, mtime_ns, inode)`` and content SHA-256. A file
whose ``stat`` matches is taken from the cache (its hash too); any other file is read, and the cache is rewritten
(atomically) when something changed. Publishing renames a new file into place, so a rewritten
runs file always has a new inode and mtime. Hidden, so no glob, ``pack`` or upload sees it; a
cache that cannot be read is ignored, and one that cannot be written is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from llm_powertrace_ds.arrow_numpy import strings, to_arrow
from llm_powertrace_ds.shards import write_table_atomic

log = logging.getLogger(__name__)

CACHE_NAME = ".card-runs-cache.ipc"  # not *.arrow: no data-file glob may match it
KEY_COLUMNS = ("__file", "__size", "__mtime_ns", "__ino", "__sha256")

StatKey = tuple[int, int, int]
Reader = Callable[[Path], tuple["str | None", pa.Table]]


@dataclass(frozen=True)
class RunsFile:
    """One runs file as the card sees it: its content hash and its rows."""

    path: Path
    key: StatKey
    sha256: str | None
    table: pa.Table


def cache_path(folder: Path) -> Path:
    """The cache file of one runs folder."""
    return folder / CACHE_NAME


def _stat_key(path: Path) -> StatKey:
    st = path.stat()
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _load(folder: Path) -> tuple[pa.Table | None, dict[str, tuple[StatKey, str | None, int, int]]]:
    """The cached table (without key columns) and ``{file name: (key, sha, first row, rows)}``."""
    try:
        with ipc.open_stream(str(cache_path(folder))) as reader:
            table = reader.read_all()
        names = table.column("__file").to_pylist()
        keys = zip(table.column("__size").to_pylist(), table.column("__mtime_ns").to_pylist(),
                   table.column("__ino").to_pylist(), strict=True)
        shas = table.column("__sha256").to_pylist()
    except (OSError, pa.ArrowInvalid, KeyError):
        return None, {}
    index: dict[str, tuple[StatKey, str | None, int, int]] = {}
    for row, (name, key, sha) in enumerate(zip(names, keys, shas, strict=True)):
        if name in index:  # a file's rows are consecutive: extend its count
            k, s, first, n = index[name]
            index[name] = (k, s, first, n + 1)
        else:
            index[name] = (tuple(key), sha, row, 1)  # type: ignore[assignment]
    rows = table.drop_columns(list(KEY_COLUMNS))
    return rows, index


def read_folder(folder: Path, files: list[Path], read: Reader) -> list[RunsFile]:
    """Every runs file of one folder, unchanged ones from the cache; refresh the cache.

    Args:
        folder: the runs folder.
        files: its runs files, in order.
        read: reads one file: ``(content SHA-256 or None, table)``.

    Returns:
        One :class:`RunsFile` per file, in order.
    """
    cached, index = _load(folder)
    out: list[RunsFile] = []
    changed = cached is None or len(index) != len(files)
    for path in files:
        key = _stat_key(path)
        hit = index.get(path.name)
        if cached is not None and hit is not None and hit[0] == key:
            _, sha, first, n = hit
            out.append(RunsFile(path, key, sha, cached.slice(first, n)))
        else:  # the stat taken before the read: a file replaced meanwhile is read again later
            sha, table = read(path)
            out.append(RunsFile(path, key, sha, table))
            changed = True
    if changed and files:
        _write(folder, out)
    return out


def _write(folder: Path, files: list[RunsFile]) -> None:
    """Write the folder's cache when every file has a hash and all share one schema."""
    if any(f.sha256 is None for f in files):
        return  # Parquet shards: nothing to key on
    schema = files[0].table.schema
    if not all(f.table.schema.equals(schema) for f in files[1:]):
        return  # mixed schema versions: read them file by file
    counts = np.array([f.table.num_rows for f in files])
    keys = [f.key for f in files]
    rows = pa.concat_tables([f.table for f in files]).combine_chunks()

    def ints(values: list[int]) -> pa.Array:  # arrow_numpy: no pa.array, which loads pandas
        return to_arrow(np.repeat(np.array(values, np.int64), counts), pa.int64())

    def texts(values: list[str]) -> pa.Array:
        return strings([str(v) for v in np.repeat(np.array(values, object), counts)])

    extra = {
        "__file": texts([f.path.name for f in files]),
        "__size": ints([k[0] for k in keys]),
        "__mtime_ns": ints([k[1] for k in keys]),
        "__ino": ints([k[2] for k in keys]),
        "__sha256": texts([str(f.sha256) for f in files]),
    }
    for name, arr in extra.items():
        rows = rows.append_column(name, arr)
    try:
        write_table_atomic(cache_path(folder), rows)
    except OSError:
        log.debug("%s: runs cache not written (read-only folder?)", folder)
