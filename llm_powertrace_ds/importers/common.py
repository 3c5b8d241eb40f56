"""Shared machinery of the importers: CSV reading, value parsing, metadata and run assembly.

Every failure on bad input becomes an :class:`~llm_powertrace_ds.errors.InputError` whose
one-line message names the file, the line and the field; nothing here lets a traceback from
``csv``, ``numpy``, ``json`` or ``yaml`` escape.

Values are parsed a chunk of rows at a time and a column at a time (numpy first, a per-distinct
value Python fallback only when the fast path fails), so a log of a million lines imports in
seconds and never holds more than one chunk of strings in memory.
"""

from __future__ import annotations

from .assemble import (
    DeviceData,
    apply_device_defaults,
    assemble_run,
    base_meta,
    check_increasing,
    check_run_id,
    fill_model,
    finish_meta,
    is_1s_average,
    median_period_ms,
    mode_of,
    resolve_num_gpus,
    resolve_platform,
    split_device_meta,
)
from .csv_reader import Converter, CsvReader, Table, sniff_encoding
from .meta_files import (
    CHUNK_ROWS,
    MAX_META_CHARS,
    MAX_META_NODES,
    companion,
    family_from_name,
    file_sha256,
    list_names,
    load_meta_file,
    log,
    one_line,
    read_structured,
    resolve_zone,
    scrub_meta,
    scrub_text,
)
from .timestamps import format_utc_ms, local_to_utc_ms, timestamp_converter
from .values import (
    Factorizer,
    active_converter,
    is_null_token,
    numeric_converter,
    reasons_converter,
)

__all__ = [
    "CHUNK_ROWS", "Converter", "CsvReader", "DeviceData", "Factorizer", "MAX_META_CHARS",
    "MAX_META_NODES", "Table", "active_converter", "apply_device_defaults", "assemble_run",
    "base_meta", "check_increasing", "check_run_id", "companion", "family_from_name",
    "file_sha256", "fill_model", "finish_meta", "format_utc_ms", "is_1s_average", "is_null_token",
    "list_names", "load_meta_file", "local_to_utc_ms", "log", "median_period_ms", "mode_of",
    "numeric_converter", "one_line", "read_structured", "reasons_converter", "resolve_num_gpus",
    "resolve_platform", "resolve_zone", "scrub_meta", "scrub_text", "sniff_encoding",
    "split_device_meta", "timestamp_converter",
]
