"""``croissant.json``: written beside the card, validated and read by the real ``mlcroissant``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import synthetic_run

from cards.builder import CardOptions, refresh_card, write_card
from llm_powertrace_ds import schema, shards
from llm_powertrace_ds.croissant import CROISSANT_FILE, croissant_metadata
from llm_powertrace_ds.hub_upload import write_parquet_copy
from llm_powertrace_ds.samples import load_sample

mlc = pytest.importorskip("mlcroissant")

ALLOWED_WARNINGS = ("datePublished",)
"""Croissant recommends a publication date; a card holds no timestamp (the same folder always
gives the same files), so the date is the Hub's to state."""


def _validate(path: Path):
    """Load with mlcroissant (raises on any error); return the dataset and its warnings."""
    dataset = mlc.Dataset(path)
    warnings = [w for w in dataset.metadata.ctx.issues.warnings
                if not any(a in w for a in ALLOWED_WARNINGS)]
    return dataset, warnings


@pytest.fixture
def demo_folder(tmp_path, monkeypatch):
    """cpu_proxy fine-tuning runs, as the demo writes them on a machine without a GPU."""
    monkeypatch.setenv("LLM_POWERTRACE_CARD_FIGURES", "0")
    root = tmp_path / "llm-powertrace"
    for i, params in enumerate((2_000_000, 4_000_000)):
        shards.publish_run(root, synthetic_run(
            f"demo-{i}", platform="cpu_proxy", sampler="cpu_proxy", power_field="cpu_proxy_model",
            seed=i, model_params=params, batch_size=2, tokens=2 * 128 * 20,
            quality_flags=["cpu_proxy"]), refresh_card=False)
    shards.publish_run(root, synthetic_run("inf-0", workload="inference", family="qwen",
                                           platform="cpu_proxy", sampler="cpu_proxy", seed=7,
                                           with_requests=True, quality_flags=["cpu_proxy"]),
                       refresh_card=False)
    refresh_card(root)
    return root


def test_demo_folder_croissant_validates_with_every_column(demo_folder):
    path = demo_folder / CROISSANT_FILE
    assert path.is_file(), "the card refresh writes croissant.json beside README.md"
    dataset, warnings = _validate(path)
    assert warnings == []
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["conformsTo"] == "http://mlcommons.org/croissant/1.0"
    sets = {rs.name: rs for rs in dataset.metadata.record_sets}
    assert set(sets) == {"finetune", "finetune_runs", "inference", "inference_runs",
                         "inference_requests"}
    for config, record_set in sets.items():
        fields = {f.name: f for f in record_set.fields}
        for column in schema.column_doc(config):
            assert column.name in fields, f"{config}.{column.name} missing from croissant.json"
            if column.unit:
                assert f"(unit: {column.unit})" in fields[column.name].description
        assert "split" in fields
    raw = {f["name"]: f for f in next(r for r in doc["recordSet"] if r["name"] == "finetune_runs")["field"]}
    assert raw["energy_j"]["dataType"] == "sc:Float"
    assert raw["run_id"]["dataType"] == "sc:Text"
    assert raw["num_gpus"]["dataType"] == "sc:Integer"
    # the RAI fields say what this folder is: cpu_proxy rows are not GPU measurements
    assert any("NOT GPU power measurements" in x for x in doc["rai:dataLimitations"])
    assert "cpu_proxy" in doc["rai:dataCollection"]
    assert doc["license"] == "https://creativecommons.org/licenses/by/4.0/"
    assert "@misc{llm_powertrace_dataset" in doc["citeAs"]
    # regenerated from the data alone: a second refresh rewrites nothing
    before = path.read_bytes()
    refresh_card(demo_folder)
    assert path.read_bytes() == before


def test_imported_real_dataset_croissant_validates(tmp_path, monkeypatch):
    """The shipped ML.ENERGY v2 sample (real published summaries), imported into tmp_path."""
    monkeypatch.setenv("LLM_POWERTRACE_CARD_FIGURES", "0")
    root = load_sample("mlenergy-v2-chat", tmp_path / "mlenergy-v2-chat")
    refresh_card(root)  # the card layer's writer (the command line registers it for load_sample)
    _, warnings = _validate(root / CROISSANT_FILE)
    assert warnings == []
    doc = json.loads((root / CROISSANT_FILE).read_text(encoding="utf-8"))
    assert [r["name"] for r in doc["recordSet"]] == ["inference_runs"]
    assert doc["rai:dataCollectionType"] == ["Secondary Data Analysis"]
    assert "ML.ENERGY" in doc["rai:dataCollection"]
    assert any("`summary_only`" in x for x in doc["rai:dataLimitations"])
    assert not any("NOT GPU" in x for x in doc["rai:dataLimitations"])
    assert doc["license"] == "https://www.apache.org/licenses/LICENSE-2.0"
    assert "The ML.ENERGY Benchmark" in doc["citeAs"]  # the source's citation, from the recipe
    card = (root / "README.md").read_text(encoding="utf-8")
    assert "license: apache-2.0" in card  # the card's front matter: the source's licence
    citation = card.split("## Citation")[1].split("## Changelog")[0]
    assert "`mlenergy-v2-chat` (191 run(s), licence `Apache-2.0`)" in citation


def test_parquet_copy_records_read_by_mlcroissant_equal_the_rows(demo_folder, tmp_path):
    """Croissant's own reader follows our file sets, splits and columns to the same values."""
    from datasets import load_dataset

    out = tmp_path / "parquet"
    write_card(demo_folder, CardOptions(file_format="parquet"), out_dir=out)
    write_parquet_copy(demo_folder, out)
    dataset, _ = _validate(out / CROISSANT_FILE)
    records = list(dataset.records("finetune_runs"))
    want = load_dataset(str(demo_folder), "finetune_runs", split="cpu_proxy",
                        cache_dir=str(tmp_path / "cache"))
    got = {r["finetune_runs/run_id"].decode(): r for r in records}
    assert sorted(got) == sorted(want["run_id"])
    for row in want:
        rec = got[row["run_id"]]
        assert rec["finetune_runs/split"] == b"cpu_proxy"
        assert rec["finetune_runs/energy_j"] == pytest.approx(row["energy_j"])
        assert rec["finetune_runs/num_gpus"] == row["num_gpus"]


def test_unknown_file_format_is_refused():
    with pytest.raises(ValueError, match="file_format 'csv'"):
        croissant_metadata(None, [], [], file_format="csv")  # type: ignore[arg-type]


def test_upload_dry_run_lists_croissant(demo_folder, monkeypatch, capsys, tmp_path, caplog):
    import upload

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    caplog.set_level(logging.ERROR)
    assert upload.main([str(demo_folder), "--repo-id", "org/llm-powertrace", "--dry-run",
                        "--allow-proxy", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert CROISSANT_FILE in [f["path"] for f in plan["files"]]
    assert CROISSANT_FILE in plan["commits"][-1]["files"]
