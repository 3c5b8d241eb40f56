"""Benchmark the explorer on a synthetic 2-hour, 8-GPU run in headless Chromium.

Builds the site of one run (8 devices x 72,001 samples at 0.1 s, every drawn signal present:
power, utilisation, SM clock, temperature, memory), then opens its run page in the system
Chromium (Playwright) and measures, side by side in one process on the same files:

- ``cold``: the run page opened directly, as its first tab, by a browser just started on a new,
  empty profile (no HTTP cache, no code cache) — from ``file://`` as a user double-clicks it;
- ``cold_http``: the same, served over ``http://127.0.0.1`` (a static Space serves it so);
- ``pyramid``: the page as shipped opened from the catalog in the same tab (a click on a run's
  link) — the usual path; the catalog loads BokehJS after drawing itself;
- ``raw``: the same, forced to draw every raw sample first (``?level=0``), which is what a chart
  without the pyramid would have to do;

and a zoom to a 10 s window (reaching the raw samples).

``--catalog-runs N`` (default 10,000) also measures the catalog at community size: the same
site's ``data/catalog.js`` replaced by N synthetic rows (the bench run's row with varied ids,
platforms, families, GPU counts and metrics — only the browser part needs them), then, with a
browser started once: ``catalog_paint_s`` from navigation start to the first frame after the
rows were drawn (``LPT.state.paintedAtMs``) and the first contentful paint; ``filter_s`` a
drop-down filter, ``search_keystroke_s`` one character typed into the run-id search, and
``sort_s`` a header click — each from the event to the next frame; ``run_page_s`` the bench
run's page opened from that catalog (navigation to the chart painted); and the most entries of
any folder of the site, with the most that ``run_dir`` would put in one folder for N runs. Times are the median of ``--repeats``
page loads (each one is printed too): ``first_draw_s`` from navigation start to the chart painted
(Bokeh's document idle: every figure of the page rendered); ``library_ready_s`` when BokehJS had
been loaded and run, and ``data_ready_s`` when the first view's chunks had been loaded and
decoded (both from navigation start; they overlap, as the pages load BokehJS with ``defer``);
``draw_s`` from BokehJS ready to painted (building the figures, the first render);
``main_thread_s`` the renderer main thread's busy time (DevTools ``Performance.getMetrics``
TaskDuration, still wall time of each task); and ``browser_cpu_s`` the CPU seconds all of
Chromium's processes (and, for ``cold_http``, the server's) spent from navigation to the first
draw (psutil) — what the first draw costs whatever else the machine runs (the load average is
printed too). Also the site's size against the dataset's trace bytes.

Prints one JSON object. Usage: python bench/explorer.py [--hours 2] [--devices 8] [--repeats 3]
[--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import _report
import numpy as np

from llm_powertrace_ds import shards
from llm_powertrace_ds.explore import build_site
from llm_powertrace_ds.explore.catalog import packed_rows, run_dir, run_folder
from llm_powertrace_ds.run import DeviceSeries, Event, Run

RUN_ID = "bench-2h-8gpu"
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--allow-file-access-from-files"]


def make_run(hours: float, devices: int, seed: int = 0) -> Run:
    """Training-like power: idle, then 1 s steps (high/low), a checkpoint dip every 10 min."""
    rng = np.random.default_rng(seed)
    n = int(hours * 3600 * 10) + 1
    t = np.arange(n, dtype=np.int64) * 100
    busy = (t > 60_000) & (t < t[-1] - 60_000)
    step = ((t // 1000) % 2 == 0).astype(float)
    ckpt = ((t // 1000) % 600 < 20) & busy
    devs = []
    for g in range(devices):
        power = np.where(busy, 450 + 200 * step, 90.0) + rng.normal(0, 8, n)
        power[ckpt] = 150 + rng.normal(0, 5, ckpt.sum())
        util = np.where(busy, 95.0, 0.0)
        devs.append(DeviceSeries(
            g, t + 3 * g, {"power_w": power, "gpu_util_pct": util,
                           "sm_clock_mhz": np.where(busy, 1980.0, 345.0),
                           "temp_c": 40 + 30 * busy + rng.normal(0, 0.5, n),
                           "mem_used_mib": np.where(busy, 70_000.0, 500.0)},
            gpu_name="NVIDIA H100 80GB HBM3", gpu_uuid_hash=f"h{g}",
            power_limit_w=700.0, default_power_limit_w=700.0))
    events = [Event(0, "idle_begin"), Event(60_000, "idle_end"), Event(60_000, "warmup_begin"),
              Event(70_000, "warmup_end")]
    for s in range(70, int(t[-1] // 1000) - 60, 2):
        events += [Event(s * 1000, "step_begin", step=s, rank=0),
                   Event(s * 1000 + 1900, "step_end", step=s, rank=0)]
    meta = {"run_id": RUN_ID, "workload": "finetune", "platform": "h100_sxm_80gb",
            "model_family": "llama", "model_name": "bench", "sweep": "bench", "repeat": 0,
            "num_gpus": devices, "sample_period_ms": 100.0, "sampler": "nvml",
            "power_field": "instant", "method": "lora", "batch_size": 8, "seq_len": 1024,
            "tokens": 10_000_000, "start_time": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}
    return Run(meta, devs, events)


def _browser_cpu_s() -> float:
    """CPU seconds (user + system) used so far by every process this script started.

    The Playwright driver and Chromium's processes: a measure a busy machine does not inflate.
    """
    import psutil

    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def _load(page, url: str, *, click: bool) -> dict:
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    cpu0 = _browser_cpu_s()
    if click:  # a navigation from the page, as a click on the catalog's link makes
        page.evaluate(f"location.href = {json.dumps(url)}")
        page.wait_for_url(url)
    else:
        page.goto(url)
    page.wait_for_function("typeof LPT !== 'undefined' && LPT.state.drawnAtMs > 0",
                           timeout=120_000)
    out = page.evaluate("({drawn: LPT.state.drawnAtMs, level: LPT.state.level, "
                        "marks: LPT.state.marks, points: LPT.state.points})")
    out["browser_cpu_s"] = _browser_cpu_s() - cpu0
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    out["main_thread_s"] = metrics.get("TaskDuration")  # renderer main-thread busy time
    out["draw_ms"] = out["drawn"] - out["marks"]["library"]  # from BokehJS ready to painted
    return out


TIME = "Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('time')"


def _zoom_to_raw(page) -> float:
    """Seconds from setting a 10 s time range (as a box zoom does) to its raw samples drawn."""
    draws = page.evaluate("LPT.state.draws")
    t0 = time.perf_counter()
    page.evaluate(f"{TIME}.setv({{start: 3600, end: 3610}})")
    page.wait_for_function(f"LPT.state.draws > {draws}", timeout=60_000)
    seconds = time.perf_counter() - t0
    assert page.evaluate("LPT.state.level") == 0
    return seconds


@contextlib.contextmanager
def _served(site: Path) -> Iterator[str]:
    """The site over HTTP on the loopback address, as a static Space serves it.

    The standard library's server in its own process (not a thread of this one, which would share
    the interpreter with Playwright's client and slow both).
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1", "--directory", str(site)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):  # until it accepts connections
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _cold(pw, chromium: str, url: str) -> dict:
    """The run page as the first tab of a browser just started on a new, empty profile."""
    with tempfile.TemporaryDirectory() as profile:
        ctx = pw.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 1000})
        try:
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            return _load(page, url, click=False)
        finally:
            ctx.close()


