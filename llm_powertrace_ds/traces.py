"""Fast access to traces as numpy arrays (the path docs/analyst-guide.md recommends to analysts).

``load_dataset`` returns a memory-mapped Arrow table; reading it row by row as Python lists is
slow for millions of samples. :func:`iter_trace_arrays` walks the table in Arrow record batches
(``Dataset.with_format("arrow")``) and slices each list column into zero-copy numpy views.

Example:
    >>> from datasets import load_dataset
    >>> ds = load_dataset("llm-powertrace", "finetune", split="cpu_proxy")  # doctest: +SKIP
    >>> for meta, t_ms, power_w in iter_trace_arrays(ds):  # doctest: +SKIP
    ...     print(meta["run_id"], meta["gpu_index"], power_w.mean())
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

META_COLUMNS = ("run_id", "node_index", "gpu_index", "platform", "model_family")


def align_signal(t_ms: pa.Array | pa.ChunkedArray, signal: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A signal's flat values aligned tick by tick with ``t_ms``'s flat values.

    A null cell (a signal the source never reported for that device, written without a value
    buffer) becomes one null per tick of the row, so the result is as long as ``t_ms``'s values.

    Args:
        t_ms: the ``t_ms`` list column.
        signal: a signal list column of the same rows.

    Returns:
        The flat signal values (nulls where not reported).
    """
    t_arr = pa.concat_arrays(t_ms.chunks) if isinstance(t_ms, pa.ChunkedArray) else t_ms
    s_arr = pa.concat_arrays(signal.chunks) if isinstance(signal, pa.ChunkedArray) else signal
    if s_arr.null_count == 0:
        return s_arr.flatten()
    t_off = t_arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    s_off = s_arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    lengths = np.diff(t_off)
    parents = np.repeat(np.arange(len(lengths)), lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(t_off[:-1] - t_off[0], lengths)
    valid = s_arr.is_valid().to_numpy(zero_copy_only=False)[parents]
    source = np.where(valid, s_off[parents] + within, 0)
    return s_arr.values.take(pa.array(source, mask=~valid))


def _list_to_numpy(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Flattened values (float64 with NaN for null, or int64 for ``t_ms``) and offsets."""
    if isinstance(arr, pa.ChunkedArray):
        arr = pa.concat_arrays(arr.chunks)
    offsets = arr.offsets.to_numpy()
    values = arr.values
    if values.null_count:
        flat = values.to_numpy(zero_copy_only=False).astype(np.float64)
    else:
        flat = values.to_numpy(zero_copy_only=False)
    return flat, offsets - offsets[0]


def iter_trace_arrays(dataset: Any, column: str = "power_w", *, batch_size: int = 64,
                      meta_columns: tuple[str, ...] = META_COLUMNS
                      ) -> Iterator[tuple[dict[str, Any], np.ndarray, np.ndarray]]:
    """Yield ``(meta, t_ms, values)`` per trace row of a trace-config ``datasets.Dataset``.

    Args:
        dataset: a ``datasets.Dataset`` of a trace config (``finetune``, ``inference``, ...).
        column: the signal to return beside ``t_ms`` (default ``power_w``).
        batch_size: rows per Arrow batch.
        meta_columns: scalar columns returned in ``meta``.

    Yields:
        meta: dict of the row's ``meta_columns``; t_ms: int64 ms; values: the signal (float32,
        or float64 with NaN where null).
    """
    cols = [c for c in meta_columns if c in dataset.column_names] + ["t_ms", column]
    arrow_ds = dataset.select_columns(list(dict.fromkeys(cols))).with_format("arrow")
    for batch in arrow_ds.iter(batch_size=batch_size):
        t_col = batch.column("t_ms")
        t_flat, t_off = _list_to_numpy(t_col)
        values = batch.column(column)
        if values.null_count:  # null cells (never reported): one NaN per tick
            flat = align_signal(t_col, values).to_numpy(zero_copy_only=False).astype(np.float64)
            v_flat, v_off = flat, t_off
        else:
            v_flat, v_off = _list_to_numpy(values)
        metas = {c: batch.column(c).to_pylist() for c in meta_columns if c in batch.column_names}
        for i in range(batch.num_rows):
            meta = {c: v[i] for c, v in metas.items()}
            yield meta, t_flat[t_off[i]:t_off[i + 1]], v_flat[v_off[i]:v_off[i + 1]]
