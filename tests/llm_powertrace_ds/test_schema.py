import pytest
from datasets import Value

from llm_powertrace_ds import schema


@pytest.mark.parametrize(("name", "slug", "flags"), [
    ("NVIDIA H100 80GB HBM3", "h100_sxm_80gb", ()),
    ("NVIDIA H100 PCIe", "h100_pcie_80gb", ()),
    ("NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb", ()),
    ("NVIDIA A100-SXM4-40GB", "a100_sxm4_40gb", ()),
    ("NVIDIA A100 80GB PCIe", "a100_pcie_80gb", ()),
    ("NVIDIA A100-PCIE-40GB", "a100_pcie_40gb", ()),
    ("NVIDIA L40S", "l40s", ()),
    ("NVIDIA H200", "h200_sxm_141gb", ()),
    ("NVIDIA H200 NVL", "h200_nvl_141gb", ()),
    ("NVIDIA L4", "l4", ()),
    ("Tesla T4", "t4", ()),
    ("NVIDIA A10G", "a10g", ()),
    ("A100", "a100", ("form_factor_unknown",)),
    ("H100", "h100", ("form_factor_unknown",)),
    ("H200", "h200", ("form_factor_unknown",)),
    ("L40s", "l40s", ("form_factor_unknown",)),
    (None, "unknown", ("platform_unknown",)),
    ("", "unknown", ("platform_unknown",)),
    ("NVIDIA GeForce RTX 4090", "geforce_rtx_4090", ()),
    ("cpu_proxy", "cpu_proxy", ("cpu_proxy",)),
])
def test_platform_slugs(name, slug, flags):
    info = schema.platform_from_name(name)
    assert info.slug == slug
    assert info.flags == flags
    assert schema.SPLIT_NAME_RE.match(info.slug)


def test_unknown_names_give_deterministic_split_safe_slugs():
    a = schema.platform_from_name("Some Future GPU-9000 (x)")
    assert a == schema.platform_from_name("Some Future GPU-9000 (x)")
    assert schema.SPLIT_NAME_RE.match(a.slug)


def test_one_second_average_families():
    assert schema.power_usage_is_1s_average("NVIDIA H100 80GB HBM3")
    assert schema.power_usage_is_1s_average("L40s")
    assert not schema.power_usage_is_1s_average("NVIDIA A100-SXM4-80GB")  # GA100: instantaneous
    assert not schema.power_usage_is_1s_average(None)


def test_every_column_described_and_categoricals_are_strings():
    for config, cols in schema.COLUMNS.items():
        names = [c.name for c in cols]
        assert len(names) == len(set(names)), config
        for c in cols:
            assert c.description, (config, c.name)
    for name in ("workload", "platform", "model_family", "sampler", "power_field", "method",
                 "precision", "parallelism"):
        assert schema.FEATURES["finetune"][name] == Value("string")


def test_contract_columns_present():
    ft = schema.FEATURES["finetune"]
    for col in ("run_id", "sweep", "repeat", "gpu_uuid_hash", "model_params", "start_time",
                "host_hash", "grid_region", "quality_flags", "t_ms", "power_w", "energy_mj",
                "clock_event_reasons", "events", "lora_rank", "global_batch_size",
                "power_limit_setting_w", "final_loss"):
        assert col in ft, col
    inf = schema.FEATURES["inference"]
    for col in ("serving_engine", "arrival_cv", "kv_cache_backend", "gpu_clock_mhz",
                "ttft_p99_ms", "latency_p99_ms", "tokens_out"):
        assert col in inf, col
    runs = schema.FEATURES["finetune_runs"]
    for col in ("energy_j", "duration_s", "mean_power_w", "peak_power_w", "p99_power_w",
                "gap_count", "gap_s", "metric_notes", "gpu_energy_j"):
        assert col in runs, col
    assert "t_ms" not in runs and "gpu_index" not in runs
    assert list(schema.FEATURES["inference_requests"]) == [c.name for c in schema.REQUEST_COLUMNS]


def test_base_config():
    assert schema.base_config("finetune-llama") == "finetune"
    assert schema.base_config("inference_runs") == "inference_runs"
    with pytest.raises(KeyError):
        schema.base_config("finetune-notafamily")


@pytest.mark.parametrize("config", [*schema.COLUMNS, "finetune-llama", "inference-qwen"])
def test_arrow_types_alone_give_datasets_the_exact_features(config):
    """Files carry no ``huggingface`` metadata: their Arrow types must name the features.

    ``arrow_schema`` is built without ``datasets``; it has the fields and types of
    ``Features.arrow_schema`` and nothing else, and ``datasets`` reads back the config's exact
    ``Features`` from it (a column type with no one-to-one Arrow type would fail here).
    """
    from datasets import Features

    features = schema.features_for(config)
    ours = schema.arrow_schema(config)
    assert ours.metadata is None
    assert ours.equals(features.arrow_schema, check_metadata=False)
    assert Features.from_arrow_schema(ours) == features


def test_column_type_names_follow_the_features():
    for cols in schema.COLUMNS.values():
        for col in cols:
            inner = getattr(col.feature, "feature", None)
            if isinstance(inner, dict):
                assert col.type_name == "list<struct>"
                assert col.struct_fields == [(k, v.dtype) for k, v in inner.items()]
            elif inner is not None:
                assert col.type_name == f"list<{inner.dtype}>"
                assert col.struct_fields == []
            else:
                assert col.type_name == col.feature.dtype