def _measure(pw, chromium: str, site: Path, base: str, repeats: int) -> tuple[dict, list]:
    """Every path's page loads, interleaved repeat by repeat, and the zoom times."""
    query = f"run.html?run={run_folder(RUN_ID)}"
    url = (site / "run.html").as_uri() + query[len("run.html"):]
    catalog = (site / "index.html").as_uri()
    results: dict[str, list[dict]] = {}
    zoom_s: list[float] = []
    browser = pw.chromium.launch(executable_path=chromium, headless=True, args=FLAGS)
    for _ in range(repeats):
        results.setdefault("cold", []).append(_cold(pw, chromium, url))
        results.setdefault("cold_http", []).append(_cold(pw, chromium, base + query))
        for name, suffix in (("pyramid", ""), ("raw", "&level=0")):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(catalog)  # the usual path: the catalog, then a click to the run
            page.wait_for_function("typeof Bokeh !== 'undefined' && !!Bokeh.Plotting",
                                   timeout=120_000)
            results.setdefault(name, []).append(_load(page, url + suffix, click=True))
            if name == "pyramid":
                zoom_s.append(_zoom_to_raw(page))
            page.close()
    browser.close()
    return results, zoom_s


def _summary(results: dict, zoom_s: list, args: argparse.Namespace, report, build_s: float,
             samples: int) -> dict:
    def med(key: str, scale: float = 1.0) -> dict[str, float]:
        return {k: round(statistics.median(r[key] for r in v) * scale, 3)
                for k, v in results.items()}

    first, draw = med("drawn", 1e-3), med("draw_ms", 1e-3)
    lib = {k: round(statistics.median(r["marks"]["library"] for r in v) / 1000.0, 3)
           for k, v in results.items()}
    data = {k: round(statistics.median(r["marks"]["decoded"] for r in v) / 1000.0, 3)
            for k, v in results.items()}
    return {
        "samples": samples, "devices": args.devices, "hours": args.hours,
        "build_s": round(build_s, 2),
        "trace_bytes": report.trace_bytes, "site_data_bytes": report.data_bytes,
        "site_data_ratio": round(report.ratio or 0, 3), "site_library_bytes": report.library_bytes,
        "first_draw_s": first,
        "first_draw_s_each": {k: [round(r["drawn"] / 1000.0, 3) for r in v]
                              for k, v in results.items()},
        "library_ready_s": lib, "data_ready_s": data, "draw_s": draw,
        "raw_over_pyramid": round(first["raw"] / first["pyramid"], 2),
        "draw_raw_over_pyramid": round(draw["raw"] / draw["pyramid"], 2),
        "main_thread_s": med("main_thread_s"), "browser_cpu_s": med("browser_cpu_s"),
        "points": {k: v[0]["points"] for k, v in results.items()},
        "zoom_to_raw_10s_s": round(statistics.median(zoom_s), 3),
        "load_average_1min": round(os.getloadavg()[0], 1), "cpus": os.cpu_count(),
        "repeats": args.repeats,
    }


