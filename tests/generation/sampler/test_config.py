"""Configuration: one clear error before anything starts."""

from __future__ import annotations

import os

import pytest

from generation.sampler import (
    Sampler,
    SamplerConfig,
    SamplerConfigError,
    SamplerError,
    resolve_source,
)

from .fake_nvml import LIBRARY_NOT_FOUND


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"period_ms": 0}, "period_ms=0 must be > 0"),
    ({"period_ms": -5.0}, "period_ms"),
    ({"period_ms": float("nan")}, "not a finite number"),
    ({"period_ms": 0.5}, "below 1 ms"),
    ({"source": "rapl"}, "sampler source 'rapl' is unknown"),
    ({"priority": "max"}, "priority 'max' is unknown"),
    ({"idle_w": -1.0}, "idle_w"),
    ({"idle_w": 300.0, "max_w": 300.0}, "max_w=300.0 must be greater than idle_w"),
    ({"flush_s": 2.0}, "flush_s=2.0 must be <= 1 s"),
    ({"gpu_indices": [0, -1]}, "gpu index -1"),
    ({"gpu_indices": [0, 0]}, "duplicates"),
    ({"gpu_indices": []}, "empty"),
    ({"gpu_indices": "0"}, "list of GPU indices"),
    ({"source": "cpu_proxy", "gpu_indices": [0]}, "nvml source only"),
])
def test_bad_config_raises_one_clear_error(kwargs, match):
    with pytest.raises(SamplerConfigError, match=match):
        SamplerConfig(**kwargs)


def test_config_error_is_also_a_value_error():
    with pytest.raises(ValueError):
        SamplerConfig(period_ms=0)


def test_config_round_trip():
    cfg = SamplerConfig(source="nvml", period_ms=50, gpu_indices=[1, 0], idle_w=50, max_w=250)
    assert cfg.gpu_indices == (1, 0)
    assert cfg.period_ns == 50_000_000
    assert SamplerConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(SamplerConfigError, match="unknown sampler settings"):
        SamplerConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_config_is_frozen():
    cfg = SamplerConfig()
    with pytest.raises(AttributeError):
        cfg.period_ms = 10  # type: ignore[misc]


def test_cpu_proxy_always_resolves():
    assert resolve_source(SamplerConfig(source="cpu_proxy")) == "cpu_proxy"


def test_nvml_asked_where_unavailable_fails_before_anything_starts(fake_nvml, tmp_path):
    fake_nvml(init_code=LIBRARY_NOT_FOUND)
    sampler = Sampler(SamplerConfig(source="nvml"), tmp_path / "run")
    with pytest.raises(SamplerConfigError, match="NVML is unavailable"):
        sampler.start()
    assert not (tmp_path / "run").exists()  # nothing was created, nothing started
    assert sampler.pid is None


def test_gpu_index_out_of_range_fails_before_anything_starts(fake_nvml, tmp_path):
    fake_nvml()
    with pytest.raises(SamplerConfigError, match="out of range"):
        Sampler(SamplerConfig(source="nvml", gpu_indices=[3]), tmp_path / "run").start()
    assert not (tmp_path / "run").exists()


def test_bad_pid_fails_before_anything_starts(tmp_path):
    with pytest.raises(SamplerConfigError, match="not a running process"):
        Sampler(SamplerConfig(source="cpu_proxy"), tmp_path / "run", pids=[2**22 + 12345]).start()
    with pytest.raises(SamplerConfigError, match="at least one pid"):
        Sampler(SamplerConfig(source="cpu_proxy"), tmp_path / "run", pids=[]).start()
    assert not (tmp_path / "run").exists()


def test_constructor_is_cheap_and_rejects_nothing_started(tmp_path):
    sampler = Sampler(SamplerConfig(source="cpu_proxy"), tmp_path / "run", pids=[os.getpid()])
    assert sampler.pid is None and not sampler.alive()
    assert not (tmp_path / "run").exists()
    with pytest.raises(SamplerError, match="not started"):
        sampler.stop()


def test_not_a_config_object(tmp_path):
    with pytest.raises(SamplerConfigError, match="must be a SamplerConfig"):
        Sampler({"source": "cpu_proxy"}, tmp_path).start()  # type: ignore[arg-type]
