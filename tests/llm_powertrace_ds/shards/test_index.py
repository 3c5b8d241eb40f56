"""The packed layout read by run: ``ShardIndex``, ``RunReader``, merged runs tables (issue 40)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from llm_powertrace_ds import facility as fac
from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.errors import RunNotFound
from llm_powertrace_ds.hub_upload import write_parquet_copy
from llm_powertrace_ds.query import Runs
from llm_powertrace_ds.shards import index as index_mod


def _folder(tmp_path, make_run, n=6):
    src = tmp_path / "src"
    for i in range(n):
        shards.publish_run(src, make_run(f"r{i}", seed=i), refresh_card=False)
    for i in range(2):
        shards.publish_run(src, make_run(f"i{i}", workload="inference", with_requests=True,
                                         seed=10 + i), refresh_card=False)
    return src


@pytest.fixture
def packed(tmp_path, make_run):
    src = _folder(tmp_path, make_run)
    dst = tmp_path / "packed"
    shards.pack(src, dst, refresh_card=False)
    return src, dst


def _batches(path):
    with open(path, "rb") as fh:
        return [b.num_rows for b in ipc.open_stream(fh)]


def _zero_copy(path) -> bool:
    """Whether every batch's buffers are slices of the mapped file (written uncompressed)."""
    with pa.memory_map(str(path), "r") as source:
        messages = ipc.MessageReader.open_stream(source)
        schema_ = ipc.read_schema(messages.read_next_message())
        for message in messages:
            lo = message.body.address
            hi = lo + message.body.size
            batch = ipc.read_record_batch(message, schema_)
            for col in batch.columns:
                for buf in col.buffers():
                    if buf is not None and buf.size and not lo <= buf.address < hi:
                        return False
    return True


def _same_run(a, b):
    assert a.meta == b.meta
    assert [d.gpu_index for d in a.devices] == [d.gpu_index for d in b.devices]
    for da, db in zip(a.devices, b.devices, strict=True):
        np.testing.assert_array_equal(da.t_ms, db.t_ms)
        assert set(da.signals) == set(db.signals)
        for k in da.signals:
            np.testing.assert_array_equal(da.signals[k], db.signals[k])
    assert a.events == b.events
    assert a.requests == b.requests


def test_pack_merges_runs_rows_into_one_uncompressed_batch(packed):
    _, dst = packed
    [runs_shard] = layout.shard_files(dst, "finetune_runs")
    assert _batches(runs_shard) == [6]  # one batch, not one per run
    # a small table stays uncompressed (COMPRESS_MIN_BYTES): read without decompressing
    assert _zero_copy(runs_shard)
    [requests_shard] = layout.shard_files(dst, "inference_requests")
    assert _batches(requests_shard) == [10]  # two runs' request logs in one batch
    assert sorted(r["run_id"] for r in shards.list_runs(dst)) == \
        sorted(r["run_id"] for r in shards.list_runs(packed[0]))


def test_index_maps_each_run_to_its_batches(packed):
    _, dst = packed
    [trace] = layout.shard_files(dst, "finetune")
    per_batch = shards.batch_run_ids(trace)
    assert per_batch == [[f"r{i}"] for i in range(6)]
    idx = shards.ShardIndex([trace])
    assert idx.run_ids() == [f"r{i}" for i in range(6)]
    assert idx.locate("r3") == {trace: [3]}
    assert idx.locate("nope") == {}


def test_reading_runs_decodes_only_their_batches(packed, monkeypatch):
    src, dst = packed
    decoded = []
    real = index_mod.ipc.read_record_batch

    def spy(message, schema_):
        batch = real(message, schema_)
        decoded.append(batch.column(batch.schema.get_field_index("run_id"))[0].as_py())
        return batch

    monkeypatch.setattr(index_mod.ipc, "read_record_batch", spy)
    reader = shards.RunReader(dst)
    got = {run.run_id: run for run in reader.read_many(["r4", "r1"])}
    assert sorted(decoded) == ["r1", "r4"]  # two batches of the six-run shard, nothing else
    for run_id in ("r1", "r4"):
        _same_run(got[run_id], shards.read_run(src, run_id))


def test_packed_runs_equal_unpacked_ones_requests_too(packed):
    src, dst = packed
    reader = shards.RunReader(dst)
    for run_id in ("r0", "r5", "i0", "i1"):
        _same_run(reader.read(run_id), shards.read_run(src, run_id))
    assert len(reader.read("i1").requests) == 5  # its rows only, out of a two-run batch
    with pytest.raises(RunNotFound, match="'nope'"):
        reader.read("nope")
    assert [r.run_id for r in reader.read_many(["nope", "r2"])] == ["r2"]


def test_parquet_copy_has_one_row_group_per_run_found_from_the_footer(packed, tmp_path,
                                                                      monkeypatch):
    src, dst = packed
    out = tmp_path / "parquet"
    write_parquet_copy(dst, out)
    [trace] = layout.shard_files(out, "finetune")
    meta = pq.ParquetFile(trace).metadata
    assert meta.num_row_groups == 6
    assert [len(meta.row_group(i).column(0).statistics.min) > 0 for i in range(6)] == [True] * 6

    def no_page_read(*args, **kwargs):
        raise AssertionError("the index read a page")

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", no_page_read)
    assert shards.batch_run_ids(trace) == [[f"r{i}"] for i in range(6)]
    monkeypatch.undo()
    reader = shards.RunReader(out)
    _same_run(reader.read("r2"), shards.read_run(src, "r2"))
    _same_run(reader.read("i0"), shards.read_run(src, "i0"))


