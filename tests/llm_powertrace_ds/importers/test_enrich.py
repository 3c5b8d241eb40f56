"""Finishing imported runs: datasheet power limit, model facts, source stages, seed flags."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llm_powertrace_ds import specs
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_file
from llm_powertrace_ds.importers.enrich import (
    STAGE_KINDS,
    _stage_key,
    apply_spec_power_limit,
    stage_kind_events,
)
from llm_powertrace_ds.metrics import compute_run_metrics
from llm_powertrace_ds.run import DeviceSeries, Event, Run
from llm_powertrace_ds.validate import validate_run

from .test_nvidia_smi import stamp, write
from .test_powertrace_csv import their_json, trace_csv


def h100x8_log(path: Path, *, limit: bool = False, ticks: int = 300) -> Path:
    """8 H100s, 100 ms ticks; idle (70 W) for the first third, then busy (600 W)."""
    header = "timestamp,index,name,power.draw [W]" + (",power.limit [W]" if limit else "")
    lines = [header]
    for k in range(ticks):
        for g in range(8):
            watts = 70.0 + g if k < ticks // 3 else 600.0 + g
            cells = [stamp(k * 100 + g), str(g), "NVIDIA H100 80GB HBM3", f"{watts:.2f}"]
            lines.append(",".join(cells + (["500.00"] if limit else [])))
    return write(path, lines)


def test_h100x8_without_a_limit_gets_the_datasheet_limit(tmp_path):
    run = import_file("nvidia-smi", h100x8_log(tmp_path / "smi.csv"), workload="inference")
    assert run.platform == "h100_sxm_80gb" and len(run.devices) == 8
    assert "power_limit_from_spec" in run.flags
    assert {d.default_power_limit_w for d in run.devices} == {700.0}
    assert {d.power_limit_w for d in run.devices} == {None}
    m = compute_run_metrics(run)
    # C = 8 x 700 W; idle below 0.2 C = 1120 W: the 8 x ~70 W third of the run
    assert m["idle_fraction"] == pytest.approx(1 / 3, abs=0.01)
    assert m["near_limit_fraction"] == 0.0
    assert m["ramp_up_max_1s_pct_per_s"] is not None


def test_a_logged_limit_wins_over_the_spec_table(tmp_path):
    run = import_file("nvidia-smi", h100x8_log(tmp_path / "smi.csv", limit=True),
                      workload="inference")
    assert "power_limit_from_spec" not in run.flags
    assert {d.power_limit_w for d in run.devices} == {500.0}


def test_ambiguous_family_gets_no_limit():
    assert specs.spec_power_limit_w("h100") is None  # PCIe 350 W or SXM 700 W
    assert specs.spec_power_limit_w("l40s") == 350.0
    assert specs.spec_power_limit_w(None) is None


def test_model_facts_fill_params_and_moe_active(tmp_path):
    meta = {"model_name": "mistralai/Mixtral-8x7B-Instruct-v0.1"}
    assert specs.fill_model_facts(meta) == ["model_params", "model_params_active"]
    assert meta["model_params"] == 46_700_000_000 and meta["model_params_active"] == 12_900_000_000
    assert "Mistral AI" in meta["model_facts_source"]
    given = {"model_name": "gpt-j-6b", "model_params": 123}
    assert specs.fill_model_facts(given) == [] and given["model_params"] == 123
    csv_path = trace_csv(tmp_path / "t.csv", ticks=5)
    run = import_file("powertrace-csv", csv_path, workload="finetune",
                      meta_path=their_json(tmp_path / "t.json", model_family="ds7bbase"))
    assert run.meta["model_name"] == "deepseek-llm-7b-base"
    assert run.meta["model_params"] == 6_910_365_696
    assert "deepseek-ai" in run.meta["model_facts_source"]


def test_source_checkpoint_stage_feeds_the_checkpoint_dip(tmp_path):
    ticks = 400  # 40 s: 15 s of training at ~100 W/GPU, a 5 s CKPT dip to ~40 W, training again
    stages = ["TRAIN" if not 150 <= k < 200 else "CKPT" for k in range(ticks)]
    path = trace_csv(tmp_path / "t.csv", ticks=ticks, stages=stages)
    text = path.read_text(encoding="utf-8").splitlines()
    out = [text[0]]
    for line in text[1:]:
        cells = line.split(",")
        k = int(round(float(cells[2]) * 10))
        cells[4] = "40.0" if 150 <= k < 200 else "100.0"
        out.append(",".join(cells))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    run = import_file("powertrace-csv", path, workload="finetune",
                      meta_path=their_json(tmp_path / "t.json"))
    kinds = [(e.kind, e.label, e.t_ms) for e in run.events]
    assert ("checkpoint_begin", "CKPT", 15000) in kinds
    assert ("checkpoint_end", "CKPT", 20000) in kinds
    m = compute_run_metrics(run)
    assert m["checkpoint_dip_pct"] == pytest.approx(60.0, abs=1.0)


def test_seed_quality_flags(make_run):
    run = make_run(n=200)
    run.devices[0].signals["power_w"][5] = 0.0
    run.meta["num_gpus"] = len(run.devices) - 1  # fewer declared than logged
    flags = validate_run(run).flags
    assert "zero_power_samples" in flags and "gpu_count_mismatch" in flags
    dup = make_run(n=50)
    t = dup.devices[0].t_ms
    t[10] = t[9]
    assert "duplicate_samples" in validate_run(dup).flags


def test_precision_unknown_only_when_the_source_is_silent(tmp_path):
    csv_path = trace_csv(tmp_path / "t.csv", ticks=5)
    with_precision = import_file("powertrace-csv", csv_path, workload="finetune",
                                 meta_path=their_json(tmp_path / "a.json"))
    assert "precision_unknown" not in with_precision.flags
    meta = json.loads((tmp_path / "a.json").read_text())
    meta.pop("precision")
    (tmp_path / "b.json").write_text(json.dumps(meta))
    without = import_file("powertrace-csv", csv_path, workload="finetune",
                          meta_path=tmp_path / "b.json")
    assert "precision_unknown" in without.flags
    assert np.isfinite(without.devices[0].power_w).all()


def test_metadata_undercounting_gpus_is_flagged_not_fatal(tmp_path):
    csv_path = trace_csv(tmp_path / "t.csv", ticks=5, gpus=4)
    run = import_file("powertrace-csv", csv_path, workload="finetune",
                      meta_path=their_json(tmp_path / "m.json", gpu_count=2))
    assert run.meta["num_gpus"] == 4 and len(run.devices) == 4
    assert "gpu_count_mismatch" in run.flags
    with pytest.raises(InputError, match="--num-gpus is 2 but the log holds 4 GPUs"):
        import_file("powertrace-csv", csv_path, workload="finetune", num_gpus=2,
                    meta_path=their_json(tmp_path / "m.json"))


@pytest.mark.parametrize("label, key", [
    ("Warm up", "warm_up"),
    ("WARM-UP", "warm_up"),
    (" (EVAL) ", "eval"),
    ("__ckpt__", "ckpt"),
    ("Checkpoint #3", "checkpoint"),
    ("prefill/decode", "prefill_decode"),
    ("42", ""),
    ("", ""),
    (None, ""),
])
def test_stage_labels_normalise_to_lower_case_words_joined_by_underscores(label, key):
    assert _stage_key(label) == key


def test_stage_labels_with_spaces_and_brackets_map_to_their_kinds(make_run):
    run = make_run(devices=1, n=50)  # readings every 100 ms up to 4900
    run.events = [Event(0, "stage", label="Warm up"), Event(1000, "stage", label="(EVAL)"),
                  Event(2000, "stage", label="Checkpoint #3"), Event(3000, "stage", label="42")]
    got = [(e.t_ms, e.kind, e.label) for e in stage_kind_events(run)]
    assert STAGE_KINDS["warm_up"] == "warmup"
    assert got == [(0, "warmup_begin", "Warm up"), (1000, "warmup_end", "Warm up"),
                   (1000, "eval_begin", "(EVAL)"), (2000, "eval_end", "(EVAL)"),
                   (2000, "checkpoint_begin", "Checkpoint #3"),
                   (3000, "checkpoint_end", "Checkpoint #3")]


def test_spec_power_limit_applies_without_any_limit():
    run = _run()
    assert apply_spec_power_limit(run) is True
    assert run.devices[0].default_power_limit_w == 350.0


@pytest.mark.parametrize("meta", [{"power_limit_setting_w": 300.0},
                                  {"power_limit_w": 300.0},
                                  {"power_limit_setting_w": 0.0, "power_limit_w": None}])
def test_spec_power_limit_is_not_applied_when_the_run_sets_a_limit(meta):
    run = _run(**meta)
    assert apply_spec_power_limit(run) is False
    assert run.devices[0].default_power_limit_w is None


def test_spec_power_limit_is_not_applied_when_a_device_reports_one():
    run = _run()
    run.devices[0].power_limit_w = 280.0
    assert apply_spec_power_limit(run) is False
    assert run.devices[0].default_power_limit_w is None


def test_spec_power_limit_skipped_for_a_run_level_power_limit():
    dev = DeviceSeries(0, np.arange(3, dtype=np.int64) * 100, {"power_w": np.full(3, 100.0)})
    run = Run({"run_id": "r", "workload": "inference", "platform": "h100_sxm_80gb",
               "power_limit_w": 250.0}, [dev], [])
    assert apply_spec_power_limit(run) is False
    assert run.devices[0].default_power_limit_w is None
    assert "power_limit_from_spec" not in run.flags


def _run(platform: str | None = "l40s", **meta) -> Run:  # noqa: ANN003
    dev = DeviceSeries(0, np.arange(3, dtype=np.int64) * 100, {"power_w": np.full(3, 100.0)})
    return Run({"run_id": "r", "workload": "inference", "platform": platform, **meta}, [dev], [])


def test_spec_power_limit_of_an_unknown_platform_is_not_applied():
    run = _run("h100")
    assert apply_spec_power_limit(run) is False
    assert run.devices[0].default_power_limit_w is None
    assert "power_limit_from_spec" not in run.flags


def test_spec_power_limit_not_applied_under_a_zero_cap_setting():
    run = _run(power_limit_setting_w=0.0)
    assert apply_spec_power_limit(run) is False
    assert run.devices[0].default_power_limit_w is None
    assert "power_limit_from_spec" not in run.flags


def test_stage_events_of_a_run_without_samples():
    dev = DeviceSeries(gpu_index=0, t_ms=np.zeros(0, np.int64), signals={})
    run = Run(meta={"run_id": "r", "workload": "finetune", "platform": "unknown"},
              devices=[dev], events=[Event(t_ms=500, kind="stage", label="CKPT", rank=2)])
    got = [(e.t_ms, e.kind, e.label, e.rank) for e in stage_kind_events(run)]
    assert got == [(500, "checkpoint_begin", "CKPT", 2), (500, "checkpoint_end", "CKPT", 2)]
