"""The explorer on really generated runs (the demo's sweeps) and on real imported GPU traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_powertrace_ds import shards
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.explore.catalog import run_folder

from .pages import TRACE_SUMMARY

pytest.importorskip("bokeh")


def _check_every_page(page, open_page, site: Path, root: Path) -> None:
    runs = shards.list_runs(root)
    open_page(page, site, "index.html")
    ids = page.eval_on_selector_all("tr[data-run-id]", "r => r.map(x => x.dataset.runId)")
    assert sorted(ids) == sorted(r["run_id"] for r in runs)
    for row in runs:
        open_page(page, site, f"run.html?run={run_folder(row['run_id'])}")
        roles = [t["role"] for t in page.evaluate(TRACE_SUMMARY)]
        assert roles.count("device") == len(shards.read_run(root, row["run_id"]).devices)
        assert roles.count("total") == 1, row["run_id"]
    assert page.errors == []


@pytest.mark.slow
def test_demo_sweeps_explorer_in_chromium(tmp_path, page, open_page, shots):
    """A slice of both demo sweeps, generated for real, then the demo's explorer line."""
    pytest.importorskip("generation")
    from generation.demo import explorer_line, sweep_paths

    root = tmp_path / "llm-powertrace"
    for sweep, tasks in zip(sweep_paths(), (9, 8), strict=True):
        assert main(["generate", str(sweep), "--out", str(root), "--task-index", "0",
                     "--num-tasks", str(tasks)]) == 0
    line = explorer_line(root)
    site = tmp_path / "llm-powertrace-explorer"
    assert line.startswith(f"explorer: {site / 'index.html'}")
    _check_every_page(page, open_page, site, root)
    open_page(page, site, "index.html")
    page.screenshot(path=str(shots / "demo-catalog.png"), full_page=True)


@pytest.mark.external
def test_explorer_on_real_imported_traces(tmp_path, external_dir, page, open_page, shots):
    root = tmp_path / "ds"
    stem = "powertraces-pt100array_pt017_r1_7536307_1-50f3a1a4a0"
    pt = external_dir / "powertraces-v6"
    assert main(["import", "powertrace-csv", str(pt / f"{stem}.csv"), "--meta",
                 str(pt / f"{stem}.json"), "--out", str(root), "--workload", "finetune"]) == 0
    for name in ("a100x2-vllm-gemma4-26b-tp2-250ms.csv", "a100-hf-mistral7b-b32-100ms.csv"):
        assert main(["import", "nvidia-smi", str(external_dir / "nvidia-smi" / name), "--out",
                     str(root), "--workload", "inference"]) == 0
    site = tmp_path / "site"
    assert main(["explore", str(root), "--out", str(site)]) == 0
    _check_every_page(page, open_page, site, root)
    open_page(page, site, f"run.html?run={run_folder(stem)}")
    page.screenshot(path=str(shots / "real-4xh200.png"), full_page=True)