def test_query_traces_of_a_packed_folder_equal_unpacked(packed):
    src, dst = packed
    want = {(r.run_id, t.gpu_index): t.power_w
            for r, t in Runs.load(src, "finetune").where(run_id="r3").traces()}
    got = {(r.run_id, t.gpu_index): t.power_w
           for r, t in Runs.load(dst, "finetune").where(run_id="r3").traces()}
    assert want.keys() == got.keys() == {("r3", 0), ("r3", 1)}
    for k in want:
        np.testing.assert_array_equal(want[k], got[k])


def _in_layout(tmp_path, src, layout_: str):
    """``src`` as it is ("unpacked"), packed, or packed and copied as Parquet."""
    if layout_ == "unpacked":
        return src
    shards.pack(src, tmp_path / "packed", refresh_card=False)
    if layout_ == "packed":
        return tmp_path / "packed"
    write_parquet_copy(tmp_path / "packed", tmp_path / "parquet")
    return tmp_path / "parquet"


@pytest.mark.parametrize("layout_", ["unpacked", "packed", "parquet"])
def test_facility_reads_only_runs_that_get_a_job(tmp_path, make_run, layout_):
    src = _folder(tmp_path, make_run, n=5)
    root = _in_layout(tmp_path, src, layout_)
    if layout_ == "unpacked":  # runs r2..r4 get no job: their traces may be gone, nothing reads them
        for i in (2, 3, 4):
            layout.trace_path(src, "finetune", "l40s", "llama", f"r{i}").unlink()
    cfg = fac.FacilityConfig(gpus=16, gpus_per_node=8, duration_s=10.0)
    res = fac.run_facility(root, cfg, config="finetune_runs")
    assert [s.run_id for s in res.sources] == ["r0", "r1"]
    assert [s.share for s in res.sources] == [0.2, 0.2]  # shares of the whole selection
    first = res.limits[0]
    assert first.startswith("composed, not measured: 16 GPUs from 2 source run(s) (those of "
                            "the 5 run(s) of finetune_runs (every run) that get a job): r0, r1")
    assert "r2" not in " ".join(res.limits)
    # the jobs are those the whole selection would get
    every = fac.select_sources(src, config="finetune_runs") if layout_ != "unpacked" else None
    if every is not None:
        full = fac.compose(every, cfg)
        assert [(j.source, j.nodes) for j in full.jobs] == [(j.source, j.nodes) for j in res.jobs]
        np.testing.assert_array_equal(full.facility_w, res.facility_w)


def test_metrics_recompute_on_a_packed_folder_equals_unpacked(packed):
    from llm_powertrace_ds.metrics.rows import run_metrics_rows

    src, dst = packed
    assert run_metrics_rows(dst, recompute=True) == run_metrics_rows(src, recompute=True)


def test_merged_batches_are_bounded_by_packed_batch_bytes(tmp_path, make_run, monkeypatch):
    import importlib

    pack_mod = importlib.import_module("llm_powertrace_ds.shards.pack")  # not the function
    src = _folder(tmp_path, make_run, n=6)
    one = layout.shard_files(src, "finetune_runs")[0]
    with pa.memory_map(str(one), "r") as source:
        row_bytes = ipc.open_stream(source).read_next_batch().get_total_buffer_size()
    monkeypatch.setattr(pack_mod, "PACKED_BATCH_BYTES", 2 * row_bytes)  # two runs a batch
    dst = tmp_path / "packed2"
    shards.pack(src, dst, refresh_card=False)
    [runs_shard] = layout.shard_files(dst, "finetune_runs")
    assert _batches(runs_shard) == [2, 2, 2]
    assert shards.list_runs(dst) == shards.list_runs(src)


def test_read_many_with_columns_returns_only_those(packed):
    src, dst = packed
    full = shards.read_run(src, "r1")
    for root in (src, dst):
        [run] = shards.RunReader(root).read_many(["r1"], columns=("power_w", "sampler"))
        assert set(run.meta) == {"run_id", "workload", "platform", "sampler"}
        assert [d.gpu_index for d in run.devices] == [d.gpu_index for d in full.devices]
        for got, want in zip(run.devices, full.devices, strict=True):
            assert set(got.signals) == {"power_w"}
            np.testing.assert_array_equal(got.t_ms, want.t_ms)
            np.testing.assert_array_equal(got.power_w, want.power_w)


@pytest.mark.parametrize("layout_", ["unpacked", "packed", "parquet"])
def test_facility_json_equals_the_one_from_fully_read_runs(tmp_path, make_run, layout_,
                                                           monkeypatch):
    import json

    from llm_powertrace_ds.facility import sources as sources_mod

    src = _folder(tmp_path, make_run, n=5)
    root = _in_layout(tmp_path, src, layout_)
    cfg = fac.FacilityConfig(gpus=64, gpus_per_node=8, duration_s=30.0)
    res = fac.run_facility(root, cfg, config="finetune_runs")
    got = json.dumps(fac.to_json(res), sort_keys=True)
    monkeypatch.setattr(sources_mod, "TRACE_COLUMNS", None)  # every column of every run
    want = json.dumps(fac.to_json(fac.run_facility(src, cfg, config="finetune_runs")),
                      sort_keys=True)
    assert len(res.sources) >= 2
    assert got == want


def test_reading_no_column_the_shard_has_returns_rows_without_columns(packed):
    src, dst = packed
    [trace] = layout.shard_files(dst, "finetune")
    [batch] = list(shards.read_parts(trace, [2], ["no_such_column"]))
    assert (batch.num_rows, batch.num_columns) == (2, 0)
    one = layout.trace_path(src, "finetune", "l40s", "llama", "r1")
    table = shards.read_table(one, ["no_such_column"])
    assert (table.num_rows, table.num_columns) == (2, 0)
