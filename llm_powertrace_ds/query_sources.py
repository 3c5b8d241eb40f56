"""Where the query API's record batches come from: a dataset folder, or ``datasets`` streaming.

:func:`open_source` returns a :class:`Source`; the query API (``llm_powertrace_ds.query``)
asks it for the splits of a config and for record batches of some columns, optionally only the
files of some model families and runs (a folder prunes by path: per-run files are named
``<run_id>.arrow``; streaming reads everything and the caller filters).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa

from . import layout, schema, shards


def list_to_numpy(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Flattened values (NaN for null) and 0-based offsets of a list column (slices too)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = pa.concat_arrays(arr.chunks) if arr.num_chunks != 1 else arr.chunk(0)
    offsets = arr.offsets.to_numpy()
    flat = arr.flatten()  # respects the slice, unlike ``.values``
    values = flat.to_numpy(zero_copy_only=False)
    if flat.null_count and values.dtype.kind != "f":
        values = values.astype(np.float64)
    return values, offsets - offsets[0]


class Source(Protocol):
    """What the query API reads through."""

    name: str

    def splits(self, config: str) -> list[str]: ...

    def batches(self, config: str, split: str, columns: list[str] | None,
                families: Collection[str] | None = None,
                run_ids: Collection[str] | None = None) -> Iterator[pa.RecordBatch]: ...


class _FolderSource:
    """A local dataset folder (or a Hub repo downloaded into one)."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.name = name
        self._folders = layout.shard_folders(root)
        self._indexes: dict[Path, shards.ShardIndex] = {}  # packed shard -> its run index

    def splits(self, config: str) -> list[str]:
        return sorted(self._folders.get(config, {}))

    def batches(self, config: str, split: str, columns: list[str] | None,
                families: Collection[str] | None = None,
                run_ids: Collection[str] | None = None) -> Iterator[pa.RecordBatch]:
        for folder in self._folders.get(config, {}).get(split, []):
            if families is not None and folder.name not in families:
                continue  # a trace folder of another model family
            for path in _shard_files(folder):
                # per-run files are named <run_id>.arrow; packed shards and runs-table
                # segments hold several runs
                packed = (shards.PACKED_RE.search(path.name) is not None
                          or layout.is_segment(path.name))
                if run_ids is not None and not packed and path.stem not in run_ids:
                    continue
                if run_ids is not None and packed:
                    # only the batches (row groups) holding the selected runs are decoded
                    if path not in self._indexes:
                        self._indexes[path] = shards.ShardIndex([path])
                    yield from self._indexes[path].batches(run_ids, columns)
                    continue
                try:
                    for batch in shards.iter_file_batches(path):
                        yield batch.select(columns) if columns else batch
                except (OSError, pa.ArrowInvalid) as exc:
                    raise shards.ShardError(f"Failed to read '{path}': {type(exc).__name__}: "
                                            f"{exc}") from None


class _StreamingSource:
    """``datasets.load_dataset(..., streaming=True)`` on a folder or a Hub repo."""

    def __init__(self, path: str) -> None:
        self.name = path
        self._splits: dict[str, list[str]] = {}

    def splits(self, config: str) -> list[str]:
        if config not in self._splits:
            from datasets import get_dataset_config_names, get_dataset_split_names

            if config not in get_dataset_config_names(self.name):
                self._splits[config] = []
            else:
                self._splits[config] = sorted(get_dataset_split_names(self.name, config))
        return self._splits[config]

    def batches(self, config: str, split: str, columns: list[str] | None,
                families: Collection[str] | None = None,
                run_ids: Collection[str] | None = None) -> Iterator[pa.RecordBatch]:
        from datasets import load_dataset

        ds = load_dataset(self.name, config, split=split, streaming=True)
        if columns:
            ds = ds.select_columns(columns)
        for table in ds.with_format("arrow").iter(batch_size=64):
            yield from table.to_batches()


def _shard_files(folder: Path) -> list[Path]:
    """The shard files of one folder (hidden temporary files never match)."""
    return sorted(p for p in folder.iterdir() if p.suffix in layout.READ_SUFFIXES
                  and not p.name.startswith(".") and p.is_file())


@functools.cache
def arrow_schema(config: str) -> pa.Schema:
    """The on-disk Arrow schema of a config (``schema.arrow_schema``: ``datasets`` not imported)."""
    return schema.arrow_schema(config)


def open_source(source: str | Path, streaming: bool) -> Source:
    """A folder (a Hub repo id is downloaded first), or ``datasets`` streaming of either."""
    if streaming:
        return _StreamingSource(str(source))
    from .hub import resolve_dataset

    return _FolderSource(resolve_dataset(source), str(source))
