"""Shard I/O: encode a ``Run`` to Arrow tables, publish atomically, pack, and read back.

Every shard is an Arrow IPC **stream** file whose schema is the config's ``schema.arrow_schema``
(the fields and types of ``Features.arrow_schema``, no ``huggingface`` metadata: ``datasets``
reads the exact list and struct features from the Arrow types). Scalar and event columns go
through ``features.encode_batch``; the per-tick signal lists are built directly from numpy
(offsets + values), which is what ``encode_batch`` would produce, without a Python object per
sample.

Publishing follows the run lifecycle of docs/design.md: ``.staging/<run_id>/status.json`` says
``complete`` then ``published``; each file is written under a hidden temporary name in its final
folder and renamed into place; a crash in between is repaired by publishing again (idempotent).
"""

from __future__ import annotations

from ..atomic import write_text_atomic
from ..errors import ShardError
from .encode import (
    COMPRESS_MIN_BYTES,
    DEFAULT_MAX_SHARD_BYTES,
    LOCK_TIMEOUT_S,
    PACKED_RE,
    SHARD_COMPRESSION,
    ipc_options,
    log,
    requests_table,
    runs_table,
    trace_table,
)
from .index import ShardIndex, batch_run_ids, read_parts
from .pack import PACKED_BATCH_BYTES, PackResult, pack
from .publish import (
    CARD_PENDING,
    PreparedRun,
    PublishResult,
    commit_run,
    discard_staged,
    existing_run_files,
    prepare_run,
    publish_run,
    repair_folder,
    set_status,
    split_front_matter,
    stage_run,
    write_configs_block,
)
from .read import (
    RunReader,
    count_rows,
    file_schema,
    iter_batches,
    iter_file_batches,
    iter_rows,
    iter_runs,
    list_runs,
    read_run,
    read_table,
    run_from_rows,
    runs_from_table,
)
from .write import (
    folder_lock,
    write_batches_atomic,
    write_table_atomic,
    write_tables_all_or_nothing,
)

__all__ = [
    "CARD_PENDING", "COMPRESS_MIN_BYTES", "DEFAULT_MAX_SHARD_BYTES", "LOCK_TIMEOUT_S",
    "PACKED_BATCH_BYTES", "PACKED_RE", "PackResult", "PreparedRun", "PublishResult",
    "RunReader", "SHARD_COMPRESSION", "ShardError", "ShardIndex", "batch_run_ids", "commit_run", "count_rows", "discard_staged", "existing_run_files",
    "file_schema", "folder_lock", "ipc_options", "iter_batches", "iter_file_batches",
    "iter_rows", "iter_runs", "list_runs", "log", "pack", "prepare_run", "publish_run",
    "read_parts", "read_run", "read_table", "repair_folder", "requests_table", "run_from_rows",
    "runs_from_table", "runs_table", "set_status", "split_front_matter", "stage_run",
    "trace_table", "write_batches_atomic", "write_configs_block", "write_table_atomic",
    "write_tables_all_or_nothing", "write_text_atomic",
]
