"""The explorer in a real headless Chromium, for adversarial inputs (issue 33, case 15).

A month-long run's times pass 2^31 ms: stored as 32-bit integers they wrapped and its page drew
no points. Uses the shared browser fixtures (``tests/browser_fixtures.py``, defined once in
``tests/conftest.py``): skipped, never failed, when Playwright or Chromium is absent.
"""

from __future__ import annotations

from explore.pages import TIME, TRACE_SUMMARY

from llm_powertrace_ds import shards

from .test_explorer_inputs import _month_run


def test_a_month_long_run_draws_its_points(tmp_path, page, open_page):
    from llm_powertrace_ds.explore import build_site
    from llm_powertrace_ds.explore.catalog import run_folder

    root = tmp_path / "ds"
    shards.publish_run(root, _month_run(), refresh_card=False)
    site = tmp_path / "site"
    build_site(root, site)
    open_page(page, site, f"run.html?run={run_folder('month-1')}")
    traces = page.evaluate(TRACE_SUMMARY)
    devices = [t for t in traces if t["role"] == "device"]
    assert devices and all(t["n"] > 100 for t in devices)
    assert max(max(t["xs"]) for t in devices if t["xs"]) > 20 * 86_400  # seconds, not wrapped
    assert min(min(t["xs"]) for t in devices if t["xs"]) >= 0
    # zoomed into day 30's last hour: the raw samples (level 0), past 2^31 ms, one a minute
    draws = page.evaluate("LPT.state.draws")
    start, end = 30 * 86_400 - 3_600, 30 * 86_400
    page.evaluate(f"{TIME}.setv({{start: {start}, end: {end}}})")
    page.wait_for_function(f"LPT.state.draws > {draws}")
    assert page.evaluate("LPT.state.level") == 0
    shown = [[x for x in t["xs"] if start <= x <= end]
             for t in page.evaluate(TRACE_SUMMARY) if t["role"] == "device"]
    assert shown and all(len(xs) >= 60 for xs in shown), [len(xs) for xs in shown]
    assert page.errors == []
