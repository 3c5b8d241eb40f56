"""The shard encoder's port of ``Features.encode_batch`` writes what ``datasets`` would.

Also the exact cells a trace row gets for an integer signal with a gap, a device that never
reported a signal ahead of one that did, a one-tick or a zero-tick device; and the readers'
column selection, split filter, one-row tables and several runs in one table.
"""

import datetime as dt
import decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from llm_powertrace_ds import layout, schema, shards
from llm_powertrace_ds.errors import RunNotFound, ShardError
from llm_powertrace_ds.run import DeviceSeries, Run
from llm_powertrace_ds.shards import encode, read


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


NAN = np.nan


def _meta(run_id: str = "enc", **extra) -> dict:
    meta = {"run_id": run_id, "workload": "finetune", "platform": "l40s",
            "model_family": "llama", "sample_period_ms": 100.0}
    meta.update(extra)
    return meta


def _odd_devices() -> list[DeviceSeries]:
    return [
        # never reported power (NaN at every tick); utilisation with a gap and fractions
        DeviceSeries(0, [0, 100], {"power_w": [NAN, NAN], "gpu_util_pct": [49.6, NAN]}),
        # one tick
        DeviceSeries(1, [0], {"power_w": [250.0], "gpu_util_pct": [3.2]}),
        # no tick at all, an empty signal
        DeviceSeries(2, [], {"power_w": []}),
    ]


def test_trace_cells_of_gaps_absent_signals_and_short_devices():
    table = encode.trace_table(Run(_meta(), _odd_devices(), []))
    assert table.column("t_ms").to_pylist() == [[0, 100], [0], []]
    # a device that never reported a signal gets a null cell, and the next device's values
    # stay its own (the value buffer holds only reported devices)
    assert table.column("power_w").to_pylist() == [None, [250.0], None]
    # integers are rounded to nearest, a gap is a null, not a 0
    assert table.column("gpu_util_pct").to_pylist() == [[50, None], [3], None]
    assert table.column("temp_c").to_pylist() == [None, None, None]
    assert table.schema.field("gpu_util_pct").type == pa.list_(pa.int16())
    assert table.schema.field("t_ms").type == pa.list_(pa.int64())


def test_trace_table_of_a_run_without_devices_is_empty():
    table = encode.trace_table(Run(_meta(), [], []))
    assert table.num_rows == 0
    assert table.schema.names == encode._arrow_schema("finetune").names


def test_requests_table_names_its_run_and_platform(make_run):
    run = make_run("req-pins", workload="inference", platform="h100_sxm_80gb",
                   with_requests=True)
    table = encode.requests_table(run)
    rows = table.to_pylist()
    assert [r["run_id"] for r in rows] == ["req-pins"] * 5
    assert [r["platform"] for r in rows] == ["h100_sxm_80gb"] * 5
    assert [r["request_id"] for r in rows] == [f"r{i}" for i in range(5)]
    assert [r["finish_ms"] for r in rows] == [100 * i + 400 for i in range(5)]


def test_requests_read_back_without_the_keys_the_row_adds(tmp_path, make_run):
    run = make_run("req-back", workload="inference", platform="h100_sxm_80gb",
                   with_requests=True)
    shards.publish_run(tmp_path, run, refresh_card=False)
    back = shards.read_run(tmp_path, "req-back")
    assert back.requests is not None
    got = [{k: v for k, v in r.items() if v is not None} for r in back.requests]
    assert got == run.requests
    assert all("run_id" not in r and "platform" not in r for r in back.requests)
    # run_from_rows attaches them too when given the folder, and only then
    rows = list(shards.iter_rows(tmp_path, "inference"))
    assert shards.run_from_rows(rows, root=tmp_path).requests == back.requests
    assert shards.run_from_rows(rows).requests is None


def _table_of(*runs: Run) -> pa.Table:
    return pa.concat_tables([encode.trace_table(r) for r in runs])


def _one_device_run(run_id: str, power: float, n: int = 3) -> Run:
    t = np.arange(n) * 100
    return Run(_meta(run_id), [DeviceSeries(0, t, {"power_w": np.full(n, power)})], [])


def test_runs_from_table_splits_consecutive_runs_of_any_size():
    two = Run(_meta("b"), [DeviceSeries(0, [0, 100], {"power_w": [1.0, 2.0]}),
                           DeviceSeries(1, [0, 100], {"power_w": [3.0, 4.0]})], [])
    table = _table_of(_one_device_run("a", 10.0), two, _one_device_run("c", 30.0))
    runs = list(read.runs_from_table(table))
    assert [r.run_id for r in runs] == ["a", "b", "c"]
    assert [len(r.devices) for r in runs] == [1, 2, 1]
    assert [float(r.devices[0].power_w[0]) for r in runs] == [10.0, 1.0, 30.0]
    assert [r.run_id for r in read.runs_from_table(table, only="c")] == ["c"]


