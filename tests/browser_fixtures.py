"""The headless-browser fixtures of the explorer tests, importable by any test module.

The browser is Playwright driving the system Chromium (``executable_path``; Playwright downloads
no browser). Browser tests skip, never fail, when Playwright or Chromium is absent (``make test``
installs Chromium when ``CI=true``). Screenshots go to ``$LLM_POWERTRACE_SCREENSHOTS`` when set
(CI keeps them), else into the test's temporary folder.

``tests/conftest.py`` imports them, so they are defined once for every suite: one Playwright
instance per test process (a second ``sync_playwright`` started beside the first fails).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

BROWSER_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--allow-file-access-from-files"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


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
