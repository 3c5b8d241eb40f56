"""The v1 campaign and its plan.

The plan fits its budget and covers the axes; the dry run names the cells that cannot fit;
the Slurm script restores GPU settings; bad campaign files fail in one line.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from llm_powertrace_ds import cli
from llm_powertrace_ds.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
V1 = ROOT / "generation" / "campaigns" / "llm-powertrace-v1.yaml"
FINETUNE_AXES = ("method", "batch_size", "seq_len", "precision", "parallelism",
                 "gradient_checkpointing")
SERVING_AXES = ("concurrency", "arrival_pattern", "prompt_len", "output_len", "tp_size",
                "weight_quant")


def test_plan_json_fits_the_budget_and_covers_the_campaign(capsys):
    assert cli.main(["generate", str(V1), "--plan", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    for key in ("runs", "gpu_hours", "budget_gpu_hours", "families", "min_model_params",
                "max_model_params", "moe", "axes"):
        assert key in plan, key
    assert plan["runs"] > 0 and 0 < plan["gpu_hours"] <= plan["budget_gpu_hours"]
    assert len(plan["families"]) >= 5
    assert plan["min_model_params"] <= 1e9 and plan["max_model_params"] >= 70e9
    assert plan["moe"] is True
    for axis in FINETUNE_AXES:
        assert f"finetune.{axis}" in plan["axes"], axis
    for axis in SERVING_AXES:
        assert f"inference.{axis}" in plan["axes"], axis
    assert sum(s["gpu_hours"] for s in plan["sweeps"]) == pytest.approx(plan["gpu_hours"],
                                                                        abs=0.1)
    assert any(s["file"].endswith("inference-vllm-tp.yaml") for s in plan["sweeps"])


def test_plan_writes_a_slurm_array_with_the_settings_restore_epilog(tmp_path, capsys):
    script = tmp_path / "v1.sbatch"
    assert cli.main(["generate", str(V1), "--plan", "--slurm", str(script)]) == 0
    text = script.read_text()
    assert text.startswith("#!/bin/bash") and "#SBATCH --array=0-" in text
    assert "trap 'llm-powertrace restore-gpu-settings || true' EXIT" in text
    assert "--parallel-runs auto" in text and "campaign-v1-ft-families.yaml" in text
    assert "GPU-hours" in capsys.readouterr().out


def test_dry_run_of_the_campaign_lists_cells_too_big_with_reasons(tmp_path, capsys):
    cli.main(["generate", str(V1), "--out", str(tmp_path / "ds"), "--dry-run",
              "--format", "csv"])
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    big = [r for r in rows if r["status"] == "too_big"]
    assert big and all(r["error"].startswith("needs ~") and "GiB per device > 80 GiB" in r["error"]
                       for r in big)
    # full fine-tuning of a 70B model (16 bytes per parameter) does not fit 8 x 80 GB
    assert any("llama-3.1-70b-full" in r["run_id"] and r["sweep"] == "campaign-v1-ft-parallel"
               for r in big)
    todo = [r for r in rows if r["status"] == "todo" and r["mem_gib"]]
    assert todo and all(float(r["mem_gib"]) <= float(r["gpu_gib"]) for r in todo)


def test_a_bad_campaign_fails_in_one_line(tmp_path):
    from generation.campaign import load_campaign

    bad = tmp_path / "c.yaml"
    bad.write_text("name: x\nplatform: h100_sxm_80gb\ngpus_per_node: 8\nbudget_gpu_hours: 10\n"
                   "setup_s_per_run: 0\nunknown_run_s: 0\nsweeps: [missing.yaml]\n")
    with pytest.raises(InputError, match="sweeps\\[0\\] 'missing.yaml' does not exist"):
        load_campaign(bad)
    bad.write_text("name: x\nsweepz: []\nsweeps: [a]\n")
    with pytest.raises(InputError, match="unknown key 'sweepz'"):
        load_campaign(bad)
