"""Issue 13's guarantees of the shard layer.

Null signals cost nothing, publishing never rebuilds the full card, ``pack`` streams, reading a
run is Arrow/numpy, compression round-trips.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from datasets import load_dataset

from llm_powertrace_ds import export, hooks, layout, shards, traces
from llm_powertrace_ds.errors import ShardError


def trace_file(root, run):  # noqa: ANN001, ANN201
    return layout.trace_path(root, run.workload, run.platform, run.model_family, run.run_id)


def test_never_reported_signal_is_a_null_cell_without_values(tmp_path, make_run):
    run = make_run("ft-null", n=500)
    shards.publish_run(tmp_path, run)
    table = shards.read_table(trace_file(tmp_path, run))
    temp = table.column("temp_c").combine_chunks()
    assert temp.null_count == table.num_rows  # one null cell per device ...
    assert len(temp.values) == 0  # ... and not one value (or null) per tick
    power = table.column("power_w").combine_chunks()
    assert power.null_count == 0 and len(power.values) == 2 * 500


def test_partly_missing_signal_keeps_its_per_tick_nulls(tmp_path, make_run):
    run = make_run("ft-part", n=50)
    run.devices[0].signals["power_avg_w"] = np.where(np.arange(50) % 5 == 0, np.nan, 100.0)
    shards.publish_run(tmp_path, run)
    back = shards.read_run(tmp_path, "ft-part")
    np.testing.assert_array_equal(back.devices[0].signals["power_avg_w"],
                                  run.devices[0].signals["power_avg_w"].astype(np.float32))
    assert "power_avg_w" not in back.devices[1].signals
    ds = load_dataset(str(tmp_path), "finetune", split="l40s", cache_dir=str(tmp_path / "c"))
    assert ds[0]["power_avg_w"][:2] == [None, 100.0] and ds[1]["power_avg_w"] is None


def test_null_cells_bytes_per_sample_is_small(tmp_path, make_run):
    run = make_run("ft-bytes", n=20_000)
    for dev in run.devices:  # an nvidia-smi import: power and utilisation only
        dev.signals = {"power_w": dev.signals["power_w"], "gpu_util_pct": dev.signals["gpu_util_pct"]}
    shards.publish_run(tmp_path, run)
    size = trace_file(tmp_path, run).stat().st_size
    assert size / (2 * 20_000) <= 12  # t_ms + power + utilisation, null signals free


def test_long_export_and_numpy_scan_align_null_cells(tmp_path, make_run):
    shards.publish_run(tmp_path, make_run("ft-x", n=30))
    table = shards.read_table(next(layout.data_root(tmp_path).glob("finetune/*/*/*.arrow")))
    long = export.long_batch(table.to_batches()[0])
    assert long.num_rows == 60 and long.column("temp_c").null_count == 60
    assert long.column("power_w").null_count == 0
    aligned = traces.align_signal(table.column("t_ms"), table.column("temp_c"))
    assert len(aligned) == 60 and aligned.null_count == 60
    ds = load_dataset(str(tmp_path), "finetune", split="l40s", cache_dir=str(tmp_path / "c"))
    for _, t_ms, temp in traces.iter_trace_arrays(ds, "temp_c"):
        assert len(temp) == len(t_ms) == 30 and np.isnan(temp).all()


def test_shards_are_compressed_and_load(tmp_path, make_run):
    run = make_run("ft-z", n=100)
    shards.publish_run(tmp_path, run)
    with pa.memory_map(str(trace_file(tmp_path, run))) as src:
        reader = ipc.open_stream(src)
        reader.read_all()
    assert shards.SHARD_COMPRESSION in (None, "zstd")
    streamed = list(load_dataset(str(tmp_path), "finetune", split="l40s", streaming=True))
    assert len(streamed) == 2 and len(streamed[0]["power_w"]) == 100


def test_publish_keeps_configs_block_but_not_the_full_card(tmp_path, make_run, monkeypatch):
    calls = []
    monkeypatch.setattr(hooks, "_card_writers", {"spy": calls.append})
    shards.publish_run(tmp_path, make_run("a"))
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert calls == [] and shards.CARD_PENDING in text
    meta, body = shards.split_front_matter(text)
    assert [c["config_name"] for c in meta["configs"]] == ["finetune", "finetune-llama",
                                                             "finetune_runs"]
    (tmp_path / "README.md").write_text(text.replace(shards.CARD_PENDING, "body kept"))
    shards.publish_run(tmp_path, make_run("b", platform="a10g"))  # a new split: new globs
    meta, body = shards.split_front_matter((tmp_path / "README.md").read_text())
    assert "body kept" in body
    assert {d["split"] for d in meta["configs"][0]["data_files"]} == {"a10g", "l40s"}
    shards.publish_run(tmp_path, make_run("c"))  # same folders: only the configs block changes
    meta2, body2 = shards.split_front_matter((tmp_path / "README.md").read_text())
    assert "body kept" in body2 and calls == []
    # the block's files fingerprint (datasets' cache key) follows the files
    assert meta2["configs"][0]["description"] != meta["configs"][0]["description"]
    hooks.rebuild_card(tmp_path)
    assert calls == [tmp_path]


def test_pack_streams_batches_and_refuses_mixed_schemas(tmp_path, make_run):
    src = tmp_path / "src"
    for i in range(3):
        shards.publish_run(src, make_run(f"r{i}", n=100))
    # a shard bound below one file: one shard per file, rows kept
    res = shards.pack(src, tmp_path / "p1", max_shard_bytes=1)
    assert res.shards["data/finetune/l40s/llama"] == 3 and res.rows["data/finetune/l40s/llama"] == 6
    back = {r.run_id: r for r in shards.iter_runs(tmp_path / "p1")}
    assert sorted(back) == ["r0", "r1", "r2"] and len(back["r1"].devices) == 2
    assert shards.read_run(tmp_path / "p1", "r2").run_id == "r2"
    odd = layout.trace_path(src, "finetune", "l40s", "llama", "odd")
    table = shards.read_table(layout.trace_path(src, "finetune", "l40s", "llama", "r0"))
    shards.write_table_atomic(odd, table.drop_columns(["seed"]))
    with pytest.raises(ShardError, match="schema differs"):
        shards.pack(src, tmp_path / "p2")
    assert not (tmp_path / "p2").exists()


def test_iter_runs_equals_read_run(tmp_path, make_run):
    for i in range(3):
        shards.publish_run(tmp_path, make_run(f"r{i}", seed=i, workload="inference",
                                              with_requests=True))
    for run in shards.iter_runs(tmp_path):
        one = shards.read_run(tmp_path, run.run_id)
        assert run.meta == one.meta and run.requests == one.requests and len(run.requests) == 5
        for a, b in zip(run.devices, one.devices, strict=True):
            np.testing.assert_array_equal(a.power_w, b.power_w)
            rows = shards.read_table(trace_file(tmp_path, run)).to_pylist()
            old = shards.run_from_rows(rows, root=tmp_path)
            np.testing.assert_array_equal(old.devices[0].power_w, run.devices[0].power_w)
            assert old.meta == run.meta
