"""The explorer at many runs (issue 40).

A paged catalog over an in-memory index, sharded run folders, and a run page that never loads
the catalog rows.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from llm_powertrace_ds.explore.catalog import packed_rows, run_dir, run_folder


def _payload(path: Path, key: str) -> dict:
    text = path.read_text(encoding="utf-8")
    head = f"LPT.got({json.dumps(key)},"
    assert text.startswith(head) and text.endswith(");\n")
    return json.loads(text[len(head):-3])


def _rows(site: Path) -> list[dict]:
    data = _payload(site / "data/catalog.js", "catalog")
    return [dict(zip(data["names"], v, strict=True)) for v in data["values"]]


def many_runs_site(site: Path, out: Path, n: int) -> list[dict]:
    """A copy of ``site`` whose catalog holds ``n`` rows cloned from its first one."""
    shutil.copytree(site, out)
    base = _rows(site)[0]
    rows = []
    for i in range(n):
        r = dict(base, run_id=f"many-{i:05d}", num_gpus=1 + i % 7,
                 platform=("l40s", "h100_sxm_80gb")[i % 2])
        r["folder"] = run_folder(r["run_id"])
        rows.append(r)
    text = f"LPT.got(\"catalog\",{json.dumps(packed_rows(rows), separators=(',', ':'))});\n"
    (out / "data/catalog.js").write_text(text, encoding="utf-8")
    return rows


def test_run_dirs_spread_over_256_subfolders():
    folders = {run_dir(run_folder(f"run-{i}")).split("/")[0] for i in range(5000)}
    assert len(folders) == 256 and all(len(f) == 2 for f in folders)
    folder = run_folder("ft-a")
    assert run_dir(folder) == f"{folder[-8:-6]}/{folder}"


def test_no_site_folder_holds_10k_entries_and_run_page_skips_the_catalog(demo_site):
    _, site, runs = demo_site
    assert {p.name for p in (site / "data/runs").iterdir()} == \
        {run_dir(run_folder(r.run_id)).split("/")[0] for r in runs}
    for page in ("run.html", "compare.html"):
        html = (site / page).read_text()
        assert "data/site.js" in html and "data/catalog.js" not in html
    for page in ("index.html", "sweep.html"):
        assert "data/catalog.js" in (site / page).read_text()
    about = _payload(site / "data/site.js", "site")
    assert about["runs"] == len(runs) and "rows" not in about


def test_catalog_pages_its_rows_and_filters_sorts_searches_the_index(demo_site, page,
                                                                      open_page, tmp_path):
    _, site, _ = demo_site
    rows = many_runs_site(site, tmp_path / "many", 250)
    open_page(page, tmp_path / "many", "index.html")
    ids = lambda: page.eval_on_selector_all("tr[data-run-id]",  # noqa: E731
                                            "r => r.map(x => x.dataset.runId)")
    assert ids() == [r["run_id"] for r in rows[:100]]  # one page drawn, not 250 rows
    assert page.inner_text("#row-count") == "250 of 250 runs"
    page.click("#page-next")
    assert ids() == [r["run_id"] for r in rows[100:200]]
    page.click("#page-next")
    assert ids() == [r["run_id"] for r in rows[200:]]
    assert page.is_disabled("#page-next") and not page.is_disabled("#page-prev")
    page.fill("#filter-text", "many-0012")  # a search keystroke filters the whole index
    assert ids() == [f"many-{i:05d}" for i in range(120, 130)]
    assert page.inner_text("#row-count") == "10 of 250 runs"
    page.fill("#filter-text", "")
    page.click("#filters-box summary")  # the filters are folded by default
    page.select_option("select[data-filter=platform]", "h100_sxm_80gb")
    assert page.inner_text("#row-count") == "125 of 250 runs"
    page.click("th[data-col=num_gpus]")
    page.click("th[data-col=num_gpus]")  # descending over all 125 rows, not the page drawn
    first = ids()
    assert len(first) == 100
    want = sorted((r for r in rows if r["platform"] == "h100_sxm_80gb"),
                  key=lambda r: -r["num_gpus"])  # stable: ties keep the catalog's order
    assert first == [r["run_id"] for r in want[:100]]
    assert page.errors == []


def test_run_page_of_an_unknown_or_malformed_run_says_so(demo_site, page, open_page):
    _, site, _ = demo_site
    for folder in ("nope-0000abcd", "../../etc-passwd", ""):
        page.goto((site / "run.html").as_uri() + f"?run={folder}")
        page.wait_for_selector("p.error")
        assert page.inner_text("p.error").startswith("no run ")


def test_run_page_header_counts_come_from_site_js(demo_site, page, open_page):
    _, site, runs = demo_site
    open_page(page, site, "run.html?run=" + run_folder(runs[0].run_id))
    assert f"· {len(runs)} runs ·" in page.inner_text("#dataset")
    assert page.errors == []
