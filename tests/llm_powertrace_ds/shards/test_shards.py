import hashlib
import json

import pyarrow as pa
import pytest
from datasets import load_dataset

from llm_powertrace_ds import layout, schema, shards
from llm_powertrace_ds.errors import InputError, ShardError


def _hashes(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".staging" not in p.parts}


def test_publish_and_load_every_config(tmp_path, make_run):
    shards.publish_run(tmp_path, make_run("ft-1"))
    shards.publish_run(tmp_path, make_run("inf-1", workload="inference", family="qwen",
                                          platform="h100_sxm_80gb", with_requests=True))
    for config, split, rows in [("finetune", "l40s", 2), ("finetune-llama", "l40s", 2),
                                ("finetune_runs", "l40s", 1), ("inference", "h100_sxm_80gb", 2),
                                ("inference-qwen", "h100_sxm_80gb", 2),
                                ("inference_runs", "h100_sxm_80gb", 1),
                                ("inference_requests", "h100_sxm_80gb", 5)]:
        ds = load_dataset(str(tmp_path), config, split=split)
        assert ds.num_rows == rows, config
        assert ds.features == schema.features_for(config), config
        streamed = list(load_dataset(str(tmp_path), config, split=split, streaming=True))
        assert streamed == ds.to_list(), config


def test_round_trip_keeps_samples_and_nulls(tmp_path, make_run):
    run = make_run("ft-rt")
    shards.publish_run(tmp_path, run)
    back = shards.read_run(tmp_path, "ft-rt")
    assert len(back.devices) == 2
    for a, b in zip(run.devices, back.devices, strict=True):
        assert (a.t_ms == b.t_ms).all()
        assert abs(a.power_w - b.power_w).max() < 1e-3  # float32 on disk
        assert "temp_c" not in b.signals  # all-null signal stays null, never 0
    ds = load_dataset(str(tmp_path), "finetune", split="l40s")
    assert ds[0]["temp_c"] is None  # never reported: a null cell (issue 13), never zeros
    # run-level events on every device, rank events only on their own device
    kinds0 = [(e["kind"], e["rank"]) for e in ds[0]["events"]]
    kinds1 = [(e["kind"], e["rank"]) for e in ds[1]["events"]]
    assert ("step_end", 0) in kinds0 and ("step_end", 0) not in kinds1
    assert ("idle_begin", None) in kinds0 and ("idle_begin", None) in kinds1


def test_half_written_staging_run_is_invisible(tmp_path, make_run):
    shards.publish_run(tmp_path, make_run("done"))
    # a crashed run: staging folder with a spool, plus a temp file in data/
    sdir = layout.staging_dir(tmp_path, "crashed")
    sdir.mkdir(parents=True)
    (sdir / "status.json").write_text(json.dumps({"status": "running"}))
    table = shards.trace_table(make_run("crashed"))
    shards.write_table_atomic(sdir / "crashed.arrow", table)
    tmp = layout.trace_path(tmp_path, "finetune", "l40s", "llama", "crashed")
    tmp = tmp.with_name(".crashed.arrow.123.tmp")
    tmp.write_bytes(b"partial")
    shards.publish_run(tmp_path, make_run("inf", workload="inference", with_requests=True))
    (sdir / "requests.arrow").write_bytes(b"half")
    for config, splits in layout.config_globs(tmp_path).items():
        for split in splits:
            ds = load_dataset(str(tmp_path), config, split=split)
            assert ds.num_rows > 0 and "crashed" not in set(ds["run_id"]), (config, split)


def test_republish_is_idempotent_and_moves(tmp_path, make_run):
    shards.publish_run(tmp_path, make_run("same"))
    shards.publish_run(tmp_path, make_run("same"))
    ds = load_dataset(str(tmp_path), "finetune", split="l40s")
    assert ds.num_rows == 2
    # the same run re-imported with another family: the old file goes away
    res = shards.publish_run(tmp_path, make_run("same", family="qwen"))
    assert res.replaced
    assert shards.existing_run_files(tmp_path, "same") == sorted(
        [tmp_path / f for f in res.files])
    assert not layout.staging_dir(tmp_path, "same").exists()


def test_error_flags_refuse_publish_and_leave_folder_alone(tmp_path, make_run):
    shards.publish_run(tmp_path, make_run("good"))
    before = _hashes(tmp_path)
    bad = make_run("bad")
    bad.devices[0].t_ms[5] = bad.devices[0].t_ms[3]
    with pytest.raises(InputError, match="nonmonotonic_time|t_ms"):
        shards.publish_run(tmp_path, bad)
    assert _hashes(tmp_path) == before


def test_pack_never_loses_rows(tmp_path, make_run):
    src, dst = tmp_path / "src", tmp_path / "dst"
    for i in range(5):
        shards.publish_run(src, make_run(f"r{i}"), refresh_card=False)
    shards.publish_run(src, make_run("i0", workload="inference", with_requests=True))
    res = shards.pack(src, dst, max_shard_bytes=20_000)  # tiny: forces several shards
    assert res.rows["data/finetune/l40s/llama"] == 10
    assert res.shards["data/finetune/l40s/llama"] > 1
    names = sorted(p.name for p in (dst / "data/finetune/l40s/llama").iterdir())
    total = res.shards["data/finetune/l40s/llama"]
    assert names == [f"l40s-{i:05d}-of-{total:05d}.arrow" for i in range(total)]
    a = load_dataset(str(src), "finetune", split="l40s").sort(["run_id", "gpu_index"])
    b = load_dataset(str(dst), "finetune", split="l40s").sort(["run_id", "gpu_index"])
    assert a.to_list() == b.to_list()
    assert load_dataset(str(dst), "inference_requests", split="l40s").num_rows == 5
    with pytest.raises(ShardError, match="not empty"):
        shards.pack(src, dst)


def test_corrupt_shard_gives_one_line_error(tmp_path, make_run):
    shards.publish_run(tmp_path, make_run("ok"))
    path = layout.trace_path(tmp_path, "finetune", "l40s", "llama", "ok")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ShardError) as info:
        shards.read_table(path)
    msg = str(info.value)
    assert "\n" not in msg and "ok.arrow" in msg and msg.startswith("Failed to read")
    with pytest.raises(ShardError):
        shards.read_run(tmp_path, "ok")


def test_shards_carry_the_config_types_and_no_feature_metadata(tmp_path, make_run):
    """One small schema per file: the types, no per-file copy of the features as JSON."""
    shards.publish_run(tmp_path, make_run("meta"))
    table = shards.read_table(layout.trace_path(tmp_path, "finetune", "l40s", "llama", "meta"))
    assert table.schema.equals(schema.FEATURES["finetune"].arrow_schema)
    assert table.schema.metadata is None
    runs = shards.read_table(layout.runs_path(tmp_path, "finetune", "l40s", "meta"))
    assert runs.schema.equals(schema.FEATURES["finetune_runs"].arrow_schema)
    assert runs.schema.metadata is None
    assert pa.types.is_list(table.schema.field("events").type)
