"""Fixtures of the explorer tests: a demo-like dataset, its site, and a headless Chromium.

The browser is Playwright driving the system Chromium (``executable_path``; Playwright downloads
no browser). Browser tests skip, never fail, when Playwright or Chromium is absent (``make test``
installs Chromium when ``CI=true``). Screenshots go to ``$LLM_POWERTRACE_SCREENSHOTS`` when set
(CI keeps them), else into the test's temporary folder.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import synthetic_run

BROWSER_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--allow-file-access-from-files"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


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


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """A headless Chromium driven by Playwright (skips when either is missing)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    path = chromium_path()
    if path is None:
        pytest.skip("headless Chromium is not installed (make test installs it when CI=true)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, headless=True, args=BROWSER_FLAGS)
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        yield ctx
        ctx.close()
        browser.close()


@pytest.fixture
def page(browser):
    """A fresh page that records console errors and uncaught exceptions in ``page.errors``."""
    pg = browser.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    pg.close()


@pytest.fixture
def shots(tmp_path) -> Path:
    """Where screenshots are written."""
    out = Path(os.environ.get("LLM_POWERTRACE_SCREENSHOTS") or tmp_path / "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _open_page(page, site: Path, rel: str) -> None:
    page.goto((site / "index.html").as_uri().rsplit("/", 1)[0] + "/" + rel)
    page.wait_for_function("typeof LPT !== 'undefined' && LPT.state.ready === true", timeout=30_000)


@pytest.fixture
def open_page():
    """``open_page(page, site, "run.html?run=...")``: open from file:// and wait for the draw."""
    return _open_page
