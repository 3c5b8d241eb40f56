"""Cell-level pins of the trace encoder and the Arrow readers.

Found unpinned by mutation testing (``make mutation``): no test looked at the exact cells a
trace row gets for an integer signal with a gap, a device that never reported a signal ahead of
one that did, a one-tick or a zero-tick device; nor at the readers' column selection, split
filter, one-row tables or several runs in one table.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.errors import RunNotFound, ShardError
from llm_powertrace_ds.run import DeviceSeries, Run
from llm_powertrace_ds.shards import encode, read

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
