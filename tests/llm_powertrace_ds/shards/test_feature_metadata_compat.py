"""Shards with and without the ``huggingface`` feature metadata, side by side.

Older writers copied the features into every file; files now carry the Arrow types only. A
folder holding both loads, queries and packs as one.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
from datasets import load_dataset

from llm_powertrace_ds import layout, schema, shards
from llm_powertrace_ds.query import Runs


def _with_feature_metadata(path, config: str) -> None:
    """Rewrite one shard as the older writers did: ``Features.arrow_schema``, metadata and all."""
    table = shards.read_table(path)
    old = schema.features_for(config).arrow_schema
    assert old.metadata and b"huggingface" in old.metadata
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, old) as writer:
        writer.write_table(table.cast(old))


def test_old_and_new_files_load_as_one_split(tmp_path, make_run, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    root = tmp_path / "ds"
    shards.publish_run(root, make_run("ft-a"), refresh_card=False)
    shards.publish_run(root, make_run("ft-b", seed=1), refresh_card=False)
    _with_feature_metadata(layout.trace_path(root, "finetune", "l40s", "llama", "ft-a"),
                           "finetune")
    _with_feature_metadata(layout.runs_path(root, "finetune", "l40s", "ft-a"), "finetune_runs")
    shards.write_configs_block(root)
    for config in ("finetune", "finetune_runs"):
        ds = load_dataset(str(root), config, split="l40s")
        assert ds.features == schema.features_for(config)
        assert sorted(set(ds["run_id"])) == ["ft-a", "ft-b"]
    assert Runs.load(root).run_ids() == ["ft-a", "ft-b"]
    packed = tmp_path / "packed"
    shards.pack(root, packed)
    ds = load_dataset(str(packed), "finetune_runs", split="l40s")
    assert ds.features == schema.features_for("finetune_runs") and ds.num_rows == 2
