"""Writing the site: layout, manifest and size, atomic replacement, bad targets, the CLI."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from conftest import synthetic_run

from llm_powertrace_ds import shards
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError

pytest.importorskip("bokeh")
from llm_powertrace_ds.explore import build_site  # noqa: E402
from llm_powertrace_ds.explore.catalog import run_dir, run_folder  # noqa: E402


def test_site_has_pages_bokehjs_catalog_and_per_run_chunks(demo_site):
    import bokeh

    root, site, runs = demo_site
    for name in ("index.html", "run.html", "compare.html", "sweep.html", "assets/explorer.js",
                 "assets/style.css", "assets/bokeh.min.js", "assets/bokeh-api.min.js",
                 "data/site.js", "data/catalog.js", "site.json"):
        assert (site / name).is_file(), name
    for name in ("bokeh.min.js", "bokeh-api.min.js"):  # the installed package's own BokehJS
        text = (site / "assets" / name).read_text()
        assert "Bokeh Contributors" in text[:400] and f'"{bokeh.__version__}"' in text, name
    for run in runs:
        folder = site / "data/runs" / run_dir(run_folder(run.run_id))
        assert (folder / "meta.js").is_file() and (folder / "L0-0.js").is_file()
    long_run = site / "data/runs" / run_dir(run_folder("ft-llama-lora"))
    assert (long_run / "L1-0.js").is_file()  # 600 s at 0.1 s: a level above raw
    pages = "".join((site / p).read_text() for p in ("index.html", "run.html"))
    assert "http://" not in pages and "https://" not in pages  # nothing from a CDN


def test_manifest_states_the_size_and_it_is_bounded(tmp_path):
    root = tmp_path / "ds"
    # a realistic trace: 4 devices x 20 min at 0.1 s, every signal present
    run = synthetic_run("long", devices=4, n=12_000)
    for dev in run.devices:
        n = len(dev.t_ms)
        dev.signals.update(temp_c=np.full(n, 60.0), sm_clock_mhz=np.full(n, 1800.0),
                           mem_used_mib=np.full(n, 30_000.0), energy_mj=np.arange(n) * 20.0)
    shards.publish_run(root, run, refresh_card=False)
    report = build_site(root, tmp_path / "site")
    manifest = json.loads((tmp_path / "site/site.json").read_text())
    assert manifest["data_bytes"] == report.data_bytes > 0
    assert manifest["trace_bytes"] == report.trace_bytes > 0
    assert report.ratio is not None and report.ratio <= 1.5, report
    assert manifest["out"] == "site"  # no absolute path in what the site says


def test_no_absolute_paths_in_written_files(demo_site):
    root, site, _ = demo_site
    for path in site.rglob("*"):
        if path.is_file() and not path.name.startswith("bokeh"):
            text = path.read_text(encoding="utf-8")
            assert str(root.parent) not in text, path


def test_rebuild_replaces_the_site_and_a_foreign_folder_is_refused(tmp_path):
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("a"), refresh_card=False)
    site = tmp_path / "site"
    build_site(root, site)
    shards.publish_run(root, synthetic_run("b", seed=3), refresh_card=False)
    build_site(root, site)
    assert (site / "data/runs" / run_dir(run_folder("b")) / "meta.js").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site")]  # no leftovers
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="not an explorer site"):
        build_site(root, foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_cli_explore_prints_the_path_and_size(tmp_path, capsys):
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("a"), refresh_card=False)
    assert main(["explore", str(root), "--out", str(tmp_path / "site")]) == 0
    out = capsys.readouterr().out
    assert f"explorer: {tmp_path / 'site' / 'index.html'}" in out
    assert "runs: 1" in out and "the dataset's trace bytes" in out
    assert main(["explore", str(root), "--out", str(tmp_path / "site"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 1


def test_cli_explore_bad_input_is_one_line(tmp_path, capsys):
    assert main(["explore", str(tmp_path / "nope"), "--out", str(tmp_path / "site")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nope" in err


def test_packed_dataset_gives_the_same_site(demo_site, tmp_path):
    root, site, runs = demo_site
    packed = tmp_path / "packed"
    shards.pack(root, packed, refresh_card=False)
    assert any("-of-" in p.name for p in (packed / "data").rglob("*.arrow"))
    site2 = tmp_path / "site2"
    build_site(packed, site2, name="ds")
    for run in runs:
        folder = run_dir(run_folder(run.run_id))
        for path in sorted((site / "data/runs" / folder).iterdir()):
            assert (site2 / "data/runs" / folder / path.name).read_bytes() == path.read_bytes()


def test_corrupt_shard_is_one_line_and_the_old_site_survives(tmp_path, capsys):
    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("a"), refresh_card=False)
    site = tmp_path / "site"
    assert main(["explore", str(root), "--out", str(site)]) == 0
    before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    capsys.readouterr()
    (bad,) = (root / "data" / "finetune").rglob("a.arrow")
    bad.write_bytes(b"not an arrow stream")
    assert main(["explore", str(root), "--out", str(site)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: Failed to read") and "a.arrow" in err[0]
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site")]


def test_empty_dataset_gives_an_empty_catalog(tmp_path):
    root = tmp_path / "ds"
    (root / "data").mkdir(parents=True)
    report = build_site(root, tmp_path / "site")
    assert report.runs == 0 and report.ratio is None
    assert (tmp_path / "site/index.html").is_file()


def test_without_bokeh_a_one_line_error_and_nothing_written(tmp_path, monkeypatch):
    from llm_powertrace_ds.explore.site import MissingExtra

    root = tmp_path / "ds"
    shards.publish_run(root, synthetic_run("a"), refresh_card=False)
    monkeypatch.setitem(sys.modules, "bokeh.util.paths", None)  # import fails
    with pytest.raises(MissingExtra) as info:
        build_site(root, tmp_path / "site")
    assert "bokeh is not installed" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "site").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site")]
