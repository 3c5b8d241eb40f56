"""The explorer against what a dataset from elsewhere can hold.

Bidi overrides in names, a month-long run, published summaries without traces.
"""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from llm_powertrace_ds import layout, shards
from llm_powertrace_ds.run import DeviceSeries, Run

pytest.importorskip("bokeh")


def _month_run() -> Run:
    """One device read once a minute for 31 days: times pass 2^31 ms (24.8 days)."""
    t = np.arange(0, 31 * 86_400_000, 60_000, dtype=np.int64)
    power = 300 + 100 * np.sin(np.arange(len(t)) / 500.0)
    dev = DeviceSeries(0, t, {"power_w": power}, gpu_name="NVIDIA H100 80GB HBM3",
                       power_limit_w=700.0, default_power_limit_w=700.0)
    meta = {"run_id": "month-1", "workload": "finetune", "platform": "h100_sxm_80gb",
            "model_family": "llama", "model_name": "llama-tiny", "sweep": "test", "repeat": 0,
            "num_gpus": 1, "sample_period_ms": 60_000.0, "sampler": "nvml",
            "power_field": "instant", "start_time": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)}
    return Run(meta, [dev], [])


def _set_cell(path, column: str, value: str) -> None:
    with pa.OSFile(str(path)) as fh:
        table = ipc.open_stream(fh).read_all()
    i = table.schema.get_field_index(column)
    table = table.set_column(i, table.schema.field(i), pa.array([value] * table.num_rows))
    shards.write_table_atomic(path, table)


def test_bidi_overrides_never_reach_the_site_files(tmp_path, make_run):
    from llm_powertrace_ds.explore import build_site

    root = tmp_path / "ds"
    shards.publish_run(root, make_run("b-1"), refresh_card=False)
    for config in ("finetune_runs", "finetune"):
        path = next(layout.data_root(root).glob(f"{config}/**/b-1.arrow"))
        _set_cell(path, "model_name", "llama\u202eexe.txt\u2066")
    build_site(root, tmp_path / "site")
    for f in (tmp_path / "site" / "data").rglob("*.js"):
        text = f.read_text(encoding="utf-8")
        for ch in ("\u202e", "\u2066"):
            assert ch not in text and json.dumps(ch).strip('"') not in text, f


def _mlenergy_task(root):
    """An ML.ENERGY v2 task folder with one configuration: a summary without a trace."""
    task = root / "chat"
    run = {"Model": "org/m", "GPU": "NVIDIA H100 80GB HBM3", "TP": 1, "PP": 1,
           "Energy/req (J)": 100.0, "Avg TPOT (s)": 0.05, "Token tput (tok/s)": 1200.0,
           "Avg Output Tokens": 400.0, "Avg BS (reqs)": 60.0, "Max BS (reqs)": 64}
    path = task / "H100" / "org" / "m" / "bs64+tp1+pp1.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(run), encoding="utf-8")
    (task / "models.json").write_text(json.dumps({"org/m": {"params": 8}}), encoding="utf-8")
    return task


def test_summary_only_runs_are_skipped_with_a_reason_not_fatal(tmp_path, make_run, cli,
                                                                monkeypatch, capsys):
    import upload

    root = tmp_path / "ds"
    shards.publish_run(root, make_run("inf-1", workload="inference",
                                      platform="h100_sxm_80gb"), refresh_card=False)
    res = cli(["import", "mlenergy-v2", _mlenergy_task(tmp_path), "--out", root])
    assert res.rc == 0, res.err
    res = cli(["explore", root, "--out", tmp_path / "site"])
    assert res.rc == 0 and "skipped: 1 summary-only run(s)" in res.out, res.err
    res = cli(["facility", root, "--gpus", "2048", "--config", "inference_runs", "--format",
               "json"])
    assert res.rc == 0, res.err
    assert any("1 summary-only run(s)" in line for line in json.loads(res.out)["limits"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    capsys.readouterr()
    assert upload.main([str(root), "--space", "org/explorer", "--dry-run"]) == 0, \
        capsys.readouterr().err
