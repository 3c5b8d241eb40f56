"""The analysis commands: metrics, fit, predict, plot (through ``cli.main``)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from cards.builder import refresh_card
from llm_powertrace_ds import cli, metrics
from llm_powertrace_ds.run import DeviceSeries, Event, Run
from llm_powertrace_ds.shards import publish_run

PARAMS = (1e8, 3e8, 1e9, 3e9)
BATCHES = (4, 8)


def _run(i: int, n_params: float, batch: int, platform: str, seed: int) -> Run:
    rng = np.random.default_rng(seed)
    n = 400
    t = np.arange(n, dtype=np.int64) * 100
    level = 60.0 * (n_params / 1e8) ** 0.3 * batch ** 0.1 * (1.4 if platform == "h100_sxm_80gb" else 1)
    devs = [DeviceSeries(g, t + 2 * g, {"power_w": level * (1 + 0.2 * np.sin(t / 700.0))
                                        + rng.normal(0, 1, n)},
                         gpu_name="NVIDIA L40S", power_limit_w=350.0,
                         default_power_limit_w=350.0) for g in range(2)]
    events = [Event(int(s), "step_begin", step=k, rank=0) for k, s in enumerate(range(0, 40_000, 2000))]
    meta = {"run_id": f"cli-{i:02d}", "workload": "finetune", "platform": platform,
            "model_family": "llama", "model_name": "llama-zoo", "sweep": "cli-test", "repeat": 0,
            "num_gpus": 2, "sample_period_ms": 100.0, "sampler": "nvml", "power_field": "instant",
            "method": "lora", "model_params": int(n_params), "global_batch_size": batch,
            "batch_size": batch, "seq_len": 256, "tokens": batch * 256 * 40,
            "gradient_checkpointing": False}
    return Run(meta, devs, events)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    i = 0
    for platform in ("l40s", "h100_sxm_80gb"):
        for n_params in PARAMS:
            for batch in BATCHES:
                publish_run(root, _run(i, n_params, batch, platform, seed=i), refresh_card=False)
                i += 1
    refresh_card(root)
    return root


def _main(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for name in ("metrics", "fit", "predict", "plot"):
        assert name in out


def test_metrics_json_has_every_metric(dataset, capsys):
    code, out, _ = _main(capsys, "metrics", dataset, "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 16
    for row in rows:
        assert row["num_gpus"] == 2 and row["run_id"].startswith("cli-")
        for name in metrics.METRIC_NAMES:
            assert name in row, name
        assert isinstance(row["metric_notes"], list)
    first = next(r for r in rows if r["run_id"] == "cli-00")
    assert first["step_freq_hz"] == pytest.approx(0.5)
    assert first["energy_per_token_j"] == pytest.approx(first["energy_j"] / (4 * 256 * 40))


def test_metrics_recompute_matches_stored(dataset, capsys):
    code, out, _ = _main(capsys, "metrics", dataset, "--run", "cli-03", "--format", "json")
    stored = json.loads(out)
    code2, out2, _ = _main(capsys, "metrics", dataset, "--run", "cli-03", "--recompute",
                           "--format", "json")
    assert code == code2 == 0
    fresh = json.loads(out2)
    assert len(stored) == len(fresh) == 1
    for name in metrics.METRIC_NAMES:
        a, b = stored[0][name], fresh[0][name]
        if isinstance(a, float):  # traces store power as float32: agree to its precision
            assert a == pytest.approx(b, rel=1e-6, abs=1e-9), name
        else:
            assert a == b, name


def test_metrics_csv_and_table_and_filters(dataset, capsys):
    code, out, _ = _main(capsys, "metrics", dataset, "--config", "finetune", "--split",
                         "h100_sxm_80gb", "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 8 and "ramp_abs_p99_1s_pct_per_s" in rows[0]
    code, out, _ = _main(capsys, "metrics", dataset, "--run", "cli-05")
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 2 and lines[0].split()[:2] == ["run_id", "num_gpus"]
    assert lines[1].startswith("cli-05")


def test_metrics_errors(dataset, capsys):
    code, _, err = _main(capsys, "metrics", dataset, "--run", "nope")
    assert code == 1 and err.startswith("error:") and "nope" in err
    code, _, err = _main(capsys, "metrics", dataset, "--config", "bogus")
    assert code == 1 and "unknown config 'bogus'" in err
    code, _, err = _main(capsys, "metrics", dataset / "missing" / "dir")
    assert code == 1 and "neither a dataset folder nor a Hub repo id" in err


def test_metrics_from_hub_repo_id(dataset, capsys, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_download(repo_id, repo_type=None, **kw):
        calls.append((repo_id, repo_type))
        return str(dataset)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    code, out, _ = _main(capsys, "metrics", "some-org/llm-powertrace", "--format", "json")
    assert code == 0 and len(json.loads(out)) == 16
    assert calls == [("some-org/llm-powertrace", "dataset")]


def test_stale_runs_rows_are_recomputed(dataset, monkeypatch):
    from llm_powertrace_ds.metrics import rows as metric_rows

    real = metric_rows.iter_run_rows
    (stored,) = [r for r in real(dataset) if r["run_id"] == "cli-01"]
    assert stored["swing_w"] > 0 and stored["par"] > 1

    def old_schema_rows(root, config=None, split=None):
        for row in real(root, config, split):
            yield {k: v for k, v in row.items() if k not in ("swing_w", "par")}

    monkeypatch.setattr(metric_rows, "iter_run_rows", old_schema_rows)
    rows = metric_rows.run_metrics_rows(dataset, run_id="cli-01")
    # recomputed from the trace: the values the current schema stores, not nulls
    assert rows[0]["swing_w"] == pytest.approx(stored["swing_w"], rel=1e-6)
    assert rows[0]["par"] == pytest.approx(stored["par"], rel=1e-6)


def test_fit_predict_and_plots(dataset, capsys, tmp_path):
    fit_path = tmp_path / "fit.json"
    code, out, err = _main(capsys, "fit", dataset, "--holdout", "N=top", "--out", fit_path,
                           "--n-boot", 100, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert json.loads(fit_path.read_text()) == data
    ho = data["holdout"]
    assert ho["n_test"] == 4 and ho["n_train"] == 12
    for key in ("loglinear", "physics", "baseline_constant", "baseline_proportional"):
        assert key in ho["mdape_pct"]
    assert set(data["laws"]) == {"loglinear", "physics"} and data["best_law"] in data["laws"]
    exps = {e["axis"]: e["exponent"] for e in data["loglinear"]["exponents"]}
    assert exps["model_params"] == pytest.approx(0.3, abs=0.05)  # power^0.3, tokens independent of N

    code, out, _ = _main(capsys, "fit", dataset, "--target", "mean_power_w", "--n-boot", 50)
    assert code == 0 and "beta_N" in out and "best law" in out

    code, out, err = _main(capsys, "predict", fit_path, "--set", "platform=l40s", "N=2B", "B=8",
                           "--model", "loglinear", "--format", "json")
    assert code == 0, err
    pred = json.loads(out)[0]
    assert pred["lo90"] < pred["value"] < pred["hi90"]
    truth = 60.0 * 20 ** 0.3 * 8 ** 0.1 * 2 * 1.4 ** 0 * 40.0 / (8 * 256 * 40)
    assert pred["value"] == pytest.approx(truth, rel=0.15)
    code, _, err = _main(capsys, "predict", fit_path, "--set", "platform")
    assert code == 2 and "AXIS=VALUE" in err
    code, _, err = _main(capsys, "predict", fit_path, "--set", "platform=a100", "N=1e9", "B=4",
                         "--model", "loglinear")
    assert code == 1 and "platform" in err

    for argv, name in ((["plot", dataset, "cli-02"], "run.png"),
                       (["plot", dataset, "--metric", "energy_per_token_j", "--axis",
                         "model_params"], "sweep.png"),
                       (["plot", "--fit", fit_path], "fit.png")):
        out_png = tmp_path / name
        code, out, err = _main(capsys, *argv, "--out", out_png)
        assert code == 0, err
        assert out_png.read_bytes()[:4] == b"\x89PNG"
    code, _, err = _main(capsys, "plot", "--out", tmp_path / "x.png")
    assert code == 2 and "RUN_ID" in err
    code, _, err = _main(capsys, "plot", dataset, "--metric", "energy_j", "--out",
                         tmp_path / "x.png")
    assert code == 2


def test_fit_errors(dataset, capsys):
    code, _, err = _main(capsys, "fit", dataset, "--holdout", "family=gemma", "--n-boot", 10)
    assert code == 1 and "selects no run" in err
    code, _, err = _main(capsys, "fit", dataset, "--config", "inference_runs")
    assert code == 1 and "no runs" in err


def test_hub_download_failure_is_one_line(capsys, monkeypatch):
    import huggingface_hub

    def offline(repo_id, repo_type=None, **kw):
        raise RuntimeError("no network\nlong traceback text")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    code, _, err = _main(capsys, "metrics", "some-org/not-here")
    assert code == 1
    assert "cannot download dataset repo 'some-org/not-here'" in err
    assert "long traceback" not in err