def test_a_one_device_table_reads_back():
    runs = list(read.runs_from_table(_table_of(_one_device_run("solo", 5.0))))
    assert [r.run_id for r in runs] == ["solo"]
    assert runs[0].meta["platform"] == "l40s"
    back = shards.run_from_rows(_table_of(_one_device_run("solo", 5.0)).to_pylist())
    assert back.run_id == "solo" and len(back.devices) == 1


def test_integer_signal_with_a_gap_reads_back_as_nan():
    table = encode.trace_table(Run(_meta(), _odd_devices(), []))
    run = next(read.runs_from_table(table))
    np.testing.assert_array_equal(run.devices[0].signals["gpu_util_pct"], [50.0, NAN])
    assert run.devices[1].signals["gpu_util_pct"].tolist() == [3.0]
    assert "power_w" not in run.devices[0].signals and "power_w" not in run.devices[2].signals


def test_a_list_of_nulls_from_another_writer_is_no_signal():
    """A writer other than ours may store "never reported" as a list of nulls, not a null."""
    table = encode.trace_table(_one_device_run("nulls", 7.0, n=2))
    i = table.schema.get_field_index("power_w")
    nulls = pa.array([[None, None]], type=table.schema.field("power_w").type)
    table = table.set_column(i, table.schema.field("power_w"), nulls)
    run = next(read.runs_from_table(table))
    assert "power_w" not in run.devices[0].signals


def _publish_two_platforms(root) -> None:
    for run_id, platform in (("p-a", "l40s"), ("p-b", "h100_sxm_80gb")):
        run = _one_device_run(run_id, 9.0)
        run.meta["platform"] = platform
        shards.publish_run(root, run, refresh_card=False)


def test_iter_batches_and_rows_filter_the_split_and_order_the_columns(tmp_path):
    _publish_two_platforms(tmp_path)
    cols = ["platform", "run_id"]  # not the file's order
    batches = list(shards.iter_batches(tmp_path, "finetune", "l40s", cols))
    assert [b.schema.names for b in batches] == [cols]
    assert [b.to_pylist() for b in batches] == [[{"platform": "l40s", "run_id": "p-a"}]]
    rows = list(shards.iter_rows(tmp_path, "finetune", "h100_sxm_80gb", cols))
    assert rows == [{"platform": "h100_sxm_80gb", "run_id": "p-b"}]
    assert len(list(shards.iter_rows(tmp_path, "finetune"))) == 2


def test_iter_file_batches_reads_only_the_columns_asked(tmp_path):
    shards.publish_run(tmp_path, _one_device_run("cols", 9.0), refresh_card=False)
    path = layout.trace_path(tmp_path, "finetune", "l40s", "llama", "cols")
    batches = list(read.iter_file_batches(path, ["run_id", "not_a_column"]))
    assert [b.schema.names for b in batches] == [["run_id"]]
    pq_path = tmp_path / "cols.parquet"
    pq.write_table(read.read_table(path), pq_path)
    batches = list(read.iter_file_batches(pq_path, ["run_id"]))
    assert [b.schema.names for b in batches] == [["run_id"]]
    assert read.count_rows(path) == 1


def _arrow_error(path) -> str:
    try:
        with pa.OSFile(str(path), "rb") as source:
            ipc.open_stream(source).read_all()
    except (OSError, pa.ArrowInvalid) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    raise AssertionError("the file read")


def test_unreadable_shards_are_named_with_the_reason(tmp_path):
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(b"not arrow at all, not even close")
    reason = _arrow_error(bad)
    expected = f"Failed to read '{bad}': {reason}"
    with pytest.raises(ShardError) as exc:
        read.read_table(bad)
    assert str(exc.value) == expected
    with pytest.raises(ShardError) as exc:
        read.file_schema(bad)
    assert str(exc.value) == expected
    # in a folder: the batch reader names the file in the same way
    folder = layout.data_root(tmp_path / "ds") / "finetune" / "l40s" / "llama"
    folder.mkdir(parents=True)
    (folder / "x.arrow").write_bytes(bad.read_bytes())
    with pytest.raises(ShardError) as exc:
        list(shards.iter_batches(tmp_path / "ds", "finetune"))
    assert str(exc.value).startswith(f"Failed to read '{folder / 'x.arrow'}': ArrowInvalid: ")
    missing = tmp_path / "missing.arrow"
    with pytest.raises(ShardError) as exc:
        read.read_table(missing)
    assert str(exc.value).startswith(f"Failed to read '{missing}': FileNotFoundError: ")


def test_a_run_that_is_not_there_is_named(tmp_path):
    shards.publish_run(tmp_path, _one_device_run("here", 9.0), refresh_card=False)
    with pytest.raises(RunNotFound) as exc:
        shards.read_run(tmp_path, "gone")
    assert str(exc.value) == f"run 'gone' is not in {tmp_path}"
