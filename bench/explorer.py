"""Benchmark the explorer on a synthetic 2-hour, 8-GPU run in headless Chromium.

Builds the site of one run (8 devices x 72,001 samples at 0.1 s, every drawn signal present:
power, utilisation, SM clock, temperature, memory), then opens its run page in the system
Chromium (Playwright) and measures, side by side in one process on the same files:

- ``pyramid``: the page as shipped (the overview level: min/max per bucket), opened from the
  catalog in the same tab — the usual path; the catalog loads plotly.js after drawing itself, so
  the browser's code cache holds it compiled;
- ``raw``: the same, forced to draw every raw sample first (``?level=0``), which is what a chart
  without the pyramid would have to do;
- ``cold``: the pyramid page opened directly in a fresh tab (plotly.js compiled from scratch);

and a zoom to a 10 s window (reaching the raw samples). Times are the median of ``--repeats``
page loads: ``first_draw_s`` from navigation start to the chart drawn; ``library_load_s`` the part
spent loading plotly.js (before the page's code starts, the same for both); ``draw_s`` the rest
(data load, decode, first render); ``main_thread_s`` the renderer main thread's busy time
(DevTools ``Performance.getMetrics`` TaskDuration, still wall time of each task); and
``browser_cpu_s`` the CPU seconds all of Chromium's processes spent from navigation to the first
draw (psutil) — what the first draw costs whatever else the machine runs (the load average is
printed too). Also the site's size against the dataset's trace bytes.

Prints one JSON object. Usage: python bench/explorer.py [--hours 2] [--devices 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from llm_powertrace_ds import shards
from llm_powertrace_ds.explore import build_site
from llm_powertrace_ds.explore.catalog import run_folder
from llm_powertrace_ds.run import DeviceSeries, Event, Run

RUN_ID = "bench-2h-8gpu"


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
    out["draw_ms"] = out["drawn"] - out["marks"]["start"]  # data load + decode + render
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("headless Chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        root, site = Path(tmp) / "ds", Path(tmp) / "site"
        run = make_run(args.hours, args.devices)
        shards.publish_run(root, run, refresh_card=False)
        start = time.perf_counter()
        report = build_site(root, site)
        build_s = time.perf_counter() - start
        url = (site / "run.html").as_uri() + f"?run={run_folder(RUN_ID)}"
        results: dict[str, list[dict]] = {}
        zoom_s = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                         args=["--no-sandbox", "--disable-gpu",
                                               "--allow-file-access-from-files"])
            catalog = (site / "index.html").as_uri()
            for _ in range(args.repeats):
                for name, suffix in (("pyramid", ""), ("raw", "&level=0"), ("cold", "")):
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    if name != "cold":  # the usual path: the catalog, then a click to the run
                        page.goto(catalog)
                        page.wait_for_function("typeof Plotly !== 'undefined'", timeout=120_000)
                    results.setdefault(name, []).append(_load(page, url + suffix,
                                                              click=name != "cold"))
                    if name == "pyramid":
                        draws = page.evaluate("LPT.state.draws")
                        t0 = time.perf_counter()
                        page.evaluate("Plotly.relayout(document.querySelector('[data-run-plot]'),"
                                      " {'xaxis.range': [3600, 3610]})")
                        page.wait_for_function(f"LPT.state.draws > {draws}", timeout=60_000)
                        zoom_s.append(time.perf_counter() - t0)
                        assert page.evaluate("LPT.state.level") == 0
                    page.close()
            browser.close()
    med = {k: statistics.median(r["drawn"] for r in v) / 1000.0 for k, v in results.items()}
    draw = {k: statistics.median(r["draw_ms"] for r in v) / 1000.0 for k, v in results.items()}
    cpu = {k: statistics.median(r["main_thread_s"] for r in v) for k, v in results.items()}
    bcpu = {k: statistics.median(r["browser_cpu_s"] for r in v) for k, v in results.items()}
    lib = statistics.median(r["marks"]["start"] for r in results["pyramid"]) / 1000.0
    print(json.dumps({
        "samples": args.devices * len(run.devices[0].t_ms),
        "devices": args.devices, "hours": args.hours,
        "build_s": round(build_s, 2),
        "trace_bytes": report.trace_bytes, "site_data_bytes": report.data_bytes,
        "site_data_ratio": round(report.ratio or 0, 3), "site_library_bytes": report.library_bytes,
        "first_draw_s_pyramid": round(med["pyramid"], 3),
        "first_draw_s_pyramid_cold_tab": round(med["cold"], 3),
        "first_draw_s_raw": round(med["raw"], 3),
        "raw_over_pyramid": round(med["raw"] / med["pyramid"], 2),
        "library_load_s": round(lib, 3),
        "library_load_s_cold_tab": round(statistics.median(
            r["marks"]["start"] for r in results["cold"]) / 1000.0, 3),
        "draw_s_pyramid": round(draw["pyramid"], 3),
        "draw_s_raw": round(draw["raw"], 3),
        "draw_raw_over_pyramid": round(draw["raw"] / draw["pyramid"], 2),
        "main_thread_s_pyramid": round(cpu["pyramid"], 3),
        "main_thread_s_raw": round(cpu["raw"], 3),
        "browser_cpu_s_pyramid": round(bcpu["pyramid"], 3),
        "browser_cpu_s_raw": round(bcpu["raw"], 3),
        "browser_cpu_s_cold_tab": round(bcpu["cold"], 3),
        "load_average_1min": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "points_pyramid": results["pyramid"][0]["points"],
        "points_raw": results["raw"][0]["points"],
        "zoom_to_raw_10s_s": round(statistics.median(zoom_s), 3),
        "repeats": args.repeats,
    }, indent=2))


if __name__ == "__main__":
    main()
