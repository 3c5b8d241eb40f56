"""The explorer in a real headless Chromium (Playwright driving the system browser).

Catalog (rows, filter, sort, cpu_proxy badge), run page (one line per device plus the node
total, event markers, requests, linked signals), zoom down to the raw samples, compare, sweep.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_powertrace_ds import shards
from llm_powertrace_ds.explore.catalog import run_folder

from .pages import RENDERERS, TIME, TRACE_SUMMARY, XY


def test_catalog_loads_one_row_per_run_with_no_console_error(demo_site, page, shots, open_page):
    _, site, runs = demo_site
    open_page(page, site, "index.html")
    ids = page.eval_on_selector_all("tr[data-run-id]", "rows => rows.map(r => r.dataset.runId)")
    assert sorted(ids) == sorted(r.run_id for r in runs)
    proxy = page.eval_on_selector_all("tr.proxy", "rows => rows.map(r => r.dataset.runId)")
    assert sorted(proxy) == ["ft-qwen-ddp-proxy", "inf-gpt2-proxy"]
    assert page.locator("tr.proxy .proxy-badge").count() == 2
    assert "CPU PROXY" in page.inner_text(".proxy-banner")
    page.screenshot(path=str(shots / "catalog.png"), full_page=True)
    assert page.errors == []


def test_filters_reduce_rows_and_headers_sort(demo_site, page, open_page):
    _, site, runs = demo_site
    open_page(page, site, "index.html")
    page.click("#filters-box summary")  # the filters are folded by default
    page.select_option("select[data-filter=workload]", "inference")
    assert page.locator("tr[data-run-id]").count() == 2
    page.select_option("select[data-filter=platform]", "cpu_proxy")
    assert page.eval_on_selector_all("tr[data-run-id]", "r => r.map(x => x.dataset.runId)") == [
        "inf-gpt2-proxy"]
    assert page.inner_text("#row-count") == f"1 of {len(runs)} runs"
    page.select_option("select[data-filter=workload]", "")
    page.select_option("select[data-filter=platform]", "")
    page.click("th[data-col=num_gpus]")
    page.click("th[data-col=num_gpus]")  # descending
    order = page.eval_on_selector_all("tr[data-run-id]", "r => r.map(x => x.dataset.runId)")
    gpus = {r.run_id: len(r.devices) for r in runs}
    assert [gpus[i] for i in order] == sorted(gpus.values(), reverse=True)
    assert page.errors == []


def test_run_page_draws_devices_total_events_and_signals(demo_site, page, shots, open_page):
    root, site, _ = demo_site
    open_page(page, site, f"run.html?run={run_folder('ft-llama-lora')}")
    plot = page.locator("[data-run-plot]")
    assert plot.get_attribute("data-run-plot") == "ft-llama-lora"
    traces = page.evaluate(TRACE_SUMMARY)
    roles = [t["role"] for t in traces]
    assert roles.count("device") == 2 and roles.count("total") == 1
    assert all(t["n"] > 100 for t in traces if t["role"] in ("device", "total"))
    events = [t for t in traces if t["role"] == "event"]
    assert events and sum(t["n"] for t in events) >= 1
    assert [t for t in traces if t["role"] == "phase"]
    assert roles.count("signal") == 2  # GPU utilisation of each device, on a linked axis
    assert page.locator("#metrics tr[data-metric=energy_j] td.formula").inner_text().strip()
    assert page.evaluate("LPT.state.level") >= 1  # the overview is the coarse level
    page.screenshot(path=str(shots / "run.png"), full_page=True)
    assert page.errors == []


def test_zoom_changes_range_and_reaches_the_raw_samples(demo_site, page, shots, open_page):
    root, site, _ = demo_site
    open_page(page, site, f"run.html?run={run_folder('ft-llama-lora')}")
    before = page.evaluate("LPT.state.range")
    draws = page.evaluate("LPT.state.draws")
    page.evaluate(f"{TIME}.setv({{start: 100, end: 110}})")  # what a box zoom does
    page.wait_for_function(f"LPT.state.draws > {draws}")
    assert page.evaluate("LPT.state.level") == 0
    after = page.evaluate("LPT.state.range")
    assert after == [100, 110] and after != before
    run = shards.read_run(root, "ft-llama-lora")
    traces = page.evaluate(TRACE_SUMMARY)
    for dev, trace in zip(run.devices, [t for t in traces if t["role"] == "device"],
                          strict=True):
        shown = np.array([x for x in trace["xs"] if 100 <= x <= 110])
        raw = dev.t_ms[(dev.t_ms >= 100_000) & (dev.t_ms <= 110_000)] / 1000.0
        np.testing.assert_allclose(shown, raw)  # every raw sample, nothing else
    lines = page.evaluate(XY, "device")
    pairs = [[(x, y) for x, y in zip(t["x"], t["y"], strict=True)
              if 100 <= x <= 110 and y is not None and not np.isnan(y)] for t in lines]
    for dev, shown_xy in zip(run.devices, pairs, strict=True):
        sel = (dev.t_ms >= 100_000) & (dev.t_ms <= 110_000)
        got = np.array(shown_xy)
        np.testing.assert_allclose(got[:, 0] * 1000.0, dev.t_ms[sel].astype(float))
        # the values drawn are the dataset's float32 samples, bit for bit (compressed, not rounded)
        np.testing.assert_array_equal(got[:, 1].astype(np.float32),
                                      dev.power_w[sel].astype(np.float32))
    # each raw sample in view is marked: the power figure's dots are its lines' samples
    marked = page.evaluate(f"({RENDERERS})('dots').map(r => r.data_source.get_length())")
    assert len(marked) == 2 and marked[0] == sum(t["n"] for t in traces
                                                 if t["role"] in ("device", "total"))
    page.screenshot(path=str(shots / "run-zoom.png"))
    page.locator("[data-run-plot] .bk-tool-icon-reset").first.click()  # the toolbar's reset
    page.wait_for_function(f"LPT.state.draws > {draws + 1}")
    assert page.evaluate("LPT.state.level") >= 1
    assert page.evaluate(f"[{TIME}.start, {TIME}.end]") == pytest.approx(before, abs=1e-6)
    assert page.errors == []


def test_mouse_wheel_zooms_the_linked_time_axis(demo_site, page, open_page):
    _, site, _ = demo_site
    open_page(page, site, f"run.html?run={run_folder('ft-llama-lora')}")
    before = page.evaluate(f"[{TIME}.start, {TIME}.end]")
    draws = page.evaluate("LPT.state.draws")
    box = page.locator("[data-run-plot] canvas").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 3)
    for _ in range(5):
        page.mouse.wheel(0, -400)  # scroll up: zoom in on the time axis
    # the page redraws (after a 60 ms pause in the wheel events) for the range the wheel left
    page.wait_for_function(f"""() => {{ const r = LPT.state.range, t = {TIME};
        return LPT.state.draws > {draws} && Math.abs(r[0] - t.start) < 1e-6
               && Math.abs(r[1] - t.end) < 1e-6; }}""")
    start, end = page.evaluate(f"[{TIME}.start, {TIME}.end]")
    assert before[0] < start < end < before[1]  # narrower, inside the run
    # every panel shares the one time range (linked axes)
    ranges = page.evaluate("""() => [...Bokeh.documents[Bokeh.documents.length - 1].all_models]
        .filter(m => Array.isArray(m.renderers) && m.x_range).map(p => p.x_range.name)""")
    assert len(ranges) >= 3 and set(ranges) == {"time"}
    assert page.errors == []


def test_inference_run_shows_requests(demo_site, page, open_page):
    _, site, _ = demo_site
    open_page(page, site, f"run.html?run={run_folder('inf-llama')}")
    by_role = {role: page.evaluate(XY, role)[0]["y"] for role in ("requests", "arrivals")}
    assert max(by_role["requests"]) == 4 and len(by_role["arrivals"]) == 5
    assert page.errors == []


def test_proxy_run_page_warns(demo_site, page, open_page):
    _, site, _ = demo_site
    open_page(page, site, f"run.html?run={run_folder('ft-qwen-ddp-proxy')}")
    assert "NOT measured on a GPU" in page.inner_text(".proxy-banner")


def test_compare_overlays_two_runs_aligned_at_work_start(demo_site, page, shots, open_page):
    _, site, runs = demo_site
    open_page(page, site, "index.html")
    page.check(f"input[data-select='{run_folder('ft-llama-lora')}']")
    page.check(f"input[data-select='{run_folder('ft-gpt2-full')}']")
    page.click("#compare-button")
    page.wait_for_url("**/compare.html?runs=*")
    page.wait_for_function("typeof LPT !== 'undefined' && LPT.state.ready === true", timeout=30_000)
    lines = [{"run": t["key"], "xs": t["xs"]} for t in page.evaluate(TRACE_SUMMARY)]
    assert [line["run"] for line in lines] == ["ft-llama-lora", "ft-gpt2-full"]
    for line in lines:
        assert len(line["xs"]) > 100
        assert min(line["xs"]) < 0 < max(line["xs"])  # idle before work start, work after
    page.screenshot(path=str(shots / "compare.png"))
    assert page.errors == []


def test_sweep_view_colours_by_an_axis(demo_site, page, open_page):
    _, site, runs = demo_site
    open_page(page, site, "sweep.html?metric=mean_power_w&axis=num_gpus&colour=platform")
    assert page.get_attribute("#sweep-plot", "data-traces") == str(
        len({r.platform for r in runs}))
    assert page.errors == []


def test_sweep_view_puts_named_values_on_a_categorical_axis(demo_site, page, open_page):
    _, site, runs = demo_site
    open_page(page, site, "sweep.html?metric=mean_power_w&axis=platform&colour=workload")
    assert page.get_attribute("#sweep-plot", "data-traces") == str(
        len({r.workload for r in runs}))
    factors = page.evaluate("""() => Bokeh.documents[Bokeh.documents.length - 1]
        .get_model_by_name('sweep').x_range.factors""")
    assert factors == sorted({r.platform for r in runs})
    page.check("#sweep-logy")  # a redraw replaces the chart: still one figure, no error
    page.wait_for_function("LPT.state.draws >= 2")
    assert page.locator("#sweep-plot canvas").count() >= 1
    assert page.errors == []


@pytest.mark.parametrize("name", ["index.html", "compare.html", "sweep.html"])
def test_pages_open_without_errors(demo_site, page, name, open_page):
    _, site, _ = demo_site
    open_page(page, site, name)
    assert page.errors == []


def test_run_page_opens_by_run_id_as_well_as_by_folder(demo_site, page, open_page):
    _, site, _ = demo_site
    open_page(page, site, "run.html?run=inf-llama")
    assert page.locator("[data-run-plot]").get_attribute("data-run-plot") == "inf-llama"
    assert page.locator("#no-run").count() == 0
    open_page(page, site, "run.html?run=no-such-run")
    assert page.inner_text("#no-run") == "no run no-such-run in this dataset"
    assert page.errors == []


def test_catalog_folds_filters_for_the_columns_that_vary(demo_site, page, open_page):
    _, site, _ = demo_site
    open_page(page, site, "index.html")
    options = "s => s.map(x => [x.dataset.filter, x.options.length - 1])"
    assert page.evaluate("document.querySelector('#filters-box').open") is False
    shown = dict(page.eval_on_selector_all("#filters-box select", options))
    assert {"workload", "platform", "model_family"} <= set(shown)
    assert all(n > 1 for n in shown.values()), shown  # a column with one value has none
    heads = page.eval_on_selector_all("th[data-col]", "t => t.map(x => x.dataset.col)")
    assert heads[:3] == ["run_id", "energy_per_token_j", "energy_j"]
    assert page.errors == []


def test_run_page_folds_metric_notes_after_the_metrics(demo_site, page, open_page):
    _, site, _ = demo_site
    open_page(page, site, f"run.html?run={run_folder('ft-gpt2-full')}")
    assert page.locator("#metric-notes li").count() >= 1
    after = page.evaluate("document.querySelector('#metrics').compareDocumentPosition("
                          "document.querySelector('#metric-notes-box')) & 4")
    assert after == 4  # the notes follow the metrics table
    assert page.evaluate("document.querySelector('#metric-notes-box').tagName") == "DETAILS"
    assert page.evaluate("document.querySelector('#metric-notes-box').open") is False
    assert page.errors == []
