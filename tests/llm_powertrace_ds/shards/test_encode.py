"""The shard encoder's port of ``Features.encode_batch`` writes what ``datasets`` would."""

import datetime as dt
import decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from llm_powertrace_ds import schema
from llm_powertrace_ds.shards import encode


def _with_datasets(config, rows, extra=None):
    """``encode._table`` as it was: ``datasets``' own ``encode_batch`` on every cell."""
    features = schema.FEATURES[config]
    n = len(next(iter(rows.values())))
    full = {k: rows.get(k, [None] * n) for k in features if k not in (extra or {})}
    encoded = encode._restricted_features(config, tuple(full)).encode_batch(full)
    arrow_schema = features.arrow_schema
    arrays = [extra[f.name].cast(f.type) if extra and f.name in extra
              else pa.array(encoded[f.name], type=f.type) for f in arrow_schema]
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


def _same(a, b):
    assert a.schema.equals(b.schema, check_metadata=True)
    assert a.equals(b)
    sink_a, sink_b = pa.BufferOutputStream(), pa.BufferOutputStream()
    for table, sink in ((a, sink_a), (b, sink_b)):
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    assert sink_a.getvalue().to_pybytes() == sink_b.getvalue().to_pybytes()


def test_tables_of_runs_equal_datasets_encoding(make_run, monkeypatch):
    runs = [make_run("ft"), make_run("inf", workload="inference", family="qwen",
                                     platform="h100_sxm_80gb", with_requests=True)]
    captured = []
    real = encode._table

    def spy(config, rows, extra=None):
        captured.append((config, rows, extra))
        return real(config, rows, extra)

    monkeypatch.setattr(encode, "_table", spy)
    for run in runs:
        encode.trace_table(run)
        encode.runs_table(run, {"energy_j": np.float64(12.5), "peak_power_w": np.float32(300.25)})
        if run.requests:
            encode.requests_table(run)
    assert {c for c, _, _ in captured} >= {"finetune", "finetune_runs", "inference",
                                           "inference_runs", "inference_requests"}
    for config, rows, extra in captured:
        _same(real(config, rows, extra), _with_datasets(config, rows, extra))


@pytest.mark.parametrize("cells", [
    {"num_gpus": [np.int64(4)], "power_limit_w": [np.array(300.5)], "sweep": [np.str_("s")],
     "quality_flags": [("a", "b")], "start_time": [dt.datetime(2026, 1, 2, tzinfo=dt.UTC)]},
    {"num_gpus": [3.0], "repeat": [True], "run_id": [7], "quality_flags": [np.array(["x"])],
     "power_limit_w": [None], "start_time": [None]},
    {"quality_flags": [[]], "run_id": [None], "num_gpus": [np.int16(2)]},
    {"quality_flags": [[None, "late"]], "power_limit_w": [decimal.Decimal("1.5")]},  # foreign
    {"start_time": [pd.Timestamp("2026-01-02", tz="UTC")]},  # foreign: a pandas subclass
])
def test_odd_cells_encode_as_datasets_does(cells):
    _same(encode._table("finetune_runs", dict(cells)), _with_datasets("finetune_runs", cells))


def test_events_with_missing_keys_and_numpy_values():
    rows = {"run_id": ["r", "r"], "events": [
        [{"t_ms": np.int64(5), "kind": "stage", "label": "x"}],
        [{"t_ms": 1, "kind": "step", "step": 3, "rank": None, "request_id": None,
          "label": None}, {"t_ms": 2.0, "kind": "step"}],
    ]}
    _same(encode._table("finetune", rows), _with_datasets("finetune", rows))
