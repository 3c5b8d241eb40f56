"""Checks and copies ``upload.py`` makes before any network call: loads, shard schemas, Parquet.

The Hub publisher (``upload.py``, above ``cards``) uses them; they need only the library, so they
live here, where a test or a script can import them without the publisher.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import PowerTraceError

PARQUET_ROW_GROUP_BYTES = 64 * 1024**2


class UploadError(PowerTraceError):
    """A failure reported as one line (exit code 1)."""


def check_loads(root: Path, cache_dir: Path) -> list[tuple[str, str]]:
    """Load every (config, split) of the card with ``load_dataset``; return the pairs.

    Each split is loaded with ``streaming=True`` and its first row read: the same loader and
    card path as a user's ``load_dataset``, without preparing a cached copy of the data (which
    cost up to 5x the dataset in temporary disk, issue 13). Every shard's schema and row count
    are checked at the Arrow level by :func:`check_shards`.

    Raises:
        UploadError: naming the first (config, split) that does not load.
    """
    import datasets
    from huggingface_hub import DatasetCard

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    card = DatasetCard.load(root / "README.md")
    pairs = []
    for entry in card.data.to_dict().get("configs") or []:
        config = entry["config_name"]
        for files in entry["data_files"]:
            split = files["split"]
            try:
                stream = datasets.load_dataset(str(root), config, split=split, streaming=True,
                                               cache_dir=str(cache_dir))
                first_row = next(iter(stream), None)
            except Exception as exc:  # any loader failure is reported as one line
                first = str(exc).splitlines()[0] if str(exc) else ""
                raise UploadError(f"config {config!r} split {split!r} of '{root}' does not "
                                  f"load: {type(exc).__name__}: {first}") from exc
            if first_row is None:
                raise UploadError(f"config {config!r} split {split!r} of '{root}' loads no rows")
            pairs.append((config, split))
    return pairs


def check_shards(root: Path) -> list[tuple[str, str]]:
    """Arrow-level check of every shard the folder's configs declare; return the pairs.

    Every shard must carry its config's exact fields and types (``schema.arrow_schema``; the
    ``huggingface`` metadata older files carry is ignored: ``datasets`` reads the same features
    from the types) and every split must hold rows. Nothing is copied or cached.

    Raises:
        UploadError: naming the first file or (config, split) that fails.
    """
    from . import layout, schema
    from .errors import ShardError
    from .shards import count_rows, file_schema

    pairs = []
    for config, splits in layout.config_globs(root).items():
        expected = schema.arrow_schema(config)
        for split in splits:
            rows = 0
            for path in layout.shard_files(root, config, split):
                try:
                    if not file_schema(path).equals(expected):
                        raise UploadError(f"'{path}' does not have the schema of config "
                                          f"{config!r} (written by another schema version?)")
                    rows += count_rows(path)
                except ShardError as exc:
                    raise UploadError(str(exc)) from None
            if rows == 0:
                raise UploadError(f"config {config!r} split {split!r} of '{root}' has no rows")
            pairs.append((config, split))
    return pairs


# ---------------------------------------------------------------------------------------------
# The upload copy
# ---------------------------------------------------------------------------------------------

def parquet_writer_options() -> dict[str, Any]:
    """Content-defined chunking and the page index, where the installed pyarrow has them."""
    import pyarrow.parquet as pq

    params = inspect.signature(pq.ParquetWriter.__init__).parameters
    opts: dict[str, Any] = {"compression": "zstd"}
    if "use_content_defined_chunking" in params:
        opts["use_content_defined_chunking"] = True
    if "write_page_index" in params:
        opts["write_page_index"] = True
    return opts


def write_parquet_copy(src: Path, dst: Path, *, remove_source: bool = False,
                       on_file: Callable[[], None] | None = None) -> int:
    """Write every Arrow shard of ``src`` as Parquet under the same path in ``dst``.

    Row groups follow the lookups readers make: in a trace config's shard each run is its own
    row group (its ``run_id`` statistics have ``min == max``, so DuckDB, Spark, Polars and
    ``shards.ShardIndex`` skip every other run's pages by the footer alone), split further only
    past ``PARQUET_ROW_GROUP_BYTES``; a runs or requests table is cut by
    ``PARQUET_ROW_GROUP_BYTES`` only (few, large row groups). Each Parquet file is read back and
    compared with its Arrow shard (same schema, including the ``huggingface`` metadata, and
    same rows).

    Args:
        src: the packed Arrow folder.
        dst: the Parquet folder.
        remove_source: delete each Arrow shard once its Parquet twin is checked, so the two
            copies never coexist (temporary disk: one dataset plus one shard).
        on_file: called after each file (e.g. to measure the temporary disk).

    Returns:
        The number of files written.

    Raises:
        UploadError: a file does not round-trip.
    """
    import pyarrow.parquet as pq

    from . import schema
    from .atomic import atomic_path
    from .shards import read_table

    opts = parquet_writer_options()
    n = 0
    for path in sorted((src / "data").rglob("*.arrow")):
        rel = path.relative_to(src)
        if any(part.startswith(".") for part in rel.parts):
            continue
        table = read_table(path)
        out = dst / rel.with_suffix(".parquet")
        out.parent.mkdir(parents=True, exist_ok=True)
        per_run = len(rel.parts) > 1 and rel.parts[1] in schema.TRACE_CONFIGS
        with atomic_path(out) as tmp, pq.ParquetWriter(str(tmp), table.schema, **opts) as writer:
            for group in _row_groups(table, per_run=per_run):
                writer.write_table(group, row_group_size=max(1, group.num_rows))
        back = pq.read_table(out)
        if back.schema.metadata != table.schema.metadata or not back.equals(table):
            raise UploadError(f"'{out}' does not round-trip to '{path}'")
        n += 1
        if on_file is not None:
            on_file()
        if remove_source:
            path.unlink()
    return n


def _row_groups(table: Any, *, per_run: bool) -> list[Any]:
    """Slices of ``table`` written as one row group each (see :func:`write_parquet_copy`)."""
    row_bytes = table.nbytes / max(1, table.num_rows)
    rows_per_group = max(1, int(PARQUET_ROW_GROUP_BYTES // max(1.0, row_bytes)))
    if not per_run or table.num_rows == 0:
        return [table.slice(i, rows_per_group) for i in range(0, max(1, table.num_rows),
                                                               rows_per_group)]
    ids = table.column("run_id").to_pylist()
    out = []
    start = 0
    for end in range(1, len(ids) + 1):
        if end < len(ids) and ids[end] == ids[start] and end - start < rows_per_group:
            continue
        out.append(table.slice(start, end - start))
        start = end
    return out
