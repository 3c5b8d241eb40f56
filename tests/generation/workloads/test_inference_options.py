"""The typed continuous-batching options read from resolved settings."""

from __future__ import annotations

from generation.workloads.inference.engines import ContinuousBatchingOptions
from generation.workloads.inference.settings import CB_SETTINGS


def test_options_from_resolved_settings():
    opts = ContinuousBatchingOptions.from_settings(
        {"cb_attn_implementation": "eager", "cb_use_cuda_graph": True,
         "cb_use_async_batching": False})
    assert opts == ContinuousBatchingOptions("eager", True, False)


def test_defaults_are_what_a_cpu_resolves():
    from generation.workloads import MachineInfo
    from generation.workloads.inference.settings import resolve_cb

    cpu = MachineInfo(source="cpu_proxy", platform="cpu_proxy", num_devices=2, cuda=False,
                      bf16=True)
    r = {k: s.default for k, s in CB_SETTINGS.items()}
    resolve_cb(r, cpu)
    assert ContinuousBatchingOptions.from_settings(None) == \
        ContinuousBatchingOptions.from_settings(r) == ContinuousBatchingOptions("sdpa", False,
                                                                                 False)
    assert ContinuousBatchingOptions.from_settings({"batching": "static"}) == \
        ContinuousBatchingOptions.from_settings(r)
