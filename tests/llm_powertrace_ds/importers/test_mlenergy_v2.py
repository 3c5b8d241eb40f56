"""ML.ENERGY leaderboard v2 run summaries: runs rows without traces, loadable, checked input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datasets import load_dataset

from llm_powertrace_ds import schema
from llm_powertrace_ds.cli import main
from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import import_summaries

MODELS = {"meta-llama/Meta-Llama-3.1-8B-Instruct": 8,
          "mistralai/Mixtral-8x7B-Instruct-v0.1": 47}


def summary(model: str, gpu: str, tp: int, pp: int, energy: float, tput: float,
            out_tokens: float = 400.0) -> dict:
    return {"Model": model, "GPU": gpu, "TP": tp, "PP": pp, "Energy/req (J)": energy,
            "Avg TPOT (s)": 0.05, "Token tput (tok/s)": tput, "Avg Output Tokens": out_tokens,
            "Avg BS (reqs)": 60.0, "Max BS (reqs)": 64}


def task_folder(root: Path, runs: list[tuple[str, str, int, int, int, float, float]],
                models: dict[str, float] | None = None) -> Path:
    """A task folder in ML.ENERGY's layout: models.json and <GPU>/<org>/<model>/bs+tp+pp.json."""
    task = root / "chat"
    task.mkdir(parents=True)
    (task / "models.json").write_text(json.dumps(
        {m: {"url": f"https://huggingface.co/{m}", "nickname": m, "params": p}
         for m, p in (models or MODELS).items()}), encoding="utf-8")
    for gpu, model, b, tp, pp, energy, tput in runs:
        folder = task / gpu.removeprefix("NVIDIA ") / model
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"bs{b}+tp{tp}+pp{pp}.json").write_text(
            json.dumps(summary(model, gpu, tp, pp, energy, tput)), encoding="utf-8")
    return task


RUNS = [("NVIDIA H100 80GB HBM3", "meta-llama/Meta-Llama-3.1-8B-Instruct", 64, 1, 1, 60.0, 1800.0),
        ("NVIDIA A100-SXM4-40GB", "mistralai/Mixtral-8x7B-Instruct-v0.1", 128, 2, 2, 200.0, 1200.0)]


def test_import_publishes_runs_rows_without_traces(tmp_path):
    task = task_folder(tmp_path / "src", RUNS)
    out = tmp_path / "ds"
    assert main(["import", "mlenergy-v2", str(task), "--out", str(out)]) == 0
    assert not (out / "data" / "inference").exists()  # trace configs untouched
    ds = load_dataset(str(out), "inference_runs", split="a100_sxm4_40gb",
                      cache_dir=str(tmp_path / "cache"))
    assert ds.features == schema.FEATURES["inference_runs"]
    row = ds[0]
    assert row["num_gpus"] == 4 and row["tp_size"] == 2 and row["pp_size"] == 2
    assert row["batch_size"] == 128 and row["task"] == "chat"
    assert row["platform"] == "a100_sxm4_40gb" and row["serving_engine"] == "vllm"
    assert row["model_params"] == 47_000_000_000
    assert row["model_params_active"] == 12_900_000_000  # from the model map, not models.json
    assert "models.json" in row["model_facts_source"] and "Mistral AI" in row["model_facts_source"]
    assert row["energy_per_token_j"] == pytest.approx(200.0 / 400.0)
    assert row["mean_power_w"] == pytest.approx(200.0 / 400.0 * 1200.0)
    assert row["energy_j"] is None and row["peak_power_w"] is None  # not in a summary
    assert "summary_only" in row["quality_flags"]
    assert row["sampler"] == "import:mlenergy-v2"
    h100 = load_dataset(str(out), "inference_runs", split="h100_sxm_80gb",
                        cache_dir=str(tmp_path / "cache"))[0]
    assert h100["model_params_active"] is None and h100["model_family"] == "llama"
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "The ML.ENERGY Initiative" in card and "Apache-2.0" in card
    # importing again replaces, never duplicates
    assert main(["import", "mlenergy-v2", str(task), "--out", str(out)]) == 0
    assert len(list((out / "data" / "inference_runs").rglob("*.arrow"))) == 2


@pytest.mark.parametrize("breakage,field", [
    (lambda d: d.update({"Energy/req (J)": -1}), "Energy/req (J)"),
    (lambda d: d.update({"Avg Output Tokens": "n/a"}), "Avg Output Tokens"),
    (lambda d: d.update({"TP": 8}), "TP"),
    (lambda d: d.update({"Model": "org/unknown"}), "Model"),
    (lambda d: d.pop("Token tput (tok/s)"), "Token tput (tok/s)"),
])
def test_bad_summary_is_one_line_and_writes_nothing(tmp_path, breakage, field):
    task = task_folder(tmp_path / "src", RUNS)
    bad = next(task.rglob("bs64+tp1+pp1.json"))
    data = json.loads(bad.read_text())
    breakage(data)
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        import_summaries("mlenergy-v2", task)
    assert field in str(err.value) and bad.name in str(err.value)
    assert "\n" not in str(err.value)
    out = tmp_path / "ds"
    assert main(["import", "mlenergy-v2", str(task), "--out", str(out)]) == 1
    assert not list(out.rglob("*.arrow"))


def test_bad_file_name_and_missing_models_json(tmp_path):
    task = task_folder(tmp_path / "src", RUNS)
    next(task.rglob("bs64+tp1+pp1.json")).rename(task / "H100 80GB HBM3" / "x.json")
    with pytest.raises(InputError, match="file name"):
        import_summaries("mlenergy-v2", task)
    (task / "models.json").unlink()
    with pytest.raises(InputError, match="models.json"):
        import_summaries("mlenergy-v2", task)


@pytest.mark.external
def test_real_mlenergy_chat_folder(external_dir, tmp_path):
    task = external_dir / "mlenergy-v2" / "chat"
    out = tmp_path / "ds"
    assert main(["import", "mlenergy-v2", str(task), "--out", str(out)]) == 0
    rows = [r for split in ("a100_sxm4_40gb", "h100_sxm_80gb")
            for r in load_dataset(str(out), "inference_runs", split=split,
                                  cache_dir=str(tmp_path / "cache"))]
    assert len(rows) == 191
    big = [r for r in rows if r["model_params"] == 405_000_000_000]
    assert len(big) == 6 and {r["num_gpus"] for r in big} == {16}
    assert all(r["energy_per_token_j"] > 0 and r["mean_power_w"] > 0 for r in rows)
    moe = {r["model_name"]: r["model_params_active"] for r in rows if "Mixtral" in r["model_name"]}
    assert moe == {"Mixtral-8x7B-Instruct-v0.1": 12_900_000_000,
                   "Mixtral-8x22B-Instruct-v0.1": 39_000_000_000}
