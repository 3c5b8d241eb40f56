"""The typed continuous-batching options read from resolved settings."""

from __future__ import annotations

from generation.workloads.inference.engines import ContinuousBatchingOptions
from generation.workloads.inference.settings import CB_SETTINGS


def test_options_from_resolved_settings():
    opts = ContinuousBatchingOptions.from_settings(
        {"cb_attn_implementation": "eager", "cb_use_cuda_graph": True,
         "cb_use_async_batching": False})
    assert opts == ContinuousBatchingOptions("eager", True, False)


def test_defaults_are_the_declared_defaults():
    declared = ContinuousBatchingOptions(
        attn_implementation=CB_SETTINGS["cb_attn_implementation"].default,
        use_cuda_graph=CB_SETTINGS["cb_use_cuda_graph"].default,
        use_async_batching=CB_SETTINGS["cb_use_async_batching"].default)
    assert ContinuousBatchingOptions.from_settings(None) == declared
    assert ContinuousBatchingOptions.from_settings({"batching": "static"}) == declared
