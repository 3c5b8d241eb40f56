import pytest
from datasets import load_dataset

from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.builder import LLMPowerTrace


@pytest.fixture
def folder(tmp_path, make_run):
    root = tmp_path / "ds"
    shards.publish_run(root, make_run("ft-a"), refresh_card=False)
    shards.publish_run(root, make_run("ft-b", family="qwen", platform="cpu_proxy"),
                       refresh_card=False)
    shards.publish_run(root, make_run("inf-a", workload="inference", with_requests=True))
    return root


def test_builder_equals_yaml_path_for_every_config(folder, tmp_path):
    globs = layout.config_globs(folder)
    assert {"finetune", "finetune-llama", "finetune-qwen", "finetune_runs", "inference",
            "inference-llama", "inference_runs", "inference_requests"} <= set(globs)
    for config, splits in globs.items():
        builder = LLMPowerTrace(config_name=config, data_dir=folder, cache_dir=str(tmp_path / "c"))
        builder.download_and_prepare()
        for split in splits:
            ours = builder.as_dataset(split=split)
            ref = load_dataset(str(folder), config, split=split)
            assert ours.features == ref.features, (config, split)
            key = ["run_id", "gpu_index"] if "gpu_index" in ref.column_names else ["run_id"]
            if config == "inference_requests":
                key = ["run_id", "request_id"]
            assert ours.sort(key).to_list() == ref.sort(key).to_list(), (config, split)
            streamed = list(builder.as_streaming_dataset(split=split))
            assert len(streamed) == ref.num_rows


def test_cache_is_not_stale_after_new_run(folder, tmp_path, make_run):
    cache = str(tmp_path / "c")
    b = LLMPowerTrace(config_name="finetune", data_dir=folder, cache_dir=cache)
    b.download_and_prepare()
    assert b.as_dataset(split="l40s").num_rows == 2
    shards.publish_run(folder, make_run("ft-c"))
    b2 = LLMPowerTrace(config_name="finetune", data_dir=folder, cache_dir=cache)
    b2.download_and_prepare()
    assert b2.as_dataset(split="l40s").num_rows == 4


def test_builder_needs_a_source():
    with pytest.raises(ValueError, match="data_dir"):
        LLMPowerTrace(config_name="finetune")
