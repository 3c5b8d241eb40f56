"""Fixtures of the explorer tests: a demo-like dataset, its site, and a headless Chromium.

The browser fixtures (``browser``, ``page``, ``open_page``, ``shots``) live in
``tests/browser_fixtures.py`` and are defined once in ``tests/conftest.py`` for every suite;
browser tests skip, never fail, when Playwright or Chromium is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import synthetic_run


def demo_like(root: Path) -> list:
    """A dataset shaped like the demo's, published into ``root``.

    Fine-tuning and inference, two families, a two-device run, cpu_proxy runs, one long run
    (levels above raw), with events and a request log.
    """
    from llm_powertrace_ds import shards

    runs = [
        synthetic_run("ft-llama-lora", n=6000, devices=2, seed=1),
        synthetic_run("ft-gpt2-full", family="gpt2", n=900, devices=1, seed=2, method="full",
                      batch_size=2),
        synthetic_run("ft-qwen-ddp-proxy", family="qwen", n=700, devices=2, seed=3,
                      platform="cpu_proxy", sampler="cpu_proxy", power_field="cpu_proxy_model"),
        synthetic_run("inf-llama", workload="inference", n=800, devices=1, seed=4,
                      with_requests=True),
        synthetic_run("inf-gpt2-proxy", workload="inference", family="gpt2", n=600, devices=1,
                      seed=5, with_requests=True, platform="cpu_proxy", sampler="cpu_proxy"),
    ]
    for run in runs:
        shards.publish_run(root, run, refresh_card=False)
    return runs


@pytest.fixture(scope="session")
def demo_site(tmp_path_factory):
    """(dataset folder, site folder, runs) of the demo-like dataset."""
    pytest.importorskip("bokeh")
    from llm_powertrace_ds.explore import build_site

    base = tmp_path_factory.mktemp("explore")
    root = base / "ds"
    runs = demo_like(root)
    build_site(root, base / "site")
    return root, base / "site", runs
