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
    arrow_schema = features.arrow_schema.remove_metadata()  # files carry the types only
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
    # a sweep file's 1 for a flag and "1.5" for a number: converted as Value.encode_example does
    {"gradient_checkpointing": [1, 0], "tf32": [np.int64(1), None],
     "power_limit_w": ["1.5", "300"]},
    # list cells whose first non-null item needs encoding (decides whether every item is)
    {"quality_flags": [[None, 5], [7], None, [np.array(3)]], "num_gpus": [np.array(2), 1, 2, 3]},
    {"quality_flags": [None, [], [None, None, 8]], "run_id": [None, 4, "x"]},
    # the first non-null item decides, not the last: [5, "a"] is encoded item by item
    {"quality_flags": [[5, "a"], None], "repeat": [np.int16(1), 2.0]},
    {"quality_flags": [[[], "x"]], "repeat": [np.array(1)]},
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


@pytest.mark.parametrize("events", [
    [None, [None, {"t_ms": 1, "kind": "stage", "label": 7}], [{"t_ms": 2, "kind": 3}]],
    [[], [{"t_ms": np.array(4), "kind": "stage", "step": np.float64(2.0)}]],
    [[{"t_ms": 5, "kind": "stage", "label": "a"}, {"t_ms": 6, "kind": "stage", "label": 9}]],
    [[{"t_ms": 1, "kind": "stage", "label": 7},
      {"t_ms": 2, "kind": "stage", "step": None, "rank": None, "request_id": None,
       "label": "ok"}]],
])
def test_event_lists_whose_items_need_encoding(events):
    rows = {"run_id": ["r"] * len(events), "events": events}
    _same(encode._table("finetune", rows), _with_datasets("finetune", rows))


def test_defaults_of_a_run_that_does_not_say(make_run):
    """schema_version, num_gpus and quality_flags are filled when the run's meta lacks them."""
    run = make_run("bare", devices=3)
    for key in ("schema_version", "num_gpus", "quality_flags"):
        run.meta.pop(key, None)
    for table in (encode.trace_table(run), encode.runs_table(run, {})):
        assert set(table.column("schema_version").to_pylist()) == {schema.SCHEMA_VERSION}
        assert set(table.column("num_gpus").to_pylist()) == {3}
        assert table.column("quality_flags").to_pylist() == [[]] * table.num_rows
    said = make_run("said", devices=3, num_gpus=8, schema_version="0.9")
    said.add_flags("power_is_1s_average")
    row = encode.runs_table(said, {}).to_pylist()[0]
    assert (row["num_gpus"], row["schema_version"]) == (8, "0.9")  # what the run says is kept
    assert row["quality_flags"] == ["power_is_1s_average"]


def test_runs_row_names_a_device_setting_only_when_every_device_shares_it(make_run):
    run = make_run("same", devices=2)
    row = encode.runs_table(run, {"energy_j": 12.5, "not_a_column": 1}).to_pylist()[0]
    assert (row["gpu_name"], row["power_limit_w"], row["default_power_limit_w"]) == \
        ("NVIDIA L40S", 350.0, 350.0)
    assert row["energy_j"] == 12.5 and "not_a_column" not in row
    mixed = make_run("mixed", devices=2)
    mixed.devices[1].gpu_name = "NVIDIA A100"
    mixed.devices[1].power_limit_w = 300.0
    mixed.devices[1].default_power_limit_w = 400.0
    row = encode.runs_table(mixed, {}).to_pylist()[0]
    assert (row["gpu_name"], row["power_limit_w"], row["default_power_limit_w"]) == \
        (None, None, None)
    named = make_run("named", devices=2, gpu_name="NVIDIA H100")  # the run's meta wins
    named.devices[1].gpu_name = "NVIDIA A100"
    assert encode.runs_table(named, {}).column("gpu_name").to_pylist() == ["NVIDIA H100"]


def test_trace_rows_carry_each_devices_own_settings_and_events(make_run):
    run = make_run("per-device", devices=2)
    run.devices[1].power_limit_w = 300.0
    rows = encode.trace_table(run).to_pylist()
    assert [(r["gpu_index"], r["gpu_uuid_hash"], r["power_limit_w"]) for r in rows] == \
        [(0, "h0", 350.0), (1, "h1", 300.0)]
    kinds = [[(e["kind"], e["rank"]) for e in r["events"]] for r in rows]
    assert ("step_begin", 0) in kinds[0] and ("step_begin", 1) in kinds[1]
    assert ("step_begin", 1) not in kinds[0]  # a rank's event sits on its own device's row


@pytest.mark.parametrize("nbytes, compressed", [(None, True), (encode.COMPRESS_MIN_BYTES, True),
                                                (encode.COMPRESS_MIN_BYTES - 1, False), (0, False)])
def test_small_shards_are_not_compressed(nbytes, compressed):
    options = encode.ipc_options(nbytes)
    assert (options.compression is not None) == (compressed and encode.SHARD_COMPRESSION is not None)
    if compressed and encode.SHARD_COMPRESSION:
        assert options.compression == encode.SHARD_COMPRESSION
