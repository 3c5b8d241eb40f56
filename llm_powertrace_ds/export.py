"""Export a config to the long format (one row per tick per device) or as a flat file.

The long format is what pandas, polars and DuckDB users expect: the per-tick signal lists are
flattened and each run's scalar metadata is repeated alongside (``pyarrow.compute.list_flatten``
and ``list_parent_indices``, one record batch at a time, so memory stays bounded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import schema, shards
from .atomic import atomic_path
from .errors import InputError
from .traces import align_signal

FileFormat = Literal["parquet", "csv"]


def long_batch(batch: pa.RecordBatch) -> pa.Table:
    """Flatten one trace-config batch: one row per (run, device, tick).

    Scalar columns are repeated; the signal lists become columns; ``events`` and other list
    columns (``quality_flags``) are dropped or joined as text.
    """
    t_ms = batch.column("t_ms")
    parents = pc.list_parent_indices(t_ms)
    cols: dict[str, pa.Array] = {}
    for name in batch.schema.names:
        col = batch.column(name)
        if name in schema.SIGNAL_NAMES:
            cols[name] = align_signal(t_ms, col)  # a null cell: one null per tick
        elif name == "events":
            continue
        elif pa.types.is_list(col.type):
            joined = pc.binary_join(col, ";") if pa.types.is_string(col.type.value_type) else None
            if joined is not None:
                cols[name] = pc.take(joined, parents)
        else:
            cols[name] = pc.take(col, parents)
    return pa.table(cols)



def _export_table(batch: pa.RecordBatch, *, is_trace: bool, long: bool,
                  file_format: str) -> pa.Table:
    """One batch as the table to write (long form, or without list columns for CSV)."""
    if is_trace and long:
        return long_batch(batch)
    table = pa.Table.from_batches([batch])
    if file_format == "csv":
        lists = [f.name for f in table.schema if pa.types.is_list(f.type)]
        if lists and is_trace:
            raise InputError("CSV cannot hold per-tick lists: add --long", field="--file-format")
        table = table.drop_columns(lists)
    return table


def export(dir_or_root: str | Path, config: str, out: str | Path, *, split: str | None = None,
           long: bool = True, file_format: FileFormat = "parquet") -> int:
    """Write a config (and split) to ``out``; returns the number of rows written.

    Args:
        dir_or_root: dataset folder.
        config: a config name (``finetune``, ``inference-llama``, ``finetune_runs``, ...).
        out: output file (written under a temporary name, then renamed).
        split: one platform, or all when ``None``.
        long: flatten trace configs to one row per tick per device.
        file_format: ``parquet`` or ``csv``.

    Raises:
        InputError: unknown config, no data, or CSV of list columns without ``long``.
    """
    try:
        base = schema.base_config(config)
    except KeyError as exc:
        raise InputError(str(exc.args[0]), field="--config") from None
    is_trace = base in schema.TRACE_CONFIGS
    out = Path(out)
    if out.is_dir():
        raise InputError(f"'{out}' is a folder; --out takes a file path", field="--out")
    writer: pq.ParquetWriter | pacsv.CSVWriter | None = None
    rows = 0
    with atomic_path(out) as tmp:
        try:
            for batch in shards.iter_batches(dir_or_root, config, split):
                table = _export_table(batch, is_trace=is_trace, long=long,
                                      file_format=file_format)
                if writer is None:
                    writer = (pq.ParquetWriter(str(tmp), table.schema) if file_format == "parquet"
                              else pacsv.CSVWriter(str(tmp), table.schema))
                writer.write_table(table)
                rows += table.num_rows
            if writer is None:
                raise InputError(f"no rows for config {config!r}"
                                 + (f" split {split!r}" if split else ""), field="--config")
        finally:
            if writer is not None:
                writer.close()
    return rows