PLATFORMS = ("h100_sxm_80gb", "a100_sxm4_80gb", "h200_sxm_141gb", "l40s", "mi300x")
FAMILIES = ("llama", "qwen", "mistral", "gemma", "gpt2", "phi")
NEXT_FRAME = "new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)))"


def synthetic_catalog(site: Path, runs: int, seed: int = 0) -> list[str]:
    """Replace the site's catalog rows by ``runs`` rows varied from its first; return folders.

    The bench run's own row is kept first, so its run page opens from the catalog.
    """
    rng = np.random.default_rng(seed)
    prefix, text = "LPT.got(\"catalog\",", (site / "data/catalog.js").read_text()
    data = json.loads(text[len(prefix):-3])
    base = dict(zip(data["names"], data["values"][0], strict=True))
    rows = [base]
    numeric = [k for k, v in base.items() if isinstance(v, float)]
    for i in range(1, runs):
        r = dict(base, run_id=f"synthetic-{i:06d}", platform=PLATFORMS[i % len(PLATFORMS)],
                 model_family=FAMILIES[(i // 7) % len(FAMILIES)], num_gpus=int(2 ** (i % 4)))
        for k in numeric:
            r[k] = float(base[k]) * float(rng.uniform(0.5, 1.5))
        r["folder"] = run_folder(r["run_id"])
        rows.append(r)
    (site / "data/catalog.js").write_text(
        f"{prefix}{json.dumps(packed_rows(rows), separators=(',', ':'))});\n", encoding="utf-8")
    site_js = site / "data/site.js"
    head = "LPT.got(\"site\","
    about = json.loads(site_js.read_text()[len(head):-3])
    about["runs"] = runs
    site_js.write_text(f"{head}{json.dumps(about, separators=(',', ':'))});\n", encoding="utf-8")
    return [r["folder"] for r in rows]


def _timed(page, action: str) -> float:
    """Seconds from running ``action`` (JS statements) in the page to the next frame."""
    return page.evaluate(f"async () => {{ const t = performance.now(); {action}; "
                         f"await {NEXT_FRAME}; return (performance.now() - t) / 1000; }}")


def _catalog_once(browser, site: Path) -> dict[str, float]:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto((site / "index.html").as_uri())
        page.wait_for_function("LPT.state.paintedAtMs > 0", timeout=120_000)
        out = {"catalog_paint_s": page.evaluate("LPT.state.paintedAtMs") / 1000,
               "first_contentful_paint_s": page.evaluate(
                   "(performance.getEntriesByName('first-contentful-paint')[0] || "
                   "{startTime: NaN}).startTime") / 1000,
               "rows_drawn": page.locator("tr[data-run-id]").count()}
        sel = "document.querySelector('select[data-filter=platform]')"
        out["filter_s"] = _timed(page, f"{sel}.value = 'l40s'; "
                                       f"{sel}.dispatchEvent(new Event('change'))")
        out["filter_rows"] = page.inner_text("#row-count")
        out["unfilter_s"] = _timed(page, f"{sel}.value = ''; "
                                         f"{sel}.dispatchEvent(new Event('change'))")
        box = "document.getElementById('filter-text')"
        keys = []
        for text in ("s", "sy", "syn", "synthetic-0001"):
            keys.append(_timed(page, f"{box}.value = {json.dumps(text)}; "
                                     f"{box}.dispatchEvent(new Event('input'))"))
        out["search_keystroke_s"] = max(keys)
        out["search_rows"] = page.inner_text("#row-count")
        _timed(page, f"{box}.value = ''; {box}.dispatchEvent(new Event('input'))")
        out["sort_s"] = _timed(page, "document.querySelector('th[data-col=energy_j]').click()")
        out["dom_nodes"] = page.evaluate("document.getElementsByTagName('*').length")
        url = (site / "run.html").as_uri() + f"?run={run_folder(RUN_ID)}"
        out["run_page_s"] = _load(page, url, click=True)["drawn"] / 1000
    finally:
        page.close()
    return out


def catalog_bench(pw, chromium: str, site: Path, runs: int, repeats: int) -> dict:
    """The catalog of ``runs`` synthetic rows (see the module docstring); medians of repeats."""
    folders = synthetic_catalog(site, runs)
    spread: dict[str, int] = {}
    for f in folders:
        key = run_dir(f).split("/")[0]
        spread[key] = spread.get(key, 0) + 1
    browser = pw.chromium.launch(executable_path=chromium, headless=True, args=FLAGS)
    try:
        each = [_catalog_once(browser, site) for _ in range(repeats)]
    finally:
        browser.close()
    out: dict = {"runs": runs, "catalog_js_bytes": (site / "data/catalog.js").stat().st_size}
    for key in each[0]:
        vals = [e[key] for e in each]
        out[key] = (round(statistics.median(vals), 3) if isinstance(vals[0], float)
                    else vals[0])
        if isinstance(vals[0], float):
            out[f"{key}_each"] = [round(v, 3) for v in vals]
    out["max_entries_in_a_site_folder"] = max(
        len(list(os.scandir(d))) for d in [site, *[p for p in site.rglob("*") if p.is_dir()]])
    out["max_runs_per_data_runs_subfolder_for_n"] = max(spread.values())
    out["data_runs_subfolders_for_n"] = len(spread)
    targets = {"catalog_paint_s": 1.0, "filter_s": 0.2, "search_keystroke_s": 0.1,
               "run_page_s": 0.6}
    out["meets_target"] = {k: out[k] <= v for k, v in targets.items()}
    out["meets_target"]["folders_below_10k"] = (
        out["max_entries_in_a_site_folder"] < 10_000
        and out["max_runs_per_data_runs_subfolder_for_n"] < 10_000)
    out["targets"] = {k: f"<= {v:g}" for k, v in targets.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--catalog-runs", type=int, default=10_000,
                        help="rows of the synthetic catalog measured after the run page "
                        "(0: skip; default 10000)")
    parser.add_argument("--catalog-only", action="store_true",
                        help="measure only the catalog part (a 10-minute run's site)")
    _report.add_json_option(parser)
    args = parser.parse_args()
    started = _report.machine()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("headless Chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        root, site = Path(tmp) / "ds", Path(tmp) / "site"
        run = make_run(1 / 6 if args.catalog_only else args.hours, args.devices)
        shards.publish_run(root, run, refresh_card=False)
        start = time.perf_counter()
        report = build_site(root, site)
        build_s = time.perf_counter() - start
        out: dict = {}
        with sync_playwright() as pw:
            if not args.catalog_only:
                with _served(site) as base:
                    results, zoom_s = _measure(pw, chromium, site, base, args.repeats)
                samples = args.devices * len(run.devices[0].t_ms)
                out = _summary(results, zoom_s, args, report, build_s, samples)
            if args.catalog_runs:
                out["catalog"] = catalog_bench(pw, chromium, site, args.catalog_runs,
                                               args.repeats)
                out["catalog"]["load_average_1min"] = round(os.getloadavg()[0], 1)
    print(json.dumps(out, indent=2))
    if args.json:
        _report.write(args.json, _report.document("explorer", results_of(out), script=__file__,
                                                  started=started))


def results_of(out: dict) -> list[_report.Result]:
    """The figures of :func:`main`'s report, with the catalog's targets (issue 40)."""
    res = _report.result
    rows = []
    if "first_draw_s" in out:
        rows += [res(f"first_draw_{k}_s", v, "s (median)") for k, v in out["first_draw_s"].items()]
        rows += [res("zoom_to_raw_10s_s", out["zoom_to_raw_10s_s"], "s (median)"),
                 res("raw_over_pyramid", out["raw_over_pyramid"], "ratio"),
                 res("site_data_ratio", out["site_data_ratio"], "site data / trace bytes"),
                 res("samples", out["samples"], "samples")]
    cat = out.get("catalog")
    if cat:
        rows += [res("catalog_runs", cat["runs"], "runs"),
                 res("catalog_paint_s", cat["catalog_paint_s"], "s (median)", at_most=1.0),
                 res("filter_s", cat["filter_s"], "s (median)", at_most=0.2),
                 res("search_keystroke_s", cat["search_keystroke_s"], "s (median of worst)",
                     at_most=0.1),
                 res("sort_s", cat["sort_s"], "s (median)"),
                 res("run_page_s", cat["run_page_s"], "s (median)", at_most=0.6),
                 res("folders_below_10k", cat["meets_target"]["folders_below_10k"], "flag",
                     equals=True)]
    return rows


if __name__ == "__main__":
    main()
